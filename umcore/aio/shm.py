"""Asyncio adapters of LBT-IPC / LBT-SMX: segments, doorbells, the source and receiver ends.

Theory of operation
-------------------
**Segments.**  A source session's ring (:mod:`umcore.transport.shmring`) lives in a POSIX
shared-memory object ``/dev/shm/LBTIPC_<sid hex>_<xport id>`` (``LBTSMX_...`` for SMX; seed
6.4.1 / 6.5.1 names).  It is created with ``O_EXCL`` and mapped with :mod:`mmap`; a receiver
opens it, reads and checks the header with ``pread`` *before* mapping anything
(:func:`open_segment`: missing, not ours, another version, sizes that do not match the file --
each refused with :class:`~umcore.transport.shmring.SegmentError` naming the command that
cleans up).  Why not :class:`multiprocessing.shared_memory.SharedMemory`: on Python < 3.13 it
registers every segment it *attaches* with the resource tracker, which unlinks the source's
segment when the receiver exits (``track=False`` arrived in 3.13); ``os.open`` + ``mmap`` on
``/dev/shm`` is what it does underneath on Linux, without that.  Receiver slots are claimed
under ``flock`` on the segment (several receivers may attach at once).

**Doorbells** (UM's per-receiver semaphore, seed 6.4.2).  Each receiving end and each source
end has an eventfd and binds a UNIX datagram socket in the abstract namespace
(``\\0pyum-shm-<pid>-<hex>``, no file to leak) whose name it stores in the ring; the loop watches
both with ``add_reader``.  A receiver, once attached, hands its eventfd to the source over the
socket (``SCM_RIGHTS``); the source takes it only from an attached receiver's name, checks it is
an eventfd, and from then on rings it with one 8-byte write (``eventfd_write``: about a third of
a ``sendto``'s cost, and the woken end's read as cheap) -- until then, or if the hand-over was
lost, it sends one byte to the receiver's socket.  What a wake-up costs beyond that is the
kernel's and the scheduler's, the same as for TCP's ``send`` (bench/shm.py's docstring says
what was measured).  ``transport_lbtipc_receiver_thread_behavior`` ``pend`` (default): after
the ring runs dry the receiver looks again on the next
``transport_lbtipc_pend_behavior_linger_loop_count`` loop iterations (UM's receive-thread
loops before pending; the loop's other callbacks run in between), then announces it sleeps
(its slot's pending flag and the header's ``sleeping`` word, a full barrier, one more look)
and sleeps on the doorbell.  The source, after each
commit, loads the ``sleeping`` word (a barrier before it) and rings only the doorbells of
receivers that announced sleep: while receivers keep up, a commit costs no syscall.
``busy_wait``: the receiver never sleeps; it polls the ring on every loop iteration
(``call_soon``), which is UM's 100% CPU, without starving the loop's other callbacks.  LBT-SMX
receivers always busy-wait (seed 6.5: the only style SMX has; a context with an SMX receiver
keeps a core busy, as in UM).  Measured and not adopted (bench/shm.py's round trip, a 2-core
host at load 5-6): spinning after the ring runs dry before sleeping -- fixed 0.1-2 ms, adaptive
(doubling when woken soon after sleeping, halving otherwise) with and without ``sched_yield``
-- was bimodal: round trips of 30-50 us in some runs and 180-2500 us in others, worse than no
spin on the median of runs; the spinning process takes the core the woken one needs.  Raising
the linger count is the way to trade CPU for latency, as in UM.

**Liveness** (seed 6.4.2 "Receiver Monitoring").  Both ends check the other every
:data:`LIVENESS_S`: a receiver whose source's pid is gone, or whose source neither committed a
record nor updated its heartbeat (every ``transport_lbtipc_sm_interval``) for the activity
timeout, or whose ring says CLOSED, reads what was committed and ends the session
(EOS): a source killed mid-record never committed it, so no torn message is ever delivered, and
loss shows as the sequence-number gap or TSNI the next source would reveal, or simply as EOS.
A source drops the slots of receivers whose pid is gone, so a dead receiver never holds a
receiver-paced source.  The same timer is the fallback for a wake-up lost to the flag race
(:mod:`umcore.transport.shmring`, "Ordering").

**Pacing.**  Source-paced: :meth:`ShmSourceEndpoint.write` always succeeds.  Receiver-paced
(IPC's option, SMX always): a write that finds no room is held (the session's ``paused`` is
set, sends wait, UM's blocking send) and retried when a receiver rings the source's doorbell
(it does when SOURCE_WAITING is set) or on a :data:`BLOCKED_POLL_S` timer.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import fcntl
import functools
import logging
import mmap
import os
import secrets
import socket
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from umcore.errors import TransportError, UMError
from umcore.transport import shmring
from umcore.transport.shmring import RingReader, RingWriter, SegmentError

__all__ = [
    "BLOCKED_POLL_S",
    "LIVENESS_S",
    "MAX_GATHER",
    "SHM_DIR",
    "Doorbell",
    "SegmentReport",
    "ShmReceiverConnection",
    "ShmSourceEndpoint",
    "create_segment",
    "host_id",
    "open_segment",
    "pid_alive",
    "reclaim",
    "scan_segments",
    "segment_name",
]

log = logging.getLogger("umcore.aio.shm")

#: Where POSIX shared-memory objects live (Linux tmpfs).
SHM_DIR = "/dev/shm"
#: How often each end checks the other is alive (and re-reads the ring: the lost-wake-up bound).
LIVENESS_S = 0.2
#: While a receiver-paced source is blocked, how often it re-reads the receivers' positions
#: when no doorbell came (a receiver that died holds it at most this long plus LIVENESS_S).
BLOCKED_POLL_S = 0.005
#: Bytes of IPC records joined for one call of the receiver core.
MAX_GATHER = 256 * 1024
#: Receivers' eventfds one source end holds at most (one per receiver slot; more offers are
#: refused and those receivers rung through their sockets).
MAX_PEER_BELLS = shmring.MAX_SLOTS
#: Records delivered per loop callback before yielding to the loop's other work.
READ_BUDGET = 2048
#: Writes a blocked receiver-paced source holds (the engine stops sending while paused: only
#: what was in flight when the ring filled, and timer output, lands here); beyond this they are
#: dropped and counted (``refused``).
MAX_HELD = 1024
PREFIXES = {shmring.KIND_IPC: "LBTIPC", shmring.KIND_SMX: "LBTSMX"}


_FENCE = threading.Lock()
_fence_acquire = _FENCE.acquire
_fence_release = _FENCE.release


def fence() -> None:
    """A full memory barrier between a store and a later load to the shared segment: an
    uncontended lock taken and released (a locked instruction; x86-64 orders nothing else that
    way).  The ring's sleep/wake-up protocol needs it on both sides (shmring, "Ordering")."""
    _fence_acquire()
    _fence_release()


