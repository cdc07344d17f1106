"""Where a UIM goes (sans-IO, explicit time): straight, or to the DRO route of its domain with
a DESTINATION header; routes age out; a domain without a route is refused once routes exist."""

from __future__ import annotations

import pytest

from umcore.engine.dro import parse_uim_destination, uim_route, uim_source
from umcore.errors import UMError
from umcore.resolver.dro import ROUTE_LIFETIME, DomainTable
from umcore.wire import lbmc, lbmr

OWN = ("10.0.0.1", 14391)
DRO_OPTS = (lbmr.SrcTypeOption(lbmr.SRC_TYPE_TNWGD), lbmr.LocalDomainOption(1))


def test_without_a_dro_the_domain_is_ignored() -> None:
    t = DomainTable()
    assert uim_route(t, "TCP:10.0.0.2:14392", OWN, 0.0) == (("10.0.0.2", 14392), [])
    assert uim_route(t, "TCP:5:10.0.0.2:14392", OWN, 0.0) == (("10.0.0.2", 14392), [])


def test_routes_decide() -> None:
    t = DomainTable()
    t.receive_packet(DRO_OPTS, 0.0)
    t.receive_route("10.0.0.9", 14500, [2], 0.0)
    addr, hdrs = uim_route(t, "TCP:2:10.0.0.2:14392", OWN, 1.0)
    assert addr == ("10.0.0.9", 14500)
    (d,) = hdrs
    assert isinstance(d, lbmc.Destination)
    assert (d.domain_id, lbmc.ip4_to_str(d.ipaddr), d.port, d.hops_taken) == (
        2,
        "10.0.0.2",
        14392,
        0,
    )
    assert (d.orig_domain_id, lbmc.ip4_to_str(d.orig_ipaddr), d.orig_port) == (1, *OWN)
    # our own domain, or none given: straight there
    assert uim_route(t, "TCP:1:10.0.0.2:14392", OWN, 1.0) == (("10.0.0.2", 14392), [])
    assert uim_route(t, "TCP:10.0.0.2:14392", OWN, 1.0) == (("10.0.0.2", 14392), [])
    with pytest.raises(UMError, match="no route to domain 3"):
        uim_route(t, "TCP:3:10.0.0.2:14392", OWN, 1.0)
    # the route not repeated: gone, and with it every DRO we knew of
    assert uim_route(t, "TCP:2:10.0.0.2:14392", OWN, ROUTE_LIFETIME + 1)[1] == []
    # the UIM's source string at the far end names us with our domain
    msg = lbmc.LBMCMessage(lbmc.MSG_DATA, 0, 0, hdrs, b"x")
    assert uim_source(msg, "10.0.0.9") == "TCP:1:10.0.0.1:14391"
    assert uim_source(lbmc.LBMCMessage(lbmc.MSG_DATA, 0, 0, [], b"x"), "10.0.0.9") == "TCP:10.0.0.9"


@pytest.mark.parametrize(
    "bad", ["UDP:1.2.3.4:5", "TCP:1.2.3.4", "TCP:x:1.2.3.4:5", "TCP:1.2.3.4:0"]
)
def test_bad_destinations(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_uim_destination(bad)
