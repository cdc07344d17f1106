"""The SRS debug monitor (``<debug-monitor>``): a read-only web page for support.

Theory of operation
-------------------
UM's SRS can serve a web page describing its state, "for support only", when
``<debug-monitor><enabled>true</enabled>`` (off by default; ``interface`` localhost and
``port`` 27001 by default, the port the real SRS reports — trap 5: the documented 27000 would
collide with the SRS's own listener).  pyum serves it with aiohttp inside the daemon's own event
loop (``AppRunner``/``TCPSite``), so a request reads the core between two inputs, never
concurrently with them:

- ``GET /``: an HTML overview — version, uptime, listening address, the SRS_STATS counters,
  the connected clients with their session ids and record counts, and the topics with their
  sources and interested clients;
- ``GET /json``: the same data as one JSON object (:func:`snapshot`).

Bounds.  The client and topic lists show at most ``MAX_CLIENTS_SHOWN`` / ``MAX_TOPICS_SHOWN``
entries (in name order) and say how many more exist ("N more"); a sample walks every table, so
it is taken at most every ``MIN_SAMPLE_INTERVAL`` seconds and reused in between — a browser
reloading in a loop cannot take the event loop from topic resolution.  Every string from a
client (topics, addresses) is HTML-escaped.

``ping-interval`` (the one ping interval of the SRS; the daemon monitor's overrides it, see
:mod:`umcore.config.srs`) is the page's refresh period: the HTML asks the browser to reload
every ping-interval, and ``/json`` reports it.  That is our reading [I]: UM documents it only as
the period at which internal statistics are sampled.

``port`` 0 (pyum only) binds an ephemeral port; the bound address is in the log line
``debug monitor on http://HOST:PORT/``.
"""

from __future__ import annotations

import html
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from umcore import __version__ as pyum_version
from umcore.config.srs import SRSConfig
from umcore.srs.server import PROTOCOL_VERSION, UNBOUNDED_CREDIT, Client, SRSServer

__all__ = [
    "MAX_CLIENTS_SHOWN",
    "MAX_TOPICS_SHOWN",
    "MIN_SAMPLE_INTERVAL",
    "DebugMonitor",
    "render_html",
    "snapshot",
]

log = logging.getLogger("SRS")

# Clients and topics listed per page: a page of a few hundred rows stays readable and cheap to
# build; the totals are always given ("N more").
MAX_CLIENTS_SHOWN = 200
MAX_TOPICS_SHOWN = 200
# A sample walks every table (O(records)); no more than one per second whatever the requests.
MIN_SAMPLE_INTERVAL = 1.0


def _client_row(c: Client) -> dict[str, Any]:
    return {
        "ip": c.addr,
        "port": c.port,
        "session_id": f"0x{c.session_id:08x}",
        "client_id": c.client_id,
        "app_type": c.app_type,
        "interest_mode": c.interest_mode,
        "protocol_version": c.protocol_version,
        "sources": len(c.sources),
        "receiver_topics": len(c.interest),
        "wildcard_patterns": len(c.patterns),
        "routes": len(c.routes) + len(c.dr_records),
        "context_names": len(c.names),
        "sir_sent": c.stats.client_sir_sent_count,
        "ser_sent": c.stats.client_ser_sent_count,
        "record_queue_depth": len(c.queue),
        "records_held_back": c.held_back,
        "stream_credit": None if c.credit >= UNBOUNDED_CREDIT else c.credit,
    }


def snapshot(
    core: SRSServer,
    config: SRSConfig,
    *,
    listening: tuple[str, int],
    uptime: float,
    wall_clock: float,
) -> dict[str, Any]:
    """Everything the pages show, as plain JSON-able data."""
    clients = sorted(core.connected_clients(), key=lambda c: (c.addr, c.port, c.session_id))
    shown = clients[:MAX_CLIENTS_SHOWN]
    topics, topic_total = core.topic_table(MAX_TOPICS_SHOWN)
    return {
        "version": pyum_version,
        "srs_protocol_version": PROTOCOL_VERSION,
        "application_id": config.application_id or "",
        "sampled_at": wall_clock,
        "uptime_s": round(uptime, 3),
        "listening": {"ip": listening[0], "port": listening[1]},
        "ping_interval_ms": config.ping_interval,
        "connections": core.connections,
        "sources": core.source_count(),
        "srs_stats": core.snapshot_stats().as_dict(),
        "srs_error_stats": core.errors.as_dict(),
        "refused": core.refused.as_dict(),
        "clients": {
            "total": len(clients),
            "shown": [_client_row(c) for c in shown],
            "more": len(clients) - len(shown),
        },
        "topics": {
            "total": topic_total,
            "shown": [{"topic": t, "sources": s, "interested": r} for t, s, r in topics],
            "more": topic_total - len(topics),
        },
    }


