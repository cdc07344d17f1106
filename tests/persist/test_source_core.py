"""PersistentSource against real StoreCore instances, in memory (persistence-store.md 1.3, 1.4,
1.6, 1.11, 1.12, 1.14; section 7 checks 1, 2, 7, 9, 12, 15, 16; traps 4, 5, 9, 15).

Theory of operation
-------------------
:class:`Net` owns 1..3 Stores (``StoreCore`` through the store tests' :class:`Rig`) and one
:class:`PersistentSource`.  The source's UIMs go to the Store they name (``rig.control``), the
Stores' answers to the source's request port come back into ``receive_control``, and a data
send is ``message_sent`` plus the frame fed to every Store through a transport session (the
store tests' :class:`Source` builds the session the Store matches to the registration).  A
Store in ``down`` neither receives nor answers; one in ``deaf`` gets no data frames (so it never
ACKs) but answers everything else.  Time is one clock moved by :meth:`Net.advance`, which fires
the source's timer whenever it asks and keeps the Stores' clocks in step.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.store.corekit import Rig, Source, instance, topic_config
from umcore.engine.options import Options
from umcore.errors import ConfigError
from umcore.features.latejoin import make_otid
from umcore.persist import events as ev
from umcore.persist.source import (
    EUMENOREG_TEXT,
    SOURCE_TRANSITIONS,
    STORE_TRANSITIONS,
    PersistentSource,
    SourceConfig,
    SourceInput,
    SourceState,
    StoreInput,
    StoreState,
)
from umcore.store import compose
from umcore.store.core import StoreCore
from umcore.wire import lbmc

T0 = 1000.0
TOPIC = "orders"
SRC_IP = "10.0.0.1"
SRC_ADDR = (SRC_IP, 14391)
TIDX = 3  # topic index
XIDX = 1  # transport index
M = 0xFFFFFFFF


def store_addr(i: int) -> tuple[str, int]:
    return (f"10.0.1.{i + 1}", 14567)


class Net:
    def __init__(
        self, tmp: Path, n: int = 1, pattern: str = TOPIC, *, fast: bool = False, **topic_opts: Any
    ) -> None:
        self.now = T0
        # fast: stability ACKs reach the source as the engine's fast path gives them (their
        # bytes read by compose.parse_stability, then receive_stability)
        self.fast = fast
        self.fast_acks = 0
        self.rigs: list[Rig] = []
        self.feeds: list[Source] = []
        self.down: set[int] = set()
        self.deaf: set[int] = set()
        self.events: list[tuple[int, Any]] = []
        self.sris: list[compose.Sri] = []
        self.retx: list[tuple[int, tuple[tuple[str, int], ...]]] = []
        self.released: list[int] = []
        self.unblocked = 0
        self.pregs = [0] * n
        self.payloads: dict[int, bytes] = {}
        self.lji_reqs: list[tuple[int, int]] = []  # (Store, request index) to answer
        self.lj_rxreqs: list[tuple[int, compose.RetransmissionRequest]] = []
        for i in range(n):
            inst = instance(tmp / f"s{i}", [topic_config(pattern, **topic_opts)])
            core = StoreCore(inst, store_index=i, address=store_addr(i), now=T0, seed=21 + i)
            rig = Rig(core, now=T0)
            rig.pump()
            self.rigs.append(rig)
            # the session the Store sees our frames on (advertising our request port)
            self.feeds.append(
                Source(rig, TOPIC, ip=SRC_IP, port=SRC_ADDR[1], transport_idx=XIDX, topic_idx=TIDX)
            )
        self.src: PersistentSource | None = None

    def source(self, **opts: Any) -> PersistentSource:
        attrs = {
            "ume_store": ",".join(f"{a}:{p}" for a, p in map(store_addr, range(len(self.rigs))))
        }
        attrs.update({k: v for k, v in opts.items() if k != "context_session_id"})
        if not attrs["ume_store"]:
            del attrs["ume_store"]
        cfg = SourceConfig.from_options(
            Options("source", attrs), context_session_id=opts.get("context_session_id", 0)
        )
        self.src = PersistentSource(
            cfg, topic=TOPIC, transport_idx=XIDX, topic_idx=TIDX, reply_to=SRC_ADDR,
            ctxinst=b"SRCCTX01", now=self.now,
        )  # fmt: skip
        return self.src

    def start(self, **opts: Any) -> PersistentSource:
        src = self.source(**opts)
        src.start(self.now)
        self.pump()
        return src

    @property
    def s(self) -> PersistentSource:
        assert self.src is not None
        return self.src

    def rig_at(self, dest: tuple[str, int]) -> int:
        for i, rig in enumerate(self.rigs):
            if rig.core.address == dest:
                return i
        raise AssertionError(dest)

    def pump(self) -> None:
        src = self.s
        for _ in range(200):
            progressed = False
            for i, rig in enumerate(self.rigs):
                for comp in rig.take(SRC_ADDR):
                    progressed = True
                    if isinstance(comp, lbmc.LBMCMessage) and comp.find(lbmc.LjiReq):
                        if i not in self.down:  # the engine's late-join service answers
                            self.lji_reqs.append((i, comp.find(lbmc.LjiReq).request_idx))
                        continue
                    if isinstance(comp, compose.RetransmissionRequest):
                        # a Store repairing from the source: late join's requests, not ours
                        # (left unanswered: a deaf Store stays deaf)
                        self.lj_rxreqs.append((i, comp))
                        continue
                    if i in self.down:
                        continue
                    if self.fast and isinstance(comp, compose.StabilityAck):
                        fields = compose.parse_stability(comp.encode())
                        assert fields is not None and fields[:2] == (XIDX, TIDX), comp
                        self.fast_acks += 1
                        _tix, _tidx, first, last, store_index, nak = fields
                        assert src.receive_stability(store_index, first, last, nak, self.now)
                        continue
                    assert src.receive_control(comp, rig.core.address[0], self.now), comp
            if self.lji_reqs and src.next_sqn is not None:
                progressed = True
                for i, qidx in self.lji_reqs:
                    self.lj_info(i, qidx)
                self.lji_reqs.clear()
            for dest, data in src.take_sends():
                progressed = True
                i = self.rig_at(dest)
                comp = compose.decode(lbmc.decode(data))
                if isinstance(comp, compose.SourceRegistration):
                    self.pregs[i] += 1
                if i not in self.down:
                    self.rigs[i].control(data, SRC_IP)
            for data in src.take_transport():
                sri = compose.decode(lbmc.decode(data))
                assert isinstance(sri, compose.Sri)
                self.sris.append(sri)
            self.events += src.take_events()
            self.retx += src.take_retransmissions()
            self.released += src.take_released()
            self.unblocked += src.take_unblocked()
            if not progressed:
                return
        raise AssertionError("did not settle")

    def lj_info(self, i: int, qidx: int) -> None:
        """What the source's late-join service answers a Store's LJI_REQ (once the source knows
        where its stream starts): it retains every message sent so far (low..high;
        ``low = high + 1`` when nothing was sent)."""
        nxt = self._sqn if hasattr(self, "_sqn") else self.s.next_sqn
        assert nxt is not None
        low = min(self.payloads, default=nxt)
        hdr = lbmc.UmeLjInfo(0, low, (nxt - 1) & M, qidx)
        self.rigs[i].control(lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[hdr])), SRC_IP)

    def send(self, count: int = 1, nbytes: int = 10, frags: int = 1) -> list[int]:
        """``count`` sends of ``frags`` fragments each, from next_sqn on; returns the sqns."""
        src = self.s
        assert src.send_check() is None
        out: list[int] = []
        for _ in range(count):
            first = self._next()
            last = (first + frags - 1) & M
            src.message_sent(first, last, nbytes, self.now, clientd=("cd", first))
            for k in range(frags):
                sqn = (first + k) & M
                out.append(sqn)
                self.payloads[sqn] = b"m%d" % sqn
                self.frame(sqn)
        self.pump()
        return out

    def _next(self) -> int:
        if not hasattr(self, "_sqn"):
            assert self.s.next_sqn is not None
            self._sqn = self.s.next_sqn
        sqn = self._sqn
        self._sqn = (sqn + 1) & M
        return sqn

    def frame(self, sqn: int, only: int | None = None) -> None:
        for i, feed in enumerate(self.feeds):
            if i in self.down or (i in self.deaf if only is None else i != only):
                continue
            feed.rig.core.receive_frame(feed.session, feed.frame(sqn, self.payloads[sqn]), self.now)
            feed.rig.pump()

    def prorx(self, sqn: int, dest: tuple[str, int]) -> None:
        """What the engine sends for a proactive retransmission: PRORX with our OTID."""
        hdrs: list[lbmc.Header] = [
            lbmc.Otid(0, make_otid(SRC_IP, SRC_ADDR[1], XIDX)),
            lbmc.TopicName(TOPIC.encode() + b"\0"),
        ]
        data = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_PRORX, TIDX, sqn, hdrs, self.payloads[sqn]))
        i = self.rig_at(dest)
        if i not in self.down:
            self.rigs[i].control(data, SRC_IP)
        self.pump()

    def advance(self, seconds: float) -> None:
        end = self.now + seconds
        for _ in range(100000):
            t = self.s.next_timer()
            if t is None or t > end:
                break
            self._clock(max(self.now, t))
            self.s.handle_timer(self.now)
            self.pump()
        else:
            raise AssertionError("timer loop did not end")
        self._clock(end)
        self.pump()

    def _clock(self, now: float) -> None:
        for rig in self.rigs:
            rig.advance(now - rig.now)
        self.now = now
        self.pump()

    def of(self, code: int) -> list[Any]:
        return [info for c, info in self.events if c == code]

    def clear(self) -> None:
        self.events.clear()


def stable_flags(net: Net, sqn: int) -> dict[int, int]:
    """store index -> flags of the per-Store stability events of ``sqn``."""
    return {
        e.store_index: e.flags
        for e in net.of(ev.SRC_EVENT_UME_MESSAGE_STABLE_EX)
        if e.sequence_number == sqn and e.flags & ev.STABLE_FLAG_STORE
    }


FULL = ev.STABLE_FLAG_STORE | ev.STABLE_FLAG_INTRAGROUP | ev.STABLE_FLAG_INTERGROUP
FULL |= ev.STABLE_FLAG_STABLE


# ------------------------------------------------------------------------------------------------
# configuration and machines


def test_config_comes_from_the_registry_with_source_defaults() -> None:
    cfg = SourceConfig.from_options(
        Options("source", {"ume_store": "7:10.0.0.5:100:0:0"}), context_session_id=0x55
    )
    assert cfg.consensus == "highest"  # trap 4: the source's default
    assert cfg.session_id == 0x55
    assert (cfg.flight_size, cfg.flight_size_bytes, cfg.flight_size_behavior_block) == (
        1000, 0, True,
    )  # fmt: skip
    assert (cfg.registration_interval, cfg.store_check_interval) == (3.0, 0.5)
    assert cfg.store_activity_timeout == 10.0
    assert (cfg.intragroup, cfg.intergroup) == ("quorum", "any")
    assert cfg.stores[0].address == ("10.0.0.5", 100) and cfg.stores[0].domain_id == 7
    assert cfg.groups == ((0, 1),)
    named = SourceConfig.from_options(Options("source", {"ume_store_name": "alpha:9:0"}))
    assert named.stores[0].address is None and named.stores[0].name == "alpha"
    assert named.stores[0].reg_id == 9


@pytest.mark.parametrize(
    ("attrs", "what"),
    [
        ({"ume_store": ",".join(f"10.0.0.1:{p}" for p in range(1, 27))}, "ume_store"),
        (
            {"ume_store": ",".join(f"0:10.0.0.1:{p}:0:{p}" for p in range(6)),
             "ume_store_group": ",".join(f"{p}:1" for p in range(6))},
            "ume_store_group",
        ),
        ({"ume_store": "0:10.0.0.1:1:0:1", "ume_store_group": "0:1"}, "ume_store_group"),
        ({"ume_store": "10.0.0.1:1", "ume_receiver_paced_persistence": "1"},
         "ume_flight_size_bytes"),
        ({}, "ume_store"),
    ],
)  # fmt: skip
def test_config_refuses_what_um_refuses(attrs: dict[str, Any], what: str) -> None:
    with pytest.raises(ConfigError) as info:
        SourceConfig.from_options(Options("source", attrs))
    assert info.value.what == what


def test_transition_tables_refuse_what_they_do_not_name(tmp_path: Path) -> None:
    assert (SourceState.DEREGISTERED, SourceInput.START) not in SOURCE_TRANSITIONS
    assert (StoreState.DEREGISTERED, StoreInput.SUCCESS) not in STORE_TRANSITIONS
    net = Net(tmp_path)
    src = net.start()
    src.deregister(net.now)
    net.pump()
    assert src.state is SourceState.DEREGISTERED
    pregs = list(net.pregs)
    src.start(net.now)  # nothing restarts a deregistered source (UM: delete and recreate)
    net.advance(10.0)
    assert net.pregs == pregs and src.send_check() == EUMENOREG_TEXT
    assert src.next_timer() is None


# ------------------------------------------------------------------------------------------------
# registration


def test_one_store_registers_completes_and_sends_from_zero(tmp_path: Path) -> None:
    net = Net(tmp_path)
    src = net.start()
    (ok,) = net.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)
    assert ok.flags == 0 and ok.store == "10.0.1.1:14567" and ok.sequence_number == 0
    (done,) = net.of(ev.SRC_EVENT_UME_REGISTRATION_COMPLETE_EX)
    assert done.flags & ev.REG_COMPLETE_FLAG_QUORUM and done.sequence_number == 0
    assert src.next_sqn == 0 and src.send_check() is None  # check 1: starts at 0
    assert net.sris and net.sris[0].version == 1 and net.sris[0].topic_idx == TIDX
    (entry,) = net.sris[0].stores
    assert entry.address == store_addr(0) and entry.src_reg_id == ok.registration_id
    assert entry.version == 1
    sqns = net.send(10)
    assert sqns == list(range(10))
    for sqn in sqns:
        assert stable_flags(net, sqn) == {0: FULL}
    assert net.released == sqns and src.in_flight == 0 and src.in_flight_bytes == 0


def test_before_complete_sends_are_refused(tmp_path: Path) -> None:
    net = Net(tmp_path, n=1)
    net.down.add(0)
    src = net.start()
    assert src.send_check() == EUMENOREG_TEXT
    assert "not currently registered with enough UMP stores" in EUMENOREG_TEXT
    net.advance(9.5)
    assert net.pregs[0] == 4  # at 0, 3, 6, 9 s: every ume_registration_interval
    assert src.send_check() == EUMENOREG_TEXT


def test_complete_waits_a_full_interval_unless_every_store_answered(tmp_path: Path) -> None:
    net = Net(tmp_path, n=3)
    net.down.add(2)
    src = net.start()
    assert len(net.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)) == 2
    assert not net.of(ev.SRC_EVENT_UME_REGISTRATION_COMPLETE_EX)  # trap 5: quorum is not enough
    net.advance(2.9)
    assert not net.of(ev.SRC_EVENT_UME_REGISTRATION_COMPLETE_EX)
    net.advance(0.2)
    assert len(net.of(ev.SRC_EVENT_UME_REGISTRATION_COMPLETE_EX)) == 1
    assert src.send_check() is None
    # the third comes up: it registers late, the SRI grows (a registration change)
    net.down.clear()
    versions = [s.version for s in net.sris]
    net.advance(3.0)
    assert len(net.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)) == 3
    assert net.sris[-1].version == max(versions) + 1 and len(net.sris[-1].stores) == 3


def test_all_answered_completes_at_once(tmp_path: Path) -> None:
    net = Net(tmp_path, n=3)
    net.start()
    assert len(net.of(ev.SRC_EVENT_UME_REGISTRATION_COMPLETE_EX)) == 1


def test_registration_error_is_reported_and_retried(tmp_path: Path) -> None:
    net = Net(tmp_path, pattern="other")
    src = net.start()
    (err,) = net.of(ev.SRC_EVENT_UME_REGISTRATION_ERROR)
    assert "store 0 [10.0.1.1:14567]" in err.text and "no matching pattern" in err.text
    net.advance(3.0)
    assert len(net.of(ev.SRC_EVENT_UME_REGISTRATION_ERROR)) == 2
    assert src.send_check() == EUMENOREG_TEXT


def test_named_store_registers_once_resolved(tmp_path: Path) -> None:
    net = Net(tmp_path)
    src = net.start(ume_store="", ume_store_name="alpha")
    assert net.pregs == [0] and src.send_check() is not None
    src.set_store_address("alpha", store_addr(0), 0, net.now)
    net.pump()
    assert net.pregs == [1] and src.send_check() is None and src.next_sqn == 0


@pytest.mark.parametrize(
    ("behavior", "expected"), [("highest", 5), ("majority", 4), ("lowest", 3), (None, 5)]
)
def test_reregistration_resumes_after_the_consensus(
    tmp_path: Path, behavior: str | None, expected: int
) -> None:
    net = Net(tmp_path, n=3)
    net.start(ume_session_id="0x1234")
    for sqn in range(5):  # Store 0 holds 0..4, Store 1 0..3, Store 2 0..2
        net.payloads[sqn] = b"m%d" % sqn
        net.s.message_sent(sqn, sqn, 2, net.now)
        for i in range(3):
            if sqn <= 4 - i:
                net.frame(sqn, only=i)
    net.pump()
    net.events.clear()
    opts: dict[str, Any] = {"ume_session_id": "0x1234"}
    if behavior is not None:
        opts["ume_consensus_sequence_number_behavior"] = behavior
    src = net.start(**opts)  # the restarted source: same Session ID -> same RegIDs
    oks = net.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)
    assert sorted(o.sequence_number for o in oks) == [2, 3, 4]
    assert all(o.flags & ev.REG_FLAG_OLD for o in oks)
    (done,) = net.of(ev.SRC_EVENT_UME_REGISTRATION_COMPLETE_EX)
    assert done.sequence_number == expected - 1
    assert src.next_sqn == expected  # check 12: resumes at consensus + 1


# ------------------------------------------------------------------------------------------------
# stability and flight


def test_quorum_stability_flags_per_store(tmp_path: Path) -> None:
    net = Net(tmp_path, n=3)
    net.start()
    net.deaf.add(2)
    (sqn,) = net.send()
    flags = stable_flags(net, sqn)
    assert set(flags) == {0, 1}
    # check 7: the second ACK makes it stable within the group and overall
    assert sorted(flags.values()) == [ev.STABLE_FLAG_STORE, FULL]
    assert net.released == [sqn]
    net.frame(sqn, only=2)  # the third Store catches up: its ACK is reported too
    net.pump()
    assert stable_flags(net, sqn)[2] == FULL


def test_per_message_notification_and_fragments(tmp_path: Path) -> None:
    net = Net(tmp_path)
    net.start(ume_message_stability_notification="3")
    sqns = net.send(1, nbytes=30, frags=3)
    whole = [
        e for e in net.of(ev.SRC_EVENT_UME_MESSAGE_STABLE_EX)
        if not e.flags & ev.STABLE_FLAG_STORE
    ]  # fmt: skip
    assert len(whole) == 1 and whole[0].sequence_number == sqns[-1]
    assert whole[0].flags & ev.STABLE_FLAG_WHOLE_MESSAGE_STABLE
    assert whole[0].msg_clientd == ("cd", 0)
    assert len(stable_flags(net, 1)) == 1
    net2 = Net(tmp_path / "b")
    net2.start(ume_message_stability_notification="0")
    net2.send(5)
    assert not net2.of(ev.SRC_EVENT_UME_MESSAGE_STABLE_EX) and net2.released == [0, 1, 2, 3, 4]


def test_two_groups_all_needs_both(tmp_path: Path) -> None:
    net = Net(tmp_path, n=2)
    net.start(
        ume_store=f"0:{store_addr(0)[0]}:14567:0:0,0:{store_addr(1)[0]}:14567:0:1",
        ume_store_group="0:1,1:1",
        ume_retention_intergroup_stability_behavior="all",
    )
    net.deaf.add(1)
    (sqn,) = net.send()
    assert stable_flags(net, sqn) == {0: ev.STABLE_FLAG_STORE | ev.STABLE_FLAG_INTRAGROUP}
    assert net.s.in_flight == 1
    net.frame(sqn, only=1)
    net.pump()
    assert stable_flags(net, sqn)[1] == FULL and net.s.in_flight == 0


def test_flight_size_block(tmp_path: Path) -> None:
    net = Net(tmp_path)
    src = net.start(ume_flight_size="3")
    net.deaf.add(0)
    net.send(3)
    assert src.flight_blocked and src.in_flight == 3 and net.unblocked == 0
    net.deaf.clear()
    net.frame(0)
    net.pump()
    assert not src.flight_blocked and net.unblocked == 1  # once: the engine wakes senders
    assert not src.take_unblocked()
    assert not net.of(ev.SRC_EVENT_FLIGHT_SIZE_NOTIFICATION)


def test_flight_size_notify_over_then_under(tmp_path: Path) -> None:
    net = Net(tmp_path)
    src = net.start(ume_flight_size="2", ume_flight_size_behavior="notify")
    net.deaf.add(0)
    net.send(2)
    assert not net.of(ev.SRC_EVENT_FLIGHT_SIZE_NOTIFICATION)
    net.send(1)  # the send that exceeds succeeds and reports OVER
    (over,) = net.of(ev.SRC_EVENT_FLIGHT_SIZE_NOTIFICATION)
    assert (over.type, over.state) == (ev.FLIGHT_SIZE_TYPE_UME, ev.FLIGHT_SIZE_OVER)
    net.deaf.clear()
    net.frame(0)
    net.frame(1)
    net.pump()
    states = [e.state for e in net.of(ev.SRC_EVENT_FLIGHT_SIZE_NOTIFICATION)]
    assert states == [ev.FLIGHT_SIZE_OVER, ev.FLIGHT_SIZE_UNDER] and src.in_flight == 1


def test_flight_size_bytes(tmp_path: Path) -> None:
    net = Net(tmp_path)
    src = net.start(ume_flight_size_bytes="100")
    net.deaf.add(0)
    net.send(1, nbytes=60)
    assert not src.flight_blocked
    net.send(1, nbytes=60)
    assert src.flight_blocked and src.in_flight_bytes == 120


def test_stability_lifetime_gives_up(tmp_path: Path) -> None:
    net = Net(tmp_path)
    src = net.start(ume_message_stability_lifetime="2000", ume_message_stability_timeout="0")
    net.deaf.add(0)
    (sqn,) = net.send()
    net.advance(1.5)
    assert not net.of(ev.SRC_EVENT_UME_MESSAGE_NOT_STABLE) and src.in_flight == 1
    net.advance(1.0)
    (ns,) = net.of(ev.SRC_EVENT_UME_MESSAGE_NOT_STABLE)
    assert ns.flags == ev.NOT_STABLE_FLAG_TIMEOUT and ns.sequence_number == sqn
    assert src.in_flight == 0 and net.released == [sqn] and not net.retx


def test_proactive_retransmission_reaches_the_store(tmp_path: Path) -> None:
    net = Net(tmp_path, n=2)
    src = net.start(ume_message_stability_timeout="1000")
    net.deaf.add(1)
    (sqn,) = net.send()  # stable at Store 0 only: 1 of 2 is not a quorum of 2
    assert src.in_flight == 1
    net.advance(0.9)
    assert not net.retx
    net.advance(0.7)
    assert net.retx == [(sqn, (store_addr(1),))]  # only to the Store that did not ACK
    net.prorx(sqn, store_addr(1))
    assert src.in_flight == 0 and set(stable_flags(net, sqn)) == {0, 1}
    net.advance(2.0)
    assert len(net.retx) == 1  # stable: not again


def test_stability_nak_gives_up_what_cannot_become_stable(tmp_path: Path) -> None:
    net = Net(tmp_path)
    src = net.start()
    net.send(2)
    feed = net.feeds[0]
    feed.rig.core.receive_loss(feed.session, 2, 2, net.now)  # the Store declared 2 lost
    feed.rig.pump()
    net.pump()
    net.deaf.add(0)
    (sqn,) = net.send()
    assert sqn == 2 and src.in_flight == 1
    net.deaf.clear()
    net.frame(2)  # its copy arrives: trap 15, a stability NAK
    net.pump()
    flags = [e.flags for e in net.of(ev.SRC_EVENT_UME_MESSAGE_NOT_STABLE)]
    assert ev.NOT_STABLE_FLAG_STORE | ev.NOT_STABLE_FLAG_LOSS in flags
    assert ev.NOT_STABLE_FLAG_LOSS in flags  # no Store left to make it stable
    assert src.in_flight == 0 and net.released == [0, 1, 2]


def test_ranged_acks_across_the_wrap(tmp_path: Path) -> None:
    net = Net(tmp_path)
    src = net.start()
    src.message_sent(M - 1, 1, 40, net.now)  # one message of 4 fragments across the wrap
    ack = compose.StabilityAck(XIDX, TIDX, M - 3, 0, store_index=0)  # starts before the window
    assert src.receive_control(ack, store_addr(0)[0], net.now)
    net.pump()
    assert net.released == [M - 1, M, 0] and src.in_flight == 1
    assert src.stats()["acks_outside"] == 2
    assert src.receive_control(compose.StabilityAck(XIDX, TIDX, 1, 1), store_addr(0)[0], net.now)
    net.pump()
    assert net.released[-1] == 1 and src.in_flight == 0 and src.in_flight_bytes == 0
    other = compose.StabilityAck(XIDX, TIDX + 1, 1, 1)
    assert not src.receive_control(other, store_addr(0)[0], net.now)


@pytest.mark.parametrize("notification", ["1", "3"])
def test_stability_fields_alone_give_the_same_events(tmp_path: Path, notification: str) -> None:
    """The engine's fast path (receive_stability with the fields parse_stability reads of the
    Store's ACK bytes) = receive_control with the decoded StabilityAck: events, releases,
    flight and counters, across quorum, a late Store, a re-ACK, fragments and a Store's NAK."""
    seen = []
    for fast in (False, True):
        net = Net(tmp_path / f"fast{fast}", n=3, fast=fast)
        src = net.start(ume_message_stability_notification=notification)
        net.send(3)
        net.deaf.add(2)
        later = net.send(2)
        net.deaf.clear()
        for sqn in later:  # the third Store catches up: ACKs for what is stable already
            net.frame(sqn, only=2)
        net.pump()
        net.frame(later[0], only=0)  # a duplicate: the Store ACKs it again
        net.pump()
        feed = net.feeds[0]
        nxt = later[-1] + 1
        feed.rig.core.receive_loss(feed.session, nxt, nxt, net.now)  # Store 0 declared it lost
        feed.rig.pump()
        net.pump()
        net.deaf.add(0)
        assert net.send(1) == [nxt]
        net.deaf.clear()
        net.frame(nxt, only=0)  # its copy arrives: a stability NAK
        net.pump()
        net.send(1, nbytes=30, frags=3)  # (Net.send numbers one message of fragments only)
        assert net.fast_acks > 0 if fast else net.fast_acks == 0
        seen.append((net.events, net.released, src.in_flight, src.in_flight_bytes, src.stats()))
    assert seen[0] == seen[1]
    assert any(code == ev.SRC_EVENT_UME_MESSAGE_STABLE_EX for code, _ in seen[0][0])
    stats = seen[0][4]
    assert stats["stability_naks"] >= 1 and stats["acks_duplicate"] + stats["acks_outside"] > 0


