"""A daemon's read-only web pages (debug monitor): every page in HTML and as its JSON twin.

Theory of operation
-------------------
UM's daemons can serve a web page describing their state "for support only" (the SRS's
``<debug-monitor>``; the store and the DRO have theirs).  Every pyum daemon serves its pages with
one :class:`WebPages` runner: aiohttp (``AppRunner``/``TCPSite``) inside the daemon's own event
loop, so a request reads the daemon's cores between two of their inputs, never concurrently with
them.  Port 0 binds an ephemeral port; the bound address is logged (``<label> on
http://HOST:PORT/``) and kept in :attr:`WebPages.address`.

A daemon registers pages with :meth:`WebPages.add_page`: a path, a title, a ``data`` callable
returning the page's content as plain JSON-able data, and a ``render`` callable turning that data
into :data:`Block` values (headings, tables, paragraphs).  The daemon never writes HTML: the
runner renders the blocks and HTML-escapes every string it puts on the page (topic names and
addresses come from peers).

**URL convention.** A page at path ``P`` is served as HTML at ``P`` and its data as JSON at
``/json`` + ``P`` (the trailing slash dropped): ``/`` -> ``/json``, ``/clients`` ->
``/json/clients`` (:func:`json_path`).  Paths under ``/json`` are therefore reserved.  When the
daemon registers no page at ``/``, ``/`` is an index of the pages (and ``/json`` the list).

**Sampling.**  ``data`` may walk every table of a core (O(records)), so each page's data is taken
at most once every :data:`MIN_SAMPLE_INTERVAL` seconds and reused in between, whatever the
requests: a browser reloading in a loop cannot take the event loop from the daemon's work.  The
HTML and the JSON twin of a page share that sample.  Time comes from the ``monotonic`` callable
the daemon passes (``loop.time`` in a daemon, a fake in tests).  A sample's HTML and JSON text
are rendered once and kept with it, so a flood of requests costs a lookup and a write each.

**Long samples in steps.**  A page whose data walks thousands of records (a Store page lists
every source registration) may be registered with a ``data`` callable that returns a generator:
it yields between chunks of its work and returns the data.  Served from a child process
(:meth:`WebPages.answer_async`) or in this loop, the runner gives the loop back between two
chunks, and encodes a large sample's JSON a slice at a time (:func:`json_steps`): the daemon's
data path never waits for a whole page, only for one chunk (about :data:`JSON_STEP_WEIGHT`
values).  Requests for a path whose sample is being taken wait for that one sample.  The
synchronous accessors (:meth:`WebPages.sample`, :meth:`WebPages.answer`) run the steps back to
back.

**Routes.**  :meth:`WebPages.add_route` serves pages whose path has parameters
(``/stores/{store}/{regid}``): their ``data`` takes the parameters and returns None for a page
that does not exist (a 404).  Samples are kept per concrete path (at most
:data:`MAX_SAMPLES`).  :meth:`WebPages.add_action` serves a POST that changes something (a rate
reset): never sampled, it drops every sample so the next page shows the change; a GET of an
action is refused (405) unless the daemon allows it for that action.  Requests go through one
handler: repeated slashes are one (``//stores/1`` is ``/stores/1``, as UM's store web monitor
accepts: its scrapers join base URL and absolute links with a slash), a trailing slash is
dropped; an unknown path gets a 404 page (JSON under ``/json``), a page whose data raises gets a
500 page -- never a trace; both are counted.

**In a child process.**  A flood of requests still costs the daemon's loop the HTTP work of
each (parsing, rendering, writing: about a third of a millisecond a page).  A daemon whose data
path must not feel a scraper serves its pages from a child process instead
(:mod:`umcore.daemon.webproc`): the child holds the same registrations (its own
:class:`WebPages`, built by a factory the daemon names), does all the HTTP and rendering, and
asks the daemon only for a page's *data* -- :meth:`WebPages.answer` in the daemon, at most once
per page per :data:`MIN_SAMPLE_INTERVAL` as above; the child's :meth:`WebPages.serve_remote`
routes its samples and actions through that question.

**Header.**  Every HTML page opens with the daemon, its version, its uptime and the time its
sample was taken, and a link to the index; :class:`Link` and :class:`Html` let a page put links
and a daemon's own markup (UM's store pages keep UM's HTML markers) with every argument
escaped.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Generator, Iterable, Iterator, Sequence
from typing import Any

from umcore import __version__ as pyum_version
from umcore.daemon.logs import RateLimitedLog

__all__ = [
    "CLIENT_ERROR_LOG_BURST",
    "CLIENT_ERROR_LOG_PERIOD",
    "JSON_PREFIX",
    "JSON_STEP_WEIGHT",
    "MAX_SAMPLES",
    "MIN_SAMPLE_INTERVAL",
    "REQUEST_HEAD_TIMEOUT",
    "Action",
    "Block",
    "Header",
    "Heading",
    "Html",
    "Link",
    "Page",
    "Para",
    "RemoteFetch",
    "Table",
    "WebPages",
    "finish_steps",
    "format_uptime",
    "json_path",
    "json_steps",
    "json_text_async",
    "json_text_if_small",
    "normalize_path",
    "render_page",
    "run_steps",
]

# A page's data walks the daemon's tables (O(records)); no more than one sample per second per
# page whatever the requests, so a reloading browser costs the daemon at most that.
MIN_SAMPLE_INTERVAL = 1.0
# Every page's JSON twin lives under this prefix (see json_path).
JSON_PREFIX = "/json"
# Samples kept at once (one per concrete path of a route: a store with thousands of sources has
# thousands of source pages); beyond it the ones older than MIN_SAMPLE_INTERVAL are dropped,
# and if none is, all: memory stays bounded whatever paths a scraper asks for.
MAX_SAMPLES = 4096

# Values (list items and dict entries, nested ones too) a page's JSON is encoded in between
# two yields to the loop (json_steps): about 30 Store page sources, a few hundred microseconds of
# json.dumps -- short next to the stability-ACK latency the data path keeps, long enough that the
# steps' own cost (a loop turn each) stays a few percent of the encoding.
JSON_STEP_WEIGHT = 256

PageData = dict[str, Any]
# What a stepped page's data callable returns: a generator that yields (nothing) between chunks
# of its work and returns the page's data (None: no such page).
PageSteps = Generator[None, None, PageData | None]
log = logging.getLogger("umcore.daemon.web")
# How a page served from a child process gets its data: (method, path) -> the daemon's
# WebPages.answer, across the pipe.
RemoteFetch = Callable[[str, str], Awaitable[dict[str, Any]]]


# A connection that has not sent a complete request head this long after it connected (or after
# its last response) is closed: aiohttp's keep-alive timer, which closes a connection whose
# handler waits for a request, also bounds one sending nothing or dribbling its head.  Local
# scrapers and browsers send a head in milliseconds; Prometheus reconnects between scrapes.
REQUEST_HEAD_TIMEOUT = 5.0
# Client errors (an oversized or malformed request head) are logged as one line per kind, at
# most this many per CLIENT_ERROR_LOG_PERIOD seconds, then a count; never a traceback.
CLIENT_ERROR_LOG_BURST = 5
CLIENT_ERROR_LOG_PERIOD = 10.0


class _ServerLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's server logger: a request aiohttp refused for the client's fault (its
    ``HttpProcessingError``: a line or header too long, a bad method ...) is one rate-limited
    line; anything else (a bug of ours) keeps its traceback."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__(logger, {})
        self.limited = RateLimitedLog(
            logger,
            time.monotonic,
            period=CLIENT_ERROR_LOG_PERIOD,
            burst=CLIENT_ERROR_LOG_BURST,
        )
        #: Requests refused for the client's fault since start.
        self.client_errors = 0

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        from aiohttp.http_exceptions import HttpProcessingError

        exc = kwargs.get("exc_info")
        if isinstance(exc, HttpProcessingError):
            self.client_errors += 1
            peer = args[0] if args else "?"
            kind = type(exc).__name__
            text = exc.message if isinstance(exc.message, str) else str(exc)
            self.limited.warning(
                kind,
                "HTTP: refused a request from %s (%s): %s",
                peer,
                kind,
                text.splitlines()[0][:200] if text else kind,
            )
            return
        super().log(level, msg, *args, **kwargs)


async def serve_app(app: Any, host: str, port: int) -> tuple[Any, tuple[str, int]]:
    """Serve an aiohttp application inside the running loop on host:port (0 = ephemeral):
    its runner (stop it with ``cleanup()``) and the bound address.  OSError when the address
    cannot be bound (nothing is left running then).  Connections are bounded in time
    (:data:`REQUEST_HEAD_TIMEOUT`) and client errors logged as one rate-limited line each."""
    from aiohttp import web  # only when a daemon serves HTTP: it costs start-up time

    runner = web.AppRunner(
        app,
        access_log=None,
        handle_signals=False,
        keepalive_timeout=REQUEST_HEAD_TIMEOUT,
        logger=_ServerLog(log),
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = runner.addresses[0]
    return runner, (str(bound[0]), int(bound[1]))


class Heading:
    """A section title on a page."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class Para:
    """A paragraph of plain text."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class Table:
    """A table: column headers and rows of values (shown as ``str(value)``, ``None`` empty)."""

    __slots__ = ("headers", "rows")

    def __init__(self, headers: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
        self.headers = list(headers)
        self.rows = [list(r) for r in rows]


class Link:
    """A link (``text`` escaped, ``href`` escaped as an attribute): a table cell, or an
    argument of :class:`Html`."""

    __slots__ = ("href", "text")

    def __init__(self, text: object, href: str) -> None:
        self.text = text
        self.href = href

    def __str__(self) -> str:
        return f'<A HREF="{html.escape(self.href, quote=True)}">{html.escape(str(self.text))}</A>'


class Html:
    """A daemon's own markup: ``template`` (literal HTML the daemon wrote, ``str.format``
    placeholders ``{}``) with every argument escaped (a :class:`Link` or :class:`Html` argument
    is put as markup)."""

    __slots__ = ("text",)

    def __init__(self, template: str, *args: object) -> None:
        self.text = template.format(*(_inline(a) for a in args))

    def __str__(self) -> str:
        return self.text


def _inline(value: object) -> str:
    if isinstance(value, Link | Html):
        return str(value)
    return html.escape(str(value), quote=True)


Block = Heading | Para | Table | Html


def json_path(path: str) -> str:
    """The URL of the JSON twin of the page at ``path``: ``/`` -> ``/json``, ``/a`` -> ``/json/a``."""
    return JSON_PREFIX + path.rstrip("/")


def _weight(value: Any, limit: int) -> int:
    """The values in ``value`` (a scalar is 1, a list or dict its length plus its containers'
    weights), counted only until they pass ``limit``: what one ``json.dumps`` of it costs,
    found in O(limit)."""
    kind = type(value)  # exact types: this runs for every answer, isinstance costs more
    if kind is dict:
        children: Iterable[object] = value.values()
    elif kind is list or kind is tuple:
        children = value
    else:
        return 1
    weight: int = len(value)
    if weight > limit:
        return weight
    for c in children:
        kind = type(c)
        if kind is dict or kind is list or kind is tuple:
            weight += _weight(c, limit - weight)
            if weight > limit:
                break
    return weight


class _JsonSteps:
    """The pieces of one :func:`json_steps` encoding and the weight since the last yield."""

    __slots__ = ("budget", "out", "since")

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.out: list[str] = []
        self.since = 0

    def done(self, weight: int) -> bool:
        """Count ``weight`` encoded; True (and start again) when a yield is due."""
        self.since += weight
        if self.since < self.budget:
            return False
        self.since = 0
        return True

    def encode(self, value: object, weight: int) -> Iterator[None]:
        if weight <= self.budget or not isinstance(value, dict | list | tuple):
            self.out.append(json.dumps(value, default=str))
            if self.done(weight):
                yield
            return
        is_dict = isinstance(value, dict)
        items: Iterable[Any] = value.items() if isinstance(value, dict) else value
        self.out.append("{" if is_dict else "[")
        group: list[Any] = []
        group_weight = 0
        first = True
        for item in items:
            child = item[1] if is_dict else item
            w = _weight(child, self.budget)
            if w > self.budget and isinstance(child, dict | list | tuple):
                if group:
                    first = self._flush(group, is_dict, first)
                    group, group_weight = [], 0
                if not first:
                    self.out.append(", ")
                first = False
                if is_dict:  # the key as json.dumps writes it (a number as a string ...)
                    self.out.append(json.dumps({item[0]: None})[1:-5])
                yield from self.encode(child, w)
                continue
            group.append(item)
            group_weight += w
            if group_weight >= self.budget:
                first = self._flush(group, is_dict, first)
                group, group_weight = [], 0
                if self.done(self.budget):
                    yield
        if group:
            self._flush(group, is_dict, first)
        self.out.append("}" if is_dict else "]")

    def _flush(self, group: list[Any], is_dict: bool, first: bool) -> bool:
        text = json.dumps(dict(group) if is_dict else group, default=str)[1:-1]
        self.out.append(text if first else ", " + text)
        return False


def json_steps(value: object, *, budget: int = JSON_STEP_WEIGHT) -> Generator[None, None, str]:
    """``json.dumps(value, default=str)``, the same text, encoded a slice at a time: a generator
    that yields after about ``budget`` values and returns the text.  Lists and
    dicts heavier than the budget are split into slices; the rest goes whole to ``json.dumps``."""
    enc = _JsonSteps(budget)
    yield from enc.encode(value, _weight(value, budget))
    return "".join(enc.out)


async def run_steps(steps: Generator[None, None, Any]) -> Any:
    """Run a generator of steps to its return value, giving the loop a turn between steps."""
    try:
        while True:
            next(steps)
            await asyncio.sleep(0)
    except StopIteration as stop:
        return stop.value


def finish_steps(steps: Generator[None, None, Any]) -> Any:
    """Run a generator of steps to its return value at once."""
    try:
        while True:
            next(steps)
    except StopIteration as stop:
        return stop.value


def json_text_if_small(value: object) -> str | None:
    """``json.dumps(value, default=str)`` when ``value`` weighs no more than one slice of
    :func:`json_steps` (most pages: encoded at once, without the steps' overhead), else None."""
    if _weight(value, JSON_STEP_WEIGHT) > JSON_STEP_WEIGHT:
        return None
    return json.dumps(value, default=str)


async def json_text_async(value: object) -> str:
    """:func:`json_steps` run with the loop's turns between slices (a small value at once)."""
    text = json_text_if_small(value)
    if text is None:
        text = await run_steps(json_steps(value))
    return text


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, Link | Html):
        return str(value)
    return html.escape(str(value))


