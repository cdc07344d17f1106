"""Test kit for the store core: a Store instance built in code, a synchronous I/O executor on
real files under a temporary directory, a fake clock, and sources/receivers played by test code
speaking the wire through :mod:`umcore.store.compose`.

Theory of operation
-------------------
:class:`Rig` owns one :class:`StoreCore` and drives it like the daemon would: every output is
collected after each step -- sends are decoded (into compositions, or RETRANS messages) and
queued per destination address, I/O jobs are run at once (or held, when a test wants to see
what waits for them) by :class:`Executor`.  Time moves only through :meth:`Rig.advance`, which
fires the core's timer as often as it asks within the step.
"""

from __future__ import annotations

import errno
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from umcore.config.store import STORE_OPTIONS, TOPIC_OPTIONS, StoreInstance, StoreTopic
from umcore.engine.raw import RawSession
from umcore.store import compose
from umcore.store.core import StoreCore
from umcore.store.io import IoDone, IoJob, IoKind
from umcore.wire import lbmc, lbmr_options

STORE_ADDR = ("10.0.0.100", 14567)


def topic_config(pattern: str, kind: str = "direct", **options: Any) -> StoreTopic:
    t = StoreTopic(pattern, kind)
    if kind != "direct":
        t.regex = re.compile(pattern)
    for name, value in options.items():
        key = name.replace("_", "-")
        assert key in TOPIC_OPTIONS or key.startswith("pyum-"), key
        t.options[key] = value
    return t


def instance(tmp: Path, topics: list[StoreTopic], **options: Any) -> StoreInstance:
    inst = StoreInstance("store1", STORE_ADDR[1], topics=topics)
    (tmp / "cache").mkdir(parents=True, exist_ok=True)
    (tmp / "state").mkdir(exist_ok=True)
    inst.options["disk-cache-directory"] = str(tmp / "cache")
    inst.options["disk-state-directory"] = str(tmp / "state")
    for name, value in options.items():
        key = name.replace("_", "-")
        assert key in STORE_OPTIONS, key
        inst.options[key] = value
    return inst


class Executor:
    """Runs IoJobs synchronously on real files; ``hold`` keeps jobs of the given kinds back
    until :meth:`release`; ``fail_writes`` answers WRITEs with ENOSPC."""

    def __init__(self) -> None:
        self.hold: set[IoKind] = set()
        self.held: list[IoJob] = []
        self.fail_writes = False
        self.done: list[IoJob] = []

    def run(self, job: IoJob) -> IoDone:
        try:
            if job.kind == IoKind.WRITE:
                if self.fail_writes:
                    return IoDone(job, "No space left on device", errno.ENOSPC)
                _pwrite(job.path, job.offset, job.data, job.preallocate)
                if job.index_path:
                    _pwrite(job.index_path, job.index_offset, job.index_data, 0)
            elif job.kind == IoKind.READ:
                with open(job.path, "rb") as f:
                    f.seek(job.offset)
                    return IoDone(job, data=f.read(job.length))
            elif job.kind == IoKind.STATE_WRITE:
                tmp = job.path + ".tmp"
                Path(tmp).write_bytes(job.data)
                os.replace(tmp, job.path)
            elif job.kind in (IoKind.STATE_DELETE, IoKind.REPO_DELETE):
                Path(job.path).unlink(missing_ok=True)
            elif job.kind == IoKind.TRUNCATE:
                os.truncate(job.path, job.offset)
        except OSError as exc:
            return IoDone(job, str(exc), exc.errno or 0)
        self.done.append(job)
        return IoDone(job)


def _pwrite(path: str, offset: int, data: bytes, preallocate: int) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if preallocate and os.fstat(fd).st_size < preallocate:
            os.ftruncate(fd, preallocate)
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


