"""A DRO's remote interest through the SRS keeps the domain id of the receivers behind it
(issue 19: interest crossing an SRS-resolved transit TRD).  SRS core and client cores in
memory, explicit time."""

from __future__ import annotations

from tests.srs.harness import Net
from umcore.srs.client import InterestReported, SRSClient
from umcore.srs.server import ServerConfig, SRSServer
from umcore.wire.srs_messages import (
    APP_TYPE_TNWGD,
    INTEREST_MODE_FILTER,
    INTEREST_MODE_FILTER_FORWARD_INTEREST,
    ReceiverEnd,
    ReceiverInfo,
    WildcardReceiverEnd,
    WildcardReceiverInfo,
)

SRS = ("127.0.0.1", 27100)
DRO2_SRC = b"dro2-src"  # context instance of the DRO whose remote interest crosses the TRD


def dro_context(net: Net, mode: int, instance: bytes | None = None) -> int:
    """A DRO endpoint's context in TRD 2 (app type TNWGD, domain 2)."""
    n = len(net.clients)
    return net.add_client(
        SRSClient(
            [SRS],
            now=net.now,
            session_id=200 + n,
            client_addr="10.0.0.2",
            client_port=15000 + n,
            interest_mode=mode,
            app_type=APP_TYPE_TNWGD,
            local_domain_id=2,
            context_instance=instance,
            reconnect_min=100,
            reconnect_max=100,
        )
    )


def heard(net: Net, ci: int) -> list[tuple[str, str, int, bytes]]:
    """What a forward-interest client was told: (record kind, symbol, domain, instance)."""
    out = []
    for ev in net.events[ci]:
        if isinstance(ev, InterestReported):
            r = ev.record
            symbol = (
                r.pattern if isinstance(r, (WildcardReceiverInfo, WildcardReceiverEnd)) else r.topic
            )
            out.append((type(r).__name__, symbol, r.domain_id, bytes(r.context_instance)))
    return out


def test_remote_interest_records_keep_their_domain_through_the_srs() -> None:
    net = Net()
    net.add_server(SRS, SRSServer(ServerConfig(interest_state_lifetime=3), now=0.0))
    dro1 = dro_context(net, INTEREST_MODE_FILTER_FORWARD_INTEREST)
    dro2 = dro_context(net, INTEREST_MODE_FILTER, DRO2_SRC)
    net.pump()
    # DRO2 holds interest of TRD3's receivers (domain 3): a topic and a pattern
    net.clients[dro2].send_remote_interest([("T", False, 3), ("^P", True, 3)])
    net.pump()
    assert heard(net, dro1) == [
        ("ReceiverInfo", "T", 3, DRO2_SRC),
        ("WildcardReceiverInfo", "^P", 3, DRO2_SRC),
    ]
    # the same set again sends nothing
    net.clients[dro2].send_remote_interest([("^P", True, 3), ("T", False, 3)])
    net.pump()
    assert len(heard(net, dro1)) == 2

    # a DRO connecting later gets the interest so far from the SRS: same domain and instance
    late = dro_context(net, INTEREST_MODE_FILTER_FORWARD_INTEREST)
    net.pump()
    assert sorted(heard(net, late)) == [
        ("ReceiverInfo", "T", 3, DRO2_SRC),
        ("WildcardReceiverInfo", "^P", 3, DRO2_SRC),
    ]

    # T now wanted for domain 4 only, the pattern no more: end for 3, info for 4, pattern end
    del net.events[dro1][:]
    net.clients[dro2].send_remote_interest([("T", False, 4)])
    net.pump()
    told = heard(net, dro1)
    assert sorted(told) == [
        ("ReceiverEnd", "T", 3, DRO2_SRC),
        ("ReceiverInfo", "T", 4, DRO2_SRC),
        ("WildcardReceiverEnd", "^P", 3, DRO2_SRC),
    ]
    assert told.index(("ReceiverEnd", "T", 3, DRO2_SRC)) < told.index(
        ("ReceiverInfo", "T", 4, DRO2_SRC)
    )

    # DRO2's context lost for good: the SRS's expiry end names the record's domain, not 2
    del net.events[dro1][:]
    net.cut(dro2, 0)
    net.advance(net.now + 3.5)
    assert heard(net, dro1) == [("ReceiverEnd", "T", 4, DRO2_SRC)]


def test_remote_interest_is_sent_again_on_reconnect() -> None:
    net = Net()
    server = net.add_server(SRS, SRSServer(ServerConfig(), now=0.0))
    dro1 = dro_context(net, INTEREST_MODE_FILTER_FORWARD_INTEREST)
    dro2 = dro_context(net, INTEREST_MODE_FILTER, DRO2_SRC)
    net.pump()
    net.clients[dro2].send_remote_interest([("T", False, 3)])
    net.pump()
    # the SRS restarts and loses everything; DRO2's context re-sends its remote interest
    net.kill_server(SRS)
    net.add_server(SRS, SRSServer(ServerConfig(), now=net.now))
    del net.events[dro1][:]
    net.advance(net.now + 101.0)
    assert server is not net.servers[SRS]
    assert ("ReceiverInfo", "T", 3, DRO2_SRC) in heard(net, dro1)


def test_receiver_info_defaults_keep_the_registration_domain() -> None:
    """An application's RIR (no remote interest) still names the context's own domain."""
    net = Net()
    net.add_server(SRS, SRSServer(ServerConfig(), now=0.0))
    dro1 = dro_context(net, INTEREST_MODE_FILTER_FORWARD_INTEREST)
    app = dro_context(net, INTEREST_MODE_FILTER, b"app-ctx1")
    net.pump()
    net.clients[app].send_receiver("U")
    net.pump()
    assert heard(net, dro1) == [("ReceiverInfo", "U", 2, b"app-ctx1")]
    assert ReceiverInfo("U").domain_id == 0 and ReceiverEnd("U").domain_id == 0
