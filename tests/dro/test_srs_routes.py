"""Issue 19: routes through a transit TRD resolved by the SRS.

DRO1 has E1 in TRD1 (domain 1) and E2 in TRD2 (domain 2), where the SRS resolves topics and no
remote domain route record (LBMR ext 0x06) can travel.  DRO2's portal in TRD2 holds an RTIR at
the SRS naming domain 3 (TRD3 behind it); the SRS relays it once, and DRO1's core must hold it
as that DRO's domain route: domain 3 on its map (through TRD2, with the cost and hops a UDP
record gives), advertised into TRD1, kept past the route timeout, and gone after its RTER.
"""

from __future__ import annotations

import ipaddress

from tests.dro.kit import config
from umcore.dro import DroCore
from umcore.dro.core import MAX_SRS_ROUTES_PER_PORTAL
from umcore.wire import lbmr

DRO2_IN_TRD2 = ("10.0.0.9", 5000)


def _core() -> DroCore:
    core = DroCore(config([("E1", 1, 1), ("E2", 2, 1)]), 1)
    core.receive_portal_up("E1", 0.0, address=("10.0.0.1", 1))
    core.receive_portal_up("E2", 0.0, address=("10.0.0.2", 1))
    return core


def _run(core: DroCore, start: float, until: float) -> float:
    now = start
    while (nxt := core.next_timer()) is not None and nxt <= until:
        now = max(now, nxt)
        core.handle_timer(now)
    return max(now, until)


def _routes_into(core: DroCore, portal: str) -> list[tuple[str, int, tuple[int, ...]]]:
    return [
        (p.body.ip, p.body.port, tuple(p.body.domains))
        for name, p in core.take_lbmr()
        if name == portal and isinstance(p.body, lbmr.RemoteDomainRoute)
    ]


def test_an_srs_route_record_is_held_as_a_domain_route() -> None:
    core = _core()
    core.receive_srs_route("E2", *DRO2_IN_TRD2, (3,), 0.0)
    now = _run(core, 0.0, 6.0)  # the recalculation backoff (5 s) after the change
    router = core.router
    assert router.domains() == [1, 2, 3]
    assert router.toward(3) == "E2"
    # E2's cost, then one DOMAIN_ROUTE_HOP_COST to DRO2 and one to TRD3: as a UDP record gives
    assert router.cost_to(3) == (3, 2)
    ip, port = DRO2_IN_TRD2
    assert router.next_hop(2, 3) == (int(ipaddress.IPv4Address(ip)), port)  # where UIMs go
    core.take_lbmr()
    now = _run(core, now, now + 1.5)  # the domain route record's max interval is 1 s
    assert ("10.0.0.1", 1, (2, 3)) in _routes_into(core, "E1")
    # the SRS relays the RTIR once: held, it outlives the route timeout (4 s) many times over
    now = _run(core, now, now + 100.0)
    assert router.domains() == [1, 2, 3] and router.cost_to(3) == (3, 2)
    # an RTER of an older record of that address (other domains) ends nothing
    core.receive_srs_route("E2", ip, port, (3, 4), now, present=False)
    now = _run(core, now, now + 20.0)
    assert router.domains() == [1, 2, 3]
    # its own RTER: the route ages out like a record no longer heard, and leaves TRD1's record
    core.receive_srs_route("E2", ip, port, (3,), now, present=False)
    now = _run(core, now, now + 11.0)  # timeout 4 s, then the backoff
    assert router.domains() == [1, 2]
    assert router.next_hop(2, 3) is None
    core.take_lbmr()
    _run(core, now, now + 1.5)
    assert ("10.0.0.1", 1, (2,)) in _routes_into(core, "E1")


def test_a_newer_record_replaces_the_older_and_the_older_end_is_ignored() -> None:
    """A DRO whose domains changed holds a new RTIR (the SRS has no RTIR withdrawal: the old
    one stays until it expires there, its RTER comes later)."""
    core = _core()
    ip, port = DRO2_IN_TRD2
    core.receive_srs_route("E2", ip, port, (3,), 0.0)
    core.receive_srs_route("E2", ip, port, (3, 4), 0.0)
    now = _run(core, 0.0, 6.0)
    assert core.router.domains() == [1, 2, 3, 4]
    core.receive_srs_route("E2", ip, port, (3,), now, present=False)  # the old one expired
    now = _run(core, now, now + 20.0)
    assert core.router.domains() == [1, 2, 3, 4]
    core.receive_srs_route("E2", ip, port, (3,), now)  # and the domains shrink again
    now = _run(core, now, now + 11.0)
    assert core.router.domains() == [1, 2, 3]


def test_own_record_portal_down_and_the_bound() -> None:
    core = _core()
    core.receive_srs_route("E2", "10.0.0.2", 1, (5,), 0.0)  # our own RTIR back: not a route
    core.receive_srs_route("E2", *DRO2_IN_TRD2, (3,), 0.0)
    now = _run(core, 0.0, 6.0)
    assert core.router.domains() == [1, 2, 3]
    # the portal's contexts go: what its SRS told is forgotten (relayed again on return)
    core.receive_portal_down("E2", now)
    core.receive_portal_up("E2", now, address=("10.0.0.2", 1))
    now = _run(core, now, now + 11.0)
    assert core.router.domains() == [1, 2]
    # more DRO portals in one TRD than the bound: the rest refused and counted
    n = MAX_SRS_ROUTES_PER_PORTAL + 3
    for i in range(n):
        core.receive_srs_route("E2", "10.1.0.1", 1000 + i, (100 + i,), now)
    assert core.stats("E2").srs_routes_refused == 3
    core.receive_srs_route("E2", "10.1.0.1", 1000, (100, 7), now)  # a held address: replaced
    assert core.stats("E2").srs_routes_refused == 3
