"""Route discovery: the graph of DROs and TRDs, portal costs, shortest paths and failover.

Theory of operation
-------------------
UM's DROs keep a topology map whose nodes are DROs and TRDs (domains) and whose links are
portals, each with a ``<cost>`` (positive, default 1).  A path's cost is the sum of the costs of
the portals it passes through; only the lowest-cost path carries data, others are standby;
equal-cost ties are broken by node id, identically on every DRO (notes A6).  This module holds
that map for one DRO (:class:`Router`):

* its own portals: an endpoint links this DRO to its domain (``<domain-id>``), a peer portal to
  the DRO at the other end once that DRO's id is known;
* what other DROs advertise (:class:`~umcore.dro.inferred.RouteInfo` [inferred]: node id, name,
  version, hop count and their adjacent domains and DROs with costs -- the content UM's
  monitoring shows on its "Topology Info" page); a DRO not heard for ``route-info timeout`` (4000 ms) is out of service, and a
  record that has travelled more than ``max-hop-count`` (100) DROs is discarded.  How route
  information travels between DROs is not public: see :mod:`umcore.dro.inferred`;
* the remote domain route records (LBMR ext 0x06) heard in an endpoint's TRD, which say which
  domains are reachable through another DRO's portal there.  They carry no costs, so they only
  add domains the route information does not know (at :data:`DOMAIN_ROUTE_HOP_COST` a hop); this
  is what lets endpoint-only DROs chained through transit TRDs find each other.

A DRO-to-DRO link counts only when both DROs list it; its cost is the sum of both peer portals'
costs.  Changes do not take effect at once (except one of our own links coming up while
nothing else is pending): the recalculation waits ``route-recalculation
backoff-interval`` (5000 ms) after the last change (:data:`RECALC_TRANSITIONS`), and warns
(:class:`~umcore.dro.events.RecalcHeldUp`) once per ``warning-interval`` (10000 ms) while changes
keep coming.  The first calculation, at construction, is immediate.

A recalculation runs Dijkstra once per known domain R, giving the shortest-path tree towards R:
``parent(R, node)`` is the next node from ``node`` towards R.  Candidates are ordered by (cost,
DRO hops, next node's id), so ties fall the same way on every DRO.  The core asks:
:meth:`Router.toward` (our portal towards R), :meth:`Router.forwards` (are we the designated
forwarder from the side behind one portal to R behind another: interest and data follow the
tree only, so parallel paths never both carry a stream), :meth:`Router.on_path` (does the tree
path from a source's domain S to R go through us between two given portals) and
:meth:`Router.served_domains` (the domains whose traffic from a portal's TRD we carry: our
domain route record there).
"""

from __future__ import annotations

import heapq
from enum import Enum

from umcore.config.dro import RouteInfo as RouteInfoConfig
from umcore.config.dro import RouteRecalculation
from umcore.dro.events import RecalcDone, RecalcHeldUp
from umcore.dro.inferred import RELAY_SUPPRESSION, Adjacency, NodeKey, RouteInfo
from umcore.events import CoreEvent

__all__ = [
    "DOMAIN_ROUTE_HOP_COST",
    "RECALC_TRANSITIONS",
    "Adjacency",
    "NodeKey",
    "RecalcEvent",
    "RecalcState",
    "RouteInfo",
    "Router",
    "domain_node",
    "dro_node",
]

_DOMAIN, _DRO, _ROUTE_ONLY = 0, 1, 2

# The cost of each hop learned only from a domain route record (LBMR ext 0x06 carries no cost):
# the default portal cost, so such a path counts like one through default-cost portals.
DOMAIN_ROUTE_HOP_COST = 1


def domain_node(domain_id: int) -> NodeKey:
    return (_DOMAIN, domain_id)


def dro_node(node_id: int) -> NodeKey:
    return (_DRO, node_id)


class RecalcState(Enum):
    STABLE = "stable"
    PENDING = "pending"  # a change waits for the backoff interval