# ------------------------------------------------------------------------------------------------
# Store failure, quorum, keepalives


def test_idle_source_stays_registered_answering_keepalives(tmp_path: Path) -> None:
    net = Net(tmp_path, n=3)
    src = net.start()
    net.send(1)
    net.advance(60.0)  # Store keepalives are activity; their R requests are answered
    assert not net.of(ev.SRC_EVENT_UME_STORE_UNRESPONSIVE)
    assert src.stats()["keepalives_answered"] > 0 and src.send_check() is None
    for rig in net.rigs:  # past the Stores' 30 s source activity timeout: state kept
        assert len(rig.core.stats().repositories) == 1


def test_unresponsive_store_quorum_lost_and_back(tmp_path: Path) -> None:
    net = Net(tmp_path, n=3)
    src = net.start()
    net.send(1)
    version = net.sris[-1].version
    net.down.add(1)
    net.advance(11.0)
    (u1,) = net.of(ev.SRC_EVENT_UME_STORE_UNRESPONSIVE)
    assert u1.text == "store 1 [10.0.1.2:14567] unresponsive" and not u1.quorum_lost
    assert src.send_check() is None  # check 15: 2 of 3 still a quorum
    (sqn,) = net.send()
    assert set(stable_flags(net, sqn)) == {0, 2} and src.in_flight == 0
    net.down.add(2)
    net.advance(11.0)
    u2 = net.of(ev.SRC_EVENT_UME_STORE_UNRESPONSIVE)[-1]
    assert u2.text == "store 2 [10.0.1.3:14567] unresponsive (quorum lost)" and u2.quorum_lost
    assert src.send_check() == EUMENOREG_TEXT  # check 16
    net.events.clear()
    net.down.discard(2)
    net.advance(3.0)  # re-registration every ume_registration_interval
    (ok,) = net.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)
    assert ok.store_index == 2 and ok.flags & ev.REG_FLAG_OLD
    assert src.send_check() is None
    sri = net.sris[-1]
    assert sri.version > version
    per_store = {e.store_idx: e.version for e in sri.stores}
    assert per_store[2] == 2 and per_store[0] == 1  # only the re-registered Store's grew