def _block(block: Block) -> str:
    e = html.escape
    if isinstance(block, Heading):
        return f"<h2>{e(block.text)}</h2>"
    if isinstance(block, Para):
        return f"<p>{e(block.text)}</p>"
    if isinstance(block, Html):
        return block.text
    head = "".join(f"<th>{e(h)}</th>" for h in block.headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in block.rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def format_uptime(seconds: float) -> str:
    """``3d 04:05:06`` / ``04:05:06``: an uptime a person reads at a glance."""
    s = max(0, int(seconds))
    days, s = divmod(s, 86400)
    hms = f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}d {hms}" if days else hms


class Header:
    """The line on top of every page: daemon, version, uptime, when the sample was taken."""

    __slots__ = ("daemon", "sampled_at", "uptime_s", "version")

    def __init__(self, daemon: str, version: str, uptime_s: float, sampled_at: float) -> None:
        self.daemon = daemon
        self.version = version
        self.uptime_s = uptime_s
        self.sampled_at = sampled_at

    def html(self) -> str:
        e = html.escape
        when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(self.sampled_at))
        return (
            "<div class='hdr'><a href='/'><b>" + e(self.daemon) + "</b></a> "
            f"<span class='ver'>pyum {e(self.version)}</span> "
            f"&middot; up <span class='uptime'>{e(format_uptime(self.uptime_s))}</span> "
            f"&middot; sampled <span class='sampled'>{e(when)}</span></div>"
        )


