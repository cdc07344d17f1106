"""Issue 19: an endpoint portal in a TRD resolved by hot/hot SRSes and the route records (RTIR /
RTER) of another DRO they relay.  Each SRS relays the record; one SRS's RTER (that DRO lost
that SRS) does not end a route another SRS still holds; the last one does.  The runtime is
built, not started (no contexts, no sockets): the portal's input and the core's timers only,
on a clock of the test's own (from the runtime's start time, the core's first timers)."""

from __future__ import annotations

from daemons.tnwgd.app import DroRuntime
from daemons.tnwgd.portal import EndpointPortal
from tests.dro_proc.kit import Trd, dro_xml
from umcore.config import dro as dro_config
from umcore.srs.client import DroRecord
from umcore.wire import srs_messages as srsm

DRO2 = ("10.0.0.9", 5000)


def _run(rt: DroRuntime, start: float, until: float) -> float:
    now = start
    while (nxt := rt.core.next_timer()) is not None and nxt <= until:
        now = max(now, nxt)
        rt.core.handle_timer(now)
    return max(now, until)


async def test_a_route_ends_when_every_srs_that_relayed_it_ended_it() -> None:
    t1, t2 = Trd(), Trd(srs=("127.0.0.1", 1))
    xml = dro_xml([("TRD1", 1, t1), ("TRD2", 2, t2)], name="dro1")
    rt = DroRuntime(dro_config.load_text(xml, "test-dro.xml"))
    core, portal = rt.core, rt.portals["TRD2"]
    assert isinstance(portal, EndpointPortal)
    t0 = rt.started_at
    core.receive_portal_up("TRD1", t0, address=("10.0.0.1", 1))
    core.receive_portal_up("TRD2", t0, address=("10.0.0.2", 1))
    rtir = srsm.RouteInfo((3,), *DRO2)
    rter = srsm.RouteEnd((3,), *DRO2)
    for slot in (0, 1):  # both SRSes relay DRO2's record
        assert portal.receive_srs_route_record(DroRecord(rtir, slot), t0)
    assert not portal.receive_srs_route_record(DroRecord(srsm.DomainInfo(2), 0), t0)
    now = _run(rt, t0, t0 + 6.0)
    assert core.router.domains() == [1, 2, 3]
    # SRS 0 ends it (DRO2 lost SRS 0): SRS 1 still has it, the route holds past the timeout
    assert not portal.receive_srs_route_record(DroRecord(rter, 0), now)
    now = _run(rt, now, now + 20.0)
    assert core.router.domains() == [1, 2, 3]
    # an end of a record nobody relayed: nothing
    other = srsm.RouteEnd((3, 4), *DRO2)
    assert not portal.receive_srs_route_record(DroRecord(other, 1), now)
    # SRS 1 ends it too: the route ages out
    assert portal.receive_srs_route_record(DroRecord(rter, 1), now)
    now = _run(rt, now, now + 11.0)
    assert core.router.domains() == [1, 2]
    assert portal.srs_route_records == 5  # RTIRs and RTERs (DIRs are not routes)
    await rt.close()