def test_sri_burst_and_requests(tmp_path: Path) -> None:
    net = Net(tmp_path)
    src = net.start(ume_sri_max_number_of_sri_per_update="3", ume_sri_inter_sri_interval="500")
    assert len(net.sris) == 1
    net.advance(0.6)
    assert len(net.sris) == 2
    net.advance(5.0)
    assert len(net.sris) == 3  # the burst is over
    assert src.receive_control(compose.SriRequest(XIDX, TIDX), "10.0.0.9", net.now)
    net.pump()
    assert len(net.sris) == 4  # immediate answer
    assert not src.receive_control(compose.SriRequest(XIDX, TIDX + 1), "10.0.0.9", net.now)
    net2 = Net(tmp_path / "b")
    s2 = net2.start(
        ume_sri_max_number_of_sri_per_update="0", ume_sri_immediate_sri_request_response="0"
    )
    assert not net2.sris
    for _ in range(3):
        s2.receive_control(compose.SriRequest(XIDX, TIDX), "10.0.0.9", net2.now)
    net2.pump()
    assert not net2.sris
    net2.advance(0.15)
    assert len(net2.sris) == 1  # one answer after the latency serves every request


# ------------------------------------------------------------------------------------------------
# delivery confirmation, deregistration


def test_delivery_confirmations_and_unique_confirmations(tmp_path: Path) -> None:
    net = Net(tmp_path)
    src = net.start(ume_confirmed_delivery_notification="1", ume_retention_unique_confirmations="2")
    assert net.sris[-1].ack_to_source
    (sqn,) = net.send()
    assert src.in_flight == 1 and not net.released  # stable, but not confirmed by 2 receivers

    def confirm(rcv: int, flags: int = 0) -> None:
        ack = compose.ConsumptionAck(XIDX, TIDX, rcv, sqn, flags)
        assert src.receive_control(ack, "10.0.0.7", net.now)
        net.pump()

    confirm(77, lbmc.ACK_FLAG_E)
    confirm(77)
    assert src.in_flight == 1
    confirm(78)
    assert src.in_flight == 0 and net.released == [sqn]
    dc = net.of(ev.SRC_EVENT_UME_DELIVERY_CONFIRMATION_EX)
    assert [d.rcv_registration_id for d in dc] == [77, 77, 78]
    assert dc[0].flags == ev.CONFIRM_FLAG_EXACK and dc[2].flags & ev.CONFIRM_FLAG_UNIQUEACKS