def segment_name(kind: int, session_id: int, xport_id: int) -> str:
    """UM's name for a session's shared memory: ``LBTIPC_<sid hex>_<xport id>``."""
    return f"{PREFIXES[kind]}_{session_id:x}_{xport_id}"


def _path(name: str) -> str:
    return os.path.join(SHM_DIR, name)


@functools.cache
def host_id() -> int:
    """This host's id as advertised in LBT-IPC/SMX TIRs: CRC-32 of the machine id (of the host
    name when there is none); receivers ignore TIRs of other hosts (seed 6.4.2)."""
    for p in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        with contextlib.suppress(OSError):
            with open(p, "rb") as f:
                mid = f.read().strip()
            if mid:
                return zlib.crc32(mid) or 1
    return zlib.crc32(socket.gethostname().encode()) or 1


def pid_alive(pid: int) -> bool:
    """Is process ``pid`` alive (on this host, in this pid namespace)?"""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, another user's
    try:  # a zombie (killed, not yet reaped by its parent) is gone for our purposes
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True  # no /proc: what kill() said
    state = stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3]
    return state not in (b"Z", b"X")


class Segment:
    """A mapped segment: its file descriptor (for flock), mapping and view."""

    def __init__(self, name: str, fd: int, size: int) -> None:
        self.name = name
        self.fd = fd
        self.map = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE)
        self.view = memoryview(self.map)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    def close(self) -> None:
        self.view.release()
        try:
            self.map.close()
        except BufferError:  # an application kept a view into it: the GC unmaps it later
            log.warning("segment %s: a delivered memoryview is still held", self.name)
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def unlink(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_path(self.name))


