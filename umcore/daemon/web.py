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
the daemon passes (``loop.time`` in a daemon, a fake in tests).
"""

from __future__ import annotations

import html
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = [
    "JSON_PREFIX",
    "MIN_SAMPLE_INTERVAL",
    "Block",
    "Heading",
    "Page",
    "Para",
    "Table",
    "WebPages",
    "json_path",
    "render_page",
]

# A page's data walks the daemon's tables (O(records)); no more than one sample per second per
# page whatever the requests, so a reloading browser costs the daemon at most that.
MIN_SAMPLE_INTERVAL = 1.0
# Every page's JSON twin lives under this prefix (see json_path).
JSON_PREFIX = "/json"

PageData = dict[str, Any]


async def serve_app(app: Any, host: str, port: int) -> tuple[Any, tuple[str, int]]:
    """Serve an aiohttp application inside the running loop on host:port (0 = ephemeral):
    its runner (stop it with ``cleanup()``) and the bound address.  OSError when the address
    cannot be bound (nothing is left running then)."""
    from aiohttp import web  # only when a daemon serves HTTP: it costs start-up time

    runner = web.AppRunner(app, access_log=None, handle_signals=False)
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


Block = Heading | Para | Table


def json_path(path: str) -> str:
    """The URL of the JSON twin of the page at ``path``: ``/`` -> ``/json``, ``/a`` -> ``/json/a``."""
    return JSON_PREFIX + path.rstrip("/")


def _cell(value: object) -> str:
    return "" if value is None else html.escape(str(value))


def _block(block: Block) -> str:
    e = html.escape
    if isinstance(block, Heading):
        return f"<h2>{e(block.text)}</h2>"
    if isinstance(block, Para):
        return f"<p>{e(block.text)}</p>"
    head = "".join(f"<th>{e(h)}</th>" for h in block.headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in block.rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def render_page(
    title: str,
    blocks: Iterable[Block],
    *,
    refresh_s: int | None = None,
    json_href: str | None = None,
) -> str:
    """A whole HTML page: ``title`` as heading, the blocks, a link to the JSON twin; every string
    escaped.  ``refresh_s`` asks the browser to reload every that many seconds."""
    e = html.escape
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'>"]
    if refresh_s is not None:
        parts.append(f"<meta http-equiv='refresh' content='{max(1, int(refresh_s))}'>")
    parts += [
        f"<title>{e(title)}</title>",
        "<style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:left}"
        "table{border-collapse:collapse}tr:nth-child(even){background:#eee}</style>",
        f"</head><body><h1>{e(title)}</h1>",
    ]
    parts += [_block(b) for b in blocks]
    if json_href is not None:
        parts.append(f"<p><a href='{e(json_href, quote=True)}'>this page as JSON</a></p>")
    parts.append("</body></html>")
    return "".join(parts)


class Page:
    """One registered page (see :meth:`WebPages.add_page`)."""

    __slots__ = ("data", "path", "refresh_s", "render", "title")

    def __init__(
        self,
        path: str,
        title: str,
        data: Callable[[], PageData],
        render: Callable[[PageData], Iterable[Block]],
        refresh_s: int | None,
    ) -> None:
        self.path = path
        self.title = title
        self.data = data
        self.render = render
        self.refresh_s = refresh_s


class _Sample:
    __slots__ = ("data", "taken_at")

    def __init__(self, data: PageData, taken_at: float) -> None:
        self.data = data
        self.taken_at = taken_at


class WebPages:
    """A daemon's pages on the running loop; see the module docstring."""

    def __init__(
        self,
        *,
        monotonic: Callable[[], float],
        label: str = "debug monitor",
        title: str = "pyum daemon",
        log: logging.Logger | None = None,
    ) -> None:
        self.monotonic = monotonic
        self.label = label
        self.title = title
        self.log = log or logging.getLogger("umcore.daemon.web")
        self.pages: dict[str, Page] = {}
        #: The bound (host, port) once started.
        self.address: tuple[str, int] | None = None
        #: Requests served, and samples taken (at most one per page per MIN_SAMPLE_INTERVAL).
        self.requests = 0
        self.samples = 0
        self._samples: dict[str, _Sample] = {}
        self._runner: Any = None

    def add_page(
        self,
        path: str,
        *,
        title: str,
        data: Callable[[], PageData],
        render: Callable[[PageData], Iterable[Block]],
        refresh_s: int | None = None,
    ) -> None:
        """Serve ``render(data())`` at ``path`` and ``data()`` at :func:`json_path` ``(path)``.

        ValueError for a path not starting with ``/``, under ``/json``, or already registered.
        """
        if not path.startswith("/"):
            raise ValueError(f"page path {path!r} does not start with /")
        if path == JSON_PREFIX or path.startswith(JSON_PREFIX + "/"):
            raise ValueError(f"page path {path!r} is under {JSON_PREFIX}, the JSON twins' prefix")
        if path in self.pages:
            raise ValueError(f"page {path!r} registered twice")
        if self._runner is not None:
            raise RuntimeError("pages are registered before start()")
        self.pages[path] = Page(path, title, data, render, refresh_s)

    # ------------------------------------------------------------------------ content

    def sample(self, path: str) -> PageData:
        """The page's current data, taken again when older than MIN_SAMPLE_INTERVAL."""
        page = self.pages[path]
        now = self.monotonic()
        s = self._samples.get(path)
        if s is None or now - s.taken_at >= MIN_SAMPLE_INTERVAL:
            s = _Sample(page.data(), now)
            self._samples[path] = s
            self.samples += 1
        return s.data

    def html(self, path: str) -> str:
        """The page at ``path`` as HTML (its current sample rendered)."""
        page = self.pages[path]
        return render_page(
            page.title,
            page.render(self.sample(path)),
            refresh_s=page.refresh_s,
            json_href=json_path(path),
        )

    def json_text(self, path: str) -> str:
        """The JSON twin of the page at ``path``."""
        return json.dumps(self.sample(path), default=str)

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
                [[p["title"], p["path"], p["json"]] for p in data["pages"]],
            )
        ]

    # -------------------------------------------------------------------------- serving

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on host:port (0 = ephemeral); log and return the bound address.  OSError if
        the address cannot be bound."""
        from aiohttp import web  # only when a daemon serves pages: it costs start-up time

        if "/" not in self.pages:
            self.add_page("/", title=self.title, data=self._index, render=self._index_blocks)

        def handlers(path: str) -> tuple[Any, Any]:
            async def as_html(request: web.Request) -> web.Response:
                self.requests += 1
                return web.Response(text=self.html(path), content_type="text/html")

            async def as_json(request: web.Request) -> web.Response:
                self.requests += 1
                return web.Response(text=self.json_text(path), content_type="application/json")

            return as_html, as_json

        app = web.Application()
        for path in self.pages:
            as_html, as_json = handlers(path)
            app.router.add_get(path, as_html)
            app.router.add_get(json_path(path), as_json)
        self._runner, self.address = await serve_app(app, host, port)
        self.log.info("%s on http://%s:%d/", self.label, *self.address)
        return self.address

    async def close(self) -> None:
        """Stop serving (idempotent)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
