"""LBT-IPC and LBT-SMX for the engine: source sessions, joins, and LBT-SMX's zero-copy send.

Theory of operation
-------------------
A source whose ``transport`` is ``lbtipc`` (``lbt-ipc``) or ``lbtsmx`` (``lbt-smx``) is mapped
onto a shared-memory session of this context (seed 003 6.4.1 / 6.5.1):

- **Transport ids.**  ``transport_lbtipc_id`` (``transport_lbtsmx_id``) pins the session; 0
  takes the context's pool ``transport_lbtipc_id_low..high`` (20001-20005; SMX 30001-30005)
  round robin: a new session while the pool has a free id, else the next existing session.
  An id outside the range is never shared with implicit sources (notes 1.x "Default pool").
  Sessions take the options of their first source (UM's rule).
- **Sizes.**  LBT-IPC's ring is ``transport_lbtipc_transmission_window_size`` (seed 6.4.4: the
  window *is* the shared memory), records up to ``transport_lbtipc_datagram_max_size``.
  LBT-SMX's window is rounded up to a power of 2 (seed 6.5.6, a warning logged) and its
  records are ``transport_lbtsmx_datagram_max_size``; a message longer than that less 16 bytes
  is refused (no fragmentation).
- **Pacing.**  ``transport_lbtipc_behavior`` ``source_paced`` (default) or ``receiver_paced``;
  LBT-SMX is always receiver-paced (seed 6.5.6; the notes' 1.5 agrees).
- **Topic resolution.**  The TIR carries the LBT-IPC / LBT-SMX block (host id, session id,
  transport id; :class:`~umcore.wire.lbmr.LBTIPCInfo`); the source string is UM's
  ``LBT-IPC:<sid hex>:<xport id>``.  A receiver joins only TIRs of its own host id (seed 6.4.2:
  others "silently ignore those advertisements").
- **Joining.**  IPC: the segment's records go to TCP's receiver core (the same LBMC framing,
  delivery controllers, loss from sequence gaps); SMX: :class:`~umcore.transport.shm.SmxReceiverSession`
  with payloads delivered as ``memoryview`` into the segment.  BOS when attached, EOS when the
  source closes, dies, or stops its heartbeat for the activity timeout.  A segment that is
  missing, of another version or inconsistent is refused with the command to clean it up, and
  the join is retried on the next TIR like a TCP connection that failed.
- **LBT-SMX zero-copy send** (seed 6.5.2): :func:`smx_buffers` gives a source's
  :class:`SmxBuffers`: ``acquire(n)`` returns a writable ``memoryview`` of ``n`` bytes inside
  the ring (``WouldBlock`` when full and asked not to wait), ``complete()`` publishes every
  acquired message, ``cancel()`` drops them.  Not thread-safe (UM's rule) and not to be mixed
  with ``send`` on the same session before ``complete()``.

Not carried over from UM: LBT-IPC's ``transport_lbtipc_receiver_operational_mode``
``sequential`` (the asyncio loop is the context thread; an application drives it by running
the loop), and SMX's statistics switch (statistics are always counted: the counters are Python
ints either way).
"""

from __future__ import annotations

import logging
import weakref
from typing import Any, Protocol, cast

from umcore.aio import shm as aio_shm
from umcore.engine import lbt
from umcore.engine.options import Options, random_session_id
from umcore.engine.receive import JoinedSession
from umcore.engine.source import EngineSource, SourceHost, SourceSession
from umcore.errors import ConfigError, UMError, WouldBlock
from umcore.resolver.core import SourceInfo
from umcore.transport import shmring
from umcore.transport.shm import (
    LBMC_DATA_HEADER,
    IpcSource,
    SmxReceiverSession,
    SmxSource,
    pack_data_header,
)
from umcore.transport.tcp import TcpReceiverSession
from umcore.wire import lbmr

__all__ = ["KINDS", "SmxBuffers", "join", "prepare_join", "smx_buffers", "source_session"]

log = logging.getLogger("umcore.engine")

