"""Sans-IO shared-memory ring: the data path of LBT-IPC and LBT-SMX (seed 003 6.4-6.5).

Theory of operation
-------------------
One ring per transport session, in one shared-memory segment the source creates
(``LBTIPC_<sid hex>_<xport id>`` / ``LBTSMX_<sid hex>_<xport id>``).  UM publishes no byte
layout for these segments (notes seed-transports-tr 1.7), so this one is pyum's own and is
compatible with itself only; every segment starts with a header naming it (magic, version,
sizes) and a reader refuses any segment whose header it does not recognise
(:func:`check_header`, :class:`SegmentError`), never reading past what the header declares.

Layout (little-endian, offsets in bytes)::

    0   8s  magic b"PYUMSHM\\0"          40  u32 max_receivers
    8   u16 version (1)                 44  u32 max_record (largest record payload)
    10  u16 kind (1 LBT-IPC, 2 LBT-SMX) 48  u64 head: committed write position
    12  u32 header_size                 56  u64 tail: oldest position still valid
    16  u64 data_size                   64  u64 heartbeat (source's wall clock, ns)
    24  u32 session_id, 28 u32 xport_id 72  u64 generation (receiver slots changed)
    32  u32 source pid                  80  32s source doorbell (a name, NUL padded)
    36  u32 flags (RECEIVER_PACED, CLOSED, SOURCE_WAITING)
    112 u32 sleeping: some receiver set its pending flag (cleared by the writer's scan)
    128 receiver slots, SLOT_SIZE each: u32 state, u32 pid, u64 position, u32 pending,
        u32 reserved, 32s doorbell, u64 attach time (ns)

Positions are byte counters that only grow (u64); a position's place in the data area is
``position % data_size``.  A *record* is an 8-byte header -- u32 payload length, u32 stamp (the
record's own position / 8, truncated: what the reader compares to know it reads the record it
expects) -- then the payload, padded to 8 bytes.  A record never wraps: when it does not fit
before the end of the data area the writer puts a PAD record there and starts at the next lap.
LBT-IPC records carry whole LBMC messages (a batch); LBT-SMX records one LBMC data message.

**Writing** (:class:`RingWriter`): reclaim room first, then the payload and the record header,
then ``head`` moves past them (the commit).  A reader only looks at records below ``head``, so a
source killed mid-record never shows a torn record: the record simply never existed.
*Source-paced* (LBT-IPC's default): room is always made by moving ``tail`` past the oldest
records -- ``tail`` is stored before their bytes are overwritten, so a reader that copies a
record and then still finds ``tail`` at or below it knows its copy is whole (seed 6.4: "compares
IPC header information at different times").  *Receiver-paced* (LBT-IPC's option, LBT-SMX
always): room is made only up to the slowest attached receiver's position; with no room
:meth:`RingWriter.write` returns False and the adapter holds the data (the session blocks).
:meth:`RingWriter.reserve` / :meth:`RingWriter.commit` are the same in two steps: the payload is
written in place by the caller (LBT-SMX's zero-copy send), and several reserved records are
committed at once.

**Reading** (:class:`RingReader`): :meth:`RingReader.next_record` gives the next committed
record's payload place (or that the reader was lapped: loss); the adapter reads or copies it,
then :meth:`RingReader.still_valid` (source-paced: was it overwritten meanwhile?) and
:meth:`RingReader.consume` (moves the reader's position, which a receiver-paced writer waits
for).  LBT-IPC's receivers read in batches (:meth:`RingReader.read_copy`): ``head`` loaded
once, every committed record up to the lap's end copied and joined in one pass, the copy
checked against ``tail`` once after it; LBT-SMX's hand out views (:meth:`RingReader.scan`).  *Signalling* (futex-style): a reader about to wait sets its slot's ``pending`` flag,
then the header's ``sleeping`` flag (:meth:`RingReader.prepare_sleep`), and looks at ``head``
once more: data committed meanwhile means it does not sleep.  A writer, after each commit, reads
the one ``sleeping`` word (:meth:`RingWriter.take_wakeups`): 0, the common case while receivers
keep up, costs nothing more -- no slot scan, no wake-up syscall; else it clears it, then scans
the slots, clears the ``pending`` flags it finds set and returns those receivers' doorbells for
the adapter to ring.  Under sequential consistency no wake-up is lost: the reader stores
``pending`` and ``sleeping`` before it loads ``head``, the writer stores ``head`` before it loads
``sleeping`` and scans after clearing it, so either the reader sees the new ``head`` or the
writer sees its flags (``tests/transport_shm/test_ring.py`` checks every interleaving).

Ordering: CPython writes these fields with ``struct.pack_into`` on a shared mapping; x86-64
keeps stores in order and loads in order, which is what the protocol needs (payload before
head; tail before overwriting).  It may let a load pass an earlier store, though -- exactly the
store-then-load of the signalling above -- so the adapters put a full barrier between the two
(a ``threading.Lock`` acquire/release: a locked instruction); the adapters also poll on a slow
timer, so even a lost wake-up would cost latency, never a hang.
"""

