"""The DRO web monitor (``<web-monitor>iface:port</web-monitor>``): UM's tnwgd pages.

Theory of operation
-------------------
UM's DRO serves read-only pages for people (notes A13; UM documents their content, not their
URLs, and deprecates them: no authentication, firewall the port).  This module is their content;
the serving is the daemons' shared runner (:class:`umcore.daemon.web.WebPages`: aiohttp in the
daemon's loop, one sample per page per second whatever the requests, every string escaped, each
page with its JSON twin under ``/json``, a 404 page for anything unknown).  Pages:

- ``/`` -- the main page: links to the configuration, the portals, the topology, path info and
  (where glibc has ``mallinfo2``) the malloc figures, with a one-line summary per portal;
- ``/config`` -- "UM Router Configuration": the XML file the DRO was started with;
- ``/portals`` -- one line per portal (type, domain or peer DRO, cost, up or down);
- ``/portals/NAME`` -- an endpoint portal: name, Domain ID, Portal Cost; Local Interest (topics,
  PCRE and REGEX patterns of its own TRD) and Remote Interest (from beyond); its Proxy
  Receivers; Receiver Topics / PCRE / REGEX patterns (the interest it propagates into its TRD);
  its Proxy Sources; Receive and Send statistics in two columns (messages or fragments |
  bytes), the ``DROMonMsg.Stats.Portal.Endpoint`` fields built by
  :func:`daemons.tnwgd.monitor.stats_pb` (one source of figures for UM's messages, Prometheus
  and these pages), and "Current/maximum data bytes enqueued (limit: N)"; the core's own
  counters (ACL rejections, ...) below them.  A peer portal: name, cost, adjacent DRO,
  Interest, the same lists, its Receive and Send statistics and the enqueued bytes, and a
  "Peer Link" table (state, the DRO at the other end, keepalive RTT, bytes and messages each
  way, drops while down or full, batches, connections, sessions lost; with ``<udp>`` the UDP
  data link's state, the other DRO's UDP port and its LBT-RU datagrams, NAKs and losses);
- ``/topology`` -- "Topology Info": this DRO's name, id, version, topology signature, graph
  version, DRO and TRD counts; per local portal its adjacent domain or DRO and cost; per other
  DRO its name, id, version, signature, "Last Activity N seconds ago" and its adjacent domains
  and DROs with costs;
- ``/path`` -- "Path Info": the shortest path of every pair of known domains (capped), and a form
  asking for Domain ID 1 and Domain ID 2 that opens ``/path/D1/D2``: Hop Count (links between
  DROs and TRDs along the path), Aggregate Cost and the Path, node by node;
- ``/malloc`` -- "GNU malloc info" (arena, ordblks, hblks, hblkhd, uordblks, fordblks).

Lists are capped (:data:`MAX_LIST_SHOWN`) and end with "N more".  The pages are served in the
daemon's process (the store's child-process mode is not offered here: a DRO page walks only
per-portal tables, and each is sampled at most once a second).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from urllib.parse import quote

from daemons.tnwgd.monitor import (
    DROMonMsg,
    DroRuntime,
    PortalView,
    config_text,
    malloc_info,
    mim_drop_counts,
    stats_pb,
    topology_signature,
)
from daemons.umestored.webmon import parse_web_monitor
from umcore.daemon.web import Block, Heading, Html, Link, Para, Table, WebPages
from umcore.dro import InterestKey
from umcore.dro.peer import PeerLink
from umcore.dro.routing import domain_node

__all__ = [
    "MAX_LIST_SHOWN",
    "MAX_PATHS_SHOWN",
    "DroWebMonitor",
    "parse_web_monitor",
    "shortest_path",
    "start_dro_web_monitor",
]

MAX_LIST_SHOWN = 1000
"""Entries of one list on a portal page (topics, patterns, proxies): a DRO with a large topic
space still serves a page of a few hundred kilobytes; the rest are counted ("N more")."""

MAX_PATHS_SHOWN = 400
"""Domain pairs listed on the Path Info page (20 domains); any pair has its own page."""

PATTERN_KINDS = ("topic", "PCRE", "REGEX")


def _portal_href(name: str) -> str:
    """A portal page's link: the name percent-encoded (a portal may be called "TRD 1")."""
    return "/portals/" + quote(name, safe="")