@dataclass
class Rig:
    core: StoreCore
    now: float = 1000.0
    executor: Executor = field(default_factory=Executor)
    inbox: dict[tuple[str, int], list[Any]] = field(default_factory=lambda: defaultdict(list))
    events: list[Any] = field(default_factory=list)
    joins: list[str] = field(default_factory=list)
    leaves: list[str] = field(default_factory=list)
    wire: list[tuple[tuple[str, int], bytes]] = field(default_factory=list)

    def pump(self) -> None:
        for _ in range(1000):
            progressed = False
            for dest, data in self.core.take_sends():
                progressed = True
                self.wire.append((dest, data))
                msg = lbmc.decode(data)
                comp = compose.decode(msg)
                self.inbox[dest].append(comp if comp is not None else msg)
            jobs = self.core.take_io()
            for job in jobs:
                progressed = True
                if job.kind in self.executor.hold:
                    self.executor.held.append(job)
                    continue
                self.core.receive_io_done(self.executor.run(job), self.now)
            joins, leaves = self.core.take_joins()
            self.joins += joins
            self.leaves += leaves
            evs = self.core.take_events()
            if evs:
                self.events += evs
                progressed = True
                bugs = [e.text for e in evs if e.text.startswith("internal error")]
                assert not bugs, bugs  # the core hides its own exceptions from peers, not from us
            if not progressed:
                return
        raise AssertionError("the core did not settle")

    def release(self) -> None:
        held, self.executor.held = self.executor.held, []
        for job in held:
            self.core.receive_io_done(self.executor.run(job), self.now)
        self.pump()

    def advance(self, seconds: float) -> None:
        end = self.now + seconds
        for _ in range(100000):
            t = self.core.next_timer()
            if t is None or t > end:
                break
            self.now = max(self.now, t)
            self.core.handle_timer(self.now)
            self.pump()
        else:
            raise AssertionError("timer loop did not end")
        self.now = end
        self.core.handle_timer(self.now)
        self.pump()

    def control(self, data: bytes, peer: str = "10.0.0.1") -> None:
        self.core.receive_control(lbmc.decode(data), peer, self.now)
        self.pump()

    def take(self, dest: tuple[str, int], kind: type | None = None) -> list[Any]:
        got = self.inbox.pop(dest, [])
        if kind is None:
            return got
        keep = [m for m in got if not isinstance(m, kind)]
        if keep:
            self.inbox[dest] = keep
        return [m for m in got if isinstance(m, kind)]

    def events_of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


class Source:
    """A persistent source as the Store sees it: registrations over UIM, data on a session."""

    def __init__(
        self,
        rig: Rig,
        topic: str,
        *,
        ip: str = "10.0.0.1",
        port: int = 14391,
        transport_idx: int = 1,
        topic_idx: int = 0,
        session_id: int = 0,
        reg_id: int = 0,
        ctxinst: bytes = b"SRCCTX01",
        advertise: bool = True,
        late_join: bool = False,
        **registration: Any,
    ) -> None:
        self.rig = rig
        self.topic = topic
        self.reply_to = (ip, port)
        self.transport_idx = transport_idx
        self.topic_idx = topic_idx
        self.session_id = session_id
        self.reg_id = reg_id
        self.ctxinst = ctxinst
        self.registration = registration
        opts: tuple[Any, ...] = ()
        if advertise:  # STORE, and LATEJOIN as a real persistent source's TIR has it
            flags = lbmr_options.UME_FLAG_STORE
            if late_join:
                flags |= lbmr_options.UME_FLAG_LATEJOIN
            opts = (lbmr_options.UMEOption(src_tcp_port=port, src_tcp_addr=ip,
                                           transport_idx=transport_idx, flags=flags),)  # fmt: skip
        self.session = RawSession(
            "TCP", f"TCP:{ip}:14371:{transport_idx}", transport_idx, topic_idx, topic, ip, opts
        )

    def preg(self, reg_id: int | None = None) -> compose.SourceRegistration:
        return compose.SourceRegistration(
            self.topic, self.transport_idx, self.topic_idx, self.reply_to,
            reg_id=self.reg_id if reg_id is None else reg_id, session_id=self.session_id,
            ctxinst=self.ctxinst, **self.registration,
        )  # fmt: skip

    def register(self, reg_id: int | None = None) -> compose.RegistrationResponse | None:
        self.rig.control(self.preg(reg_id).encode(), self.reply_to[0])
        resps = self.rig.take(self.reply_to, compose.RegistrationResponse)
        if not resps:
            return None
        resp = resps[-1]
        if resp.error is None:
            self.reg_id = resp.reg_id
        return resp

    def lj_info(self, low: int, high: int) -> None:
        """The source's late-join service answers the Store's LJI_REQ (qidx = its RegID): it
        retains ``low..high`` (``low = high + 1``: nothing, its next sequence number is low)."""
        hdr = lbmc.UmeLjInfo(0, low & 0xFFFFFFFF, high & 0xFFFFFFFF, self.reg_id)
        msg = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[hdr]))
        self.rig.control(msg, self.reply_to[0])

    def frame(self, sqn: int, payload: bytes | None = None, msg_type: int = lbmc.MSG_DATA) -> bytes:
        body = payload if payload is not None else b"msg%d" % sqn
        return lbmc.encode_data(self.topic_idx, sqn, body, msg_type=msg_type)

    def send(self, *sqns: int, msg_type: int = lbmc.MSG_DATA) -> None:
        for sqn in sqns:
            self.rig.core.receive_frame(
                self.session, self.frame(sqn, msg_type=msg_type), self.rig.now
            )
            self.rig.pump()

    def acks(self) -> list[compose.StabilityAck]:
        return self.rig.take(self.reply_to, compose.StabilityAck)

    def acked(self) -> list[int]:
        """Every sqn stability-ACKed (not NAKed) since the last call, expanded from ranges."""
        out: list[int] = []
        for a in self.acks():
            if not a.nak:
                n = ((a.last - a.first) & 0xFFFFFFFF) + 1
                out += [(a.first + i) & 0xFFFFFFFF for i in range(n)]
        return out

    def deregister(self) -> compose.RegistrationResponse:
        d = compose.Deregistration(
            True, self.reg_id, self.transport_idx, self.topic_idx, self.reply_to
        )
        self.rig.control(d.encode(), self.reply_to[0])
        return self.rig.take(self.reply_to, compose.RegistrationResponse)[-1]