def test_deregistration(tmp_path: Path) -> None:
    net = Net(tmp_path, n=2)
    src = net.start()
    net.send(3)
    net.events.clear()
    src.deregister(net.now)
    net.pump()
    oks = net.of(ev.SRC_EVENT_UME_DEREGISTRATION_SUCCESS_EX)
    assert sorted(o.store_index for o in oks) == [0, 1]
    assert all(o.sequence_number == 2 for o in oks)
    assert len(net.of(ev.SRC_EVENT_UME_DEREGISTRATION_COMPLETE_EX)) == 1
    assert net.events[-1][0] == ev.SRC_EVENT_UME_DEREGISTRATION_COMPLETE_EX
    assert src.send_check() == EUMENOREG_TEXT
    for rig in net.rigs:
        assert not rig.core.stats().repositories  # the Stores deleted the source's state


def test_majority_consensus_of_two_is_the_lower(tmp_path: Path) -> None:
    net = Net(tmp_path, n=2)
    net.start(ume_session_id="0x99")
    for sqn in range(4):  # Store 0 holds 0..3, Store 1 0..2
        net.payloads[sqn] = b"m%d" % sqn
        net.s.message_sent(sqn, sqn, 2, net.now)
        for i in range(2):
            if sqn <= 3 - i:
                net.frame(sqn, only=i)
    net.pump()
    net.events.clear()
    src = net.start(ume_session_id="0x99", ume_consensus_sequence_number_behavior="majority")
    assert src.next_sqn == 3