def _key_kind(k: InterestKey) -> str:
    return PATTERN_KINDS[k.pattern_type] if 0 <= k.pattern_type <= 2 else str(k.pattern_type)


def _capped(items: list[Any], cap: int = MAX_LIST_SHOWN) -> tuple[list[Any], int]:
    return items[:cap], max(0, len(items) - cap)


def _interest(pairs: Iterable[tuple[InterestKey, int]]) -> dict[str, Any]:
    by_key: dict[InterestKey, set[int]] = {}
    for k, d in pairs:
        by_key.setdefault(k, set()).add(d)
    out: dict[str, Any] = {}
    for n, kind in enumerate(("topics", "pcre_patterns", "regex_patterns")):
        keys = sorted(k.symbol for k in by_key if k.pattern_type == n)
        shown, more = _capped(keys)
        out[kind] = shown
        out[kind + "_more"] = more
    out["domains"] = {f"{_key_kind(k)}:{k.symbol}": sorted(d) for k, d in by_key.items()}
    return out


def shortest_path(rt: DroRuntime, d1: int, d2: int) -> dict[str, Any] | None:
    """The shortest path from domain ``d1`` to domain ``d2`` on this DRO's map: hop count,
    aggregate cost, the nodes in order; None when either domain is unknown or unreachable."""
    router = rt.core.router
    if d1 == d2 and router.known(d1):
        return {"from": d1, "to": d2, "hop_count": 0, "cost": 0, "path": [f"TRD {d1}"]}
    dist = router.dist.get(d2, {})
    node = domain_node(d1)
    if node not in dist:
        return None
    cost, _dro_hops = dist[node]
    path = [node]
    for _ in range(len(dist) + 1):
        nxt = router.parent(d2, node)
        if nxt is None or nxt == node:
            break
        path.append(nxt)
        node = nxt
    names = {rt.core.node_id: rt.config.daemon.name or ""}
    names.update({nid: h.info.name for nid, h in router.heard.items()})
    shown = []
    for kind, ident in path:
        if kind == 0:
            shown.append(f"TRD {ident}")
        elif kind == 1:
            shown.append(f"DRO {names.get(ident) or '?'} ({ident:#x})")
        else:
            shown.append(f"DRO at {ident >> 16:#x}:{ident & 0xFFFF}")
    return {"from": d1, "to": d2, "hop_count": len(path) - 1, "cost": cost, "path": shown}


def _link_rows(link: PeerLink) -> list[tuple[str, object]]:
    """A peer portal's link: state, the DRO at the other end, keepalive RTT (µs), bytes and
    messages each way, drops, sessions."""
    st = link.stats
    peer = f"{link.peer_name} ({link.peer_node_id:#x})" if link.peer_node_id else "-"
    return [
        ("state", link.state.value),
        ("peer DRO", peer),
        ("keepalive RTT min/mean/max (us)", f"{st.rtt_min}/{st.rtt_mean}/{st.rtt_max}"),
        ("keepalive RTT samples", st.rtt_samples),
        ("bytes sent", st.bytes_sent),
        ("bytes received", st.bytes_rcvd),
        ("data messages sent", st.data_fragments_sent),
        ("data messages received", st.data_msgs_rcvd),
        ("control messages sent", st.gateway_cntl_msgs_sent),
        ("control messages received", st.gateway_cntl_msgs_rcvd),
        ("data dropped (link down)", st.data_fragments_dropped_not_operational),
        ("data dropped (link full)", st.data_fragments_dropped_would_block),
        ("batches", st.batches),
        ("connections", st.connects),
        ("sessions lost", st.losses),
        *_udp_rows(link),
    ]