#: Source ``transport`` kinds (normalised) this module serves, and the joined-session kinds.
KINDS = ("lbtipc", "lbtsmx")
JOIN_KINDS = ("LBT-IPC", "LBT-SMX")
_RING_KIND = {"lbtipc": shmring.KIND_IPC, "lbtsmx": shmring.KIND_SMX}
#: Session-id retries when a segment name is taken (a stale segment of a dead process, or a
#: 1-in-2**32 collision): a new random id each time.
NAME_RETRIES = 8

#: Round-robin turn per context (its LBT state) and kind, once the id pool is full.
_NEXT: weakref.WeakKeyDictionary[Any, dict[str, int]] = weakref.WeakKeyDictionary()


def local_host_id() -> int:
    return aio_shm.host_id()


class ShmHost(SourceHost, Protocol):
    lbt: lbt.LbtState | None

    @property
    def options(self) -> Options: ...

    def join_failed(self, js: JoinedSession) -> None: ...


def _pow2(n: int) -> int:
    return 1 << max(n - 1, 1).bit_length()


async def source_session(engine: ShmHost, kind: str, o: Options) -> SourceSession:
    """The session a new ``lbtipc`` / ``lbtsmx`` source maps onto (existing, pooled, or new)."""
    c = engine.options
    lctx = lbt.lbt_state(engine)
    sessions: dict[Any, SourceSession] = lctx.sessions.setdefault(kind, {})
    low = int(c.get(f"transport_{kind}_id_low"))
    high = int(c.get(f"transport_{kind}_id_high"))
    if low > high:
        raise ConfigError(
            f"transport_{kind}_id_low {low} is above transport_{kind}_id_high {high}",
            what=f"transport_{kind}_id_low",
        )
    xid = int(o.get(f"transport_{kind}_id"))
    if xid:
        if xid in sessions:
            return sessions[xid]
    else:
        pool = [i for i in range(low, high + 1)]
        free = [i for i in pool if i not in sessions]
        if free:
            xid = free[0]
        else:
            turns = _NEXT.setdefault(lctx, {})
            n = turns.get(kind, 0)
            turns[kind] = n + 1
            return sessions[pool[n % len(pool)]]
    if kind == "lbtsmx":
        _warn_smx_features(o)
    if not 0 < xid <= 0xFFFF:
        raise ConfigError(f"transport id {xid} does not fit a TIR (1..65535)", what=kind)
    s = _new_session(engine, kind, o, c, xid)
    sessions[xid] = s
    return s


def _warn_smx_features(o: Options) -> None:
    """Seed 6.5.3: UM logs a warning for each feature LBT-SMX does not support and does not
    enable it.  pyum warns alike but leaves late join and persistence working (its SMX records
    are LBMC messages like any other; refusing them would take features away, not add safety);
    properties, application headers and requests are refused at send (SmxSource)."""
    if o.get("late_join"):
        log.warning("LBT-SMX source with late_join 1: UM does not support it (seed 6.5.6)")
    if o.get("ume_store") or o.get("ume_store_name"):
        log.warning("LBT-SMX source with Stores: UM does not support persistence (seed 6.5.6)")