from __future__ import annotations

import struct

from umcore.errors import UMError

#: What a ring reads from or copies in.
Buffer = bytes | bytearray | memoryview

__all__ = [
    "CLOSED",
    "HEADER_FIXED",
    "KIND_IPC",
    "KIND_SMX",
    "MAGIC",
    "RECEIVER_PACED",
    "RECORD_HEADER",
    "SLOT_SIZE",
    "SOURCE_WAITING",
    "VERSION",
    "RingHeader",
    "RingReader",
    "RingWriter",
    "SegmentError",
    "check_header",
    "header_size_for",
    "init_header",
    "record_size",
]

MAGIC = b"PYUMSHM\x00"
#: Bumped whenever the layout changes: a segment of another version is refused, not guessed at.
#: (2: the header's ``sleeping`` word.)
VERSION = 2
KIND_IPC = 1
KIND_SMX = 2
KIND_NAMES = {KIND_IPC: "LBT-IPC", KIND_SMX: "LBT-SMX"}
#: Flags (header offset 36).
RECEIVER_PACED = 0x1
CLOSED = 0x2
SOURCE_WAITING = 0x4
#: Bytes of the fixed header before the receiver slots.
HEADER_FIXED = 128
#: Bytes per receiver slot.
SLOT_SIZE = 64
#: Bytes of a record's own header (length, stamp).
RECORD_HEADER = 8
#: Payload length marking a PAD record (the rest of the lap is unused).
PAD = 0xFFFFFFFF
#: Largest doorbell name stored (a UNIX socket name fits in 32 bytes with our naming).
DOORBELL_MAX = 32
#: Upper bound on receiver slots: keeps a header (and a hostile one) small; UM's defaults are
#: 20 (IPC) and 64 (SMX).
MAX_SLOTS = 1024
#: Smallest data area: must hold a few records of the smallest datagram (SMX's minimum is 32).
MIN_DATA = 256

_HEAD = struct.Struct("<8sHHIQIIIIII")  # magic .. max_record (48 bytes)
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
_REC = struct.Struct("<II")
_SLOT = struct.Struct("<IIQII32sQ")

_OFF_FLAGS = 36
_OFF_HEAD = 48
_OFF_TAIL = 56
_OFF_HEARTBEAT = 64
_OFF_GENERATION = 72
_OFF_DOORBELL = 80
_OFF_SLEEPING = 112
# Within a slot.
_S_STATE = 0
_S_POS = 8
_S_PENDING = 16
_S_DOORBELL = 24

_pack_u64 = _U64.pack_into
_unpack_u64 = _U64.unpack_from
_pack_u32 = _U32.pack_into
_unpack_u32 = _U32.unpack_from
_pack_rec = _REC.pack_into
_unpack_rec = _REC.unpack_from


class SegmentError(UMError):
    """A shared-memory segment is missing, not ours, of another version, or inconsistent."""


def record_size(n: int) -> int:
    """Bytes a record of an ``n``-byte payload takes in the ring (header + padding)."""
    return RECORD_HEADER + ((n + 7) & ~7)


def header_size_for(max_receivers: int) -> int:
    """Header bytes (fixed part and slots, 64-byte aligned) for ``max_receivers`` slots."""
    return (HEADER_FIXED + SLOT_SIZE * max_receivers + 63) & ~63