class Receiver:
    def __init__(
        self,
        rig: Rig,
        source: Source,
        *,
        ip: str = "10.0.0.2",
        port: int = 14392,
        reg_id: int = 0,
        session_id: int = 0,
        rpp_mode: int = 0,
        **registration: Any,
    ) -> None:
        self.rig = rig
        self.source = source
        self.reply_to = (ip, port)
        self.reg_id = reg_id
        self.session_id = session_id
        self.rpp_mode = rpp_mode
        self.registration = registration

    def register(self) -> compose.RegistrationResponse | None:
        s = self.source
        req = compose.ReceiverRegistration(
            s.reg_id, s.transport_idx, s.topic_idx, self.reply_to, reg_id=self.reg_id,
            topic=s.topic, session_id=self.session_id, rpp_mode=self.rpp_mode,
            **self.registration,
        )  # fmt: skip
        self.rig.control(req.encode(), self.reply_to[0])
        resps = self.rig.take(self.reply_to, compose.RegistrationResponse)
        if not resps:
            return None
        resp = resps[-1]
        if resp.error is None:
            self.reg_id = resp.reg_id
        return resp

    def ack(self, sqn: int) -> None:
        a = compose.ConsumptionAck(self.source.transport_idx, self.source.reg_id, self.reg_id, sqn)
        self.rig.control(a.encode(), self.reply_to[0])

    def request(self, *sqns: int, request_idx: int = 7) -> None:
        s = self.source
        reqs = [
            compose.RxReq(s.transport_idx, s.reg_id, q, self.reply_to, request_idx) for q in sqns
        ]
        for m in compose.rxreq_messages(reqs):
            self.rig.control(m.encode(), self.reply_to[0])

    def retransmissions(self) -> list[compose.Retransmission]:
        return self.rig.take(self.reply_to, compose.Retransmission)

    def recovered(self) -> list[int]:
        return [r.sqn for r in self.retransmissions()]


def make_rig(tmp: Path, topics: list[StoreTopic], *, seed: int = 7, **options: Any) -> Rig:
    inst = instance(tmp, topics, **options)
    core = StoreCore(inst, store_index=0, address=STORE_ADDR, now=1000.0, seed=seed)
    rig = Rig(core)
    rig.pump()
    return rig