def create_segment(name: str, size: int) -> Segment:
    """A new zero-filled segment of ``size`` bytes (FileExistsError when the name is taken)."""
    if not os.path.isdir(SHM_DIR):
        raise UMError(f"LBT-IPC/SMX need POSIX shared memory in {SHM_DIR} (Linux)")
    fd = os.open(_path(name), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, size)
        return Segment(name, fd, size)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(_path(name))
        raise


def read_header(name: str) -> tuple[int, shmring.RingHeader]:
    """The segment's size and checked header, read without mapping it (SegmentError)."""
    try:
        fd = os.open(_path(name), os.O_RDONLY)
    except FileNotFoundError:
        raise SegmentError(
            f"{name}: no such segment in {SHM_DIR} (the source is gone or was never on this host)"
        ) from None
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, shmring.HEADER_FIXED, 0)
    finally:
        os.close(fd)
    return size, shmring.check_header(head, size, name)


def open_segment(name: str) -> Segment:
    """Map an existing segment for reading and slot updates, its header checked first, and its
    source process alive (a segment left by a dead one is refused, with what to run)."""
    size, h = read_header(name)
    if not pid_alive(h.pid):
        raise SegmentError(
            f"{name}: left by process {h.pid}, which is gone; run "
            "`python -m umcore.tools.ipcrm --reclaim` to remove it"
        )
    fd = os.open(_path(name), os.O_RDWR)
    try:
        if os.fstat(fd).st_size != size:
            raise SegmentError(f"{name}: the segment changed size while being opened")
        seg = Segment(name, fd, size)
    except BaseException:
        os.close(fd)
        raise
    return seg


class Doorbell:
    """One end's doorbell (module docstring, "Doorbells"): an eventfd and a UNIX datagram socket
    in the abstract namespace, both watched by the loop.  The socket's name identifies the end
    in the ring; it carries an end's eventfd to a source (:meth:`offer`), and rings from ends
    whose eventfd is not known (yet)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_ring: Callable[[], None],
        accept: Callable[[bytes], bool] | None = None,
    ) -> None:
        self.loop = loop
        self.name = f"\0pyum-shm-{os.getpid()}-{secrets.token_hex(4)}".encode()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.sock.setblocking(False)
            self.sock.bind(self.name)
            self.efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except BaseException:
            self.sock.close()
            raise
        self._on_ring = on_ring
        #: Whose eventfds this end takes (a source: its attached receivers'); None: nobody's.
        self._accept = accept
        #: Doorbell name -> that end's eventfd (duplicated into this process).
        self._peers: dict[bytes, int] = {}
        #: Eventfds offered and refused (not an attached receiver, not an eventfd, too many).
        self.refused = 0
        loop.add_reader(self.efd, self._event)
        loop.add_reader(self.sock.fileno(), self._readable)
        #: Wake-ups taken, and how many of them came through the eventfd.
        self.rings = 0
        self.eventfd_rings = 0

    def _event(self) -> None:
        # The wake-up's latency path: one read resets the counter however often it was rung.
        try:  # noqa: SIM105 (try/except, not contextlib.suppress, about 1 us dearer)
            os.eventfd_read(self.efd)
        except OSError:
            pass
        self.rings += 1
        self.eventfd_rings += 1
        self._on_ring()

    def _readable(self) -> None:
        # One message per call; more queued keep the socket readable.
        try:
            _, fds, _, addr = socket.recv_fds(self.sock, 64, 1)
        except OSError:
            return
        if fds:
            self._adopt(addr, fds[0])
            return
        self.rings += 1
        self._on_ring()

    def _adopt(self, addr: object, fd: int) -> None:
        """An end offered its eventfd: keep it when it is an eventfd of an end we accept."""
        ok = (
            self._accept is not None
            and isinstance(addr, bytes)
            and len(self._peers) < MAX_PEER_BELLS
            and _is_eventfd(fd)
            and self._accept(addr)
        )
        if not ok:
            self.refused += 1
            os.close(fd)
            return
        assert isinstance(addr, bytes)
        old = self._peers.pop(addr, None)
        if old is not None:
            os.close(old)
        self._peers[addr] = fd

    def offer(self, name: bytes) -> bool:
        """Hand this end's eventfd to the end named ``name`` (a source rings it from then on
        instead of sending to our socket); False when it could not be sent."""
        try:  # (not socket.send_fds: it drops the address before Python 3.13)
            self.sock.sendmsg([b"E"], [_rights(self.efd)], 0, name)
        except OSError:
            return False
        return True

    @property
    def peers(self) -> int:
        """Other ends' eventfds held."""
        return len(self._peers)

    def knows(self, name: bytes) -> bool:
        """Is the end named ``name`` rung through its eventfd?"""
        return name in self._peers

    def prune(self, names: set[bytes]) -> None:
        """Close the eventfds of ends not in ``names`` (receivers that left)."""
        for name in [n for n in self._peers if n not in names]:
            os.close(self._peers.pop(name))

    def ring(self, name: bytes) -> None:
        """Ring another end's doorbell: its eventfd when it gave us one, else its socket; a
        gone or full one is ignored (its liveness timer covers it)."""
        fd = self._peers.get(name)
        if fd is not None:
            try:
                os.eventfd_write(fd, 1)
                return
            except OSError:
                pass
        try:  # noqa: SIM105 (the latency path, as in _event)
            self.sock.sendto(b"\1", name)
        except OSError:
            pass

    def close(self) -> None:
        for fd in (self.efd, self.sock.fileno()):
            with contextlib.suppress(Exception):
                self.loop.remove_reader(fd)
        self.prune(set())
        with contextlib.suppress(OSError):
            os.close(self.efd)
        self.sock.close()


