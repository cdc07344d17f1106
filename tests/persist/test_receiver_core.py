"""PersistentReceiver against real StoreCore instances, in memory (persistence-store.md 1.5,
1.7, 1.14; section 7 checks 6, 10, 11, 15, 17, 20, 28; traps 3, 4, 9).

Theory of operation
-------------------
:class:`Net` owns 1..3 Stores (``StoreCore`` through the store tests' :class:`Rig`) and a fake
source that registers with each (the store tests' :class:`Source`: its PREG on the request
port, its frames on a transport session).  It carries the receiver's sends to the Store they
name (SRI requests to the source are counted), and the Stores' answers to the receiver's
request port back into :meth:`PersistentReceiver.receive_control`; a Store in ``down`` neither
receives nor answers.  Time is one clock moved by :meth:`Net.advance`, which fires the
receiver's timer whenever it asks and keeps the Stores' clocks in step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.store.corekit import Rig, Source, instance, topic_config
from umcore.engine.options import Options
from umcore.persist import events as ev
from umcore.persist.receiver import (
    RECEIVER_TRANSITIONS,
    PersistentReceiver,
    ReceiverConfig,
    ReceiverInput,
    ReceiverState,
    RecoverySequenceInfo,
)
from umcore.store import compose
from umcore.store.core import StoreCore
from umcore.wire import lbmc

T0 = 1000.0
TOPIC = "orders"
RCV_IP = "10.0.0.2"
RCV_ADDR = (RCV_IP, 14392)
SRC_REQ = ("10.0.0.1", 14391)  # the fake source's request port (corekit.Source's default)
M = 0xFFFFFFFF


class Net:
    def __init__(self, tmp: Path, n: int = 1, **topic_opts: Any) -> None:
        self.now = T0
        self.rigs: list[Rig] = []
        self.sources: list[Source] = []
        self.down: set[int] = set()
        self.sri_requests = 0
        self.recovered: list[tuple[int, int]] = []  # (sqn, store index)
        self.events: list[tuple[int, Any]] = []
        for i in range(n):
            inst = instance(tmp / f"s{i}", [topic_config(TOPIC, **topic_opts)])
            core = StoreCore(
                inst, store_index=i, address=(f"10.0.1.{i + 1}", 14567), now=T0, seed=11 + i
            )
            rig = Rig(core, now=T0)
            rig.pump()
            self.rigs.append(rig)

    def add_source(self, **registration: Any) -> None:
        for rig in self.rigs:
            src = Source(rig, TOPIC, **registration)
            resp = src.register()
            assert resp is not None and resp.error is None, resp
            self.sources.append(src)

    def send(self, *sqns: int) -> None:
        for i, src in enumerate(self.sources):
            if i not in self.down:
                src.send(*sqns)

    def sri(self, version: int = 1, versions: tuple[int, ...] | None = None) -> compose.Sri:
        stores = tuple(
            compose.SriStore(
                rig.core.address, i, self.sources[i].reg_id,
                version=versions[i] if versions else 1,
            )
            for i, rig in enumerate(self.rigs)
        )  # fmt: skip
        return compose.Sri(version, 0, 0, stores)

    def receiver(self, tmp_opts: dict[str, str] | None = None, **kw: Any) -> PersistentReceiver:
        ctx = kw.pop("context", None)
        cfg = ReceiverConfig.from_options(Options("receiver", tmp_opts or {}), context=ctx)
        return PersistentReceiver(
            cfg, topic=TOPIC, transport_idx=1, topic_idx=0, source_request=SRC_REQ,
            reply_to=RCV_ADDR, ctxinst=b"RCVCTX01", now=self.now, source="TCP:10.0.0.1:14371:1",
            **kw,
        )  # fmt: skip

    def rig_at(self, dest: tuple[str, int]) -> int | None:
        for i, rig in enumerate(self.rigs):
            if rig.core.address == dest:
                return i
        return None

    def deliver(self, rcv: PersistentReceiver, sends: list[tuple[tuple[str, int], bytes]]) -> None:
        for dest, data in sends:
            if dest == SRC_REQ:
                comp = compose.decode(lbmc.decode(data))
                assert isinstance(comp, compose.SriRequest)
                assert (comp.transport_idx, comp.topic_idx) == (1, 0)
                self.sri_requests += 1
                continue
            i = self.rig_at(dest)
            assert i is not None, dest
            if i not in self.down:
                self.rigs[i].control(data, RCV_IP)
        self.pump(rcv)

    def pump(self, rcv: PersistentReceiver) -> None:
        for _ in range(100):
            progressed = False
            for i, rig in enumerate(self.rigs):
                for comp in rig.take(RCV_ADDR):
                    progressed = True
                    if i in self.down:
                        continue
                    if isinstance(comp, compose.Retransmission):
                        self.recovered.append((comp.sqn, i))
                    else:
                        assert rcv.receive_control(comp, rig.core.address[0], self.now), comp
            sends = rcv.take_sends()
            self.events += rcv.take_events()
            if sends:
                progressed = True
                self.deliver(rcv, sends)
            if not progressed:
                return
        raise AssertionError("did not settle")

    def advance(self, rcv: PersistentReceiver, seconds: float) -> None:
        end = self.now + seconds
        for _ in range(100000):
            t = rcv.next_timer()
            if t is None or t > end:
                break
            self._clock(max(self.now, t))
            rcv.handle_timer(self.now)
            self.pump(rcv)
        else:
            raise AssertionError("timer loop did not end")
        self._clock(end)
        self.pump(rcv)

    def _clock(self, now: float) -> None:
        for rig in self.rigs:
            rig.advance(now - rig.now)
        self.now = now

    def of(self, code: int) -> list[Any]:
        return [info for c, info in self.events if c == code]

    def high_ack(self, i: int) -> int:
        (repo,) = self.rigs[i].core.stats().repositories
        (rs,) = repo.receiver_stats
        return rs.high_ack_sqn

    def rxreq(self, rcv: PersistentReceiver, sqns: list[int], retry: bool = False) -> None:
        self.deliver(rcv, rcv.rxreq_messages(sqns, retry, 7))


def start(net: Net, rcv: PersistentReceiver, sri: compose.Sri | None = None) -> None:
    rcv.start(net.now)
    net.pump(rcv)
    rcv.receive_sri(sri if sri is not None else net.sri(), net.now)
    net.pump(rcv)


# ------------------------------------------------------------------------------------------------
# configuration


def test_config_comes_from_the_registry_with_receiver_defaults() -> None:
    cfg = ReceiverConfig.from_options(Options("receiver"), context_session_id=0x77)
    assert cfg.consensus == "majority"  # trap 4: the receiver's default is not the source's
    assert cfg.session_id == 0x77  # the context's when the receiver has none
    assert (cfg.registration_interval, cfg.sri_request_interval) == (3.0, 1.0)
    assert cfg.sri_request_maximum == 60
    assert cfg.ack_batching_interval == pytest.approx(0.1)  # context scope
    assert cfg.proactive_keepalive_interval == pytest.approx(3.0)
    assert cfg.use_ack_batching and not cfg.explicit_ack_only
    own = ReceiverConfig.from_options(
        Options("receiver", {"ume_session_id": "0x10", "ume_receiver_paced_persistence": "2"}),
        context_session_id=0x77,
        context=Options("context", {"ume_ack_batching_interval": "250"}),
    )
    assert own.session_id == 0x10 and own.rpp_mode == 2
    assert own.ack_batching_interval == pytest.approx(0.25)


def test_transition_table_refuses_what_it_does_not_name(tmp_path: Path) -> None:
    assert (ReceiverState.COMPLETE, ReceiverInput.START) not in RECEIVER_TRANSITIONS
    net = Net(tmp_path)
    rcv = net.receiver()
    rcv.close(net.now)
    assert rcv.next_timer() is None
    rcv.start(net.now)  # not IDLE any more: ignored, not an error
    assert rcv.take_sends() == []
    rcv.deregister(net.now)  # closed: nothing to do, nothing sent
    assert rcv.take_sends() == [] and rcv.state is ReceiverState.CLOSED
    # every state but CLOSED may be closed; CLOSED leads nowhere
    closable = {s for (s, i) in RECEIVER_TRANSITIONS if i is ReceiverInput.CLOSE}
    assert closable == set(ReceiverState) - {ReceiverState.CLOSED}
    assert not [k for k in RECEIVER_TRANSITIONS if k[0] is ReceiverState.CLOSED]


# ------------------------------------------------------------------------------------------------
# SRI request and registration (check 6)


def test_sri_requests_every_interval_then_registration_error_at_the_maximum(tmp_path: Path) -> None:
    net = Net(tmp_path)
    rcv = net.receiver({"ume_sri_request_maximum": "3", "ume_sri_request_interval": "500"})
    rcv.start(net.now)
    net.pump(rcv)
    assert net.sri_requests == 1
    net.advance(rcv, 0.49)
    assert net.sri_requests == 1
    net.advance(rcv, 0.02)
    assert net.sri_requests == 2
    net.advance(rcv, 0.5)
    assert net.sri_requests == 3 and not rcv.failed
    net.advance(rcv, 0.5)  # the third went unanswered a whole interval
    assert net.sri_requests == 3 and rcv.failed
    (err,) = net.of(ev.MSG_UME_REGISTRATION_ERROR)
    assert "no SRI" in err.text and "3 SRI requests" in err.text
    assert rcv.next_timer() is None
    assert rcv.take_recovery() is None


def test_receiver_started_after_the_source_recovers_0_to_6_then_is_complete(
    tmp_path: Path,
) -> None:
    net = Net(tmp_path)
    net.add_source()
    net.send(*range(7))
    rcv = net.receiver()
    rcv.start(net.now)
    net.pump(rcv)
    assert net.sri_requests == 1
    net.advance(rcv, 1.0)
    assert net.sri_requests == 2  # still no SRI: asked again after ume_sri_request_interval
    rcv.receive_sri(net.sri(), net.now)
    net.pump(rcv)
    (ok,) = net.of(ev.MSG_UME_REGISTRATION_SUCCESS_EX)
    assert ok.sequence_number == 0 and not ok.flags & ev.RCV_REG_FLAG_OLD
    assert ok.src_registration_id == net.sources[0].reg_id and ok.rcv_registration_id != 0
    assert ok.store == "10.0.1.1:14567" and ok.store_index == 0
    (done,) = net.of(ev.MSG_UME_REGISTRATION_COMPLETE_EX)
    assert done.sequence_number == 0 and done.flags & ev.RCV_COMPLETE_FLAG_QUORUM
    assert not done.flags & ev.RCV_COMPLETE_FLAG_RXREQMAX
    assert rcv.complete and rcv.registered and rcv.stores == (("10.0.1.1", 14567),)
    assert rcv.take_recovery() == (0, 6)
    assert rcv.take_recovery() is None  # once
    net.rxreq(rcv, list(range(7)))
    assert sorted(s for s, _ in net.recovered) == list(range(7))
    counters = net.rigs[0].core.stats().counters
    assert counters["rx_received"] == 7 and counters["rx_serviced"] == 7
    net.advance(rcv, 5.0)
    assert net.sri_requests == 2  # no more once an SRI came


def test_registration_carries_session_id_regid_callback_and_rpp_mode(tmp_path: Path) -> None:
    net = Net(tmp_path)
    net.add_source()
    asked: list[tuple[int, int, str, str]] = []

    def reg_fn(src_reg_id: int, store_index: int, store: str, source: str) -> int:
        asked.append((src_reg_id, store_index, store, source))
        return 4242

    rcv = net.receiver({"ume_session_id": "0xABC"}, registration_fn=reg_fn)
    rcv.receive_sri(net.sri(), net.now)
    ((dest, data),) = rcv.take_sends()
    req = compose.decode(lbmc.decode(data))
    assert isinstance(req, compose.ReceiverRegistration)
    assert dest == ("10.0.1.1", 14567)
    assert (req.src_reg_id, req.reg_id, req.session_id, req.rpp_mode) == (
        net.sources[0].reg_id, 4242, 0xABC, 0,
    )  # fmt: skip
    assert (req.transport_idx, req.topic_idx, req.reply_to, req.topic) == (1, 0, RCV_ADDR, TOPIC)
    assert asked == [(net.sources[0].reg_id, 0, "10.0.1.1:14567", "TCP:10.0.0.1:14371:1")]
    net.deliver(rcv, [(dest, data)])
    (ok,) = net.of(ev.MSG_UME_REGISTRATION_SUCCESS_EX)
    assert ok.rcv_registration_id == 4242


def test_unanswered_registration_is_retried_every_registration_interval(tmp_path: Path) -> None:
    net = Net(tmp_path)
    net.add_source()
    net.down.add(0)
    rcv = net.receiver()
    rcv.receive_sri(net.sri(), net.now)
    net.pump(rcv)
    sent = rcv.stats()["registrations_sent"]
    assert sent == 1 and not rcv.registered
    net.advance(rcv, 2.9)
    assert rcv.stats()["registrations_sent"] == 1
    net.advance(rcv, 0.2)
    assert rcv.stats()["registrations_sent"] == 2
    net.down.clear()
    net.advance(rcv, 3.0)
    assert rcv.complete and rcv.stats()["registrations_sent"] == 3


def test_rpp_mode_mismatch_is_a_registration_error_and_fails(tmp_path: Path) -> None:
    # check 20 (receiver side): an RPP receiver on an SPP repository is refused (ECONFIG)
    net = Net(tmp_path)
    net.add_source()
    rcv = net.receiver({"ume_receiver_paced_persistence": "1"})
    start(net, rcv)
    errors = net.of(ev.MSG_UME_REGISTRATION_ERROR)
    assert any("incompatible" in e.text for e in errors)
    assert rcv.failed and not rcv.registered
    net.advance(rcv, 10.0)
    assert rcv.stats()["registrations_sent"] == 1  # not retried: asking again cannot help


def test_rpp_receivers_get_rpp_and_non_blocking_flags(tmp_path: Path) -> None:
    opts = dict(repository_allow_receiver_paced_persistence=1, repository_size_limit=100000)
    for mode, flags in (("1", ev.RCV_REG_FLAG_RPP),
                        ("2", ev.RCV_REG_FLAG_RPP | ev.RCV_REG_FLAG_RPP_IS_NON_BLOCKING)):  # fmt: skip
        net = Net(tmp_path / mode, **opts)
        net.add_source(rpp=True, rpp_options=(("ume_flight_size_bytes", 1000),))
        rcv = net.receiver({"ume_receiver_paced_persistence": mode})
        start(net, rcv)
        (ok,) = net.of(ev.MSG_UME_REGISTRATION_SUCCESS_EX)
        mask = ev.RCV_REG_FLAG_RPP | ev.RCV_REG_FLAG_RPP_IS_NON_BLOCKING
        assert ok.flags & mask == flags
        assert rcv.complete


# ------------------------------------------------------------------------------------------------
# recovery range (checks 6, 11; section 1.7)


def _restart_after(tmp_path: Path, acked: int, sent: int, **opts: str) -> tuple[Net, Any]:
    """A receiver ACKs up to ``acked``, stops; the source sends up to ``sent``; a receiver
    with the same Session ID registers again."""
    net = Net(tmp_path)
    net.add_source()
    net.send(*range(acked + 1))
    first = net.receiver({"ume_session_id": "0x5"})
    start(net, first)
    first.take_recovery()
    for q in range(acked + 1):
        first.consumed(q, net.now)
    net.advance(first, 0.2)
    assert net.high_ack(0) == acked  # check 10: the Store's ACK is the last consumed
    first.close(net.now)
    net.send(*range(acked + 1, sent + 1))
    net.events.clear()
    again = net.receiver({"ume_session_id": "0x5", **opts})
    start(net, again)
    return net, again


def test_check11_restart_recovers_from_the_last_ack(tmp_path: Path) -> None:
    net, rcv = _restart_after(tmp_path, 41, 99)
    (ok,) = net.of(ev.MSG_UME_REGISTRATION_SUCCESS_EX)
    assert ok.flags & ev.RCV_REG_FLAG_OLD and ok.sequence_number == 42
    (done,) = net.of(ev.MSG_UME_REGISTRATION_COMPLETE_EX)
    assert done.sequence_number == 42 and not done.flags & ev.RCV_COMPLETE_FLAG_RXREQMAX
    assert rcv.take_recovery() == (42, 99)


def test_check11_retransmit_request_maximum_10_starts_at_89_with_rxreqmax(tmp_path: Path) -> None:
    net, rcv = _restart_after(tmp_path, 41, 99, retransmit_request_maximum="10")
    (done,) = net.of(ev.MSG_UME_REGISTRATION_COMPLETE_EX)
    assert done.sequence_number == 89 and done.flags & ev.RCV_COMPLETE_FLAG_RXREQMAX
    assert rcv.take_recovery() == (89, 99)


def test_worked_example_recovery_callback_sees_low_1_rxreq_max_4_high_6(tmp_path: Path) -> None:
    seen: list[RecoverySequenceInfo] = []

    def keep(info: RecoverySequenceInfo) -> int | None:
        seen.append(info)
        return info.low_sequence_number  # "unchanged"

    net = Net(tmp_path)
    net.add_source()
    net.send(*range(7))
    first = net.receiver({"ume_session_id": "0x5"})
    start(net, first)
    first.consumed(0, net.now)
    net.advance(first, 0.2)
    first.close(net.now)
    net.events.clear()
    rcv = net.receiver(
        {"ume_session_id": "0x5", "retransmit_request_maximum": "2"}, recovery_fn=keep
    )
    start(net, rcv)
    (info,) = seen
    assert (info.low_sequence_number, info.low_rxreq_max_sequence_number) == (1, 4)
    assert info.high_sequence_number == 6 and info.source == "TCP:10.0.0.1:14371:1"
    assert rcv.take_recovery() == (4, 6)  # first delivered 4


def test_recovery_callback_may_move_the_start_or_skip_recovery(tmp_path: Path) -> None:
    # 7 = high + 1: no recovery; 10, past what the Stores hold, starts there too (not a range
    # 10..6 that wraps through 2^32)
    for chosen, expect in ((3, (3, 6)), (7, (7, 6)), (10, (7, 6))):
        net = Net(tmp_path / str(chosen))
        net.add_source()
        net.send(*range(7))
        rcv = net.receiver(recovery_fn=lambda info, c=chosen: c)
        start(net, rcv)
        assert rcv.take_recovery() == expect
        (done,) = net.of(ev.MSG_UME_REGISTRATION_COMPLETE_EX)
        assert done.sequence_number == expect[0]


def test_a_raising_callback_is_reported_and_the_range_kept(tmp_path: Path) -> None:
    def boom(info: RecoverySequenceInfo) -> int | None:
        raise RuntimeError("app bug")

    net = Net(tmp_path)
    net.add_source()
    net.send(0, 1, 2)
    rcv = net.receiver(recovery_fn=boom)
    start(net, rcv)
    assert rcv.take_recovery() == (0, 2)
    assert any("app bug" in e.text for e in net.of(ev.MSG_UME_REGISTRATION_ERROR))
    assert rcv.stats()["callback_errors"] == 1


def test_nothing_stored_is_an_empty_range(tmp_path: Path) -> None:
    net = Net(tmp_path)
    net.add_source()
    rcv = net.receiver()
    start(net, rcv)
    low, high = rcv.take_recovery() or (None, None)
    assert low == 0 and high == M  # low == high + 1 (mod 2^32): nothing to recover


# ------------------------------------------------------------------------------------------------
# quorum and consensus with three Stores


def _three(tmp_path: Path, acks: tuple[int, int, int], behavior: str | None = None) -> Net:
    """Three Stores holding 0..20 where a former receiver (Session ID 5) ACKed acks[i]."""
    net = Net(tmp_path, 3)
    net.add_source()
    net.send(*range(21))
    old = net.receiver({"ume_session_id": "0x5"})
    start(net, old)
    for i, a in enumerate(acks):  # one Store at a time: each keeps its own ACK position
        net.down = {0, 1, 2} - {i}
        old.consumed(a, net.now)
        net.advance(old, 0.2)
        assert net.high_ack(i) == a
    old.close(net.now)
    net.down = set()
    net.events.clear()
    return net


@pytest.mark.parametrize(
    ("behavior", "expect"), [(None, 11), ("majority", 11), ("lowest", 6), ("highest", 16)]
)
def test_consensus_low_sequence_number_over_three_stores(
    tmp_path: Path, behavior: str | None, expect: int
) -> None:
    net = _three(tmp_path, (5, 10, 15))
    opts = {"ume_session_id": "0x5"}
    if behavior:
        opts["ume_consensus_sequence_number_behavior"] = behavior
    rcv = net.receiver(opts)
    start(net, rcv)
    lows = sorted(i.sequence_number for i in net.of(ev.MSG_UME_REGISTRATION_SUCCESS_EX))
    assert lows == [6, 11, 16]
    assert rcv.take_recovery() == (expect, 20)


def test_majority_of_two_answers_is_the_lower(tmp_path: Path) -> None:
    # one Store of three down: a majority of the two answers (both) reached only the lower
    net = _three(tmp_path, (5, 10, 15))
    net.down = {2}
    rcv = net.receiver({"ume_session_id": "0x5"})
    start(net, rcv)
    net.advance(rcv, 3.0)
    assert rcv.take_recovery() == (6, 20)


def test_quorum_completes_after_a_registration_interval_unless_all_answered(
    tmp_path: Path,
) -> None:
    net = Net(tmp_path, 3)
    net.add_source()
    net.send(0, 1)
    net.down = {2}
    rcv = net.receiver()
    start(net, rcv)
    assert len(net.of(ev.MSG_UME_REGISTRATION_SUCCESS_EX)) == 2
    assert not rcv.complete and rcv.registered  # 2 of 3: quorum, waiting for the third
    net.advance(rcv, 2.9)
    assert not rcv.complete
    net.advance(rcv, 0.2)
    assert rcv.complete and rcv.take_recovery() == (0, 1)
    assert len(rcv.stores) == 2
    net.down = set()
    net.advance(rcv, 3.0)  # the third is asked again and joins
    assert len(rcv.stores) == 3
    assert len(net.of(ev.MSG_UME_REGISTRATION_COMPLETE_EX)) == 1


def test_one_store_of_three_is_no_quorum(tmp_path: Path) -> None:
    net = Net(tmp_path, 3)
    net.add_source()
    net.down = {1, 2}
    rcv = net.receiver()
    start(net, rcv)
    net.advance(rcv, 10.0)
    assert not rcv.complete and not rcv.failed and rcv.take_recovery() is None
    net.down = {2}
    net.advance(rcv, 3.0)
    assert rcv.complete


# ------------------------------------------------------------------------------------------------
# retransmission requests: load balancing and retry elsewhere (check 17)


def test_rxreqs_are_spread_over_the_stores_and_a_retry_goes_elsewhere(tmp_path: Path) -> None:
    net = Net(tmp_path, 3)
    net.add_source()
    net.send(*range(9))
    rcv = net.receiver()
    start(net, rcv)
    assert rcv.take_recovery() == (0, 8)
    net.rxreq(rcv, list(range(9)))
    by_store = sorted(s for _, s in net.recovered)
    assert by_store == [0, 0, 0, 1, 1, 1, 2, 2, 2]  # round robin
    first_try = dict(net.recovered)
    net.recovered.clear()
    net.rxreq(rcv, [4], retry=True)
    ((sqn, store),) = net.recovered
    assert sqn == 4 and store != first_try[4]
    # a request carries the source's RegID at that Store and our request port
    sends = rcv.rxreq_messages([5], False, 9)
    ((dest, data),) = sends
    msg = compose.decode(lbmc.decode(data))
    assert isinstance(msg, compose.RetransmissionRequest)
    (rx,) = msg.requests
    i = net.rig_at(dest)
    assert i is not None
    assert (rx.id_2, rx.reply_to, rx.request_idx, rx.seqnum) == (
        net.sources[i].reg_id, RCV_ADDR, 9, 5,
    )  # fmt: skip


def test_check17_a_store_missing_a_message_is_covered_by_a_retry(tmp_path: Path) -> None:
    net = Net(tmp_path, 3)
    net.add_source()
    net.send(0, 1, 2)
    net.down = {0}
    net.send(3)  # Store 0 never got 3
    net.down = set()
    net.send(4)
    rcv = net.receiver()
    start(net, rcv)
    got: set[int] = set()
    retry = False
    for _ in range(3):
        net.rxreq(rcv, [3], retry=retry)
        got |= {s for s, _ in net.recovered}
        if 3 in got:
            break
        retry = True
    assert 3 in got


def test_no_registered_store_means_no_request(tmp_path: Path) -> None:
    net = Net(tmp_path)
    rcv = net.receiver()
    assert rcv.rxreq_messages([1, 2], False, 1) == []
    assert rcv.stats()["rxreq_without_store"] == 2


# ------------------------------------------------------------------------------------------------
# consumption ACKs (check 10, trap 3)


def test_ack_batching_sends_one_cumulative_ack_per_interval(tmp_path: Path) -> None:
    net = Net(tmp_path, 2)
    net.add_source()
    net.send(*range(50))
    rcv = net.receiver()
    start(net, rcv)
    before = rcv.stats()["ack_messages"]
    for q in range(50):
        rcv.consumed(q, net.now)
    assert rcv.take_sends() == []  # batched: nothing yet
    assert rcv.next_timer() == pytest.approx(net.now + 0.1)
    net.advance(rcv, 0.1)
    assert rcv.stats()["ack_messages"] - before == 2  # one ACK to each of the 2 Stores
    assert net.high_ack(0) == 49 and net.high_ack(1) == 49
    rcv.consumed(10, net.now)  # older: nothing new to ACK (cumulative)
    net.advance(rcv, 0.2)
    assert rcv.stats()["ack_messages"] - before == 2


def test_without_batching_the_ack_is_due_at_once(tmp_path: Path) -> None:
    net = Net(tmp_path)
    net.add_source()
    net.send(0, 1, 2)
    rcv = net.receiver({"ume_use_ack_batching": "0"})
    start(net, rcv)
    rcv.consumed(0, net.now)
    rcv.consumed(1, net.now)
    assert rcv.next_timer() == net.now
    rcv.handle_timer(net.now)
    net.pump(rcv)
    assert net.high_ack(0) == 1


def test_explicit_ack_only_ignores_consumption_and_acks_on_request(tmp_path: Path) -> None:
    net = Net(tmp_path)
    net.add_source()
    net.send(0, 1, 2, 3)
    rcv = net.receiver({"ume_explicit_ack_only": "1"})
    start(net, rcv)
    rcv.consumed(3, net.now)
    net.advance(rcv, 0.5)
    assert net.high_ack(0) == M  # nothing ACKed
    rcv.explicit_ack(2, net.now)
    sends = rcv.take_sends()
    ((_, data),) = sends
    ack = compose.decode(lbmc.decode(data))
    assert isinstance(ack, compose.ConsumptionAck) and ack.flags & lbmc.ACK_FLAG_E
    assert (ack.seqnum, ack.src_reg_id) == (2, net.sources[0].reg_id)
    net.deliver(rcv, sends)
    assert net.high_ack(0) == 2


def test_acks_wrap_with_serial_arithmetic(tmp_path: Path) -> None:
    net = Net(tmp_path)
    net.add_source()
    net.send(M - 1)
    rcv = net.receiver({"ume_use_ack_batching": "0"})
    start(net, rcv)
    rcv.consumed(M - 1, net.now)
    rcv.consumed(M, net.now)
    rcv.consumed(0, net.now)
    rcv.consumed(M, net.now)  # before 0 in serial order
    rcv.handle_timer(net.now)
    ((_, data),) = rcv.take_sends()
    ack = compose.decode(lbmc.decode(data))
    assert isinstance(ack, compose.ConsumptionAck) and ack.seqnum == 0


def test_close_flushes_the_batched_ack_and_stops_timers(tmp_path: Path) -> None:
    net = Net(tmp_path)
    net.add_source()
    net.send(0, 1, 2)
    rcv = net.receiver()
    start(net, rcv)
    rcv.consumed(2, net.now)
    rcv.close(net.now)
    assert rcv.next_timer() is None
    net.deliver(rcv, rcv.take_sends())
    assert net.high_ack(0) == 2


# ------------------------------------------------------------------------------------------------
# keepalives


def test_store_keepalive_with_r_is_answered_and_proactive_keepalive_when_idle(
    tmp_path: Path,
) -> None:
    net = Net(tmp_path)
    net.add_source()
    rcv = net.receiver(context=Options("context", {"ume_proactive_keepalive_interval": "0"}))
    start(net, rcv)
    (reg_id,) = {i.rcv_registration_id for i in net.of(ev.MSG_UME_REGISTRATION_SUCCESS_EX)}
    ka = compose.Keepalive(lbmc.KA_TYPE_STORE, 1, 0, reg_id, response_requested=True,
                           store_index=0)  # fmt: skip
    assert rcv.receive_control(ka, "10.0.1.1", net.now)
    ((_, data),) = rcv.take_sends()
    answer = compose.decode(lbmc.decode(data))
    assert isinstance(answer, compose.Keepalive)
    assert (answer.role, answer.reg_id, answer.response_requested) == (
        lbmc.KA_TYPE_RECEIVER, reg_id, False,
    )  # fmt: skip
    other = compose.Keepalive(lbmc.KA_TYPE_STORE, 1, 0, reg_id + 1, response_requested=True)
    assert not rcv.receive_control(other, "10.0.1.1", net.now)  # another receiver's
    # proactive keepalive off: silence for a long time sends nothing
    net.advance(rcv, 30.0)
    assert rcv.stats()["proactive_keepalives"] == 0

    net2 = Net(tmp_path / "pk")
    net2.add_source()
    net2.send(0)
    rcv2 = net2.receiver()  # default 3000 ms
    start(net2, rcv2)
    net2.advance(rcv2, 2.9)
    assert rcv2.stats()["proactive_keepalives"] == 0
    net2.advance(rcv2, 0.2)
    assert rcv2.stats()["proactive_keepalives"] == 1  # UME_RCV_KEEPALIVE: nothing ACKed yet
    rcv2.consumed(0, net2.now)
    net2.advance(rcv2, 0.1)  # the ACK goes; the next keepalive 3 s after it re-sends it
    acks = rcv2.stats()["ack_messages"]
    net2.advance(rcv2, 3.0)
    assert rcv2.stats()["ack_messages"] == acks + 1
    assert net2.high_ack(0) == 0
    # the Store heard us all along: the receiver is still active there after 40 s (the
    # fake source keeps itself alive with source keepalives)
    src = net2.sources[0]
    for _ in range(4):
        alive = compose.Keepalive(lbmc.KA_TYPE_SOURCE, 1, 0, src.reg_id)
        net2.rigs[0].control(alive.encode(), SRC_REQ[0])
        net2.advance(rcv2, 10.0)
    (repo,) = net2.rigs[0].core.stats().repositories
    (rs,) = repo.receiver_stats
    assert rs.state == "active"


# ------------------------------------------------------------------------------------------------
# SRI versions (registration change) and deregistration (check 28)


def test_higher_sri_version_reregisters_only_with_grown_stores(tmp_path: Path) -> None:
    net = Net(tmp_path, 3)
    net.add_source()
    rcv = net.receiver()
    start(net, rcv, net.sri(1, (1, 1, 1)))
    assert rcv.complete
    sent = rcv.stats()["registrations_sent"]
    rcv.receive_sri(net.sri(1, (1, 1, 1)), net.now)  # a repeat: nothing
    assert rcv.take_sends() == [] and rcv.take_events() == []
    rcv.receive_sri(net.sri(2, (1, 2, 1)), net.now)
    sends = rcv.take_sends()
    assert [net.rig_at(d) for d, _ in sends] == [1]
    assert rcv.stats()["registrations_sent"] == sent + 1
    (change,) = [i for c, i in rcv.take_events() if c == ev.MSG_UME_REGISTRATION_CHANGE]
    assert isinstance(change, ev.RcvRegistrationChange)
    assert "version 1 -> 2" in change.text and "Store 1" in change.text
    net.deliver(rcv, sends)
    olds = [i for i in net.of(ev.MSG_UME_REGISTRATION_SUCCESS_EX) if i.flags & ev.RCV_REG_FLAG_OLD]
    assert [i.store_index for i in olds] == [1]
    assert len(rcv.stores) == 3


def test_deregistration_success_per_store_then_complete(tmp_path: Path) -> None:
    net = Net(tmp_path, 2)
    net.add_source()
    net.send(0, 1, 2)
    rcv = net.receiver()
    start(net, rcv)
    rcv.consumed(1, net.now)
    rcv.deregister(net.now)
    net.pump(rcv)
    succ = net.of(ev.MSG_UME_DEREGISTRATION_SUCCESS_EX)
    assert sorted(i.store_index for i in succ) == [0, 1]
    assert all(i.sequence_number == 1 for i in succ)  # the consumed ACK went first
    assert len(net.of(ev.MSG_UME_DEREGISTRATION_COMPLETE_EX)) == 1
    assert rcv.state is ReceiverState.DEREGISTERED and not rcv.registered
    for rig in net.rigs:
        assert rig.core.stats().receivers == 0
    rcv.consumed(2, net.now)  # a deregistered receiver no longer ACKs
    net.advance(rcv, 5.0)
    assert rcv.take_sends() == []


def test_deregistration_is_retried_until_answered(tmp_path: Path) -> None:
    net = Net(tmp_path, 2)
    net.add_source()
    rcv = net.receiver()
    start(net, rcv)
    net.down = {1}
    rcv.deregister(net.now)
    net.pump(rcv)
    assert len(net.of(ev.MSG_UME_DEREGISTRATION_SUCCESS_EX)) == 1
    assert not net.of(ev.MSG_UME_DEREGISTRATION_COMPLETE_EX)
    net.down = set()
    net.advance(rcv, 3.0)
    assert len(net.of(ev.MSG_UME_DEREGISTRATION_COMPLETE_EX)) == 1
    assert rcv.stats()["deregistrations_sent"] == 3


def test_answers_for_other_receivers_are_not_taken(tmp_path: Path) -> None:
    net = Net(tmp_path)
    net.add_source()
    rcv = net.receiver()
    start(net, rcv)
    (ok,) = net.of(ev.MSG_UME_REGISTRATION_SUCCESS_EX)
    other_topic = compose.RegistrationResponse(False, ok.rcv_registration_id, 1, 5)
    assert not rcv.receive_control(other_topic, "10.0.1.1", net.now)
    other_rcv = compose.RegistrationResponse(False, ok.rcv_registration_id + 1, 1, 0,
                                             deregistered=True)  # fmt: skip
    assert not rcv.receive_control(other_rcv, "10.0.1.1", net.now)
    src_answer = compose.RegistrationResponse(True, ok.rcv_registration_id, 1, 0)
    assert not rcv.receive_control(src_answer, "10.0.1.1", net.now)
