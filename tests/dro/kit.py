"""Helpers of the DRO core tests: configurations from XML, a fake TRD that connects cores.

Theory of operation
-------------------
:func:`config` builds a :class:`~umcore.config.dro.DROConfig` through the real loader (so
defaults come from one place).  :class:`Net` is a tiny deterministic network of
:class:`~umcore.dro.DroCore` objects and fake TRDs, with a fake clock: each TRD holds the
applications' sources and receivers and every DRO endpoint on it; :meth:`Net.run` advances time
in steps and carries what the cores output (LBMR packets to the other endpoints of the TRD,
route information over peer links and through TRDs, proxy commands into TRD state, frames from
egress queues to the proxy receivers that resolved them), the way portal adapters will.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from umcore.config.dro import DROConfig, load_text
from umcore.dro import (
    CreateProxyReceiver,
    CreateProxySource,
    DeleteProxyReceiver,
    DeleteProxySource,
    DroCore,
    FinalAdvertisement,
    InterestKey,
    SourceAdvert,
    SourceKey,
    SourceTransport,
    UpdateProxySource,
)
from umcore.wire import lbmr


def config(
    endpoints: list[tuple[str, int, int]],
    peers: list[tuple[str, int, str]] = (),  # type: ignore[assignment]
    *,
    name: str = "dro",
    portal_extra: dict[str, str] | None = None,
    daemon_extra: str = "",
) -> DROConfig:
    """``endpoints``: (name, domain id, cost); ``peers``: (name, cost, "initiator"|"acceptor");
    ``portal_extra``: XML put after a portal's cost (must follow the DTD order)."""
    extra = portal_extra or {}
    parts = []
    for ep, dom, cost in endpoints:
        parts.append(
            f"<endpoint><name>{ep}</name><domain-id>{dom}</domain-id><cost>{cost}</cost>"
            f"{extra.get(ep, '')}</endpoint>"
        )
    for pe, cost, role in peers:
        link = (
            "<initiator><address>127.0.0.1</address><port>9000</port></initiator>"
            if role == "initiator"
            else "<acceptor><listen-port>9000</listen-port></acceptor>"
        )
        parts.append(
            f"<peer><name>{pe}</name><cost>{cost}</cost><single-tcp>{link}</single-tcp>"
            f"{extra.get(pe, '')}</peer>"
        )
    xml = (
        f'<tnw-gateway version="1.0"><daemon><name>{name}</name>{daemon_extra}</daemon>'
        f"<portals>{''.join(parts)}</portals></tnw-gateway>"
    )
    return load_text(xml, f"<{name}.xml>")


def otid(n: int) -> bytes:
    return n.to_bytes(4, "big") * 8


@dataclass
class Trd:
    """One topic resolution domain: its applications and the DRO endpoints on it."""

    domain: int
    endpoints: list[tuple[str, str]] = field(default_factory=list)  # (dro, portal)
    receivers: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)  # topic -> got
    wildcards: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    sources: dict[SourceKey, tuple[int, int, int]] = field(default_factory=dict)  # cost,hops,dom
    proxy_sources: dict[tuple[str, str, SourceKey], tuple[int, int, int]] = field(
        default_factory=dict
    )
    finals: list[tuple[str, SourceKey]] = field(default_factory=list)


