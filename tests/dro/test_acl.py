"""ACL tables: first match wins, implicit reject, inbound transport conditions, outbound quirks."""

from __future__ import annotations

import pytest

from tests.dro.kit import config
from umcore.config.dro import Ace, AceCondition, Acl
from umcore.dro.acl import SourceTransport, compile_acl
from umcore.errors import ConfigError

TCP = SourceTransport("tcp", source_ip="10.1.2.3", tcp_source_port=14371)
RM = SourceTransport(
    "lbtrm",
    source_ip="10.1.2.4",
    multicast_group="239.1.1.1",
    udp_source_port=14390,
    udp_destination_port=14400,
)


def ace(match: str, *conds: tuple[str, str] | tuple[str, str, str]) -> Ace:
    return Ace(match, [AceCondition(*c) for c in conds])


def test_no_acl_accepts_everything() -> None:
    acl = compile_acl(None)
    assert acl.inbound_accepts("X", TCP) and acl.outbound_accepts("X")


def test_first_match_wins_and_the_default_is_reject() -> None:
    acl = compile_acl(
        Acl(
            inbound=[
                ace("reject", ("topic", "ORD.SECRET")),
                ace("accept", ("pcre-pattern", r"^ORD\.")),
                ace("reject", ("pcre-pattern", ".*")),
            ]
        )
    )
    assert acl.inbound_accepts("ORD.NYSE", TCP)
    assert not acl.inbound_accepts("ORD.SECRET", TCP)
    assert not acl.inbound_accepts("MD.X", TCP)
    only_abc = compile_acl(Acl(inbound=[ace("accept", ("topic", "ABC"))]))
    assert only_abc.inbound_accepts("ABC", TCP)
    assert not only_abc.inbound_accepts("DEF", TCP)  # implicit reject-all
    assert not only_abc.inbound_accepts("ABCD", TCP)  # <topic> is exact, not a pattern
    assert only_abc.outbound_accepts("DEF")  # no outbound list: everything goes out


def test_conditions_of_one_ace_are_anded() -> None:
    acl = compile_acl(Acl(inbound=[ace("accept", ("topic", "A"), ("transport", "lbt-rm", "eq"))]))
    assert acl.inbound_accepts("A", RM)
    assert not acl.inbound_accepts("A", TCP)
    assert not acl.inbound_accepts("B", RM)


@pytest.mark.parametrize(
    ("cond", "transport", "expected"),
    [
        (("transport", "tcp", "eq"), TCP, True),
        (("transport", "tcp", "ne"), RM, True),
        (("transport", "lbtrm", "notequal"), RM, False),
        (("source-ip", "10.1.2.0", "gt"), TCP, True),
        (("source-ip", "10.1.2.3", "lt"), TCP, False),
        (("multicast-group", "239.1.1.1", "eq"), RM, True),
        (("multicast-group", "239.1.1.1", "eq"), TCP, False),  # not applicable: no effect
        (("udp-destination-port", "14400", "ge"), RM, True),
        (("udp-source-port", "14390", "lessthanequal"), RM, True),
        (("tcp-source-port", "14371", "equal"), TCP, True),
        (("tcp-source-port", "14371", "equal"), RM, False),
        (("xport-id", "3", "eq"), SourceTransport("lbtipc", xport_id=3), True),
    ],
)
def test_transport_conditions_inbound(
    cond: tuple[str, str, str], transport: SourceTransport, expected: bool
) -> None:
    acl = compile_acl(Acl(inbound=[ace("accept", cond)]))
    assert acl.inbound_accepts("T", transport) is expected


def test_transport_condition_on_an_outbound_list_has_no_effect() -> None:
    acl = compile_acl(
        Acl(
            outbound=[
                ace("reject", ("transport", "lbtrm", "eq")),  # ignored: no effect
                ace("accept", ("pcre-pattern", ".*")),
            ]
        )
    )
    assert acl.outbound_accepts("ANY")
    only = compile_acl(Acl(outbound=[ace("accept", ("transport", "tcp", "eq"))]))
    assert not only.outbound_accepts("ANY")  # the only ACE is ignored: implicit reject


def test_may_accept_before_the_transport_is_known() -> None:
    acl = compile_acl(
        Acl(
            inbound=[
                ace("reject", ("topic", "A"), ("transport", "tcp", "eq")),
                ace("accept", ("topic", "A"), ("transport", "lbtrm", "eq")),
            ]
        )
    )
    assert acl.inbound_may_accept("A")  # an RM source of A would pass
    assert not acl.inbound_may_accept("B")
    assert not acl.inbound_accepts("A", TCP)
    assert acl.inbound_accepts("A", RM)


@pytest.mark.parametrize(
    "bad",
    [
        ace("accept", ("pcre-pattern", "(")),
        ace("accept", ("transport", "smoke-signal", "eq")),
        ace("accept", ("transport", "tcp", "lt")),
        ace("accept", ("source-ip", "10.0.0.300", "eq")),
        ace("accept", ("udp-source-port", "x", "eq")),
        ace("accept", ("tcp-source-port", "1", "about")),
        ace("maybe", ("topic", "A")),
    ],
)
def test_bad_aces_are_refused_with_the_line(bad: Ace) -> None:
    bad.line = 42
    with pytest.raises(ConfigError) as err:
        compile_acl(Acl(inbound=[bad]), "dro.xml")
    assert "dro.xml:42" in str(err.value)


def test_acl_from_the_xml_loader() -> None:
    cfg = config(
        [("E1", 1, 1), ("E2", 2, 1)],
        portal_extra={
            "E1": '<acl><inbound><ace match="accept"><topic>ABC</topic></ace></inbound></acl>'
        },
    )
    acl = compile_acl(cfg.portal("E1").acl)
    assert acl.inbound_accepts("ABC", TCP) and not acl.inbound_accepts("DEF", TCP)