def test_any_group_is_enough_and_ia_names_the_stores_group(tmp_path: Path) -> None:
    net = Net(tmp_path, n=2)
    net.start(
        ume_store=f"0:{store_addr(0)[0]}:14567:0:0,0:{store_addr(1)[0]}:14567:0:1",
        ume_store_group="0:1,1:2",  # group 1 names 2 Stores, only 1 is configured: never met
    )
    (sqn,) = net.send()
    flags = stable_flags(net, sqn)
    assert flags[0] == FULL
    # stable (group 0 is any group), but Store 1's own group is not: no IA on its event
    assert flags[1] == ev.STABLE_FLAG_STORE | ev.STABLE_FLAG_INTERGROUP | ev.STABLE_FLAG_STABLE


RPP = {"ume_receiver_paced_persistence": "1", "ume_flight_size_bytes": "500"}


def test_rpp_granted_by_a_store_that_allows_it_refused_by_one_that_does_not(
    tmp_path: Path,
) -> None:
    net = Net(tmp_path / "allow", repository_allow_receiver_paced_persistence="1")
    src = net.start(**RPP)
    (succ,) = net.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)
    assert succ.flags & ev.REG_FLAG_RPP
    assert src.send_check() is None

    net = Net(tmp_path / "deny")
    src = net.start(**RPP)
    (err,) = net.of(ev.SRC_EVENT_UME_REGISTRATION_ERROR)
    assert "incompatible" in err.text
    assert src.send_check() == EUMENOREG_TEXT