class Net:
    """Cores and fake TRDs with a fake clock; see the module docstring."""

    def __init__(self) -> None:
        self.now = 0.0
        self.cores: dict[str, DroCore] = {}
        self.trds: dict[int, Trd] = {}
        self.portal_trd: dict[tuple[str, str], int] = {}
        self.peer_links: dict[tuple[str, str], tuple[str, str]] = {}
        self.rcv: dict[tuple[str, str], set[InterestKey]] = {}  # proxy receivers per portal
        self.seen: dict[tuple[str, str], set[SourceKey]] = {}  # reported to the core
        self.commands: list[object] = []
        self.route_over_trd = True
        self.peer_sources: dict[tuple[str, str, SourceKey], tuple[int, int, int]] = {}

    def trd(self, domain: int) -> Trd:
        return self.trds.setdefault(domain, Trd(domain))

    def add(self, name: str, cfg: DROConfig, node_id: int) -> DroCore:
        core = DroCore(cfg, node_id, self.now)
        self.cores[name] = core
        for ep in cfg.endpoints:
            self.portal_trd[(name, ep.name)] = ep.domain_id
            self.trd(ep.domain_id).endpoints.append((name, ep.name))
        return core

    def link(self, a: tuple[str, str], b: tuple[str, str]) -> None:
        self.peer_links[a] = b
        self.peer_links[b] = a

    def up(self, dro: str, portal: str, n: int = 1) -> None:
        addr = (f"10.0.0.{n}", 14000 + n)
        self.cores[dro].receive_portal_up(portal, self.now, address=addr)

    def down(self, dro: str, portal: str) -> None:
        self.cores[dro].receive_portal_down(portal, self.now)
        self.rcv.pop((dro, portal), None)
        self.seen.pop((dro, portal), None)
        dom = self.portal_trd.get((dro, portal))
        if dom is not None:
            trd = self.trds[dom]
            for k in [k for k in trd.proxy_sources if k[:2] == (dro, portal)]:
                del trd.proxy_sources[k]

    def kill(self, dro: str) -> None:
        for p in list(self.cores[dro].portals):
            self.down(dro, p)
        del self.cores[dro]

    # --- applications --------------------------------------------------------------------------

    def receiver(self, domain: int, topic: str) -> list[tuple[int, bytes]]:
        return self.trd(domain).receivers.setdefault(topic, [])

    def wildcard(self, domain: int, pattern: str) -> list[tuple[str, int]]:
        return self.trd(domain).wildcards.setdefault(pattern, [])

    def source(self, domain: int, key: SourceKey) -> None:
        self.trd(domain).sources[key] = (0, 0, domain)

    def publish(self, domain: int, key: SourceKey, sqn: int, data: bytes) -> None:
        """A local source's frame: to local receivers and every proxy receiver that has it."""
        trd = self.trds[domain]
        self._deliver(trd, key, sqn, data, exclude=None)

    def _deliver(
        self, trd: Trd, key: SourceKey, sqn: int, data: bytes, exclude: tuple[str, str] | None
    ) -> None:
        if key.topic in trd.receivers:
            trd.receivers[key.topic].append((sqn, data))
        for pattern, got in trd.wildcards.items():
            if re.search(pattern, key.topic):
                got.append((key.topic, sqn))
        for dro, portal in trd.endpoints:
            if (dro, portal) == exclude or dro not in self.cores:
                continue
            if key in self.seen.get((dro, portal), set()):
                self.cores[dro].receive_frame(portal, key, sqn, data)

    # --- the fake clock --------------------------------------------------------------------------

    def run(self, seconds: float, step: float = 0.05) -> None:
        end = self.now + seconds
        while self.now < end - 1e-9:
            self.now = round(self.now + step, 6)
            self.tick()

    def tick(self) -> None:
        for _ in range(4):  # let outputs ripple through within one step
            for name, core in list(self.cores.items()):
                t = core.next_timer()
                if t is not None and t <= self.now:
                    core.handle_timer(self.now)
                self._carry(name, core)
            self._resolve()
            self._frames()

    def _queries(self) -> None:
        """Receivers query: TQRs of applications every step while unresolved (a simplification
        of the initial/sustaining phases), wildcard queries likewise."""
        for trd in self.trds.values():
            for dro, portal in trd.endpoints:
                core = self.cores.get(dro)
                if core is None or not core.portals[portal].up:
                    continue
                for topic in trd.receivers:
                    core.receive_tqr(portal, topic, self.now)
                for pattern in trd.wildcards:
                    core.receive_wildcard_tqr(portal, pattern, 1, self.now)

    def query(self) -> None:
        self._queries()

    def _carry(self, name: str, core: DroCore) -> None:
        for portal, packet in core.take_lbmr():
            dom = self.portal_trd.get((name, portal))
            if dom is not None:
                self._lbmr_to_trd(name, portal, dom, packet)
            elif (name, portal) in self.peer_links:
                other, oport = self.peer_links[(name, portal)]
                if other in self.cores:
                    self.cores[other].receive_lbmr(oport, packet, self.now)
        for portal, info in core.take_route_info():
            if (name, portal) in self.peer_links:
                other, oport = self.peer_links[(name, portal)]
                if other in self.cores:
                    self.cores[other].receive_route_info(oport, info, self.now)
            elif self.route_over_trd:
                dom = self.portal_trd[(name, portal)]
                for dro, ep in self.trds[dom].endpoints:
                    if dro != name and dro in self.cores:
                        self.cores[dro].receive_route_info(ep, info, self.now)
        for cmd in core.take_commands():
            self.commands.append(cmd)
            self._command(name, cmd)

    def _lbmr_to_trd(self, name: str, portal: str, dom: int, packet: lbmr.LBMRPacket) -> None:
        wire = lbmr.encode(packet)  # what goes on the wire must encode and decode
        back = lbmr.decode(wire)
        trd = self.trds[dom]
        if isinstance(back.body, lbmr.TopicManagement):
            # receivers answer use queries for topics and patterns they have
            answers = [
                lbmr.TMR(t.topic, t.tmr_type, t.flags | lbmr.TMR_FLAG_RESPONSE)
                for t in back.body.tmrs
                if t.topic in trd.receivers or t.topic in trd.wildcards
            ]
            if answers:
                reply = lbmr.LBMRPacket(4, body=lbmr.TopicManagement(answers))
                self.cores[name].receive_lbmr(portal, reply, self.now)
            return
        for dro, ep in trd.endpoints:
            if dro != name and dro in self.cores and self.cores[dro].portals[ep].up:
                self.cores[dro].receive_lbmr(ep, back, self.now)

    def _command(self, name: str, cmd: object) -> None:
        if isinstance(cmd, CreateProxyReceiver):
            self.rcv.setdefault((name, cmd.portal), set()).add(cmd.key)
        elif isinstance(cmd, DeleteProxyReceiver):
            self.rcv[(name, cmd.portal)].discard(cmd.key)
        dom = self.portal_trd.get((name, getattr(cmd, "portal", "")))
        if isinstance(cmd, CreateProxySource):
            where = (name, cmd.portal, cmd.source)
            if dom is not None:
                self.trds[dom].proxy_sources[where] = (cmd.cost, cmd.hop_count, cmd.origin_domain)
            else:
                self.peer_sources[where] = (cmd.cost, cmd.hop_count, cmd.origin_domain)
        elif isinstance(cmd, UpdateProxySource):
            table = self.trds[dom].proxy_sources if dom is not None else self.peer_sources
            old = table[(name, cmd.portal, cmd.source)]
            table[(name, cmd.portal, cmd.source)] = (cmd.cost, cmd.hop_count, old[2])
        elif isinstance(cmd, FinalAdvertisement) and dom is not None:
            self.trds[dom].finals.append((cmd.portal, cmd.source))
        elif isinstance(cmd, DeleteProxySource):
            table = self.trds[dom].proxy_sources if dom is not None else self.peer_sources
            table.pop((name, cmd.portal, cmd.source), None)

    def _resolve(self) -> None:
        """Proxy receivers resolve the sources of their TRD (local and other DROs' proxies);
        over a peer link, the other side's proxy sources for that link."""
        for (dro, portal), keys in list(self.rcv.items()):
            core = self.cores.get(dro)
            if core is None:
                continue
            offers: dict[SourceKey, tuple[int, int, int]] = {}
            dom = self.portal_trd.get((dro, portal))
            if dom is not None:
                trd = self.trds[dom]
                offers.update(trd.sources)
                for (odro, _oport, sk), v in trd.proxy_sources.items():
                    if odro != dro:
                        prev = offers.get(sk)
                        if prev is None or v[0] < prev[0]:
                            offers[sk] = v
            else:
                other, oport = self.peer_links[(dro, portal)]
                for (odro, op, sk), v in self.peer_sources.items():
                    if (odro, op) == (other, oport):
                        offers[sk] = v
            seen = self.seen.setdefault((dro, portal), set())
            for sk, (cost, hops, origin) in offers.items():
                wanted = any(
                    (k.pattern_type == 0 and k.symbol == sk.topic)
                    or (k.pattern_type != 0 and re.search(k.symbol, sk.topic))
                    for k in keys
                )
                if wanted and sk not in seen:
                    seen.add(sk)
                    core.receive_source(
                        portal,
                        SourceAdvert(
                            sk,
                            SourceTransport("tcp", "10.9.9.9", tcp_source_port=1),
                            cost,
                            hops,
                            origin,
                        ),
                        self.now,
                    )
            for sk in [
                s
                for s in seen
                if s not in offers
                or not any(
                    (k.pattern_type == 0 and k.symbol == s.topic)
                    or (k.pattern_type != 0 and re.search(k.symbol, s.topic))
                    for k in keys
                )
            ]:
                seen.discard(sk)
                core.receive_source_gone(portal, sk, self.now)

    def _frames(self) -> None:
        """Egress queues drain into the proxy sources' TRD (or across the peer link)."""
        for name, core in list(self.cores.items()):
            for portal in core.portals:
                for fr in core.take_frames(portal):
                    sk = SourceKey(fr.otid, fr.topic)
                    dom = self.portal_trd.get((name, portal))
                    if dom is not None:
                        self._deliver(self.trds[dom], sk, fr.sqn, bytes(fr.data), (name, portal))
                    else:
                        other, oport = self.peer_links[(name, portal)]
                        if other in self.cores and sk in self.seen.get((other, oport), set()):
                            self.cores[other].receive_frame(oport, sk, fr.sqn, fr.data)
