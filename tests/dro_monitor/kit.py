"""A fake tnwgd runtime for the monitoring tests: a real DroCore fed with a few records.

Theory of operation
-------------------
:func:`runtime` builds what :class:`daemons.tnwgd.monitor.DroRuntime` describes -- ``core``,
``config``, ``portals`` (name, index, domain id, kind, contexts) and ``started_at`` -- around a
real :class:`~umcore.dro.DroCore` of three portals: endpoints ``TRD1`` (domain 1) and ``TRD2``
(domain 2) and a peer ``PEER`` linked to another DRO (node 77, name ``far``, with domain 3
behind it).  :func:`feed` drives the core as portal adapters would: receivers of topic
``orders`` and pattern ``^md\\.`` in TRD2, a receiver of ``fx`` in domain 3 (interest heard over
the peer link), a source of ``orders`` in TRD1 and frames from it, some of them duplicates, and
more than TRD2's small ``<max-queue>`` holds, so every counter the monitor reads moves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.dro.kit import config, otid
from umcore.config.dro import DROConfig
from umcore.dro import Adjacency, DroCore, InterestKey, RouteInfo, SourceAdvert, SourceKey
from umcore.dro.routing import domain_node, dro_node

NODE_ID = 0x1234_5678_9ABC
FAR_ID = 77
MAX_QUEUE = 2000  # TRD2's <max-queue>: four 500-byte frames
FRAME = 500
SOURCE = SourceKey(otid(5), "orders")


@dataclass
class FakePortal:
    name: str
    index: int
    domain_id: int | None
    kind: str
    ctxs: list[Any] = field(default_factory=list)

    def contexts(self) -> Sequence[Any]:
        return list(self.ctxs)


@dataclass
class FakeRuntime:
    core: DroCore
    config: DROConfig
    portals: dict[str, FakePortal]
    started_at: float = 0.0


def dro_config(name: str = "dro-a") -> DROConfig:
    return config(
        [("TRD1", 1, 1), ("TRD2", 2, 3)],
        [("PEER", 2, "acceptor")],
        name=name,
        portal_extra={"TRD2": f"<max-queue>{MAX_QUEUE}</max-queue>"},
    )


def runtime(cfg: DROConfig | None = None, now: float = 0.0) -> FakeRuntime:
    cfg = cfg or dro_config()
    core = DroCore(cfg, NODE_ID, now)
    portals: dict[str, FakePortal] = {}
    for i, p in enumerate(cfg.portals):
        dom = getattr(p, "domain_id", None)
        kind = "endpoint" if dom is not None else "peer"
        portals[p.name] = FakePortal(p.name, i, dom, kind)
    return FakeRuntime(core, cfg, portals, started_at=now)


def feed(rt: FakeRuntime, now: float = 1.0) -> None:
    """Interest, a source, frames (see the module docstring)."""
    core = rt.core
    core.receive_portal_up("TRD1", now, address=("10.0.0.1", 14001))
    core.receive_portal_up("TRD2", now, address=("10.0.0.2", 14002))
    core.receive_portal_up("PEER", now, peer_node_id=FAR_ID)
    far = RouteInfo(
        FAR_ID, "far", 4, 0, (Adjacency(dro_node(NODE_ID), 2), Adjacency(domain_node(3), 1))
    )
    core.receive_route_info("PEER", far, now)
    core.receive_tqr("TRD2", "orders", now)
    core.receive_wildcard_tqr("TRD2", r"^md\.", 1, now)
    core.receive_interest("PEER", InterestKey("fx", 0), 3, now)
    core.receive_source("TRD1", SourceAdvert(SOURCE), now)
    payload = memoryview(bytes(FRAME))
    for sqn in range(6):  # 4 fit in TRD2's queue, 2 are refused
        core.receive_frame("TRD1", SOURCE, sqn, payload)
    core.receive_frame("TRD1", SOURCE, 3, payload)  # a duplicate
    core.receive_frame("TRD1", SourceKey(otid(9), "nobody"), 0, payload)  # unknown source
    core.take_frames("TRD2", 1)  # one frame left for the proxy source
    core.take_commands()
    core.take_lbmr()
    core.take_events()
    core.take_route_info()