def _new_session(engine: ShmHost, kind: str, o: Options, c: Options, xid: int) -> SourceSession:
    loop = engine.loop
    common: dict[str, Any] = {
        "batching_interval": o.seconds("implicit_batching_interval"),
        "tsni_interval": o.seconds("transport_topic_sequence_number_info_interval"),
        "tsni_active_threshold": o.seconds("transport_topic_sequence_number_info_active_threshold"),
    }
    core: IpcSource
    if kind == "lbtipc":
        window = int(o.get("transport_lbtipc_transmission_window_size"))
        dgram = int(c.get("transport_lbtipc_datagram_max_size"))
        paced = str(o.get("transport_lbtipc_behavior")) == "receiver_paced"
        receivers = int(o.get("transport_lbtipc_maximum_receivers_per_transport"))
        sm = o.seconds("transport_lbtipc_sm_interval")
        data_size = max((window + 7) & ~7, 2 * shmring.record_size(dgram))
        if data_size > window:
            log.warning(
                "transport_lbtipc_transmission_window_size %d raised to %d: the ring must hold "
                "two transport_lbtipc_datagram_max_size (%d) records",
                window,
                data_size,
                dgram,
            )
    else:
        window = int(o.get("transport_lbtsmx_transmission_window_size"))
        dgram = int(o.get("transport_lbtsmx_datagram_max_size"))
        paced = True
        receivers = int(o.get("transport_lbtsmx_maximum_receivers_per_transport"))
        sm = o.seconds("transport_lbtsmx_sm_interval")
        data_size = _pow2(max(window, shmring.MIN_DATA))
        if data_size != window:
            log.warning(
                "transport_lbtsmx_transmission_window_size %d rounded up to %d (a power of 2)",
                window,
                data_size,
            )
        if data_size < 2 * shmring.record_size(dgram):
            raise ConfigError(
                f"transport_lbtsmx_transmission_window_size {window} must hold two "
                f"transport_lbtsmx_datagram_max_size ({dgram}) records",
                what="transport_lbtsmx_transmission_window_size",
            )
    for _ in range(NAME_RETRIES):
        sid = random_session_id()
        if kind == "lbtipc":
            core = IpcSource(
                sid,
                datagram_max_size=dgram,
                batching_minimum_length=int(o.get("implicit_batching_minimum_length")),
                **common,
            )
        else:
            core = SmxSource(sid, datagram_max_size=dgram, **common)
        try:
            ep = aio_shm.ShmSourceEndpoint(
                loop,
                core,
                kind=_RING_KIND[kind],
                session_id=sid,
                xport_id=xid,
                data_size=data_size,
                max_receivers=receivers,
                max_record=min(dgram, data_size // 2),
                receiver_paced=paced,
                sm_interval=sm,
            )
            break
        except FileExistsError:
            continue
    else:
        raise UMError(
            f"no free {kind} segment name for transport id {xid}: run "
            "`python -m umcore.tools.ipcrm --reclaim` to remove stale segments"
        )
    hid = local_host_id()
    label = "LBT-IPC" if kind == "lbtipc" else "LBT-SMX"
    info_cls = lbmr.LBTIPCInfo if kind == "lbtipc" else lbmr.LBTSMXInfo
    info = info_cls(hid, sid, xid)
    source_string = f"{label}:{sid:08x}:{xid}"

    def transport_info(ip: str) -> tuple[Any, str]:
        return info, source_string

    return SourceSession(engine, kind, core, ep, info=transport_info)


def prepare_join(
    engine: ShmHost, js: JoinedSession, info: SourceInfo, options: Options | None
) -> bool:
    """Give a new joined session its receiver core; False (nothing to join) when the TIR is
    another host's."""
    t = cast(lbmr.LBTIPCInfo, info.transport)
    if t.host_id != local_host_id():
        return False
    label = "LBT-SMX" if type(t) is lbmr.LBTSMXInfo else "LBT-IPC"
    core: Any = SmxReceiverSession() if label == "LBT-SMX" else TcpReceiverSession(None)
    js.set_core(core, f"{label}:{t.session_id:08x}:{t.xport_id}")
    js.join_options = options if options is not None else Options("receiver", None, info.topic)
    kind = label.replace("-", "").lower()

    def sample() -> tuple[str, str, str, dict[str, int]]:
        if label == "LBT-SMX":
            return ("receiver", kind, js.source_string, core.monitor_fields())
        st = core.stats
        return (
            "receiver",
            kind,
            js.source_string,
            {
                "msgs_rcved": st.messages_received,
                "bytes_rcved": st.bytes_received,
                "lbm_msgs_rcved": st.messages_received,
                "lbm_msgs_no_topic_rcved": st.messages_no_topic,
                "lbm_reqs_rcved": 0,
            },
        )

    js.sample = sample
    return True


async def join(engine: ShmHost, js: JoinedSession, info: SourceInfo) -> None:
    """Attach to the source's segment: BOS at once, records delivered as they are committed."""
    t = cast(lbmr.LBTIPCInfo, info.transport)
    smx = type(t) is lbmr.LBTSMXInfo
    kind = shmring.KIND_SMX if smx else shmring.KIND_IPC
    name = aio_shm.segment_name(kind, t.session_id, t.xport_id)
    o = js.join_options if js.join_options is not None else Options("receiver", None, info.topic)
    c = engine.options
    core = js.core

    def on_end(exc: Exception | None) -> None:
        js.eos(exc)

    if smx:
        on_record = core.receive_record
        timeout = o.seconds("transport_lbtsmx_activity_timeout")
        busy, linger = True, 0  # SMX receivers busy-wait, always (seed 6.5)
    else:
        on_record = core.receive_data
        timeout = o.seconds("transport_lbtipc_activity_timeout")
        busy = str(c.get("transport_lbtipc_receiver_thread_behavior")) == "busy_wait"
        if str(c.get("transport_lbtipc_receiver_operational_mode")) == "sequential":
            log.warning(
                "transport_lbtipc_receiver_operational_mode sequential is not implemented: the "
                "asyncio loop reads LBT-IPC (run the loop to drive it)"
            )
        linger = int(c.get("transport_lbtipc_pend_behavior_linger_loop_count"))
    try:
        conn = aio_shm.ShmReceiverConnection(
            engine.loop,
            name,
            on_record=on_record,
            on_end=on_end,
            on_lost=None,
            busy_wait=busy,
            linger=linger,
            activity_timeout=timeout,
            zero_copy=smx,
        )
    except (OSError, UMError) as exc:
        log.warning("cannot join %s: %s", js.source_string, exc)
        engine.join_failed(js)
        return
    if js.closed:
        conn.abort()
        return
    js.conn = conn
    if not core.active:
        core.active = True
        js.bos()


class SmxBuffers:
    """LBT-SMX's zero-copy send for one source (module docstring): UM's
    ``lbm_src_buff_acquire`` / ``lbm_src_buffs_complete`` / ``lbm_src_buffs_cancel``."""

    def __init__(self, src: EngineSource) -> None:
        if src.session.kind != "lbtsmx":
            raise UMError(
                f"source {src.topic!r} is on {src.session.kind}: the SMX buffer calls need lbtsmx"
            )
        self.src = src
        self.core = cast(SmxSource, src.session.core)
        self.endpoint = cast(aio_shm.ShmSourceEndpoint, src.session.writer)
        #: The segment's view (the endpoint's for its life; a closed source is refused first).
        self._view = self.endpoint.view
        self._acquired = 0
        self._time = src.engine.loop.time

    def acquire(self, n: int, *, nonblock: bool = True) -> memoryview:
        """A writable ``n``-byte view into the ring for the next message.  With ``nonblock``
        (the only form an asyncio caller can use without awaiting) WouldBlock when the ring is
        full; ``await wait_for_room()`` then try again."""
        src = self.src
        if src.closed:
            src.check()
        core = self.core
        if n > core.max_message:
            core.check_length(n)
        ep = self.endpoint
        if ep.paused:
            raise WouldBlock(f"LBT-SMX source {src.topic!r}: ring full")
        if core.batch_len:
            out = core.flush()
            if out is not None:
                ep.write(out)  # a TSNI or anything batched goes first
        off = ep.reserve(LBMC_DATA_HEADER + n)
        if off is None:
            ep.wait_for_room(LBMC_DATA_HEADER + n)
            raise WouldBlock(f"LBT-SMX source {src.topic!r}: ring full")
        tidx = src.tidx
        sqn = core.take_sequence_number(tidx, n, self._time())
        view = self._view
        pack_data_header(view, off, n, tidx, sqn)
        self._acquired += 1
        off += LBMC_DATA_HEADER
        return view[off : off + n]

    def complete(self) -> None:
        """Publish every acquired message."""
        self._acquired = 0
        self.endpoint.commit()

    def complete_and_acquire(self, n: int) -> memoryview:
        self.complete()
        return self.acquire(n)

    def cancel(self) -> None:
        """Drop every acquired, not completed message (their sequence numbers are reused)."""
        self.endpoint.cancel()
        self.core.give_back(self.src.tidx, self._acquired)
        self._acquired = 0

    async def wait_for_room(self) -> None:
        await self.endpoint.writable()


def smx_buffers(src: Any) -> SmxBuffers:
    """The zero-copy send of an LBT-SMX source (the API's ``Source`` is an EngineSource)."""
    return SmxBuffers(src)