class RingHeader:
    """A segment header's fields, as :func:`check_header` read them."""

    __slots__ = (
        "data_size",
        "flags",
        "head",
        "header_size",
        "heartbeat",
        "kind",
        "max_receivers",
        "max_record",
        "pid",
        "session_id",
        "version",
        "xport_id",
    )

    def __init__(self, buf: Buffer) -> None:
        (_, self.version, self.kind, self.header_size, self.data_size, self.session_id,
         self.xport_id, self.pid, self.flags, self.max_receivers, self.max_record) = _HEAD.unpack_from(buf, 0)  # fmt: skip
        self.head = _unpack_u64(buf, _OFF_HEAD)[0]
        self.heartbeat = _unpack_u64(buf, _OFF_HEARTBEAT)[0]

    @property
    def total_size(self) -> int:
        return int(self.header_size + self.data_size)

    @property
    def closed(self) -> bool:
        return bool(self.flags & CLOSED)

    @property
    def kind_name(self) -> str:
        return KIND_NAMES.get(self.kind, f"kind {self.kind}")


def check_header(buf: Buffer, size: int, name: str = "segment") -> RingHeader:
    """The header of a segment of ``size`` bytes whose first bytes are ``buf``; SegmentError
    (saying what is wrong and what to run) unless it is a pyum ring of this version whose
    declared sizes match ``size``."""
    hint = "; run `python -m umcore.tools.ipcrm` to list stale segments, `--reclaim` to remove them"
    if size < HEADER_FIXED or len(memoryview(buf)) < HEADER_FIXED:
        raise SegmentError(f"{name}: {size} bytes, too short to be a pyum LBT-IPC/SMX ring{hint}")
    if bytes(memoryview(buf)[:8]) != MAGIC:
        raise SegmentError(f"{name}: not a pyum LBT-IPC/SMX ring (bad magic){hint}")
    h = RingHeader(buf)
    if h.version != VERSION:
        raise SegmentError(
            f"{name}: ring layout version {h.version}, this pyum reads version {VERSION}{hint}"
        )
    if h.kind not in KIND_NAMES:
        raise SegmentError(f"{name}: unknown ring kind {h.kind}{hint}")
    if not 1 <= h.max_receivers <= MAX_SLOTS or h.header_size != header_size_for(h.max_receivers):
        raise SegmentError(f"{name}: inconsistent header (receivers/header size){hint}")
    if h.data_size < MIN_DATA or h.data_size % 8 or h.total_size != size:
        raise SegmentError(
            f"{name}: header declares {h.total_size} bytes, the segment has {size}{hint}"
        )
    if not 0 < h.max_record <= h.data_size // 2:
        raise SegmentError(f"{name}: inconsistent header (max record {h.max_record}){hint}")
    return h


def init_header(
    buf: memoryview,
    *,
    kind: int,
    data_size: int,
    session_id: int,
    xport_id: int,
    pid: int,
    max_receivers: int,
    max_record: int,
    receiver_paced: bool,
    doorbell: bytes,
    now_ns: int,
) -> None:
    """Write a new segment's header (``buf`` is the whole zero-filled segment)."""
    if len(doorbell) > DOORBELL_MAX:
        raise ValueError("doorbell name longer than 32 bytes")
    hsize = header_size_for(max_receivers)
    if len(buf) != hsize + data_size:
        raise ValueError("segment size does not match header and data sizes")
    flags = RECEIVER_PACED if receiver_paced else 0
    _HEAD.pack_into(buf, 0, MAGIC, VERSION, kind, hsize, data_size, session_id, xport_id,
                    pid, flags, max_receivers, max_record)  # fmt: skip
    _pack_u64(buf, _OFF_HEARTBEAT, now_ns)
    buf[_OFF_DOORBELL : _OFF_DOORBELL + DOORBELL_MAX] = doorbell.ljust(DOORBELL_MAX, b"\0")