def test_rpp_success_without_the_rpp_flag_is_a_registration_error(tmp_path: Path) -> None:
    """Seed 002's compatibility matrix, "Granted - Source Error": a Store (pre-5.3 UM) that
    grants an RPP source's registration without acknowledging RPP."""
    net = Net(tmp_path)
    src = net.source(**RPP)
    src.start(net.now)
    ((dest, data),) = src.take_sends()
    preg = compose.decode(lbmc.decode(data))
    assert isinstance(preg, compose.SourceRegistration) and preg.rpp
    resp = compose.RegistrationResponse(
        True, 77, XIDX, TIDX, marker=preg.marker, store_index=0, rpp=False
    )
    comp = compose.decode(lbmc.decode(resp.encode()))
    assert comp is not None
    assert src.receive_control(comp, dest[0], net.now)
    events = src.take_events()
    assert [code for code, _ in events] == [ev.SRC_EVENT_UME_REGISTRATION_ERROR]
    assert "RPP requested but not acknowledged" in events[0][1].text
    assert src.send_check() == EUMENOREG_TEXT
    assert src.stats()["registration_errors"] == 1


def test_flight_accounting_of_one_fragment_and_fragmented_messages(tmp_path: Path) -> None:
    """In-flight fragments and bytes return to 0 whichever way a message leaves flight (stable
    then confirmed by 2 receivers; given up by the lifetime), for one-fragment messages and a
    fragmented one; the whole-message stable event comes once per message, on its last
    fragment."""
    net = Net(tmp_path / "a")
    src = net.start(
        ume_retention_unique_confirmations="2",
        ume_message_stability_notification="3",
    )
    one = net.send(2, nbytes=30)
    frag = net.send(1, nbytes=90, frags=3)
    assert src.in_flight == 5 and src.in_flight_bytes == 150  # stable, none confirmed yet
    whole = [
        e.sequence_number
        for e in net.of(ev.SRC_EVENT_UME_MESSAGE_STABLE_EX)
        if e.flags & ev.STABLE_FLAG_WHOLE_MESSAGE_STABLE
    ]
    assert whole == [one[0], one[1], frag[-1]]
    for rcv in (77, 78):
        for sqn in [*one, *frag]:
            ack = compose.ConsumptionAck(XIDX, TIDX, rcv, sqn, 0)
            assert src.receive_control(ack, "10.0.0.7", net.now)
            net.pump()
        assert src.in_flight == (5 if rcv == 77 else 0)
    assert src.in_flight_bytes == 0 and net.released[-1] == frag[-1]

    net = Net(tmp_path / "b")
    src = net.start(ume_message_stability_lifetime="2000", ume_message_stability_timeout="0")
    net.deaf.add(0)
    sqns = [*net.send(1, nbytes=30), *net.send(1, nbytes=90, frags=3)]
    assert src.in_flight == 4 and src.in_flight_bytes == 120
    net.advance(2.5)  # never ACKed: given up, out of flight
    gone = [e.sequence_number for e in net.of(ev.SRC_EVENT_UME_MESSAGE_NOT_STABLE)]
    assert gone == sqns
    assert src.in_flight == 0 and src.in_flight_bytes == 0 and net.released[-1] == sqns[-1]


