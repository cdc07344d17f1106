"""lbmrd's web pages (a pyum addition: UM's lbmrd has none): clients, rates, NAT domains.

Theory of operation
-------------------
Started with ``lbmrd --web-monitor HOST:PORT``; served by the daemons' shared runner
(:class:`umcore.daemon.web.WebPages`: aiohttp in lbmrd's loop, one sample per page per second,
every page with its JSON twin under ``/json``, escaping, a 404 page for unknown paths).

- ``/`` -- the overview: the listening address, ttl and activity, the client count, rates
  (datagrams and bytes per second in and out, forwarded, dropped) measured between this sample
  and the previous one, every counter, the NAT domains (name, networks, active clients in each)
  and transforms; links to the client list and to each domain's clients;
- ``/clients`` -- the client table (address, NAT domain, seconds since last heard), at most
  :data:`MAX_CLIENTS_SHOWN` rows, in address order, and how many more;
- ``/domains/{name}`` -- one NAT domain: its networks and its clients (a 404 for an unknown
  domain).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from typing import Any

from umcore.aio.udp import DatagramEndpoint
from umcore.config.lbmrd import LbmrdConfig
from umcore.daemon.web import Block, Heading, Html, Link, Para, Table, WebPages
from umcore.lbmrd.core import LbmrdRelay, NatTable

__all__ = ["MAX_CLIENTS_SHOWN", "LbmrdWebPages"]

# Rows of the client tables: a table people scroll and a sample that stays cheap even with a
# full client table; the total is always shown ("N more").
MAX_CLIENTS_SHOWN = 1000
_NO_DOMAIN = "(none)"


class LbmrdWebPages:
    """lbmrd's pages (see the module docstring)."""

    def __init__(
        self,
        relay: LbmrdRelay,
        endpoint: DatagramEndpoint,
        config: LbmrdConfig,
        nat: NatTable,
        *,
        monotonic: Callable[[], float],
        max_clients: int = MAX_CLIENTS_SHOWN,
    ) -> None:
        self.relay = relay
        self.endpoint = endpoint
        self.config = config
        self.nat = nat
        self.monotonic = monotonic
        self.max_clients = max_clients
        self._last: tuple[float, dict[str, int]] | None = None
        pages = WebPages(
            monotonic=monotonic,
            label="lbmrd web pages",
            title="pyum lbmrd",
            daemon="lbmrd",
            log=logging.getLogger("lbmrd"),
        )
        self.pages = pages
        pages.add_page("/", title="lbmrd", data=self.overview, render=self.overview_blocks)
        pages.add_page(
            "/clients", title="lbmrd clients", data=self.clients, render=self.client_blocks
        )
        pages.add_route(
            "/domains/{name}", title="NAT domain {name}", data=self.domain,
            render=self.client_blocks,
        )  # fmt: skip

    async def start(self, host: str, port: int) -> tuple[str, int]:
        return await self.pages.start(host, port)

    async def close(self) -> None:
        await self.pages.close()

    # ------------------------------------------------------------------ data
    def _counters(self) -> dict[str, int]:
        c = self.relay.counters.as_dict()
        c["datagrams_sent"] = self.endpoint.datagrams_sent
        c["bytes_sent"] = self.endpoint.bytes_sent
        c["send_dropped"] = self.endpoint.send_dropped
        c["send_errors"] = self.endpoint.send_errors
        c["receive_errors"] = self.endpoint.receive_errors
        return c

    def _domain_of(self, ip: str) -> str:
        try:
            ipaddress.IPv4Address(ip)
        except ValueError:
            return _NO_DOMAIN
        return self.nat.domain_of(ip) or _NO_DOMAIN

    def _rows(self, only: str | None = None) -> tuple[list[dict[str, Any]], int]:
        now = self.monotonic()
        table = sorted(self.relay.clients().items())
        rows: list[dict[str, Any]] = []
        total = 0
        for (ip, port), heard in table:
            domain = self._domain_of(ip)
            if only is not None and domain != only:
                continue
            total += 1
            if len(rows) < self.max_clients:
                rows.append(
                    {"ip": ip, "port": port, "domain": domain, "heard_s_ago": round(now - heard, 1)}
                )
        return rows, total

    def overview(self) -> dict[str, Any]:
        now = self.monotonic()
        counters = self._counters()
        rates: dict[str, float] = {}
        if self._last is not None and now > self._last[0]:
            dt = now - self._last[0]
            prev = self._last[1]
            for key in ("datagrams_in", "bytes_in", "datagrams_sent", "bytes_sent",
                        "forwarded", "dropped"):  # fmt: skip
                rates[key] = round((counters[key] - prev.get(key, 0)) / dt, 1)
        self._last = (now, counters)
        per_domain: dict[str, int] = {}
        for ip, _port in self.relay.clients():
            d = self._domain_of(ip)
            per_domain[d] = per_domain.get(d, 0) + 1
        host, port = self.endpoint.local_address
        return {
            "listening": {"ip": host, "port": port},
            "ttl_s": self.config.ttl_s,
            "activity_s": self.config.activity_s,
            "clients": self.relay.active_clients,
            "max_clients": self.relay.max_clients,
            "rates_per_s": rates,
            "counters": counters,
            "domains": [
                {
                    "name": d.name,
                    "networks": [str(n) for n in d.networks],
                    "clients": per_domain.get(d.name, 0),
                    "href": f"/domains/{d.name}",
                }
                for d in self.config.domains
            ],
            "transforms": [
                {"source": t.source, "destination": t.destination, "rules": len(t.rules)}
                for t in self.config.transforms
            ],
        }

    def overview_blocks(self, d: dict[str, Any]) -> list[Block]:
        lst = d["listening"]
        rates = d["rates_per_s"]
        out: list[Block] = [
            Table(
                ["", ""],
                [
                    ["listening on", f"{lst['ip']}:{lst['port']}"],
                    ["ttl (s)", d["ttl_s"]],
                    ["activity check (s)", d["activity_s"]],
                    [
                        "clients",
                        Link(f"{d['clients']} (of at most {d['max_clients']})", "/clients"),
                    ],
                ],
            ),
            Heading("Rates (per second, since the previous sample)"),
            Table(["", "per second"], rates.items())
            if rates
            else Para("Rates appear from the second sample on (reload in a second)."),
            Heading("Counters"),
            Table(["counter", "value"], d["counters"].items()),
            Heading(f"NAT domains ({len(d['domains'])})"),
            Table(
                ["domain", "networks", "clients"],
                [
                    [Link(x["name"], x["href"]), ", ".join(x["networks"]), x["clients"]]
                    for x in d["domains"]
                ],
            ),
            Heading(f"NAT transforms ({len(d['transforms'])})"),
            Table(
                ["from domain", "to domain", "rules"],
                [[t["source"], t["destination"], t["rules"]] for t in d["transforms"]],
            ),
        ]
        return out

    def clients(self) -> dict[str, Any]:
        rows, total = self._rows()
        return {"total": total, "shown": rows, "more": total - len(rows)}

    def domain(self, params: dict[str, str]) -> dict[str, Any] | None:
        name = params["name"]
        dom = next((d for d in self.config.domains if d.name == name), None)
        if dom is None:
            return None
        rows, total = self._rows(only=name)
        return {
            "domain": name,
            "networks": [str(n) for n in dom.networks],
            "total": total,
            "shown": rows,
            "more": total - len(rows),
        }

    def client_blocks(self, d: dict[str, Any]) -> list[Block]:
        out: list[Block] = []
        if "domain" in d:
            out.append(Html("<p>Networks: {}</p>", ", ".join(d["networks"]) or "none"))
        out.append(Heading(f"Clients ({d['total']})"))
        out.append(
            Table(
                ["address", "port", "NAT domain", "last heard (s ago)"],
                [[r["ip"], r["port"], r["domain"], r["heard_s_ago"]] for r in d["shown"]],
            )
        )
        if d["more"]:
            out.append(Para(f"{d['more']} more clients not shown"))
        return out