class _Ring:
    """What writer and reader share: the header's geometry and field access."""

    def __init__(self, buf: memoryview, name: str = "segment") -> None:
        h = check_header(buf, len(buf), name)
        self.buf = buf
        self.header = h
        self.size = int(h.data_size)
        self.base = int(h.header_size)
        self.max_receivers = int(h.max_receivers)
        self.max_record = int(h.max_record)
        self.kind = int(h.kind)
        self.session_id = int(h.session_id)
        self.xport_id = int(h.xport_id)
        self.pid = int(h.pid)

    # header fields
    @property
    def flags(self) -> int:
        return int(_unpack_u32(self.buf, _OFF_FLAGS)[0])

    def _set_flag(self, bit: int, on: bool) -> None:
        f = _unpack_u32(self.buf, _OFF_FLAGS)[0]
        _pack_u32(self.buf, _OFF_FLAGS, (f | bit) if on else (f & ~bit))

    @property
    def receiver_paced(self) -> bool:
        return bool(self.flags & RECEIVER_PACED)

    @property
    def closed(self) -> bool:
        return bool(self.flags & CLOSED)

    @property
    def head(self) -> int:
        return int(_unpack_u64(self.buf, _OFF_HEAD)[0])

    @property
    def tail(self) -> int:
        return int(_unpack_u64(self.buf, _OFF_TAIL)[0])

    @property
    def heartbeat(self) -> int:
        return int(_unpack_u64(self.buf, _OFF_HEARTBEAT)[0])

    @property
    def generation(self) -> int:
        return int(_unpack_u64(self.buf, _OFF_GENERATION)[0])

    @property
    def source_doorbell(self) -> bytes:
        return bytes(self.buf[_OFF_DOORBELL : _OFF_DOORBELL + DOORBELL_MAX]).rstrip(b"\0")

    def slot_offset(self, i: int) -> int:
        return HEADER_FIXED + SLOT_SIZE * i

    def slot(self, i: int) -> tuple[int, int, int, int, bytes]:
        """Slot ``i``: (state, pid, position, pending, doorbell)."""
        state, pid, pos, pending, _, bell, _ = _SLOT.unpack_from(self.buf, self.slot_offset(i))
        return state, pid, pos, pending, bytes(bell).rstrip(b"\0")

    def slots_in_use(self) -> list[int]:
        return [i for i in range(self.max_receivers) if self.slot(i)[0]]