def _table(headers: list[str], rows: list[list[object]]) -> str:
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{e(str(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def render_html(data: dict[str, Any]) -> str:
    """The overview page of a :func:`snapshot`."""
    refresh = max(1, int(data["ping_interval_ms"]) // 1000)
    lst = data["listening"]
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<meta http-equiv='refresh' content='{refresh}'>",
        "<title>pyum SRS debug monitor</title>",
        "<style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:left}"
        "table{border-collapse:collapse}tr:nth-child(even){background:#eee}</style>",
        "</head><body>",
        "<h1>pyum SRS (Stateful Resolver Service)</h1>",
        _table(
            ["", ""],
            [
                ["version", data["version"]],
                ["SRS protocol version", data["srs_protocol_version"]],
                ["application id", data["application_id"]],
                ["listening on", f"{lst['ip']}:{lst['port']}"],
                ["uptime (s)", data["uptime_s"]],
                ["open connections", data["connections"]],
                ["sources held", data["sources"]],
                [
                    "sampled at",
                    time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(data["sampled_at"])),
                ],
            ],
        ),
        "<h2>SRS_STATS</h2>",
        _table(["counter", "value"], [[k, v] for k, v in data["srs_stats"].items()]),
        "<h2>SRS_ERROR_STATS</h2>",
        _table(["counter", "value"], [[k, v] for k, v in data["srs_error_stats"].items()]),
        "<h2>Refused by bounds, held back</h2>",
        _table(["counter", "value"], [[k, v] for k, v in data["refused"].items()]),
    ]
    clients = data["clients"]
    cols = [
        "ip", "port", "session_id", "client_id", "app_type", "interest_mode", "sources",
        "receiver_topics", "wildcard_patterns", "routes", "context_names", "sir_sent",
        "ser_sent", "record_queue_depth", "records_held_back", "stream_credit",
    ]  # fmt: skip
    parts.append(f"<h2>Connected clients ({clients['total']})</h2>")
    parts.append(
        _table(
            cols,
            [
                [("unbounded" if v is None else v) for v in (row[c] for c in cols)]
                for row in clients["shown"]
            ],
        )
    )
    if clients["more"]:
        parts.append(f"<p>{clients['more']} more clients not shown</p>")
    topics = data["topics"]
    parts.append(f"<h2>Topics ({topics['total']})</h2>")
    parts.append(
        _table(
            ["topic", "sources", "interested clients"],
            [[t["topic"], t["sources"], t["interested"]] for t in topics["shown"]],
        )
    )
    if topics["more"]:
        parts.append(f"<p>{topics['more']} more topics not shown</p>")
    parts.append("<p><a href='json'>this page as JSON</a></p></body></html>")
    return "".join(parts)


class DebugMonitor:
    """Serves :func:`snapshot` as ``/`` (HTML) and ``/json`` on the running loop."""

    def __init__(
        self,
        core: SRSServer,
        config: SRSConfig,
        *,
        listening: tuple[str, int],
        monotonic: Callable[[], float],
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.core = core
        self.config = config
        self.listening = listening
        self.monotonic = monotonic
        self.wall_clock = wall_clock
        self.started = monotonic()
        self.address: tuple[str, int] | None = None
        #: Requests served, and samples taken (at most one per MIN_SAMPLE_INTERVAL).
        self.requests = 0
        self.samples = 0
        self._sample: dict[str, Any] | None = None
        self._sampled_at = 0.0
        self._runner: Any = None

    def data(self) -> dict[str, Any]:
        """The current sample, taken again when older than MIN_SAMPLE_INTERVAL."""
        now = self.monotonic()
        if self._sample is None or now - self._sampled_at >= MIN_SAMPLE_INTERVAL:
            self._sample = snapshot(
                self.core,
                self.config,
                listening=self.listening,
                uptime=now - self.started,
                wall_clock=self.wall_clock(),
            )
            self._sampled_at = now
            self.samples += 1
        return self._sample

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on host:port (0 = ephemeral); returns the bound address."""
        from aiohttp import web  # only when enabled: it costs start-up time

        async def page(request: web.Request) -> web.Response:
            self.requests += 1
            return web.Response(text=render_html(self.data()), content_type="text/html")

        async def as_json(request: web.Request) -> web.Response:
            self.requests += 1
            return web.Response(text=json.dumps(self.data()), content_type="application/json")

        app = web.Application()
        app.router.add_get("/", page)
        app.router.add_get("/json", as_json)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, host, port, reuse_address=True)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        bound = runner.addresses[0]
        self.address = (str(bound[0]), int(bound[1]))
        return self.address

    async def close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
