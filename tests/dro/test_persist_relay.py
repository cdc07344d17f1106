"""Persistence across the DRO, sans-IO (umcore.dro.persist): SRI retargeting, the SRI relay's
timers, the core's control path and the peer link carrying identities and SRIs (decoded by
tshark with nothing Malformed)."""

from __future__ import annotations

from tests.dro.kit import config
from tests.dro.test_peer import connect, pair, pump
from tests.dro.test_peer_tshark import PORT, keys
from tests.oracle import Tshark
from umcore.dro import DroCore, SourceAdvert, SourceKey
from umcore.dro.peer import ControlReceived, SourceReceived
from umcore.dro.persist import (
    SRI_REEMIT_INTERVAL,
    SRI_REFRESH_INTERVAL,
    SRI_REQUEST_INTERVAL,
    SRI_REQUEST_MAXIMUM,
    PersistIdentity,
    SriRelay,
    identity_from_options,
    is_control,
    retarget_sri,
    sri_topic_idx,
)
from umcore.errors import RemoteProtocolError
from umcore.store import compose
from umcore.wire import lbmc
from umcore.wire.lbmr_options import OTIDOption, UMEOption
from umcore.wire.pcap import TcpFlow

SK = SourceKey(b"o" * 32, "persisted")
IDENT = PersistIdentity("10.0.0.1", 14391, 3, 7, 0x8)


def _sri(topic_idx: int | None = 7, version: int = 1) -> bytes:
    store = compose.SriStore(("10.0.0.9", 14567), 0, 1234, 0, 1, 1)
    return compose.Sri(version, 0, 41, (store,), topic_idx=topic_idx).encode()


def test_sri_retargeted_to_the_proxy_topic_index_and_otherwise_unchanged() -> None:
    frame = _sri(7)
    assert is_control(frame)
    assert sri_topic_idx(frame) == (True, 7)
    out = retarget_sri(frame, 42)
    sri = compose.decode(lbmc.decode(out))
    assert isinstance(sri, compose.Sri)
    assert sri.topic_idx == 42
    assert sri == compose.decode(lbmc.decode(_sri(42)))
    assert sri_topic_idx(_sri(None)) == (True, None)
    data = lbmc.encode_data(1, 5, b"payload")
    assert not is_control(data)
    tsni = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[lbmc.TopicIdx(0, 7)]))
    assert sri_topic_idx(tsni) == (False, None)
    try:
        retarget_sri(tsni, 1)
    except RemoteProtocolError:
        pass
    else:
        raise AssertionError("a control message that is no SRI was retargeted")


def test_identity_from_the_ume_option_only() -> None:
    ume = UMEOption(src_tcp_port=14391, src_tcp_addr="10.0.0.1", transport_idx=3, flags=0x8)
    assert identity_from_options([OTIDOption(b"x" * 32), ume], 7) == IDENT
    assert identity_from_options([OTIDOption(b"x" * 32)], 7) is None


def test_relay_requests_until_an_sri_then_refreshes() -> None:
    relay = SriRelay()
    relay.source_joined(SK, IDENT, 0.0)
    assert relay.next_timer() == 0.0
    assert relay.take_due(0.0) == ([(SK, IDENT)], [])
    assert relay.next_timer() == SRI_REQUEST_INTERVAL
    assert relay.take_due(0.5) == ([], [])
    assert relay.take_due(SRI_REQUEST_INTERVAL)[0] == [(SK, IDENT)]
    relay.sri_seen(SK, 1.5)
    # the pending fast request is superseded: the next is the refresh
    assert relay.take_due(1.5 + SRI_REFRESH_INTERVAL - 0.01) == ([], [])
    assert relay.take_due(1.5 + SRI_REFRESH_INTERVAL)[0] == [(SK, IDENT)]
    relay.source_left(SK)
    assert relay.take_due(100.0) == ([], [])
    assert relay.requests == 3


def test_relay_falls_back_to_the_refresh_after_the_maximum() -> None:
    relay = SriRelay()
    relay.source_joined(SK, IDENT, 0.0)
    now = 0.0
    for _ in range(SRI_REQUEST_MAXIMUM):
        assert relay.take_due(now)[0] == [(SK, IDENT)]
        now += SRI_REQUEST_INTERVAL
    last = now - SRI_REQUEST_INTERVAL
    assert relay.next_timer() == last + SRI_REFRESH_INTERVAL