class RingWriter(_Ring):
    """The source end of a ring (module docstring, "Writing")."""

    def __init__(self, buf: memoryview, name: str = "segment") -> None:
        super().__init__(buf, name)
        self._head = self.head
        self._tail = self.tail
        #: End of what :meth:`reserve` handed out and :meth:`commit` has not published.
        self._reserved = self._head
        #: Slots in use as last scanned, and the generation they were scanned at.
        self._slots: list[int] = []
        #: Each of those slots' pending-flag offset and doorbell (fixed while it is attached).
        self._bells: list[tuple[int, bytes]] = []
        self._gen = -1
        self.records_written = 0
        self.bytes_written = 0
        #: Receiver-paced (fixed when the segment was made).
        self.paced = bool(self.flags & RECEIVER_PACED)
        #: Records reclaimed before every attached receiver read them (source-paced loss).
        self.records_overwritten = 0

    def _refresh_slots(self) -> list[int]:
        g = _unpack_u64(self.buf, _OFF_GENERATION)[0]
        if g != self._gen:
            self._gen = g
            self._slots = self.slots_in_use()
            self._bells = [(self.slot_offset(i) + _S_PENDING, self.slot(i)[4]) for i in self._slots]
        return self._slots

    def receivers(self) -> list[int]:
        """Slots attached now (re-read when a receiver attached or left)."""
        return list(self._refresh_slots())

    def _min_reader(self) -> int | None:
        slots = self._refresh_slots()
        if not slots:
            return None
        buf = self.buf
        return int(min(_unpack_u64(buf, self.slot_offset(i) + _S_POS)[0] for i in slots))

    def _reclaim(self, upto: int, limit: int | None) -> bool:
        """Move ``tail`` so that position ``upto`` may be written; False when receiver-paced
        and ``limit`` (the slowest receiver's position) forbids it.  Records every receiver
        has read (below ``limit``) are reclaimed in one go, so the next writes need no walk."""
        tail = self._tail
        need = upto - self.size
        if tail >= need:
            return True
        if limit is not None and need <= limit <= self._head:
            # Everything below the slowest receiver's position is read by all: the tail moves
            # there at once (a receiver's position is always a record's start), no walk.
            self._tail = limit
            _pack_u64(self.buf, _OFF_TAIL, limit)
            return True
        if self.paced and limit is not None:
            return False
        target = need
        buf, size, base = self.buf, self.size, self.base
        lost = 0
        while tail < target:
            off = tail % size
            n = _unpack_rec(buf, base + off)[0]
            if n == PAD or tail + RECORD_HEADER + ((n + 7) & ~7) > tail - off + size:
                step = size - off  # PAD (or a record that cannot be: skip the lap's rest)
            else:
                step = RECORD_HEADER + ((n + 7) & ~7)
            if tail >= need and tail + step > target:
                break  # room made; the next record is not read by everyone yet
            if limit is None or tail >= limit:
                lost += 1  # reclaimed before every receiver read it (source-paced)
            tail += step
        self.records_overwritten += lost
        self._tail = tail
        _pack_u64(buf, _OFF_TAIL, tail)
        return True

    def _place(self, n: int) -> int | None:
        """Room for a record of ``n`` payload bytes after what is reserved: its position (a
        PAD written before it when the lap's rest is too short), or None (receiver-paced and
        full)."""
        if n > self.max_record:
            raise UMError(f"record of {n} bytes exceeds the ring's maximum of {self.max_record}")
        pos = self._reserved
        size = self.size
        off = pos % size
        need = record_size(n)
        pad = size - off if size - off < need else 0
        upto = pos + pad + need
        # Room must be made (else there is nothing to look at), and may not be.
        if self._tail < upto - size and not self._reclaim(upto, self._min_reader()):
            return None
        if pad:
            _pack_rec(self.buf, self.base + off, PAD, (pos >> 3) & 0xFFFFFFFF)
            pos += pad
        return pos

    def has_room(self, n: int) -> bool:
        """Would a record of ``n`` payload bytes fit now (receiver-paced: without overtaking
        the slowest receiver)?  Changes nothing."""
        if not self.paced:
            return True
        pos = self._reserved
        off = pos % self.size
        need = record_size(n)
        pad = self.size - off if self.size - off < need else 0
        lowest = pos + pad + need - self.size
        limit = self._min_reader()
        return self._tail >= lowest or limit is None or limit >= lowest

    def write(self, data: Buffer) -> bool:
        """Append one record and commit it; False (nothing written) when receiver-paced and
        full.  UMError for a record larger than the ring's maximum."""
        n = len(data) if type(data) is bytes else len(memoryview(data))
        pos = self._reserved
        size = self.size
        off = pos % size
        need = RECORD_HEADER + ((n + 7) & ~7)
        # The data path: room before the lap's end and nothing to reclaim (the tail already
        # far enough); anything else (a PAD, reclaiming, a full receiver-paced ring, a
        # too-large record) takes _place.
        if size - off < need or self._tail < pos + need - size or n > self.max_record:
            placed = self._place(n)
            if placed is None:
                return False
            pos = placed
            off = pos % size
        buf = self.buf
        off += self.base
        buf[off + RECORD_HEADER : off + RECORD_HEADER + n] = data
        _pack_rec(buf, off, n, (pos >> 3) & 0xFFFFFFFF)
        end = pos + need
        self._reserved = self._head = end
        self.records_written += 1
        self.bytes_written += n
        _pack_u64(buf, _OFF_HEAD, end)  # the commit
        return True

    def reserve(self, n: int) -> int | None:
        """Room for a record of ``n`` bytes written in place: the offset (in the segment) of
        its payload, or None when receiver-paced and full.  Published by :meth:`commit`."""
        pos = self._reserved
        size = self.size
        off = pos % size
        need = RECORD_HEADER + ((n + 7) & ~7)
        if size - off < need or self._tail < pos + need - size or n > self.max_record:
            placed = self._place(n)  # (the data path is as in write)
            if placed is None:
                return None
            pos = placed
            off = pos % size
        off += self.base
        _pack_rec(self.buf, off, n, (pos >> 3) & 0xFFFFFFFF)
        self._reserved = pos + need
        self.records_written += 1
        self.bytes_written += n
        return off + RECORD_HEADER

    def commit(self) -> None:
        """Publish every reserved record (``head`` moves)."""
        if self._reserved != self._head:
            self._head = self._reserved
            _pack_u64(self.buf, _OFF_HEAD, self._head)

    def cancel(self) -> int:
        """Drop the records reserved and not committed; returns how many bytes of ring that was."""
        n = self._reserved - self._head
        self._reserved = self._head
        return n

    @property
    def uncommitted(self) -> bool:
        return self._reserved != self._head

    def take_wakeups(self) -> list[bytes]:
        """Doorbells of the receivers waiting for data (their flags cleared): ring them.  One
        load when no receiver is sleeping (module docstring, "Signalling"); the steps are
        :attr:`sleeping`, :meth:`clear_sleeping`, :meth:`take_pending`."""
        if not _unpack_u32(self.buf, _OFF_SLEEPING)[0]:
            return []
        self.clear_sleeping()  # before the scan: a receiver announcing sleep later sets it again
        return self.take_pending()

    @property
    def sleeping(self) -> bool:
        """Has some receiver announced it sleeps (the header's ``sleeping`` word)?"""
        return bool(_unpack_u32(self.buf, _OFF_SLEEPING)[0])

    def clear_sleeping(self) -> None:
        _pack_u32(self.buf, _OFF_SLEEPING, 0)

    def take_pending(self) -> list[bytes]:
        """The doorbells of the receivers whose pending flag is set, the flags cleared."""
        buf = self.buf
        out: list[bytes] = []
        self._refresh_slots()
        for o, bell in self._bells:
            if _unpack_u32(buf, o)[0]:
                _pack_u32(buf, o, 0)
                out.append(bell)
        return out

    def set_waiting(self, on: bool) -> None:
        """SOURCE_WAITING: receivers ring the source's doorbell when they free room."""
        self._set_flag(SOURCE_WAITING, on)

    def beat(self, now_ns: int) -> None:
        _pack_u64(self.buf, _OFF_HEARTBEAT, now_ns)

    def free_slot(self, i: int) -> None:
        """Forget receiver slot ``i`` (its process died: it must not pace the source)."""
        o = self.slot_offset(i)
        self.buf[o : o + SLOT_SIZE] = bytes(SLOT_SIZE)
        _pack_u64(self.buf, _OFF_GENERATION, self.generation + 1)

    def close(self) -> None:
        """End of session: readers drain what is committed, then end (EOS)."""
        self.cancel()
        self._set_flag(CLOSED, True)


