"""The Store web monitor (``<web-monitor>``): UM's store pages, with UM's paths and markers.

Theory of operation
-------------------
UM's umestored serves, when ``<web-monitor>Address:Port</web-monitor>`` is set, read-only pages
that people read and scripts scrape (Informatica's public ``store_scraper`` among them: curl
and regular expressions over the HTML).  This module is their content; the serving is the
daemons' shared runner (:class:`umcore.daemon.web.WebPages`: aiohttp in the daemon's loop, one
sample per page per second, every string escaped, each page with its JSON twin under
``/json``, a 404 page for anything unknown).  The pages and the HTML markers scrapers rely on:

- ``/`` -- the index: the build ("pyum umestored VERSION") and a link ``Stores``;
- ``/stores`` -- one line per Store instance, numbered from 0 in configuration order:
  ``<LI>Store N:<A HREF="/stores/N">NAME</A></LI>``;
- ``/stores/N`` -- ``<H3>Store N: NAME</H3>``; Interface, Cache Dir, State Dir, the configured
  ``retransmission-request-processing-rate``, the seconds the rates cover, retransmission
  requests received / serviced / dropped per second and dropped in all, the topic Patterns,
  and Topics, one line per topic with a link per source registration::

      <LI>"TOPIC" -  <A HREF="/stores/N/REGID">REGID(SESSIONID)</A> ... </LI>

  and the rate reset (a POST form, see below); then the same sources as a table for people;
- ``/stores/N/REGID`` -- a source's page when REGID is a source registration:
  ``<H3>REGID: Source [REGID IP.PORT TRANSPORT_IDX TOPIC_IDX]</H3>``, ``<DD>Topic: "TOPIC"``,
  ``<DD>Session ID: N``, ``<DD>Last Activity: HH:MM:SS.ffffff``, ``<DD>Repository: KIND``,
  ``<DD>Receiver Paced Persistence: 0|1``, ``<LI>Message Map: N``, ``<LI>Window: [trail,
  mem_trail, lead]`` (hex; a memory repository shows two), ``<LI>Memory: cur / threshold /
  limit``, ``<LI>Age Threshold: N``, ``<LI>Sync: [sync_complete, sync, contig]`` (hex),
  ``<LI>In progress: writes / reads``, ``<LI>Loss: N``, ``<LI>Drops: active / total``,
  ``<DD>LBM Stats: [SOURCE STRING]`` (the transport session the Store joined for it), and its
  receivers as ``REGID(SESSIONID)`` links; a receiver's page when REGID is a receiver's:
  ``<H3>REGID: Receiver [...]</H3>``, Topic, Last Activity, Source RegID (a link), Source
  Session ID, ``<DD>ACK: HEX`` (the last consumption ACK).

Each of those lines is a line of its own in the HTML (scrapers read line by line).  Lists are
capped (:data:`MAX_SOURCES_SHOWN`, :data:`MAX_RECEIVERS_SHOWN`) and end with "N more".

**Rate reset.**  UM's "Reset Rate Stats" zeroes the three rates and the seconds they cover.
Here it is a POST to ``/stores/N/reset-rate-stats`` (a button on the Store page); UM's GET form
(a plain link) is served only when the daemon is started with ``reset_by_get`` (umestored's
``--web-monitor-get-reset``): a GET that changes state can be triggered by any crawler.  The
reset does not touch the core: the monitor keeps the counts at the reset and subtracts them
(the "total dropped" figure is since start, as UM's).

What UM's page has that this one does not: Offsets and Active ULBs (a disk layout of UM's own)
and transport statistics beyond the session's source string.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from umcore import __version__ as pyum_version
from umcore.config.store import StoreInstance
from umcore.daemon import webproc
from umcore.daemon.web import Block, Heading, Html, Link, PageSteps, Para, Table, WebPages
from umcore.errors import ConfigError

if TYPE_CHECKING:  # umestored -v / -d import this module for parse_web_monitor only
    from umcore.engine.context import Engine
    from umcore.engine.raw import RawReceiver
    from umcore.store.core import StoreCore
    from umcore.store.registry import ReceiverEntry, SourceEntry

__all__ = [
    "CHILD_FACTORY",
    "MAX_RECEIVERS_SHOWN",
    "MAX_SOURCES_SHOWN",
    "RESET_MESSAGE",
    "SOURCES_PER_STEP",
    "MonitoredStore",
    "StoreWebMonitor",
    "child_pages",
    "parse_web_monitor",
    "start_store_web_monitor",
]

# Source registrations listed on a Store page (the topic lines and the table): a page for a
# person and a scraper that stays a few hundred kilobytes; the rest are counted ("N more").
MAX_SOURCES_SHOWN = 2000
# Receivers listed on a source page.
MAX_RECEIVERS_SHOWN = 1000
# Sources a Store page's sample reads between two turns of the Store's loop: about a
# millisecond of work on a loaded host, so that sampling a thousand sources never holds the
# stability ACKs back for the whole page (the sample takes ten turns instead).
SOURCES_PER_STEP = 100
# What UM's page says after a rate reset (scrapers look for it).
RESET_MESSAGE = "Rate Statistics have been reset"
_M = 0xFFFFFFFF


# The child process's registrations (umcore.daemon.webproc): the pages without Stores.
CHILD_FACTORY = "daemons.umestored.webmon:child_pages"


def child_pages(*, reset_by_get: bool = False) -> WebPages:
    """The Store web monitor's pages as its child process builds them: the same paths, titles
    and renders; no Stores (the daemon answers for every page's data)."""
    return StoreWebMonitor([], monotonic=time.monotonic, reset_by_get=reset_by_get).pages


def parse_web_monitor(text: str, *, source: str = "<web-monitor>") -> tuple[str, int]:
    """``Address:Port`` (``*`` or an empty address: every interface) -> (host, port).
    ConfigError naming what is allowed for anything else."""
    allowed = "Address:Port, e.g. *:12000 or 127.0.0.1:12000 (port 0: an ephemeral one)"
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(
            f"{text!r} is not an address and port", source=source, what="<web-monitor>",
            allowed=allowed,
        )  # fmt: skip
    host = host.strip("[]")
    return ("0.0.0.0" if host in ("", "*") else host), int(port)


@dataclass(frozen=True, slots=True)
class MonitoredStore:
    """One Store instance as the monitor sees it: its name and configuration, its core (None
    while it starts or after it stopped) and the transport sessions it joined for a topic."""

    name: str
    instance: StoreInstance
    core: Callable[[], StoreCore | None]
    sessions: Callable[[str], Sequence[str]] = lambda _topic: ()


class _Rates:
    """The retransmission-request counts and time at the last reset."""

    __slots__ = ("dropped", "received", "serviced", "since")

    def __init__(self, since: float) -> None:
        self.since = since
        self.received = self.serviced = self.dropped = 0


def _hex(sqn: int) -> str:
    return f"{sqn & _M:x}"


def _clock(wall: float) -> str:
    """UM's Last Activity form: HH:MM:SS.ffffff, local time."""
    t = time.localtime(wall)
    return time.strftime("%H:%M:%S", t) + f".{int((wall % 1) * 1e6):06d}"


def _ip_port(addr: tuple[str, int]) -> str:
    """UM writes an address and port as IP.PORT."""
    return f"{addr[0]}.{addr[1]}"


class StoreWebMonitor:
    """The pages of every Store of one umestored on one :class:`WebPages` runner."""

    def __init__(
        self,
        stores: Sequence[MonitoredStore],
        *,
        monotonic: Callable[[], float],
        wall_clock: Callable[[], float] = time.time,
        reset_by_get: bool = False,
        max_sources: int = MAX_SOURCES_SHOWN,
        max_receivers: int = MAX_RECEIVERS_SHOWN,
        sources_per_step: int = SOURCES_PER_STEP,
        log: logging.Logger | None = None,
    ) -> None:
        self.max_sources = max_sources
        self.sources_per_step = sources_per_step
        self.max_receivers = max_receivers
        self.stores = list(stores)
        self.monotonic = monotonic
        self.wall_clock = wall_clock
        self.reset_by_get = reset_by_get
        self.rates = [_Rates(monotonic()) for _ in self.stores]
        pages = WebPages(
            monotonic=monotonic,
            wall_clock=wall_clock,
            label="store web monitor",
            title="pyum umestored web monitor",
            daemon="umestored",
            log=log or logging.getLogger("umestored"),
        )
        self.pages = pages
        #: The child process serving the pages, when started with ``separate_process``.
        self.process: webproc.WebProcess | None = None
        pages.add_page("/", title="umestored", data=self.index, render=self.index_blocks)
        pages.add_page("/stores", title="Stores", data=self.stores_data, render=self.stores_blocks)
        pages.add_route(
            "/stores/{store}", title="Store {store}", data=self.store, render=self.store_blocks
        )
        pages.add_action(
            "/stores/{store}/reset-rate-stats",
            title="Store {store}: rate statistics",
            run=self.reset,
            render=self.reset_blocks,
            allow_get=reset_by_get,
        )
        pages.add_route(
            "/stores/{store}/{regid}",
            title="Store {store}: RegID {regid}",
            data=self.registration,
            render=self.registration_blocks,
        )

    async def start(
        self, host: str, port: int, *, separate_process: bool = False
    ) -> tuple[str, int]:
        """Serve on host:port (0 = ephemeral).  ``separate_process``: from a child process
        (:mod:`umcore.daemon.webproc`; where :func:`~umcore.daemon.webproc.supported`) that
        asks this process only for each page's data, so that a scraper's HTTP never runs on
        the Stores' loop.  OSError when the address cannot be bound."""
        if separate_process and webproc.supported():
            self.process = webproc.WebProcess(
                self.pages, CHILD_FACTORY, {"reset_by_get": self.reset_by_get}
            )
            return await self.process.start(host, port)
        return await self.pages.start(host, port)

    async def close(self) -> None:
        if self.process is not None:
            await self.process.close()
        await self.pages.close()

    # ------------------------------------------------------------------ lookups
    def _store(self, text: str) -> tuple[int, MonitoredStore, StoreCore] | None:
        if not text.isdigit():
            return None
        n = int(text)
        if n >= len(self.stores):
            return None
        core = self.stores[n].core()
        return None if core is None else (n, self.stores[n], core)

    def _wall(self, core: StoreCore, t: float) -> float:
        return t + core.wall_offset

    # ------------------------------------------------------------------ index
    def index(self) -> dict[str, Any]:
        rows = []
        for n, ms in enumerate(self.stores):
            core = ms.core()
            reg = core.registry if core is not None else None
            rows.append(
                {
                    "store": n,
                    "name": ms.name,
                    "href": f"/stores/{n}",
                    "running": core is not None,
                    "sources": len(reg.sources) if reg else 0,
                    "receivers": len(reg.receivers) if reg else 0,
                    "topics": len(reg.topics) if reg else 0,
                }
            )
        return {"version": f"pyum umestored {pyum_version}", "stores": rows}

    def index_blocks(self, d: dict[str, Any]) -> list[Block]:
        return [
            Html("<H3>{}</H3>\n", d["version"]),
            Html("<P>{}</P>\n", Link("Stores", "/stores")),
            Table(
                ["store", "name", "sources", "receivers", "topics"],
                [
                    [
                        r["store"],
                        Link(r["name"], r["href"]),
                        r["sources"],
                        r["receivers"],
                        r["topics"],
                    ]
                    for r in d["stores"]
                ],
            ),
        ]

    def stores_data(self) -> dict[str, Any]:
        return {
            "stores": [
                {"store": n, "name": ms.name, "href": f"/stores/{n}"}
                for n, ms in enumerate(self.stores)
            ]
        }

    def stores_blocks(self, d: dict[str, Any]) -> list[Block]:
        lines = [
            Html("<LI>Store {}:{}</LI>\n", s["store"], Link(s["name"], s["href"]))
            for s in d["stores"]
        ]
        return [Html("<UL>\n"), *lines, Html("</UL>\n")]

    # ------------------------------------------------------------------ one Store
    def store(self, params: dict[str, str]) -> PageSteps:
        """The Store page's data, in steps of ``sources_per_step`` sources (the runner
        gives the Store's loop a turn between two); a source deregistered meanwhile is left
        out."""
        found = self._store(params["store"])
        if found is None:
            return None
        n, ms, core = found
        reg = core.registry
        rates = self.rates[n]
        seconds = max(0, int(self.monotonic() - rates.since))
        retx = core.retx
        counts = {
            "received": retx.received - rates.received,
            "serviced": retx.serviced - rates.serviced,
            "dropped": retx.dropped - rates.dropped,
        }
        topics: list[dict[str, Any]] = []
        shown = step = 0
        for topic in sorted(reg.topics):
            if shown >= self.max_sources:
                break
            regs = sorted(reg.topics.get(topic, ()))[: self.max_sources - shown]
            entries = []
            for r in regs:
                step += 1
                if step == self.sources_per_step:
                    step = 0
                    yield
                src = reg.sources.get(r)
                if src is None:  # deregistered while the page was being sampled
                    continue
                shown += 1
                entries.append(
                    {
                        "reg_id": r,
                        "session_id": src.session_id,
                        "href": f"/stores/{n}/{r}",
                        "state": src.clock.state.value,
                        "receivers": len(src.receivers),
                        "lead_sqn": src.repository.lead_sqn,
                        "repository": src.repository.kind,
                    }
                )
            if topic in reg.topics:  # not deleted while the page was being sampled
                topics.append({"topic": topic, "sources": entries})
        opts = ms.instance.options
        return {
            "store": n,
            "name": ms.name,
            "interface": {"ip": core.address[0], "port": core.address[1]},
            "cache_dir": core.cache_dir,
            "state_dir": core.state_dir,
            "retransmission_request_processing_rate": int(
                opts["retransmission-request-processing-rate"]
            ),
            "rate_seconds": seconds,
            "rx_received_per_s": counts["received"] / seconds if seconds else 0.0,
            "rx_serviced_per_s": counts["serviced"] / seconds if seconds else 0.0,
            "rx_dropped_per_s": counts["dropped"] / seconds if seconds else 0.0,
            "rx_dropped_total": retx.dropped,
            "patterns": [t.pattern for t in ms.instance.topics],
            "topics": topics,
            "sources_total": len(reg.sources),
            "more": max(0, len(reg.sources) - shown),
            "reset": {"href": f"/stores/{n}/reset-rate-stats", "get": self.reset_by_get},
        }

    def store_blocks(self, d: dict[str, Any]) -> list[Block]:
        iface = d["interface"]
        out: list[Block] = [
            Html("<H3>Store {}: {}</H3>\n<DL>\n", d["store"], d["name"]),
            Html("<DD>Interface: {}:{}</DD>\n", iface["ip"], iface["port"]),
            Html("<DD>Cache Dir: {}</DD>\n", d["cache_dir"]),
            Html("<DD>State Dir: {}</DD>\n", d["state_dir"]),
            Html(
                "<DD>Configured Retransmission Request Processing Rate: {}</DD>\n",
                d["retransmission_request_processing_rate"],
            ),
            Html("<DD>Total Seconds Used for Rate Calculations: {}</DD>\n", d["rate_seconds"]),
            Html("<DD>Retransmission Request Received Rate: {}</DD>\n",
                 f"{d['rx_received_per_s']:.1f}"),
            Html("<DD>Retransmission Request Service Rate: {}</DD>\n",
                 f"{d['rx_serviced_per_s']:.1f}"),
            Html("<DD>Retransmission Request Drop Rate: {}</DD>\n",
                 f"{d['rx_dropped_per_s']:.1f}"),
            Html("<DD>Retransmission Request Total Dropped: {}</DD>\n", d["rx_dropped_total"]),
            Html("<DD>Patterns: {}</DD>\n", ", ".join(f'"{p}"' for p in d["patterns"])),
            Html("<DD>Topics:</DD>\n</DL>\n<UL>\n"),
        ]  # fmt: skip
        for t in d["topics"]:
            links = "".join(
                " " + str(Link(f"{s['reg_id']}({s['session_id']})", s["href"])) + " "
                for s in t["sources"]
            )
            out.append(Html('<LI>"{}" - {}</LI>\n', t["topic"], Html(links)))
        if d["more"]:
            out.append(Html("<LI>{} more sources not shown</LI>\n", d["more"]))
        out.append(Html("</UL>\n"))
        reset = d["reset"]
        if reset["get"]:
            out.append(Html("<P>{}</P>\n", Link("Reset Rate Stats", reset["href"])))
        else:
            out.append(
                Html(
                    '<FORM method="post" action="{}"><button type="submit">Reset Rate Stats'
                    "</button></FORM>\n",
                    reset["href"],
                )
            )
        out.append(Heading(f"Sources ({d['sources_total']})"))
        out.append(
            Table(
                ["topic", "RegID", "session id", "state", "repository", "receivers", "lead"],
                [
                    [
                        t["topic"],
                        Link(s["reg_id"], s["href"]),
                        s["session_id"],
                        s["state"],
                        s["repository"],
                        s["receivers"],
                        _hex(s["lead_sqn"]),
                    ]
                    for t in d["topics"]
                    for s in t["sources"]
                ],
            )
        )
        if d["more"]:
            out.append(Para(f"{d['more']} more sources not shown"))
        return out

    def reset(self, params: dict[str, str]) -> dict[str, Any] | None:
        found = self._store(params["store"])
        if found is None:
            return None
        n, ms, core = found
        r = self.rates[n]
        r.since = self.monotonic()
        r.received, r.serviced, r.dropped = (
            core.retx.received,
            core.retx.serviced,
            core.retx.dropped,
        )
        return {"store": n, "name": ms.name, "message": RESET_MESSAGE, "href": f"/stores/{n}"}

    def reset_blocks(self, d: dict[str, Any]) -> list[Block]:
        return [
            Html("<H3>Store {}: {}</H3>\n", d["store"], d["name"]),
            Html("<P>{}</P>\n", d["message"]),
            Html("<P>{}</P>\n", Link(f"Back to Store {d['store']}", d["href"])),
        ]

    # ------------------------------------------------------------------ a registration
    def registration(self, params: dict[str, str]) -> dict[str, Any] | None:
        found = self._store(params["store"])
        text = params["regid"]
        if found is None or not text.isdigit():
            return None
        n, ms, core = found
        reg_id = int(text)
        src = core.registry.sources.get(reg_id)
        if src is not None:
            return self._source(n, ms, core, src)
        by_src = core.registry.receivers.get(reg_id)
        if by_src:
            return self._receiver(n, core, [by_src[k] for k in sorted(by_src)])
        return None

    def _source(
        self, n: int, ms: MonitoredStore, core: StoreCore, src: SourceEntry
    ) -> dict[str, Any]:
        repo = src.repository
        st = repo.stats()
        cfg = repo.config
        window = [st["trail_sqn"], st["mem_trail_sqn"], st["lead_sqn"]]
        if repo.kind == "memory":
            window = [st["trail_sqn"], st["lead_sqn"]]
        ip = src.reply_to[0]
        sessions = [s for s in ms.sessions(src.topic) if f":{ip}:" in f"{s}:"]
        rcvs = sorted(src.receivers.values(), key=lambda r: r.reg_id)
        shown = rcvs[: self.max_receivers]
        return {
            "kind": "source",
            "store": n,
            "reg_id": src.reg_id,
            "topic": src.topic,
            "session_id": src.session_id,
            "address": {"ip": ip, "port": src.reply_to[1]},
            "transport_idx": src.transport_idx,
            "topic_idx": src.topic_idx,
            "state": src.clock.state.value,
            "last_activity": self._wall(core, src.clock.last_heard),
            "repository": repo.kind,
            "rpp": int(src.rpp),
            "message_map": st["frames_held"],
            "window": window,
            "memory": [st["mem_bytes"], cfg.size_threshold, cfg.size_limit],
            "age_threshold": cfg.age_threshold,
            "sync": [st["sync_complete_sqn"], st["sync_sqn"], st["contig_sqn"]],
            "in_progress": [st["writes_pending"], st["reads_pending"]],
            "loss": st["lost"],
            "drops": [0, st["intentional_drops"] + st["size_limit_drops"] + st["gap_drops"]],
            "lbm_stats": sessions,
            "receivers": [
                {
                    "reg_id": r.reg_id,
                    "session_id": r.session_id,
                    "href": f"/stores/{n}/{r.reg_id}",
                    "ack": r.high_ack_sqn,
                    "state": r.clock.state.value,
                }
                for r in shown
            ],
            "receivers_total": len(rcvs),
            "more": len(rcvs) - len(shown),
            "counters": st,
        }

    def _receiver(self, n: int, core: StoreCore, entries: list[ReceiverEntry]) -> dict[str, Any]:
        rcv = entries[0]
        src = core.registry.sources[rcv.src_reg_id]
        return {
            "kind": "receiver",
            "store": n,
            "reg_id": rcv.reg_id,
            "topic": src.topic,
            "session_id": rcv.session_id,
            "address": {"ip": rcv.reply_to[0], "port": rcv.reply_to[1]},
            "transport_idx": rcv.transport_idx,
            "topic_idx": rcv.topic_idx,
            "state": rcv.clock.state.value,
            "last_activity": self._wall(core, rcv.clock.last_heard),
            "source_reg_id": src.reg_id,
            "source_href": f"/stores/{n}/{src.reg_id}",
            "source_session_id": src.session_id,
            "ack": rcv.high_ack_sqn,
            "rpp_mode": rcv.rpp_mode,
            "also_registered_with": [e.src_reg_id for e in entries[1:]],
        }

    def registration_blocks(self, d: dict[str, Any]) -> list[Block]:
        if d["kind"] == "receiver":
            return self._receiver_blocks(d)
        addr = (d["address"]["ip"], d["address"]["port"])
        out: list[Block] = [
            Html("<H3>{}: Source [{} {} {} {}]</H3>\n<DL>\n", d["reg_id"], d["reg_id"],
                 _ip_port(addr), d["transport_idx"], d["topic_idx"]),
            Html('<DD>Topic: "{}"</DD>\n', d["topic"]),
            Html("<DD>Session ID: {}</DD>\n", d["session_id"]),
            Html("<DD>Last Activity: {}</DD>\n", _clock(d["last_activity"])),
            Html("<DD>State: {}</DD>\n", d["state"]),
            Html("<DD>Repository: {}</DD>\n", d["repository"]),
            Html("<DD>Receiver Paced Persistence: {}</DD>\n</DL>\n<UL>\n", d["rpp"]),
            Html("<LI>Message Map: {}</LI>\n", d["message_map"]),
            Html("<LI>Window: [{}]</LI>\n", ", ".join(_hex(x) for x in d["window"])),
            Html("<LI>Memory: {}</LI>\n", " / ".join(str(x) for x in d["memory"])),
            Html("<LI>Age Threshold: {}</LI>\n", f"{d['age_threshold']:g}"),
            Html("<LI>Sync: [{}]</LI>\n", ", ".join(_hex(x) for x in d["sync"])),
            Html("<LI>In progress: {} / {}</LI>\n", *d["in_progress"]),
            Html("<LI>Loss: {}</LI>\n", d["loss"]),
            Html("<LI>Drops: {} / {}</LI>\n</UL>\n<DL>\n", *d["drops"]),
            Html("<DD>LBM Stats: [{}]</DD>\n", " ".join(d["lbm_stats"])),
            Html("<DD>Receivers ({}):</DD>\n</DL>\n<UL>\n", d["receivers_total"]),
        ]  # fmt: skip
        for r in d["receivers"]:
            out.append(Html("<LI>{}</LI>\n", Link(f"{r['reg_id']}({r['session_id']})", r["href"])))
        if d["more"]:
            out.append(Html("<LI>{} more receivers not shown</LI>\n", d["more"]))
        out.append(Html("</UL>\n"))
        out.append(Heading("Receivers"))
        out.append(
            Table(
                ["RegID", "session id", "state", "last ACK"],
                [
                    [Link(r["reg_id"], r["href"]), r["session_id"], r["state"], _hex(r["ack"])]
                    for r in d["receivers"]
                ],
            )
        )
        out.append(Heading("Repository counters"))
        out.append(Table(["counter", "value"], d["counters"].items()))
        return out

    def _receiver_blocks(self, d: dict[str, Any]) -> list[Block]:
        addr = (d["address"]["ip"], d["address"]["port"])
        return [
            Html("<H3>{}: Receiver [{} {} {} {}]</H3>\n<DL>\n", d["reg_id"], d["reg_id"],
                 _ip_port(addr), d["transport_idx"], d["topic_idx"]),
            Html('<DD>Topic: "{}"</DD>\n', d["topic"]),
            Html("<DD>Session ID: {}</DD>\n", d["session_id"]),
            Html("<DD>Last Activity: {}</DD>\n", _clock(d["last_activity"])),
            Html("<DD>State: {}</DD>\n", d["state"]),
            Html("<DD>Source RegID: {}</DD>\n", Link(d["source_reg_id"], d["source_href"])),
            Html("<DD>Source Session ID: {}</DD>\n", d["source_session_id"]),
            Html("<DD>ACK: {}</DD>\n</DL>\n", _hex(d["ack"])),
        ]  # fmt: skip


class _Plan(Protocol):
    @property
    def instance(self) -> StoreInstance: ...


class _Runtime(Protocol):
    """What the monitor reads of a running Store (daemons.umestored.app.StoreRuntime)."""

    @property
    def name(self) -> str: ...
    @property
    def plan(self) -> _Plan: ...
    @property
    def core(self) -> StoreCore | None: ...
    @property
    def engine(self) -> Engine | None: ...
    @property
    def raw(self) -> Mapping[str, RawReceiver]: ...


def _core_of(rt: _Runtime) -> Callable[[], StoreCore | None]:
    return lambda: rt.core


def _joined_sessions(rt: _Runtime) -> Callable[[str], list[str]]:
    """topic -> the source strings of the transport sessions the Store joined for it."""

    def sessions(topic: str) -> list[str]:
        raw, engine = rt.raw.get(topic), rt.engine
        if raw is None or engine is None:
            return []
        out = []
        for key, _sink in raw.attached:
            js = engine.joined.get(key)
            if js is not None:
                out.append(js.source_string)
        return out

    return sessions


async def start_store_web_monitor(
    runtimes: Sequence[_Runtime],
    address: tuple[str, int],
    *,
    monotonic: Callable[[], float],
    reset_by_get: bool = False,
    separate_process: bool = True,
    log: logging.Logger | None = None,
) -> StoreWebMonitor | None:
    """The web monitor of ``runtimes`` on ``address`` (served from a child process unless
    ``separate_process`` is false); None (logged) when it cannot bind: the Stores go on
    without it, as UM's do."""
    stores = [
        MonitoredStore(rt.name, rt.plan.instance, _core_of(rt), _joined_sessions(rt))
        for rt in runtimes
    ]
    mon = StoreWebMonitor(stores, monotonic=monotonic, reset_by_get=reset_by_get, log=log)
    try:
        await mon.start(*address, separate_process=separate_process)
    except OSError as exc:
        (log or logging.getLogger("umestored")).error(
            "web monitor not started on %s:%d: %s", address[0], address[1], exc.strerror or exc
        )
        return None
    return mon