# ------------------------------------------------------------------------------------------------
# stability bookkeeping against a model (ranged ACKs in bulk and fragment by fragment)

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.sampled_from([1, 1, 1, 1, 2, 3]), st.integers(1, 6)),
        st.tuples(st.just("ack"), st.integers(0, 2), st.integers(0, 60), st.integers(1, 40)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_OPS)
def test_ranged_stability_acks_agree_with_a_model(ops: list[tuple[Any, ...]]) -> None:
    """Three Stores, quorum 2 of 3, flight size 8 (Block), one-fragment and fragmented
    messages, ACK ranges from any Store over anything sent (repeats, overlaps, released and
    trimmed fragments): each Store's first ACK of a fragment is one MESSAGE_STABLE_EX in ACK
    order with its flags; releases, fragments and bytes in flight, repeated ACKs counted; the
    send gate's ``clear`` agrees with send_check and the flight."""
    with tempfile.TemporaryDirectory() as tmp:
        net = Net(Path(tmp), n=3)
        src = net.start(ume_flight_size="8")
        base = src.next_sqn
        assert base is not None and src.clear
        acked: list[set[int]] = []  # per fragment (sqn - base): the Stores that ACKed it
        msg_of: list[int] = []  # per fragment: its message's index
        msg_bytes: list[int] = []
        model: list[tuple[int, int, int]] = []  # (flags, sqn, store index)
        repeats = 0
        for op in ops:
            if op[0] == "send":
                _, frags, count = op
                for _ in range(count):
                    first = (base + len(acked)) & M
                    src.message_sent(first, (first + frags - 1) & M, 10 * frags, net.now)
                    msg_bytes.append(10 * frags)
                    acked += [set() for _ in range(frags)]
                    msg_of += [len(msg_bytes) - 1] * frags
            else:
                _, store, start, length = op
                if not acked:
                    continue
                lo = start % len(acked)
                hi = min(lo + length, len(acked))
                for k in range(lo, hi):
                    if store in acked[k]:
                        repeats += 1
                        continue
                    acked[k].add(store)
                    flags = FULL if len(acked[k]) >= 2 else ev.STABLE_FLAG_STORE
                    model.append((flags, (base + k) & M, store))
                assert src.receive_stability(store, (base + lo) & M, (base + hi - 1) & M,
                                             False, net.now)  # fmt: skip
            net.pump()
            stable = [len(a) >= 2 for a in acked]
            prefix = stable.index(False) if False in stable else len(stable)
            assert (net.released[-1] if net.released else None) == (
                (base + prefix - 1) & M if prefix else None
            )
            assert src.in_flight == stable.count(False)
            unstable_msgs = {msg_of[k] for k, ok in enumerate(stable) if not ok}
            assert src.in_flight_bytes == sum(msg_bytes[i] for i in unstable_msgs)
            assert src.clear == (src.send_check() is None and not src.flight_blocked)
        got = [
            (e.flags, e.sequence_number, e.store_index)
            for e in net.of(ev.SRC_EVENT_UME_MESSAGE_STABLE_EX)
        ]
        assert got == model
        stats = src.stats()
        assert stats["acks_duplicate"] + stats["acks_outside"] == repeats
        assert stats["fragments_stable"] == sum(len(a) >= 2 for a in acked)


def test_ranged_ack_of_one_fragment_messages_across_the_wrap(tmp_path: Path) -> None:
    """The bulk path's events number the fragments across 2**32 - 1 -> 0."""
    net = Net(tmp_path)
    src = net.start()
    for sqn in (M - 2, M - 1, M, 0, 1):
        src.message_sent(sqn, sqn, 10, net.now, clientd=sqn)
    assert src.receive_stability(0, M - 2, 1, False, net.now)
    net.pump()
    got = [
        (e.sequence_number, e.msg_clientd, e.flags)
        for e in net.of(ev.SRC_EVENT_UME_MESSAGE_STABLE_EX)
    ]
    assert got == [(s, s, FULL) for s in (M - 2, M - 1, M, 0, 1)]
    assert net.released[-1] == 1 and src.in_flight == 0 and src.in_flight_bytes == 0