def _rights(fd: int) -> tuple[int, int, bytes]:
    """The ancillary item passing ``fd`` over a UNIX socket."""
    return socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]).tobytes()


def _is_eventfd(fd: int) -> bool:
    """Is ``fd`` an eventfd (what a doorbell rings by writing 8 bytes)?"""
    try:
        return os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[eventfd]"
    except OSError:
        return False


class ShmSourceEndpoint:
    """The writing end of one LBT-IPC / LBT-SMX source session (the engine's Writer shape)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        core: Any,
        *,
        kind: int,
        session_id: int,
        xport_id: int,
        data_size: int,
        max_receivers: int,
        max_record: int,
        receiver_paced: bool,
        sm_interval: float,
    ) -> None:
        self.loop = loop
        self.core = core
        self.kind = kind
        self.paused = False
        self.single: Any = None
        self.port = xport_id
        self.on_connect: Callable[[str], None] | None = None
        self.on_disconnect: Callable[[str], None] | None = None
        self.on_unblock: Callable[[], None] | None = None
        self.doorbell = Doorbell(loop, self._on_ring, accept=self._is_receiver_bell)
        name = segment_name(kind, session_id, xport_id)
        hsize = shmring.header_size_for(max_receivers)
        self.segment = create_segment(name, hsize + data_size)
        self.name = name
        try:
            shmring.init_header(
                self.segment.view,
                kind=kind,
                data_size=data_size,
                session_id=session_id,
                xport_id=xport_id,
                pid=os.getpid(),
                max_receivers=max_receivers,
                max_record=max_record,
                receiver_paced=receiver_paced,
                doorbell=self.doorbell.name,
                now_ns=time.time_ns(),
            )
            self.ring = RingWriter(self.segment.view, name)
        except BaseException:
            self._release()
            raise
        self._held: deque[bytes] = deque()
        #: Record size a refused zero-copy reserve waits for (0: none).
        self._want = 0
        #: Writes refused because :data:`MAX_HELD` were held already.
        self.refused = 0
        self._waiters: list[asyncio.Future[None]] = []
        self._known: dict[int, int] = {}  # slot -> pid, as last scanned
        self._sm_interval = sm_interval
        self._next_beat = loop.time() + sm_interval
        self._timer: asyncio.TimerHandle | None = loop.call_later(LIVENESS_S, self._tick)
        self._poll: asyncio.TimerHandle | None = None
        self.closed = False

    # -------------------------------------------------------------- Writer shape
    @property
    def receivers(self) -> int:
        return len(self.ring.receivers())

    @property
    def buffered_bytes(self) -> int:
        return sum(map(len, self._held))

    def write(self, data: bytes) -> None:
        """One record (a batch of LBMC messages); held while receiver-paced and full."""
        if self._held:
            if len(self._held) >= MAX_HELD:
                # Only timer output (batches, TSNIs) arrives while paused (sends wait): a
                # receiver stuck this long loses it, counted, rather than memory growing.
                self.refused += 1
                if self.refused == 1:
                    log.warning("%s: receiver-paced ring full for long: output dropped", self.name)
                return
            self._held.append(data)
            return
        ring = self.ring
        if ring.write(data):
            _fence_acquire()  # fence(): head stored before the sleeping word is loaded
            _fence_release()
            bells = ring.take_wakeups()  # (one load while no receiver sleeps)
            if bells:
                ring_ = self.doorbell.ring
                for b in bells:
                    ring_(b)
            return
        self._held.append(data)
        self._block()

    def _block(self) -> None:
        if not self.paused:
            self.paused = True
            self.ring.set_waiting(True)
        if self._poll is None:
            self._poll = self.loop.call_later(BLOCKED_POLL_S, self._retry)

    def _on_ring(self) -> None:
        if self.paused:
            self._drain()

    def _retry(self) -> None:
        self._poll = None
        self._drop_dead_receivers()
        self._drain()

    def _drain(self) -> None:
        """Write what is held while there is room; unblock when all went."""
        ring = self.ring
        held = self._held
        while held:
            if not ring.write(held[0]):
                self._block()
                return
            held.popleft()
        if self._want and not ring.has_room(self._want):
            self._block()  # a zero-copy reserve is waiting for this much room
            return
        self._want = 0
        fence()
        for b in ring.take_wakeups():
            self.doorbell.ring(b)
        if self.paused:
            self.paused = False
            ring.set_waiting(False)
            waiters, self._waiters = self._waiters, []
            for w in waiters:
                if not w.done():
                    w.set_result(None)
            if self.on_unblock is not None:
                self.on_unblock()

    async def writable(self) -> None:
        if not self.paused:
            return
        w = self.loop.create_future()
        self._waiters.append(w)
        await w

    # -------------------------------------------------------------- zero copy (SMX)
    def reserve(self, n: int) -> int | None:
        """Room for an ``n``-byte record written in place: its offset in :attr:`view`, None
        when receiver-paced and full."""
        if self._held:
            return None
        return self.ring.reserve(n)

    @property
    def view(self) -> memoryview:
        return self.segment.view

    def commit(self) -> None:
        ring = self.ring
        ring.commit()
        fence()
        for b in ring.take_wakeups():
            self.doorbell.ring(b)

    def cancel(self) -> None:
        self.ring.cancel()

    def wait_for_room(self, n: int) -> None:
        """A reserve of ``n`` bytes found no room: block the session until receivers free
        enough."""
        self._want = max(self._want, n)
        self._block()

    def _bells(self) -> set[bytes]:
        ring = self.ring
        return {ring.slot(i)[4] for i in ring.receivers()}

    def _is_receiver_bell(self, name: bytes) -> bool:
        """An eventfd is taken only from an attached receiver (it attaches, then offers)."""
        return name in self._bells()

    # -------------------------------------------------------------- liveness
    def _drop_dead_receivers(self) -> None:
        ring = self.ring
        for i in ring.receivers():
            pid = ring.slot(i)[1]
            if not pid_alive(pid):
                log.info("%s: receiver process %d is gone: slot %d freed", self.name, pid, i)
                with self.segment.locked():
                    ring.free_slot(i)

    def _tick(self) -> None:
        self._timer = None
        if self.closed:
            return
        now = self.loop.time()
        if now >= self._next_beat:
            self.ring.beat(time.time_ns())
            self._next_beat = now + self._sm_interval
        self._drop_dead_receivers()
        ring = self.ring
        current = {i: ring.slot(i)[1] for i in ring.receivers()}
        for i, pid in current.items():
            if self._known.get(i) != pid and self.on_connect is not None:
                self.on_connect(f"{PREFIXES[self.kind]}:pid {pid}")
        for i, pid in self._known.items():
            if current.get(i) != pid and self.on_disconnect is not None:
                self.on_disconnect(f"{PREFIXES[self.kind]}:pid {pid}")
        self._known = current
        self.core.clients = len(current)
        self.doorbell.prune(self._bells())  # eventfds of receivers that left
        for b in ring.take_wakeups():  # the fallback for a lost wake-up
            self.doorbell.ring(b)
        if self.paused:
            self._drain()
        self._timer = self.loop.call_later(LIVENESS_S, self._tick)

    # -------------------------------------------------------------- end
    async def close(self, linger: float = 1.0) -> None:
        """End the session: held writes go out first (receiver-paced: for at most ``linger``
        seconds while live receivers read), then CLOSED is set and the receivers are woken (they
        read what is committed, then EOS); the name is unlinked, our mapping released."""
        if self.closed:
            return
        deadline = self.loop.time() + linger
        while self._held and self.loop.time() < deadline:
            self._drain()
            if self._held:
                await asyncio.sleep(BLOCKED_POLL_S)
        if self._held:
            log.warning(
                "%s: closed with %d records no receiver made room for", self.name, len(self._held)
            )
        self.closed = True
        self.ring.close()
        for i in self.ring.receivers():
            bell = self.ring.slot(i)[4]
            if bell:
                self.doorbell.ring(bell)
        self._release()

    def _release(self) -> None:
        for h in (self._timer, self._poll):
            if h is not None:
                h.cancel()
        self._timer = self._poll = None
        self.segment.unlink()
        self.segment.close()
        self.doorbell.close()


class ShmReceiverConnection:
    """The reading end of one joined LBT-IPC / LBT-SMX session (the engine's Connection shape:
    ``pause_reading``, ``resume_reading``, ``abort``).

    ``on_record`` gets each record: ``bytes`` (IPC: copied, then checked whole) or a
    ``memoryview`` into the segment valid during the call (SMX); ``on_lost`` the ring bytes a
    source-paced writer overwrote before they were read; ``on_end`` the end of the session
    (None: the source closed it; else why).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        name: str,
        *,
        on_record: Callable[[Any], object],
        on_end: Callable[[Exception | None], None],
        on_lost: Callable[[int], None] | None = None,
        busy_wait: bool = False,
        linger: int = 1,
        activity_timeout: float = 60.0,
        zero_copy: bool = False,
    ) -> None:
        self.loop = loop
        self.segment = open_segment(name)
        self.name = name
        try:
            self.ring = RingReader(self.segment.view, name)
            self.doorbell = Doorbell(loop, self._wake)
        except BaseException:
            self.segment.close()
            raise
        with self.segment.locked():
            try:
                self.ring.attach(os.getpid(), self.doorbell.name, time.time_ns())
            except BaseException:
                self.doorbell.close()
                self.segment.close()
                raise
        # The source rings our eventfd from when it has it (before: our socket).
        self.doorbell.offer(self.ring.source_doorbell)
        self.on_record = on_record
        self.on_end = on_end
        self.on_lost = on_lost
        self.busy_wait = busy_wait
        self.linger = max(0, linger)
        self.activity_timeout = activity_timeout
        self.zero_copy = zero_copy
        self.paused = False
        self.closed = False
        self._scheduled = False
        #: Loop iterations in a row that found the ring dry (the linger count's counter).
        self._dry = 0
        self._mark = (-1, -1)
        self._active_at = loop.time()
        self._timer: asyncio.TimerHandle | None = loop.call_later(LIVENESS_S, self._tick)
        self._schedule()

    @property
    def source_pid(self) -> int:
        return self.ring.pid

    # -------------------------------------------------------------- reading
    def _wake(self) -> None:
        """The doorbell rang: read now (one loop iteration sooner than scheduling)."""
        if not self.paused and not self.closed and not self._scheduled:
            self._pump()

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._pump)

    def _pump(self) -> None:
        self._scheduled = False
        if self.closed or self.paused:
            return
        if self.busy_wait and not self.ring.has_data():
            # Busy-wait's empty poll: one load of ``head`` (no read, no position published),
            # so the next loop iteration polls again sooner.
            self._scheduled = True
            self.loop.call_soon(self._pump)
            return
        try:
            got = self._read(READ_BUDGET)
        except (TransportError, SegmentError) as exc:
            self._end(exc)
            return
        if self.closed:
            return
        if got >= READ_BUDGET or self.busy_wait:
            self._schedule()  # more to read, or busy-wait: next loop iteration
            return
        # The ring ran dry (this read ended on it): the linger starts now, so a read that
        # found data costs no extra loop iteration beyond the linger's.
        if got:
            self._dry = 0
        if self._dry < self.linger:  # transport_lbtipc_pend_behavior_linger_loop_count
            self._dry += 1
            self._schedule()
            return
        self._dry = 0
        ring = self.ring
        ring.prepare_sleep()
        fence()  # pending and sleeping stored before head is loaded (shmring, "Signalling")
        if ring.has_data():  # committed meanwhile: no doorbell will come for it
            ring.cancel_sleep()
            self._schedule()

    def _read(self, budget: int) -> int:
        """Deliver up to ``budget`` committed records; publish our position."""
        n = 0
        ring = self.ring
        try:
            n = self._read_views(budget) if self.zero_copy else self._read_copies(budget)
        finally:
            ring.publish()
            if n and ring.source_waiting:
                bell = ring.source_doorbell
                if bell:
                    self.doorbell.ring(bell)
        return n

    def _read_views(self, budget: int) -> int:
        """LBT-SMX: each record handed over as a view into the segment (receiver-paced: the
        writer cannot reclaim it before we move on)."""
        ring = self.ring
        view = self.segment.view
        on_record = self.on_record
        consume_to = ring.consume_to
        n = 0
        for off, length, end in ring.scan(budget):
            if self.closed or self.paused:
                break
            rec = view[off : off + length]
            try:
                on_record(rec)
            finally:
                rec.release()
            consume_to(end, length)
            n += 1
        return n

    def _read_copies(self, budget: int) -> int:
        """LBT-IPC: the committed records, copied and joined into one buffer of whole LBMC
        messages (one call of the receiver core per :data:`MAX_GATHER` bytes of ring, as one
        TCP read holds many writes), checked whole against the tail once after copying
        (:meth:`RingReader.read_copy`)."""
        read = self.ring.read_copy
        on_record = self.on_record
        n = 0
        while n < budget and not self.closed and not self.paused:
            data, k, lost = read(MAX_GATHER)
            if data is None:
                if not lost:
                    break
                if self.on_lost is not None:
                    self.on_lost(lost)
                continue
            n += k
            on_record(data)
        return n

    # -------------------------------------------------------------- liveness
    def _tick(self) -> None:
        self._timer = None
        if self.closed:
            return
        ring = self.ring
        why: Exception | None = None
        ended = False
        if ring.closed:
            ended = True
        elif not pid_alive(ring.pid):
            ended = True
            why = TransportError(f"{self.name}: source process {ring.pid} is gone")
        elif self._idle_for() > self.activity_timeout:
            ended = True
            why = TransportError(
                f"{self.name}: no heartbeat for {self.activity_timeout:g} s (activity timeout)"
            )
        if ended:
            # Whatever was committed is whole: deliver it, then end.
            try:
                while not self.closed and not self.paused and self._read(READ_BUDGET):
                    pass
            except (TransportError, SegmentError) as exc:
                why = exc
            self._end(why)
            return
        if not self.paused:
            self._schedule()  # the fallback for a lost wake-up
        self._timer = self.loop.call_later(LIVENESS_S, self._tick)

    def _idle_for(self) -> float:
        """Seconds since the source last showed activity: a new record or heartbeat (both
        read from the ring, so no clock is compared across processes)."""
        ring = self.ring
        mark = (ring.head, ring.heartbeat)
        now = self.loop.time()
        if mark != self._mark:
            self._mark = mark
            self._active_at = now
        return now - self._active_at

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        if self.paused:
            self.paused = False
            self._schedule()

    def _end(self, exc: Exception | None) -> None:
        if self.closed:
            return
        self._close()
        self.on_end(exc)

    def abort(self) -> None:
        """Leave the session (no EOS: the engine left it)."""
        self._close()

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        with contextlib.suppress(OSError, ValueError), self.segment.locked():
            self.ring.detach()
        self.doorbell.close()
        self.segment.close()