_STYLE = (
    "body{font-family:sans-serif;margin:1em 2em}td,th{padding:2px 8px;text-align:left}"
    "table{border-collapse:collapse;margin:.5em 0}th{background:#dde}"
    "tr:nth-child(even){background:#eee}.hdr{background:#234;color:#fff;padding:4px 8px}"
    ".hdr a{color:#fff;text-decoration:none}dd{margin:2px 1em}"
)


def render_page(
    title: str,
    blocks: Iterable[Block],
    *,
    refresh_s: int | None = None,
    json_href: str | None = None,
    header: Header | None = None,
) -> str:
    """A whole HTML page: the header (when given), ``title`` as heading, the blocks, a link to
    the JSON twin; every string escaped.  ``refresh_s`` asks the browser to reload every that
    many seconds."""
    e = html.escape
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'>"]
    if refresh_s is not None:
        parts.append(f"<meta http-equiv='refresh' content='{max(1, int(refresh_s))}'>")
    parts += [
        f"<title>{e(title)}</title>",
        f"<style>{_STYLE}</style>",
        "</head><body>",
        header.html() if header is not None else "",
        f"<h1>{e(title)}</h1>",
    ]
    parts += [_block(b) for b in blocks]
    if json_href is not None:
        parts.append(f"<p><a href='{e(json_href, quote=True)}'>this page as JSON</a></p>")
    parts.append("</body></html>")
    return "".join(parts)