def test_relay_repeats_the_latest_sri_while_the_proxy_lives() -> None:
    relay = SriRelay()
    relay.sri_out(SK, b"v1", 0.0)
    assert relay.take_due(SRI_REEMIT_INTERVAL - 0.01) == ([], [])
    assert relay.take_due(SRI_REEMIT_INTERVAL) == ([], [(SK, b"v1")])
    relay.sri_out(SK, b"v2", 1.5)  # newer: its own schedule, the old one lapses
    assert relay.take_due(2.0) == ([], [])
    assert relay.take_due(1.5 + SRI_REEMIT_INTERVAL) == ([], [(SK, b"v2")])
    relay.proxy_gone(SK)
    assert relay.take_due(100.0) == ([], [])
    assert relay.next_timer() is None


def _core() -> DroCore:
    core = DroCore(config([("A", 1, 1), ("B", 2, 1)]), 7, 0.0)
    core.receive_portal_up("A", 0.0, address=("10.0.0.1", 1))
    core.receive_portal_up("B", 0.0, address=("10.0.0.2", 2))
    core.receive_tqr("B", SK.topic, 0.0)
    core.handle_timer(0.0)
    return core


def test_core_queues_an_sri_for_the_portals_the_source_goes_to() -> None:
    core = _core()
    core.receive_source("A", SourceAdvert(SK, None, persist=IDENT), 0.0)
    assert core.persistence(SK) == IDENT
    assert core.receive_control("A", SK, _sri(), 0.0) == 1
    assert core.take_controls() == [("B", SK, _sri())]
    assert core.take_controls() == []
    # not from the active ingress, or an unknown source: nothing
    assert core.receive_control("B", SK, _sri(), 0.0) == 0
    assert core.receive_control("A", SourceKey(b"p" * 32, "t"), _sri(), 0.0) == 0
    assert core.take_controls() == []


def test_core_without_identity_is_not_persistent() -> None:
    core = _core()
    core.receive_source("A", SourceAdvert(SK, None), 0.0)
    assert core.persistence(SK) is None


def test_peer_link_carries_the_identity_and_the_sri() -> None:
    a, b = pair()
    connect(a, b)
    assert a.send_source(SK, 4, 1, 1, 0.0, persist=IDENT)
    assert a.send_source(SK, 5, 1, None, 0.0, change=True, persist=IDENT)
    assert a.send_sri(SK, _sri(7), 0.0)
    pump(a, b, 0.0)
    evs = b.take_events()
    got = [e for e in evs if isinstance(e, SourceReceived)]
    assert [e.persist for e in got] == [IDENT, IDENT]
    (ctl,) = [e for e in evs if isinstance(e, ControlReceived)]
    assert ctl.source == SK
    assert sri_topic_idx(ctl.frame) == (True, None)  # the link drops the topic index
    assert compose.decode(lbmc.decode(retarget_sri(ctl.frame, 7))) == compose.decode(
        lbmc.decode(_sri(7))
    )
    # a source that is not persistent carries none
    a.send_source(SourceKey(b"q" * 32, "plain"), 1, 1, 1, 0.0)
    pump(a, b, 0.0)
    (plain,) = [e for e in b.take_events() if isinstance(e, SourceReceived)]
    assert plain.persist is None


def test_tshark_decodes_the_persistence_messages_of_a_peer_link(tshark: Tshark) -> None:
    a, b = pair()
    connect(a, b)
    flow = TcpFlow(("127.0.0.1", 40000), ("127.0.0.1", PORT))
    assert a.send_source(SK, 4, 1, 1, 0.0, persist=IDENT)
    assert a.send_sri(SK, _sri(7), 0.0)
    frames = [flow.segment(True, b"".join(a.take_bytes()))]
    decoded = tshark.decode(frames, decode_as=[f"tcp.port=={PORT},lbttcp"])
    decoded.assert_clean()
    names = {"lbmc.advertisement", "lbmc.topic_source_exfunc", "lbmc.sri", "lbmc.otid"}
    seen = names & set(keys(decoded.layers))
    assert seen == names, names - seen