# ------------------------------------------------------------------ resource manager
class SegmentReport:
    """One ``LBTIPC_*`` / ``LBTSMX_*`` object in /dev/shm as the resource manager sees it."""

    __slots__ = ("header", "name", "problem", "receivers", "size", "source_alive")

    def __init__(self, name: str) -> None:
        self.name = name
        self.size = 0
        self.header: shmring.RingHeader | None = None
        #: Why the segment is unusable (None: it is a valid pyum ring).
        self.problem: str | None = None
        self.source_alive = False
        #: (slot, pid, alive) of each attached receiver.
        self.receivers: list[tuple[int, int, bool]] = []

    @property
    def stale(self) -> bool:
        """Left by a dead source (or unreadable): safe to remove."""
        return self.problem is not None or not self.source_alive

    def describe(self) -> str:
        if self.header is None:
            return f"{self.problem}"  # (it starts with the name)
        h = self.header
        state = "alive" if self.source_alive else "NOT FOUND"
        extra = ", closed" if h.closed else ""
        rcv = ", ".join(f"pid {p} ({'alive' if a else 'NOT FOUND'})" for _, p, a in self.receivers)
        return (
            f"Memory resource {self.name}: {h.kind_name} Process ID: {h.pid} ({state}) "
            f"SessionID: {h.session_id:x} XportID: {h.xport_id} size {self.size}{extra}"
            f"; receivers: {rcv or 'none'}"
        )