PageParams = dict[str, str]
# A route's path parameter: one path segment.
_PARAM = re.compile(r"\{([a-z_][a-z0-9_]*)\}")
_SLASHES = re.compile(r"/{2,}")


def normalize_path(path: str) -> str:
    """Repeated slashes as one, no trailing slash (``/`` stays)."""
    path = _SLASHES.sub("/", path or "/")
    if len(path) > 1:
        path = path.rstrip("/") or "/"
    return path


class Page:
    """One registered page or route (see :meth:`WebPages.add_page`, :meth:`add_route`)."""

    __slots__ = ("data", "path", "pattern", "refresh_s", "render", "title")

    def __init__(
        self,
        path: str,
        title: str,
        data: Callable[[PageParams], PageData | PageSteps | None],
        render: Callable[[PageData], Iterable[Block]],
        refresh_s: int | None,
    ) -> None:
        self.path = path
        self.title = title
        self.data = data
        self.render = render
        self.refresh_s = refresh_s
        self.pattern = _compile(path)


class Action:
    """A POST that changes something (see :meth:`WebPages.add_action`)."""

    __slots__ = ("allow_get", "path", "pattern", "render", "run", "title")

    def __init__(
        self,
        path: str,
        title: str,
        run: Callable[[PageParams], PageData | None],
        render: Callable[[PageData], Iterable[Block]],
        allow_get: bool,
    ) -> None:
        self.path = path
        self.title = title
        self.run = run
        self.render = render
        self.allow_get = allow_get
        self.pattern = _compile(path)