class RingReader(_Ring):
    """One receiver's end of a ring (module docstring, "Reading")."""

    def __init__(self, buf: memoryview, name: str = "segment") -> None:
        super().__init__(buf, name)
        #: Receiver-paced (fixed when the segment was made; read once, as the writer does).
        self.paced = bool(self.flags & RECEIVER_PACED)
        self.slot_index = -1
        self.pos = self.head
        self._next = self.pos
        self.records_read = 0
        self.bytes_read = 0
        #: Times this reader was lapped by a source-paced writer, and the ring bytes it lost.
        self.laps = 0
        self.bytes_lost = 0

    def attach(self, pid: int, doorbell: bytes, now_ns: int) -> int:
        """Take a free slot (the adapter holds the segment's lock); start at ``head``.
        SegmentError when every slot is taken."""
        buf = self.buf
        for i in range(self.max_receivers):
            o = self.slot_offset(i)
            if not _unpack_u32(buf, o + _S_STATE)[0]:
                self.pos = self._next = self.head
                _SLOT.pack_into(buf, o, 1, pid, self.pos, 0, 0,
                                doorbell.ljust(DOORBELL_MAX, b"\0")[:DOORBELL_MAX], now_ns)  # fmt: skip
                _pack_u64(buf, _OFF_GENERATION, self.generation + 1)
                self.slot_index = i
                return i
        raise SegmentError(
            f"all {self.max_receivers} receiver slots of the segment are taken "
            "(transport_*_maximum_receivers_per_transport)"
        )

    def detach(self) -> None:
        """Leave the slot (the adapter holds the segment's lock)."""
        i = self.slot_index
        if i < 0:
            return
        self.slot_index = -1
        o = self.slot_offset(i)
        self.buf[o : o + SLOT_SIZE] = bytes(SLOT_SIZE)
        _pack_u64(self.buf, _OFF_GENERATION, self.generation + 1)

    def next_record(self) -> tuple[int, int]:
        """The next committed record as (payload offset in the segment, length); (-1, 0) when
        none is committed; (-2, bytes) when this reader was lapped (loss: it moved to the
        oldest valid record; the bytes skipped are counted)."""
        buf, size = self.buf, self.size
        pos = self.pos
        while True:
            head = _unpack_u64(buf, _OFF_HEAD)[0]
            if pos >= head:
                self.pos = pos
                return -1, 0
            tail = _unpack_u64(buf, _OFF_TAIL)[0]
            if pos < tail:
                return self._lapped(tail)
            off = pos % size
            n, stamp = _unpack_rec(buf, self.base + off)
            if stamp != (pos >> 3) & 0xFFFFFFFF:
                tail = _unpack_u64(buf, _OFF_TAIL)[0]
                if pos < tail:
                    return self._lapped(tail)
                raise SegmentError(f"ring record at {pos} has a bad stamp: segment corrupt")
            if n == PAD:
                pos += size - off
                continue
            if n > self.max_record or off + record_size(n) > size:
                raise SegmentError(f"ring record at {pos} has a bad length {n}: segment corrupt")
            self.pos = pos
            self._next = pos + record_size(n)
            return self.base + off + RECORD_HEADER, n

    def scan(self, limit: int) -> list[tuple[int, int, int]]:
        """Receiver-paced rings only (the writer never reclaims a record a reader has not
        passed, so no tail checks): up to ``limit`` committed records from this reader's
        position, each (payload offset in the segment, length, position after it), PADs
        skipped, ``head`` loaded once for all -- LBT-SMX's one-message records without a method
        call each.  Nothing is consumed: :meth:`consume_to` each as it is done.  SegmentError
        for a record that cannot be."""
        if not self.paced:
            raise UMError("RingReader.scan needs a receiver-paced ring")
        buf, size, base, largest = self.buf, self.size, self.base, self.max_record
        pos = self.pos
        head = _unpack_u64(buf, _OFF_HEAD)[0]
        out: list[tuple[int, int, int]] = []
        while pos < head and len(out) < limit:
            off = pos % size
            n, stamp = _unpack_rec(buf, base + off)
            if stamp != (pos >> 3) & 0xFFFFFFFF:
                raise SegmentError(f"ring record at {pos} has a bad stamp: segment corrupt")
            if n == PAD:
                pos += size - off
                continue
            step = RECORD_HEADER + ((n + 7) & ~7)
            if n > largest or off + step > size:
                raise SegmentError(f"ring record at {pos} has a bad length {n}: segment corrupt")
            out.append((base + off + RECORD_HEADER, n, pos + step))
            pos += step
        return out

    def read_copy(self, max_bytes: int) -> tuple[bytes | None, int, int]:
        """LBT-IPC's batch read: the payloads of the committed records from this reader's
        position -- up to the lap's end and about ``max_bytes`` of ring (at least one record) --
        copied and joined into one ``bytes``, ``head`` loaded once and the copy checked whole
        against ``tail`` once after it (source-paced: see "Writing"), then consumed.  Returns
        ``(data, records, lost)``: ``data`` None when nothing was committed (``lost`` > 0: this
        reader was lapped and moved to the oldest valid record, those ring bytes counted).
        SegmentError for a record that cannot be (and was not overwritten meanwhile)."""
        buf, size, base, largest = self.buf, self.size, self.base, self.max_record
        while True:
            pos = self.pos
            head = _unpack_u64(buf, _OFF_HEAD)[0]
            if pos >= head:
                return None, 0, 0
            tail = _unpack_u64(buf, _OFF_TAIL)[0]
            if pos < tail:
                return None, 0, self._lapped(tail)[1]
            lap_end = pos - pos % size + size
            stop = head if head < lap_end else lap_end
            limit = pos + max_bytes
            parts: list[memoryview] = []
            append = parts.append
            p = pos
            bad = False
            # The record headers are read from the live segment: a record overwritten while
            # read shows as a bad stamp or length, or as nothing wrong -- the tail check after
            # the copy tells which (and throws the copy away either way).
            while p < stop:
                o = base + p - lap_end + size
                n, stamp = _unpack_rec(buf, o)
                if stamp != (p >> 3) & 0xFFFFFFFF:
                    bad = True
                    break
                if n == PAD:
                    if head < lap_end:
                        bad = True  # a PAD is committed only with the record after it
                        break
                    p = lap_end
                    break
                step = RECORD_HEADER + ((n + 7) & ~7)
                if n > largest or p + step > stop:
                    bad = True
                    break
                if p + step > limit and parts:
                    break
                append(buf[o + RECORD_HEADER : o + RECORD_HEADER + n])
                p += step
            k = len(parts)
            data = (bytes(parts[0]) if k == 1 else b"".join(parts)) if k else None
            del parts[:]  # (the views into the segment go now, not with the frame)
            if not self.paced:
                tail = _unpack_u64(buf, _OFF_TAIL)[0]
                if pos < tail:  # overwritten while copied: loss, whatever was read
                    return None, 0, self._lapped(tail)[1]
            if bad and not k:
                raise SegmentError(f"ring record at {p} has a bad stamp or length: segment corrupt")
            self.pos = self._next = p
            if data is None:
                continue  # a PAD only: the next lap
            self.records_read += k
            self.bytes_read += len(data)
            return data, k, 0

    def consume_to(self, end: int, n: int) -> None:
        """Done with a record :meth:`scan` gave (``end`` its position after, ``n`` bytes)."""
        self.pos = self._next = end
        self.records_read += 1
        self.bytes_read += n

    def _lapped(self, tail: int) -> tuple[int, int]:
        lost = tail - self.pos
        self.laps += 1
        self.bytes_lost += lost
        self.pos = self._next = tail
        self._publish()
        return -2, lost

    def still_valid(self) -> bool:
        """Source-paced: is the record :meth:`next_record` gave still unreclaimed (so what was
        read of it is whole)?  Always True receiver-paced (the writer waits for us)."""
        return self.pos >= int(_unpack_u64(self.buf, _OFF_TAIL)[0])

    def valid_since(self, pos: int) -> bool:
        """:meth:`still_valid` for everything read since position ``pos``."""
        return pos >= int(_unpack_u64(self.buf, _OFF_TAIL)[0])

    def rewind(self, pos: int) -> None:
        """Back to position ``pos`` (what was read since was overwritten: the next
        :meth:`next_record` reports the loss)."""
        self.pos = self._next = pos

    def consume(self, n: int) -> None:
        """Done with the record :meth:`next_record` gave (``n`` payload bytes)."""
        self.pos = self._next
        self.records_read += 1
        self.bytes_read += n

    def publish(self) -> None:
        """Tell the writer how far this reader got (receiver pacing)."""
        self._publish()

    def _publish(self) -> None:
        if self.slot_index >= 0:
            _pack_u64(self.buf, self.slot_offset(self.slot_index) + _S_POS, self.pos)

    def set_pending(self, on: bool) -> None:
        """Set or clear this reader's pending flag (its slot only: :meth:`prepare_sleep`)."""
        if self.slot_index >= 0:
            _pack_u32(self.buf, self.slot_offset(self.slot_index) + _S_PENDING, 1 if on else 0)

    def announce_sleep(self) -> None:
        """Set the header's ``sleeping`` word (after the pending flag)."""
        if self.slot_index >= 0:
            _pack_u32(self.buf, _OFF_SLEEPING, 1)

    def prepare_sleep(self) -> None:
        """About to wait for a doorbell: pending flag, then the header's ``sleeping`` word
        (module docstring, "Signalling").  The caller puts a full barrier after this and then
        checks :meth:`has_data` once more: True means do not sleep (:meth:`cancel_sleep`)."""
        self.set_pending(True)
        self.announce_sleep()

    def cancel_sleep(self) -> None:
        """Not sleeping after all (the writer may still ring once: harmless)."""
        self.set_pending(False)

    def has_data(self) -> bool:
        """Is a record committed past this reader's position (one load)?"""
        return bool(_unpack_u64(self.buf, _OFF_HEAD)[0] > self.pos)

    @property
    def source_waiting(self) -> bool:
        return bool(self.flags & SOURCE_WAITING)