def _udp_rows(link: PeerLink) -> list[tuple[str, object]]:
    """The UDP data link's rows (``<udp>``): state, the other DRO's port, LBT-RU figures."""
    if link.udp_config is None:
        return []
    send, receive = link.udp_stats()
    return [
        ("UDP data link", f"{'up' if link.udp_up else 'down'} (port {link.udp_config.port})"),
        ("UDP peer port", link.udp_peer_port or "-"),
        ("UDP datagrams sent / retransmitted", f"{send.get('msgs_sent', 0)} / "
         f"{send.get('rxs_sent', 0)}"),
        ("UDP NAKs received / ignored / shed", f"{send.get('naks_rcved', 0)} / "
         f"{send.get('naks_ignored', 0)} / {send.get('naks_shed', 0)}"),
        ("UDP datagrams received / duplicates", f"{receive.get('msgs_rcved', 0)} / "
         f"{receive.get('duplicate_data', 0)}"),
        ("UDP NAKs sent / datagrams lost / unrecovered", f"{receive.get('naks_sent', 0)} / "
         f"{receive.get('lost', 0)} / "
         f"{receive.get('unrecovered_txw', 0) + receive.get('unrecovered_tmo', 0)}"),
        ("UDP frames dropped (source never advertised)", link.udp_frames_dropped_unadvertised),
    ]  # fmt: skip


def _stat_rows(msg: Any) -> list[tuple[str, int, int | None]]:
    """(label, messages, bytes) rows of a Receive/Send message: ``*_msgs``/``*_fragments``
    fields paired with their ``*_bytes`` twin."""
    fields = [f.name for f in msg.DESCRIPTOR.fields]
    rows: list[tuple[str, int, int | None]] = []
    used: set[str] = set()
    for name in fields:
        if name in used:
            continue
        twin = None
        for a, b in (
            ("fragments", "fragment_bytes"),
            ("msgs", "msg_bytes"),
            ("_control_rcvd", "_control_bytes_rcvd"),
        ):
            if a in name and name.replace(a, b, 1) in fields:
                twin = name.replace(a, b, 1)
                break
        if twin is None and "bytes" in name and name.startswith("data_bytes"):
            rows.append((name, getattr(msg, name), None))
            used.add(name)
            continue
        if "bytes" in name and twin is None:
            continue  # the byte twin of a row already shown
        used.add(name)
        if twin is not None:
            used.add(twin)
        rows.append((name, getattr(msg, name), getattr(msg, twin) if twin else None))
    return rows