def _compile(path: str) -> re.Pattern[str] | None:
    """None for a path without parameters, else the regular expression matching it."""
    if "{" not in path:
        return None
    parts = _PARAM.split(path)
    rx = "".join(f"(?P<{part}>[^/]+)" if i % 2 else re.escape(part) for i, part in enumerate(parts))
    return re.compile(rx + r"\Z")


class _Sample:
    __slots__ = ("data", "html", "json", "taken_at", "wall")

    def __init__(self, data: PageData | None, taken_at: float, wall: float) -> None:
        self.data = data
        self.taken_at = taken_at
        self.wall = wall
        self.html: str | None = None
        self.json: str | None = None


class WebPages:
    """A daemon's pages on the running loop; see the module docstring."""

    def __init__(
        self,
        *,
        monotonic: Callable[[], float],
        label: str = "debug monitor",
        title: str = "pyum daemon",
        log: logging.Logger | None = None,
        daemon: str | None = None,
        version: str = pyum_version,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.monotonic = monotonic
        self.wall_clock = wall_clock
        self.label = label
        self.title = title
        #: Shown in every page's header.
        self.daemon = daemon or title
        self.version = version
        self.started = monotonic()
        self.log = log or logging.getLogger("umcore.daemon.web")
        self.pages: dict[str, Page] = {}
        self.routes: list[Page] = []
        self.actions: list[Action] = []
        #: The bound (host, port) once started.
        self.address: tuple[str, int] | None = None
        #: Pages served, samples taken (at most one per page per MIN_SAMPLE_INTERVAL), actions
        #: run, requests for no page (404), refused methods (405), pages that failed (500).
        self.requests = 0
        self.samples = 0
        self.actions_run = 0
        self.not_found = 0
        self.refused = 0
        self.errors = 0
        self._samples: dict[str, _Sample] = {}
        self._runner: Any = None
        # In a child process (serve_remote): the daemon answers for the data.
        self._remote: RemoteFetch | None = None
        # Stepped samples being taken, by path: later requests for the path wait for that one.
        self._taking: dict[str, asyncio.Future[_Sample]] = {}

    def _check_new(self, path: str) -> None:
        if not path.startswith("/"):
            raise ValueError(f"page path {path!r} does not start with /")
        if path == JSON_PREFIX or path.startswith(JSON_PREFIX + "/"):
            raise ValueError(f"page path {path!r} is under {JSON_PREFIX}, the JSON twins' prefix")
        taken = {*self.pages, *(r.path for r in self.routes), *(a.path for a in self.actions)}
        if path in taken:
            raise ValueError(f"page {path!r} registered twice")
        if self._runner is not None:
            raise RuntimeError("pages are registered before start()")

    def add_page(
        self,
        path: str,
        *,
        title: str,
        data: Callable[[], PageData | PageSteps],
        render: Callable[[PageData], Iterable[Block]],
        refresh_s: int | None = None,
    ) -> None:
        """Serve ``render(data())`` at ``path`` and ``data()`` at :func:`json_path` ``(path)``
        (``data`` may return a generator of steps: see "Long samples in steps" above).

        ValueError for a path not starting with ``/``, under ``/json``, or already registered.
        """
        self._check_new(path)
        self.pages[path] = Page(path, title, lambda _params: data(), render, refresh_s)

    def add_route(
        self,
        path: str,
        *,
        title: str,
        data: Callable[[PageParams], PageData | PageSteps | None],
        render: Callable[[PageData], Iterable[Block]],
        refresh_s: int | None = None,
    ) -> None:
        """Serve the pages of a path with ``{name}`` parameters (one segment each):
        ``data(params)`` (None: no such page, a 404); ``title`` is formatted with the
        parameters.  Static pages are matched first, then actions, then routes, each in
        registration order."""
        self._check_new(path)
        page = Page(path, title, data, render, refresh_s)
        if page.pattern is None:
            raise ValueError(f"route {path!r} has no {{parameter}}; use add_page")
        self.routes.append(page)

    def add_action(
        self,
        path: str,
        *,
        title: str,
        run: Callable[[PageParams], PageData | None],
        render: Callable[[PageData], Iterable[Block]],
        allow_get: bool = False,
    ) -> None:
        """A POST at ``path`` (parameters as for routes) running ``run(params)`` (None: no such
        thing, a 404) and showing ``render`` of its result; its JSON twin answers the POST with
        the result as JSON.  A GET is refused (405) unless ``allow_get``."""
        self._check_new(path)
        self.actions.append(Action(path, title, run, render, allow_get))

    def invalidate(self) -> None:
        """Drop every sample: the next request of each page takes a new one."""
        self._samples.clear()

    # ------------------------------------------------------------------------ content

    def resolve(self, path: str) -> tuple[Page | Action, PageParams] | None:
        """The page, route or action serving ``path`` (normalized), with its parameters."""
        page = self.pages.get(path)
        if page is not None:
            return page, {}
        entries: list[Page | Action] = [*self.actions, *self.routes]
        for entry in entries:
            assert entry.pattern is not None
            m = entry.pattern.match(path)
            if m is not None:
                return entry, m.groupdict()
        return None

    def _lookup(self, path: str) -> tuple[Page, PageParams, _Sample | None, float] | None:
        """The page at ``path``, its parameters, its sample if still fresh (None: one must be
        taken) and the time now; None when no page is there."""
        found = self.resolve(path)
        if found is None:
            return None
        page, params = found
        if not isinstance(page, Page):
            return None
        now = self.monotonic()
        s = self._samples.get(path)
        if s is not None and now - s.taken_at >= MIN_SAMPLE_INTERVAL:
            s = None
        return page, params, s, now

    def _page_sample(self, path: str) -> tuple[Page, PageParams, _Sample] | None:
        found = self._lookup(path)
        if found is None:
            return None
        page, params, s, now = found
        if s is None:
            data = page.data(params)
            if isinstance(data, Generator):
                data = finish_steps(data)
            s = self._keep(path, data, now)
        return page, params, s

    def _keep(self, path: str, data: PageData | None, taken_at: float) -> _Sample:
        s = _Sample(data, taken_at, self.wall_clock())
        if path not in self._samples and len(self._samples) >= MAX_SAMPLES:
            self._evict(self.monotonic())
        self._samples[path] = s
        self.samples += 1
        return s

    async def _page_sample_async(self, path: str) -> tuple[Page, PageParams, _Sample] | None:
        """:meth:`_page_sample` with a stepped page's steps run between the loop's turns; a
        request for a path whose sample is being taken waits for it."""
        found = self._lookup(path)
        if found is None:
            return None
        page, params, s, now = found
        if s is not None:
            return page, params, s
        taking = self._taking.get(path)
        if taking is not None:
            return page, params, await asyncio.shield(taking)
        data = page.data(params)
        if not isinstance(data, Generator):
            return page, params, self._keep(path, data, now)
        fut: asyncio.Future[_Sample] = asyncio.get_running_loop().create_future()
        self._taking[path] = fut
        try:
            s = self._keep(path, await run_steps(data), now)
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except Exception as exc:
            fut.set_exception(exc)
            fut.exception()  # the waiters (if any) get it; none: not logged as unretrieved
            raise
        else:
            fut.set_result(s)
        finally:
            del self._taking[path]
        return page, params, s

    def _evict(self, now: float) -> None:
        fresh = {k: v for k, v in self._samples.items() if now - v.taken_at < MIN_SAMPLE_INTERVAL}
        self._samples = fresh if len(fresh) < MAX_SAMPLES else {}

    def sample(self, path: str) -> PageData:
        """The page's current data, taken again when older than MIN_SAMPLE_INTERVAL.
        KeyError when no page is at ``path``."""
        found = self._page_sample(normalize_path(path))
        if found is None or found[2].data is None:
            raise KeyError(path)
        return found[2].data

    def header(self, sampled_at: float | None = None) -> Header:
        return Header(
            self.daemon,
            self.version,
            self.monotonic() - self.started,
            self.wall_clock() if sampled_at is None else sampled_at,
        )

    def _render(self, entry: Page | Action, params: PageParams, data: PageData, wall: float) -> str:
        return render_page(
            entry.title.format(**params),
            entry.render(data),
            refresh_s=entry.refresh_s if isinstance(entry, Page) else None,
            json_href=json_path(normalize_path(entry.path.format(**params)))
            if isinstance(entry, Page)
            else None,
            header=self.header(wall),
        )

    def html(self, path: str) -> str:
        """The page at ``path`` as HTML (its current sample rendered).  KeyError: no page."""
        path = normalize_path(path)
        found = self._page_sample(path)
        if found is None or found[2].data is None:
            raise KeyError(path)
        page, params, s = found
        if s.html is None:
            assert s.data is not None
            s.html = self._render(page, params, s.data, s.wall)
        return s.html

    def json_text(self, path: str) -> str:
        """The JSON twin of the page at ``path``.  KeyError: no page."""
        path = normalize_path(path)
        found = self._page_sample(path)
        if found is None or found[2].data is None:
            raise KeyError(path)
        s = found[2]
        if s.json is None:
            s.json = json.dumps(s.data, default=str)
        return s.json

    async def _json_text_async(self, path: str) -> str:
        """:meth:`json_text`, a large sample encoded a slice at a time between the loop's
        turns (:func:`json_text_async`).  KeyError: no page."""
        path = normalize_path(path)
        found = self._page_sample(path)
        if found is None or found[2].data is None:
            raise KeyError(path)
        s = found[2]
        if s.json is None:
            s.json = await json_text_async(s.data)
        return s.json

    def not_found_html(self, path: str) -> str:
        return render_page(
            "Not found",
            [
                Para(f"There is no page at {path} on this {self.daemon}."),
                Html("<p>{}</p>", Link("Back to the index", "/")),
            ],
            header=self.header(),
        )

    def _index(self) -> PageData:
        return {
            "pages": [
                {"path": p.path, "title": p.title, "json": json_path(p.path)}
                for p in sorted(self.pages.values(), key=lambda p: p.path)
            ]
        }

    def _index_blocks(self, data: PageData) -> list[Block]:
        return [
            Table(
                ["page", "path", "JSON"],
                [[Link(p["title"], p["path"]), p["path"], p["json"]] for p in data["pages"]],
            )
        ]

    def ensure_index(self) -> None:
        """Register the index of the pages at ``/`` unless the daemon has a page there."""
        if "/" not in self.pages:
            self.add_page("/", title=self.title, data=self._index, render=self._index_blocks)

    # ------------------------------------------------------------- a child process serves

    def answer(self, method: str, path: str) -> dict[str, Any]:
        """The daemon's side of a page served from a child process: for a GET, the page's
        current sample (``{"status": 200, "data": ..., "wall": ...}``; 404 when no page is
        there); for a POST to an action, the action run (its result as ``data``; 405 when the
        action takes no such method).  The child renders; this only samples."""
        path = normalize_path(path)
        try:
            found = self.resolve(path)
            if found is not None and isinstance(found[0], Action):
                return self._answer_action(found[0], found[1], method)
            return self._answer_sample(self._page_sample(path))
        except Exception:
            return self._answer_failed(path)

    async def answer_async(self, method: str, path: str) -> dict[str, Any]:
        """:meth:`answer`, with a stepped page's sample taken between the loop's turns."""
        path = normalize_path(path)
        try:
            found = self.resolve(path)
            if found is not None and isinstance(found[0], Action):
                return self._answer_action(found[0], found[1], method)
            return self._answer_sample(await self._page_sample_async(path))
        except Exception:
            return self._answer_failed(path)

    def _answer_action(self, action: Action, params: PageParams, method: str) -> dict[str, Any]:
        if method != "POST" and not (action.allow_get and method == "GET"):
            self.refused += 1
            return {"status": 405}
        result = action.run(params)
        if result is None:
            self.not_found += 1
            return {"status": 404}
        self.actions_run += 1
        self.invalidate()
        return {"status": 200, "data": result, "wall": self.wall_clock()}

    def _answer_sample(self, sampled: tuple[Page, PageParams, _Sample] | None) -> dict[str, Any]:
        if sampled is None or sampled[2].data is None:
            self.not_found += 1
            return {"status": 404}
        self.requests += 1
        return {"status": 200, "data": sampled[2].data, "wall": sampled[2].wall}

    def _answer_failed(self, path: str) -> dict[str, Any]:
        self.errors += 1
        self.log.exception("%s: the page %s failed", self.label, path)
        return {"status": 500}

    def serve_remote(self, fetch: RemoteFetch, uptime_s: float) -> None:
        """Serve these pages with the data ``fetch(method, path)`` returns (the daemon's
        :meth:`answer`, across a pipe): this process renders and the daemon samples.  The
        header's uptime counts from the daemon's start, ``uptime_s`` ago."""
        self._remote = fetch
        self.started = self.monotonic() - uptime_s

    async def _remote_sample(self, path: str) -> None:
        """Fill the sample of ``path`` from the daemon when it is missing or stale."""
        assert self._remote is not None
        now = self.monotonic()
        s = self._samples.get(path)
        if s is not None and now - s.taken_at < MIN_SAMPLE_INTERVAL:
            return
        reply = await self._remote("GET", path)
        if reply.get("status") == 500:
            raise RuntimeError(f"the daemon could not sample {path}")
        data = reply.get("data") if reply.get("status") == 200 else None
        if path not in self._samples and len(self._samples) >= MAX_SAMPLES:
            self._evict(now)
        self._samples[path] = _Sample(data, self.monotonic(), float(reply.get("wall", 0.0)))
        self.samples += 1

    # -------------------------------------------------------------------------- serving

    async def handle(self, request: Any) -> Any:
        """Every request: the page, twin or action at its path, or a 404/405/500 page."""
        from aiohttp import web

        path = normalize_path(request.path)
        as_json = path == JSON_PREFIX or path.startswith(JSON_PREFIX + "/")
        if as_json:
            path = path[len(JSON_PREFIX) :] or "/"
        method = request.method
        try:
            found = self.resolve(path)
            if isinstance(found, tuple) and isinstance(found[0], Action):
                if self._remote is not None:
                    return await self._act_remote(found[0], found[1], method, as_json)
                return self._act(found[0], found[1], method, as_json)
            if method not in ("GET", "HEAD"):
                self.refused += 1
                return _reply(web, 405, "Method not allowed", as_json, self, path)
            if self._remote is not None and found is not None:
                await self._remote_sample(path)
            elif found is not None:
                await self._page_sample_async(path)
            if as_json:
                text = await self._json_text_async(path)
                self.requests += 1
                return web.Response(text=text, content_type="application/json")
            text = self.html(path)
            self.requests += 1
            return web.Response(text=text, content_type="text/html")
        except KeyError:
            self.not_found += 1
            if as_json:
                return web.json_response({"error": "not found", "path": path}, status=404)
            return web.Response(
                text=self.not_found_html(path), content_type="text/html", status=404
            )
        except Exception:
            self.errors += 1
            self.log.exception("%s: the page %s failed", self.label, path)
            return _reply(
                web, 500, "This page failed; the daemon's log says why", as_json, self, path
            )

    def _act(self, action: Action, params: PageParams, method: str, as_json: bool) -> Any:
        from aiohttp import web

        if method != "POST" and not (action.allow_get and method == "GET"):
            self.refused += 1
            return _reply(web, 405, f"{action.path} takes a POST", as_json, self, action.path)
        result = action.run(params)
        if result is None:
            raise KeyError(action.path)
        self.actions_run += 1
        self.invalidate()
        if as_json:
            return web.json_response(result)
        return web.Response(
            text=self._render(action, params, result, self.wall_clock()),
            content_type="text/html",
        )

    async def _act_remote(
        self, action: Action, params: PageParams, method: str, as_json: bool
    ) -> Any:
        from aiohttp import web

        if method != "POST" and not (action.allow_get and method == "GET"):
            self.refused += 1
            return _reply(web, 405, f"{action.path} takes a POST", as_json, self, action.path)
        assert self._remote is not None
        reply = await self._remote(method, action.path.format(**params))
        if reply.get("status") != 200:
            raise KeyError(action.path)
        self.actions_run += 1
        self.invalidate()
        result = reply["data"]
        if as_json:
            return web.json_response(result)
        return web.Response(
            text=self._render(action, params, result, self.wall_clock()),
            content_type="text/html",
        )

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on host:port (0 = ephemeral); log and return the bound address.  OSError if
        the address cannot be bound."""
        from aiohttp import web  # only when a daemon serves pages: it costs start-up time

        self.ensure_index()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner, self.address = await serve_app(app, host, port)
        self.log.info("%s on http://%s:%d/", self.label, *self.address)
        return self.address

    async def close(self) -> None:
        """Stop serving (idempotent)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()


def _reply(web: Any, status: int, text: str, as_json: bool, pages: WebPages, path: str) -> Any:
    if as_json:
        return web.json_response({"error": text, "path": path}, status=status)
    page = render_page(
        f"{status}: {text}",
        [Html("<p>{}</p>", Link("Back to the index", "/"))],
        header=pages.header(),
    )
    return web.Response(text=page, content_type="text/html", status=status)