def scan_segments(directory: str | None = None) -> list[SegmentReport]:
    """Every LBT-IPC / LBT-SMX segment in ``directory`` (/dev/shm), checked without mapping an
    invalid one: header, creator pid, receivers' pids."""
    d = directory or SHM_DIR
    out: list[SegmentReport] = []
    try:
        names = sorted(os.listdir(d))
    except FileNotFoundError:
        return out
    for name in names:
        if not name.startswith(tuple(p + "_" for p in PREFIXES.values())):
            continue
        rep = SegmentReport(name)
        path = os.path.join(d, name)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            rep.problem = f"cannot open: {exc.strerror}"
            out.append(rep)
            continue
        try:
            rep.size = os.fstat(fd).st_size
            head = os.pread(fd, shmring.HEADER_FIXED, 0)
            h = shmring.check_header(head, rep.size, name)
            rep.header = h
            rep.source_alive = pid_alive(h.pid) and not h.closed
            slots = os.pread(fd, h.header_size - shmring.HEADER_FIXED, shmring.HEADER_FIXED)
            for i in range(h.max_receivers):
                o = i * shmring.SLOT_SIZE
                state = int.from_bytes(slots[o : o + 4], "little")
                pid = int.from_bytes(slots[o + 4 : o + 8], "little")
                if state:
                    rep.receivers.append((i, pid, pid_alive(pid)))
        except SegmentError as exc:
            rep.problem = str(exc).split(";", 1)[0]
        except OSError as exc:
            rep.problem = f"cannot read: {exc.strerror}"
        finally:
            os.close(fd)
        out.append(rep)
    return out


def reclaim(report: SegmentReport, directory: str | None = None) -> bool:
    """Remove a stale segment's name (mappings of live processes stay valid until they unmap)."""
    if not report.stale:
        return False
    try:
        os.unlink(os.path.join(directory or SHM_DIR, report.name))
    except FileNotFoundError:
        return False
    return True