class RecalcEvent(Enum):
    CHANGE = "change"
    BACKOFF_ELAPSED = "backoff-elapsed"


# The one transition table of the recalculation damping.
RECALC_TRANSITIONS: dict[tuple[RecalcState, RecalcEvent], RecalcState] = {
    (RecalcState.STABLE, RecalcEvent.CHANGE): RecalcState.PENDING,
    (RecalcState.PENDING, RecalcEvent.CHANGE): RecalcState.PENDING,
    (RecalcState.PENDING, RecalcEvent.BACKOFF_ELAPSED): RecalcState.STABLE,
}


class _Heard:
    __slots__ = ("info", "last")

    def __init__(self, info: RouteInfo, last: float) -> None:
        self.info = info
        self.last = last


class Router:
    """The topology map and shortest-path trees of one DRO; see the module docstring."""

    def __init__(
        self,
        node_id: int,
        name: str,
        route_info: RouteInfoConfig,
        recalculation: RouteRecalculation,
        now: float = 0.0,
    ) -> None:
        self.node_id = node_id
        self.me: NodeKey = dro_node(node_id)
        self.name = name
        self.timeout = route_info.timeout / 1000
        self.check_interval = route_info.check_interval / 1000
        self.propagation_interval = route_info.propagation_interval / 1000
        self.max_hop_count = route_info.max_hop_count
        self.backoff = recalculation.backoff_interval / 1000
        self.warning = recalculation.warning_interval / 1000
        self.own: dict[str, Adjacency] = {}  # portal -> its link (only while it is up)
        self.version = 0  # our own version: changes with our links
        self.heard: dict[int, _Heard] = {}
        # (portal's domain, ip << 16 | port) -> (domains, last heard)
        self.domain_routes: dict[tuple[int, int], tuple[tuple[int, ...], float]] = {}
        self.state = RecalcState.STABLE
        self.changed_at = now
        self.pending_since = now
        self.warned_at = now
        self.next_check = now + self.check_interval
        self.recalcs = 0
        self.relayed_at: dict[int, float] = {}
        self.routes_discarded = 0
        self.parents: dict[int, dict[NodeKey, NodeKey]] = {}
        self.dist: dict[int, dict[NodeKey, tuple[int, int]]] = {}
        self.node_portal: dict[NodeKey, str] = {}
        self._events: list[CoreEvent] = []
        self._recalculate()

    # --- inputs ------------------------------------------------------------------------------

    def set_portal(self, portal: str, link: Adjacency | None, now: float) -> None:
        """Our portal ``portal`` is up with ``link`` (or down: ``None``)."""
        before = self.own.get(portal)
        if before == link:
            return
        if link is None:
            del self.own[portal]
        else:
            self.own[portal] = link
        self.version += 1
        if before is None and self.state is RecalcState.STABLE:
            # one of our own links came up: it cannot make a route worse, and a DRO starting
            # must route between its own portals without waiting for the backoff
            self._recalculate()
        else:
            self._change(now)

    def receive_route_info(self, info: RouteInfo, now: float) -> bool:
        """Another DRO's route information; False if discarded (ours, or too many hops)."""
        if info.node_id == self.node_id:
            return False
        if info.hop_count > self.max_hop_count:
            self.routes_discarded += 1
            return False
        heard = self.heard.get(info.node_id)
        if heard is None or heard.info.version != info.version or heard.info != info:
            changed = heard is None or heard.info.adjacencies != info.adjacencies
            self.heard[info.node_id] = _Heard(info, now)
            if changed:
                self._change(now)
        else:
            heard.last = now
        return True

    def relay_due(self, node_id: int, now: float) -> bool:
        """Pass ``node_id``'s route information on?  At most once per half propagation
        interval per DRO, so a copy coming round a loop is not relayed again [inferred]."""
        last = self.relayed_at.get(node_id)
        if last is not None and now - last < self.propagation_interval * RELAY_SUPPRESSION:
            return False
        self.relayed_at[node_id] = now
        return True

    def receive_domain_route(
        self, portal_domain: int, ip: int, port: int, domains: tuple[int, ...], now: float
    ) -> None:
        """A remote domain route record heard in the TRD ``portal_domain``."""
        key = (portal_domain, ip << 16 | port)
        before = self.domain_routes.get(key)
        doms = tuple(sorted(set(domains) - {portal_domain}))
        self.domain_routes[key] = (doms, now)
        if before is None or before[0] != doms:
            self._change(now)

    def own_route_info(self) -> RouteInfo:
        """What we advertise (hop count 0): our links while their portals are up."""
        adj = tuple(sorted(self.own.values(), key=lambda a: (a.node, a.cost)))
        return RouteInfo(self.node_id, self.name, self.version, 0, adj)

    # --- time --------------------------------------------------------------------------------

    def _change(self, now: float) -> None:
        if self.state is RecalcState.STABLE:
            self.pending_since = now
            self.warned_at = now
        self.state = RECALC_TRANSITIONS[(self.state, RecalcEvent.CHANGE)]
        self.changed_at = now

    def next_timer(self) -> float:
        t = self.next_check
        if self.state is RecalcState.PENDING:
            t = min(t, self.changed_at + self.backoff, self.warned_at + self.warning)
        return t

    def handle_timer(self, now: float) -> bool:
        """Expire silent DROs and domain routes, recalculate when due; True if routes changed."""
        if now >= self.next_check:
            self.next_check = now + self.check_interval
            stale = [n for n, h in self.heard.items() if now - h.last > self.timeout]
            for n in stale:
                del self.heard[n]
            old = [k for k, (_, t) in self.domain_routes.items() if now - t > self.timeout]
            for k in old:
                del self.domain_routes[k]
            if stale or old:
                self._change(now)
        if self.state is not RecalcState.PENDING:
            return False
        if now >= self.changed_at + self.backoff:
            self.state = RECALC_TRANSITIONS[(self.state, RecalcEvent.BACKOFF_ELAPSED)]
            self._recalculate()
            return True
        if now >= self.warned_at + self.warning:
            self.warned_at = now
            self._events.append(RecalcHeldUp(now - self.pending_since))
        return False

    def take_events(self) -> list[CoreEvent]:
        out, self._events = self._events, []
        return out

    # --- the calculation ----------------------------------------------------------------------

    def _graph(self) -> dict[NodeKey, dict[NodeKey, int]]:
        graph: dict[NodeKey, dict[NodeKey, int]] = {}

        def link(a: NodeKey, b: NodeKey, cost: int) -> None:
            old = graph.setdefault(a, {}).get(b)
            if old is None or cost < old:
                graph[a][b] = cost
                graph.setdefault(b, {})[a] = cost

        tables: dict[NodeKey, tuple[Adjacency, ...]] = {
            dro_node(n): h.info.adjacencies for n, h in self.heard.items()
        }
        tables[self.me] = tuple(self.own.values())
        peer_costs: dict[tuple[NodeKey, NodeKey], int] = {}
        graph.setdefault(self.me, {})
        for node, adjs in tables.items():
            for adj in adjs:
                if adj.node[0] == _DOMAIN:
                    link(node, adj.node, adj.cost)
                else:
                    peer_costs[(node, adj.node)] = adj.cost
        for (a, b), cost in peer_costs.items():
            back = peer_costs.get((b, a))
            if back is not None and a < b:  # a DRO link counts when both ends list it
                link(a, b, cost + back)
        known = {n for n in graph if n[0] == _DOMAIN}
        for (dom, addr), (doms, _) in self.domain_routes.items():
            via = (_ROUTE_ONLY, addr)
            extra = [d for d in doms if domain_node(d) not in known]
            if extra and domain_node(dom) in graph:
                link(domain_node(dom), via, DOMAIN_ROUTE_HOP_COST)
                for d in extra:
                    link(via, domain_node(d), DOMAIN_ROUTE_HOP_COST)
        return graph

    def _recalculate(self) -> None:
        graph = self._graph()
        self.parents.clear()
        self.dist.clear()
        for root in sorted(n for n in graph if n[0] == _DOMAIN):
            parents: dict[NodeKey, NodeKey] = {}
            dist: dict[NodeKey, tuple[int, int]] = {}
            heap: list[tuple[int, int, NodeKey, NodeKey]] = [(0, 0, root, root)]
            while heap:
                cost, hops, parent, node = heapq.heappop(heap)
                if node in dist:
                    continue
                dist[node] = (cost, hops)
                parents[node] = parent
                for nxt, w in graph.get(node, {}).items():
                    if nxt in dist:
                        continue
                    h = hops + (nxt[0] != _DOMAIN)
                    if h > self.max_hop_count:
                        continue
                    heapq.heappush(heap, (cost + w, h, node, nxt))
            self.parents[root[1]] = parents
            self.dist[root[1]] = dist
        self.node_portal = {adj.node: portal for portal, adj in self.own.items()}
        self.recalcs += 1
        doms = sum(1 for n in graph if n[0] == _DOMAIN)
        dros = sum(1 for n in graph if n[0] != _DOMAIN)
        self._events.append(RecalcDone(self.recalcs, doms, dros))

    # --- queries ------------------------------------------------------------------------------

    def known(self, domain: int) -> bool:
        return domain in self.parents

    def domains(self) -> list[int]:
        return sorted(self.parents)

    def parent(self, domain: int, node: NodeKey) -> NodeKey | None:
        tree = self.parents.get(domain)
        return None if tree is None else tree.get(node)

    def toward(self, domain: int) -> str | None:
        """Our portal on the shortest path to ``domain`` (None: unreachable, or ours is not)."""
        nxt = self.parent(domain, self.me)
        return None if nxt is None else self.node_portal.get(nxt)

    def next_hop(self, portal_domain: int, domain: int) -> tuple[int, int] | None:
        """The (IPv4 as int, port) of another DRO's portal in TRD ``portal_domain`` whose remote
        domain route record lists ``domain`` (where a UIM for ``domain`` goes next from there:
        that portal's request port); the lowest address when several do, None when none."""
        best: int | None = None
        for (dom, addr), (doms, _) in self.domain_routes.items():
            if dom == portal_domain and domain in doms and (best is None or addr < best):
                best = addr
        return None if best is None else (best >> 16, best & 0xFFFF)

    def cost_to(self, domain: int) -> tuple[int, int] | None:
        """(cost, DRO hops) of our shortest path to ``domain``."""
        tree = self.dist.get(domain)
        return None if tree is None else tree.get(self.me)

    def forwards(self, domain: int, toward_portal: str, from_portal: str) -> bool:
        """Are we the forwarder, on the tree towards ``domain``, for what comes from the side of
        ``from_portal`` and leaves by ``toward_portal``?"""
        toward = self.own.get(toward_portal)
        frm = self.own.get(from_portal)
        if toward is None or frm is None:
            return False
        return (
            self.parent(domain, self.me) == toward.node and self.parent(domain, frm.node) == self.me
        )

    def on_path(self, source_domain: int, domain: int, from_portal: str) -> bool | None:
        """Does the tree path from ``source_domain`` to ``domain`` enter us by ``from_portal``?
        None when the source's domain is not on the map (the caller decides)."""
        tree = self.parents.get(domain)
        frm = self.own.get(from_portal)
        if tree is None or frm is None:
            return False
        node = domain_node(source_domain)
        if node not in tree:
            return None
        for _ in range(len(tree) + 1):
            nxt = tree[node]
            if nxt == node:  # reached the root
                return False
            if node == frm.node and nxt == self.me:
                return True
            node = nxt
        return False

    def served_domains(self, portal: str) -> list[int]:
        """Domains that the TRD behind endpoint ``portal`` reaches through us."""
        adj = self.own.get(portal)
        if adj is None or adj.node[0] != _DOMAIN:
            return []
        return [
            d
            for d, tree in sorted(self.parents.items())
            if d != adj.node[1] and tree.get(adj.node) == self.me
        ]
