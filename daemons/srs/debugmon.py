"""The SRS debug monitor (``<debug-monitor>``): what the SRS's support page shows.

Theory of operation
-------------------
UM's SRS can serve a web page describing its state, "for support only", when
``<debug-monitor><enabled>true</enabled>`` (off by default; ``interface`` localhost and
``port`` 27001 by default, the port the real SRS reports — trap 5: the documented 27000 would
collide with the SRS's own listener).  The serving is the daemons' shared runner
(:class:`umcore.daemon.web.WebPages`: aiohttp in the daemon's loop, sampling at most every
``MIN_SAMPLE_INTERVAL``, HTML escaping, each page with its JSON twin); this module is only the
SRS's content, one page:

- ``GET /``: an HTML overview — version, uptime, listening address, the SRS_STATS counters,
  the connected clients with their session ids and record counts, and the topics with their
  sources and interested clients;
- ``GET /json``: its JSON twin, the same data as one JSON object (:func:`snapshot`).

Bounds.  The client and topic lists show at most ``MAX_CLIENTS_SHOWN`` / ``MAX_TOPICS_SHOWN``
entries (in name order) and say how many more exist ("N more").

``ping-interval`` (the one ping interval of the SRS; the daemon monitor's overrides it, see
:mod:`umcore.config.srs`) is the page's refresh period: the HTML asks the browser to reload
every ping-interval, and ``/json`` reports it.  That is our reading [I]: UM documents it only as
the period at which internal statistics are sampled.

``port`` 0 (pyum only) binds an ephemeral port; the bound address is in the log line
``debug monitor on http://HOST:PORT/``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from umcore import __version__ as pyum_version
from umcore.config.srs import SRSConfig
from umcore.daemon.web import Block, Heading, Para, Table, WebPages, render_page
from umcore.srs.server import PROTOCOL_VERSION, UNBOUNDED_CREDIT, Client, SRSServer

__all__ = [
    "MAX_CLIENTS_SHOWN",
    "MAX_TOPICS_SHOWN",
    "TITLE",
    "debug_pages",
    "page_blocks",
    "render_html",
    "snapshot",
]

log = logging.getLogger("SRS")

# Clients and topics listed per page: a page of a few hundred rows stays readable and cheap to
# build; the totals are always given ("N more").
MAX_CLIENTS_SHOWN = 200
MAX_TOPICS_SHOWN = 200

TITLE = "pyum SRS (Stateful Resolver Service)"


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


def _refresh_s(ping_interval_ms: int) -> int:
    return max(1, int(ping_interval_ms) // 1000)


def page_blocks(data: dict[str, Any]) -> list[Block]:
    """The overview page of a :func:`snapshot`, as blocks for the shared renderer."""
    lst = data["listening"]
    blocks: list[Block] = [
        Table(
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
        Heading("SRS_STATS"),
        Table(["counter", "value"], data["srs_stats"].items()),
        Heading("SRS_ERROR_STATS"),
        Table(["counter", "value"], data["srs_error_stats"].items()),
        Heading("Refused by bounds, held back"),
        Table(["counter", "value"], data["refused"].items()),
    ]
    clients = data["clients"]
    cols = [
        "ip", "port", "session_id", "client_id", "app_type", "interest_mode", "sources",
        "receiver_topics", "wildcard_patterns", "routes", "context_names", "sir_sent",
        "ser_sent", "record_queue_depth", "records_held_back", "stream_credit",
    ]  # fmt: skip
    blocks.append(Heading(f"Connected clients ({clients['total']})"))
    blocks.append(
        Table(
            cols,
            [
                [("unbounded" if v is None else v) for v in (row[c] for c in cols)]
                for row in clients["shown"]
            ],
        )
    )
    if clients["more"]:
        blocks.append(Para(f"{clients['more']} more clients not shown"))
    topics = data["topics"]
    blocks.append(Heading(f"Topics ({topics['total']})"))
    blocks.append(
        Table(
            ["topic", "sources", "interested clients"],
            [[t["topic"], t["sources"], t["interested"]] for t in topics["shown"]],
        )
    )
    if topics["more"]:
        blocks.append(Para(f"{topics['more']} more topics not shown"))
    return blocks


def render_html(data: dict[str, Any]) -> str:
    """The overview page of a :func:`snapshot` as the runner serves it at ``/``."""
    return render_page(
        TITLE,
        page_blocks(data),
        refresh_s=_refresh_s(data["ping_interval_ms"]),
        json_href="/json",
    )


def debug_pages(
    core: SRSServer,
    config: SRSConfig,
    *,
    listening: tuple[str, int],
    monotonic: Callable[[], float],
    wall_clock: Callable[[], float] = time.time,
) -> WebPages:
    """The SRS's pages on the shared runner: :func:`snapshot` at ``/`` (and ``/json``)."""
    started = monotonic()

    def data() -> dict[str, Any]:
        return snapshot(
            core,
            config,
            listening=listening,
            uptime=monotonic() - started,
            wall_clock=wall_clock(),
        )

    pages = WebPages(
        monotonic=monotonic,
        label="debug monitor",
        title=TITLE,
        log=log,
        daemon="SRS",
        wall_clock=wall_clock,
    )
    pages.add_page(
        "/",
        title=TITLE,
        data=data,
        render=page_blocks,
        refresh_s=_refresh_s(config.ping_interval),
    )
    return pages