class DroWebMonitor:
    """The DRO's pages on one :class:`WebPages` runner."""

    def __init__(
        self,
        runtime: DroRuntime,
        *,
        monotonic: Callable[[], float],
        wall_clock: Callable[[], float] = time.time,
        log: logging.Logger | None = None,
    ) -> None:
        self.runtime = runtime
        self.monotonic = monotonic
        self.wall_clock = wall_clock
        pages = WebPages(
            monotonic=monotonic,
            wall_clock=wall_clock,
            label="DRO web monitor",
            title="pyum tnwgd web monitor",
            daemon=f"tnwgd {runtime.config.daemon.name or ''}".strip(),
            log=log or logging.getLogger("tnwgd"),
        )
        pages.started = runtime.started_at
        self.pages = pages
        pages.add_page("/", title="UM Router", data=self.main, render=self.main_blocks)
        pages.add_page(
            "/config",
            title="UM Router Configuration",
            data=self.configuration,
            render=self.configuration_blocks,
        )
        pages.add_page("/portals", title="Portals", data=self.portals, render=self.portals_blocks)
        pages.add_route(
            "/portals/{portal}",
            title="Portal {portal}",
            data=self.portal,
            render=self.portal_blocks,
        )
        pages.add_page(
            "/topology", title="Topology Info", data=self.topology, render=self.topology_blocks
        )
        pages.add_page("/path", title="Path Info", data=self.paths, render=self.paths_blocks)
        pages.add_route(
            "/path/{d1}/{d2}", title="Path Info: {d1} to {d2}", data=self.path,
            render=self.path_blocks,
        )  # fmt: skip
        pages.add_page(
            "/malloc", title="GNU malloc info", data=self.malloc, render=self.malloc_blocks
        )

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Serve on host:port (0 = ephemeral); OSError when it cannot be bound."""
        return await self.pages.start(host, port)

    async def close(self) -> None:
        await self.pages.close()

    # ----------------------------------------------------------------- helpers
    def _up(self, name: str) -> bool:
        return name in self.runtime.core.router.own

    def _stats(self, views: Sequence[PortalView]) -> Any:
        msg = DROMonMsg()
        stats_pb(
            self.runtime,
            msg.stats,
            wall_offset=self.wall_clock() - self.monotonic(),
            portals=list(views),
        )
        return msg.stats

    def _adjacent(self, p: PortalView) -> str:
        if p.kind == "endpoint":
            return f"TRD {p.domain_id}"
        adj = self.runtime.core.router.own.get(p.name)
        return f"DRO {adj.node[1]:#x}" if adj is not None else "(peer not known)"

    # ----------------------------------------------------------------- main
    def main(self) -> dict[str, Any]:
        rt = self.runtime
        stats = self._stats(list(rt.portals.values()))
        return {
            "name": rt.config.daemon.name or "",
            "id": rt.core.node_id,
            "malloc": malloc_info() is not None,
            "portals": [
                {
                    "name": p.name,
                    "type": p.kind,
                    "up": self._up(p.name),
                    "proxy_receivers": s.proxy_receivers,
                    "proxy_sources": s.proxy_sources,
                }
                for p, s in zip(rt.portals.values(), stats.portals, strict=True)
            ],
        }

    def main_blocks(self, d: dict[str, Any]) -> list[Block]:
        links = [
            Link("UM Router Configuration", "/config"),
            Link("Portals", "/portals"),
            Link("Topology Info", "/topology"),
            Link("Path Info", "/path"),
        ]
        if d["malloc"]:
            links.append(Link("GNU malloc info", "/malloc"))
        menu = "".join("<li>{}</li>" for _ in links)
        return [
            Para(f"UM Router {d['name']} (id {d['id']:#x})"),
            Html("<ul>" + menu + "</ul>", *links),
            Heading("Portals"),
            Table(
                ["Portal", "Type", "State", "Proxy receivers", "Proxy sources"],
                [
                    [
                        Link(p["name"], _portal_href(p["name"])),
                        p["type"],
                        "up" if p["up"] else "down",
                        p["proxy_receivers"],
                        p["proxy_sources"],
                    ]
                    for p in d["portals"]
                ],
            ),
        ]

    # ----------------------------------------------------------------- configuration
    def configuration(self) -> dict[str, Any]:
        cfg = self.runtime.config
        return {"file": cfg.source, "text": config_text(cfg)}

    def configuration_blocks(self, d: dict[str, Any]) -> list[Block]:
        return [Para(f"File: {d['file']}"), Html("<pre>{}</pre>", d["text"])]

    # ----------------------------------------------------------------- portals
    def portals(self) -> dict[str, Any]:
        rt = self.runtime
        return {
            "portals": [
                {
                    "name": p.name,
                    "index": p.index,
                    "type": p.kind,
                    "adjacent": self._adjacent(p),
                    "cost": rt.config.portal(p.name).cost,
                    "up": self._up(p.name),
                }
                for p in rt.portals.values()
            ]
        }

    def portals_blocks(self, d: dict[str, Any]) -> list[Block]:
        return [
            Table(
                ["#", "Portal", "Type", "Adjacent", "Cost", "State"],
                [
                    [
                        p["index"],
                        Link(p["name"], _portal_href(p["name"])),
                        p["type"],
                        p["adjacent"],
                        p["cost"],
                        "up" if p["up"] else "down",
                    ]
                    for p in d["portals"]
                ],
            )
        ]

    def portal(self, params: dict[str, str]) -> dict[str, Any] | None:
        rt = self.runtime
        p = rt.portals.get(params["portal"])
        if p is None:
            return None
        core = rt.core
        s = self._stats([p]).portals[0]
        kind_msg = s.endpoint if p.kind == "endpoint" else s.peer
        pairs = core.interest(p.name)
        d: dict[str, Any] = {
            "name": p.name,
            "type": p.kind,
            "up": self._up(p.name),
            "cost": s.cost,
            "adjacent": self._adjacent(p),
        }
        if p.kind == "endpoint":
            d["domain_id"] = p.domain_id
            d["local_interest"] = _interest((k, x) for k, x in pairs if x == p.domain_id)
            d["remote_interest"] = _interest((k, x) for k, x in pairs if x != p.domain_id)
        else:
            d["interest"] = _interest(pairs)
        receivers = sorted(
            f"{_key_kind(k)} {k.symbol}" for name, k in core.proxy_receivers() if name == p.name
        )
        d["proxy_receivers"], d["proxy_receivers_more"] = _capped(receivers)
        d["proxy_receivers_count"] = s.proxy_receivers
        d["receiver_interest"] = _interest(core.advertised_interest(p.name))
        sources = sorted(
            (sk.topic, sk.otid.hex(), state.value)
            for (name, sk), state in core.proxy_sources().items()
            if name == p.name
        )
        shown, more = _capped(sources)
        d["proxy_sources"] = [{"topic": t, "otid": o, "state": st} for t, o, st in shown]
        d["proxy_sources_more"] = more
        d["proxy_sources_count"] = s.proxy_sources
        d["receive"] = _stat_rows(kind_msg.receive)
        d["send"] = _stat_rows(kind_msg.send)
        d["enqueued"] = {
            "current": kind_msg.send.data_bytes_enqueued,
            "max": kind_msg.send.data_bytes_enqueued_max,
            "limit": kind_msg.send.data_bytes_enqueued_limit,
        }
        link = getattr(p, "link", None)
        if isinstance(link, PeerLink):
            d["link"] = _link_rows(link)
        st = core.stats(p.name)
        d["core"] = {
            name: getattr(st, name)
            for name in (
                "dropped_old",
                "unknown_source",
                "acl_rejected",
                "hop_limit_dropped",
                "own_sources_ignored",
                "sources_refused",
                "tqrs_from_dros_ignored",
            )
        }
        d["core"].update(mim_drop_counts(core, p.name))
        return d

    @staticmethod
    def _interest_blocks(title: str, i: dict[str, Any]) -> list[Block]:
        out: list[Block] = [Heading(title)]
        for kind, label in (
            ("topics", "Topics"),
            ("pcre_patterns", "PCRE patterns"),
            ("regex_patterns", "REGEX patterns"),
        ):
            items = i[kind]
            more = i[kind + "_more"]
            text = ", ".join(items) if items else "(none)"
            if more:
                text += f" ... {more} more"
            out.append(Para(f"{label} ({len(items) + more}): {text}"))
        return out

    def portal_blocks(self, d: dict[str, Any]) -> list[Block]:
        out: list[Block] = [Para(f"Name: {d['name']}")]
        if d["type"] == "endpoint":
            out.append(Para(f"Domain ID: {d['domain_id']}"))
        else:
            out.append(Para(f"Adjacent: {d['adjacent']}"))
        out.append(Para(f"Portal Cost: {d['cost']}"))
        out.append(Para(f"State: {'up' if d['up'] else 'down'}"))
        if d["type"] == "endpoint":
            out += self._interest_blocks("Local Interest", d["local_interest"])
            out += self._interest_blocks("Remote Interest", d["remote_interest"])
        else:
            out += self._interest_blocks("Interest", d["interest"])
        rcv_more = d["proxy_receivers_more"]
        out.append(Heading(f"Proxy Receivers ({d['proxy_receivers_count']})"))
        out.append(Para(", ".join(d["proxy_receivers"]) or "(none)"))
        if rcv_more:
            out.append(Para(f"... {rcv_more} more"))
        ri = d["receiver_interest"]
        out += self._interest_blocks("Receiver Topics and Patterns", ri)
        out.append(Heading(f"Proxy Sources ({d['proxy_sources_count']})"))
        out.append(
            Table(
                ["Topic", "OTID", "State"],
                [[s["topic"], s["otid"], s["state"]] for s in d["proxy_sources"]],
            )
        )
        if d["proxy_sources_more"]:
            out.append(Para(f"... {d['proxy_sources_more']} more"))
        out.append(Heading("Receive stats"))
        out.append(Table(["", "messages or fragments", "bytes"], d["receive"]))
        out.append(Heading("Send stats"))
        out.append(Table(["", "messages or fragments", "bytes"], d["send"]))
        q = d["enqueued"]
        out.append(
            Para(
                f"Current/maximum data bytes enqueued: {q['current']}/{q['max']} "
                f"(limit: {q['limit']})"
            )
        )
        if "link" in d:
            out.append(Heading("Peer Link"))
            out.append(Table(["", "value"], d["link"]))
        out.append(Heading("Core counters (pyum)"))
        out.append(Table(["", "count"], sorted(d["core"].items())))
        return out

    # ----------------------------------------------------------------- topology
    def topology(self) -> dict[str, Any]:
        rt = self.runtime
        router = rt.core.router
        local = self._stats([]).local
        now = self.monotonic()
        return {
            "name": local.gateway_name,
            "id": local.gateway_id,
            "version": local.version,
            "signature": topology_signature(rt.core),
            "graph_version": local.graph_version,
            "dro_count": local.gateway_count,
            "trd_count": local.trd_count,
            "domains": router.domains(),
            "portals": [
                {
                    "name": p.name,
                    "adjacent": self._adjacent(p),
                    "cost": rt.config.portal(p.name).cost,
                    "up": self._up(p.name),
                }
                for p in rt.portals.values()
            ],
            "others": [
                {
                    "name": h.info.name,
                    "id": nid,
                    "version": h.info.version,
                    "last_activity_s": round(max(0.0, now - h.last), 1),
                    "adjacent": [
                        {
                            "kind": "TRD" if a.node[0] == 0 else "DRO",
                            "id": a.node[1],
                            "cost": a.cost,
                        }
                        for a in h.info.adjacencies
                    ],
                }
                for nid, h in sorted(router.heard.items())
            ],
        }

    def topology_blocks(self, d: dict[str, Any]) -> list[Block]:
        out: list[Block] = [
            Table(
                ["", ""],
                [
                    ["Local UM Router Name", d["name"]],
                    ["Local UM Router ID", f"{d['id']:#x}"],
                    ["Self Version", d["version"]],
                    ["Topology Signature", f"{d['signature']:#010x}"],
                    ["Last recalc duration", "not measured"],
                    ["Graph Version", d["graph_version"]],
                    ["UM Router Count", d["dro_count"]],
                    ["TRD Count", d["trd_count"]],
                    ["Known TRDs", ", ".join(str(x) for x in d["domains"])],
                ],
            ),
            Heading("Local portals"),
            Table(
                ["Portal", "Adjacent", "Cost", "State"],
                [
                    [p["name"], p["adjacent"], p["cost"], "up" if p["up"] else "down"]
                    for p in d["portals"]
                ],
            ),
            Heading(f"Other UM Routers ({len(d['others'])})"),
        ]
        for o in d["others"]:
            out.append(
                Para(
                    f"{o['name']} (ID {o['id']:#x}), version {o['version']}, "
                    f"Last Activity {o['last_activity_s']} seconds ago"
                )
            )
            out.append(
                Table(
                    ["Adjacent", "ID", "Cost"],
                    [[a["kind"], a["id"], a["cost"]] for a in o["adjacent"]],
                )
            )
        return out

    # ----------------------------------------------------------------- paths
    def paths(self) -> dict[str, Any]:
        doms = self.runtime.core.router.domains()
        pairs = [(a, b) for a in doms for b in doms if a != b]
        shown, more = _capped(pairs, MAX_PATHS_SHOWN)
        rows = []
        for a, b in shown:
            p = shortest_path(self.runtime, a, b)
            rows.append(
                {"from": a, "to": b, "path": p}
                if p is not None
                else {"from": a, "to": b, "path": None}
            )
        return {"domains": doms, "paths": rows, "more": more}

    def paths_blocks(self, d: dict[str, Any]) -> list[Block]:
        form = (
            "<form id='pathform' onsubmit=\"location.href='/path/'+encodeURIComponent("
            "this.d1.value)+'/'+encodeURIComponent(this.d2.value);return false\">"
            "Domain ID 1: <input name='d1' size='10'> Domain ID 2: <input name='d2' size='10'> "
            "<input type='submit' value='Calculate Shortest Path'></form>"
        )
        rows = []
        for r in d["paths"]:
            p = r["path"]
            rows.append(
                [
                    Link(f"{r['from']} to {r['to']}", f"/path/{r['from']}/{r['to']}"),
                    "" if p is None else p["hop_count"],
                    "unreachable" if p is None else p["cost"],
                    "" if p is None else " > ".join(p["path"]),
                ]
            )
        out: list[Block] = [
            Html(form),
            Para("Known TRDs: " + (", ".join(str(x) for x in d["domains"]) or "(none)")),
            Table(["Domains", "Hop Count", "Aggregate Cost", "Path"], rows),
        ]
        if d["more"]:
            out.append(Para(f"... {d['more']} more pairs"))
        return out

    def path(self, params: dict[str, str]) -> dict[str, Any] | None:
        try:
            d1, d2 = int(params["d1"]), int(params["d2"])
        except ValueError:
            return None
        p = shortest_path(self.runtime, d1, d2)
        if p is None:
            return {"from": d1, "to": d2, "hop_count": None, "cost": None, "path": []}
        return p

    def path_blocks(self, d: dict[str, Any]) -> list[Block]:
        if d["hop_count"] is None:
            return [Para(f"No path from TRD {d['from']} to TRD {d['to']} on this DRO's map.")]
        return [
            Para(f"Hop Count: {d['hop_count']}"),
            Para(f"Aggregate Cost: {d['cost']}"),
            Para("Path: " + " > ".join(d["path"])),
        ]

    # ----------------------------------------------------------------- malloc
    def malloc(self) -> dict[str, Any]:
        return {"mallinfo": malloc_info()}

    def malloc_blocks(self, d: dict[str, Any]) -> list[Block]:
        mi = d["mallinfo"]
        if mi is None:
            return [Para("Not available on this system (glibc's mallinfo2).")]
        return [Table(["", "bytes or blocks"], sorted(mi.items()))]


async def start_dro_web_monitor(
    runtime: DroRuntime,
    *,
    monotonic: Callable[[], float],
    log: logging.Logger | None = None,
) -> DroWebMonitor | None:
    """The web monitor at ``<web-monitor>`` (None when not configured, or when the address
    cannot be bound: logged, the DRO goes on without it, as UM's does).  A malformed address
    raises ConfigError (check it before starting: :func:`parse_web_monitor`)."""
    text = runtime.config.daemon.web_monitor
    if not text:
        return None
    host, port = parse_web_monitor(text, source=runtime.config.source)
    mon = DroWebMonitor(runtime, monotonic=monotonic, log=log)
    try:
        await mon.start(host, port)
    except OSError as exc:
        (log or logging.getLogger("tnwgd")).error(
            "web monitor not started on %s:%d: %s", host, port, exc.strerror or exc
        )
        return None
    return mon
