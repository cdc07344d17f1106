"""The shared web-page runner on its own: a fake daemon's pages over real HTTP (ephemeral port,
aiohttp client), each with its JSON twin; escaping, sampling, the index, registration rules."""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import pytest

from umcore.daemon import web
from umcore.daemon.web import Heading, Para, Table, WebPages, json_path


class FakeDaemon:
    """A daemon with one table of peer-supplied names and a counter of data() calls."""

    def __init__(self) -> None:
        self.names = ["alpha", "<b>bold</b> & co"]
        self.reads = 0

    def data(self) -> dict[str, Any]:
        self.reads += 1
        return {"names": list(self.names), "reads": self.reads}

    def blocks(self, data: dict[str, Any]) -> list[web.Block]:
        return [
            Heading(f"Names ({len(data['names'])})"),
            Table(["name", "length"], [[n, len(n)] for n in data["names"]]),
            Para(f"read <{data['reads']}> times"),
        ]


def _pages(clock: list[float]) -> tuple[WebPages, FakeDaemon]:
    daemon = FakeDaemon()
    pages = WebPages(monotonic=lambda: clock[0], label="fake pages", title="fake <daemon>")
    pages.add_page("/names", title="Names", data=daemon.data, render=daemon.blocks, refresh_s=5)
    return pages, daemon


def test_json_twin_convention() -> None:
    assert json_path("/") == "/json"
    assert json_path("/clients") == "/json/clients"
    assert json_path("/a/b/") == "/json/a/b"


def test_registration_rules() -> None:
    pages, daemon = _pages([0.0])
    for bad in ("names", "/json", "/json/x", "/names"):
        with pytest.raises(ValueError):
            pages.add_page(bad, title="x", data=daemon.data, render=daemon.blocks)
    pages.add_page("/jsonish", title="ok", data=daemon.data, render=daemon.blocks)


async def test_a_registered_page_is_served_as_html_and_json_on_an_ephemeral_port(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = [10.0]
    pages, daemon = _pages(clock)
    caplog.set_level(logging.INFO)
    host, port = await pages.start("127.0.0.1", 0)
    try:
        assert port != 0 and pages.address == (host, port)
        assert f"fake pages on http://{host}:{port}/" in caplog.text
        base = f"http://{host}:{port}"
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/names") as r:
                assert r.status == 200 and r.content_type == "text/html"
                page = await r.text()
            assert "&lt;b&gt;bold&lt;/b&gt; &amp; co" in page and "<b>bold" not in page
            assert "read &lt;1&gt; times" in page
            assert "<h2>Names (2)</h2>" in page and "content='5'" in page
            assert "href='/json/names'" in page
            async with http.get(base + "/json/names") as r:
                assert r.status == 200 and r.content_type == "application/json"
                doc = await r.json()
            # the twin within MIN_SAMPLE_INTERVAL: the same sample, data() not called again
            assert doc == {"names": ["alpha", "<b>bold</b> & co"], "reads": 1}
            daemon.names.append("gamma")
            clock[0] += web.MIN_SAMPLE_INTERVAL
            async with http.get(base + "/json/names") as r:
                doc = await r.json()
            assert doc["reads"] == 2 and doc["names"][-1] == "gamma"
            # no page at "/": an index of the pages, and its own twin
            async with http.get(base + "/") as r:
                assert r.status == 200
                index = await r.text()
            assert "<title>fake &lt;daemon&gt;</title>" in index and "/json/names" in index
            async with http.get(base + "/json") as r:
                listing = await r.json()
            assert {"path": "/names", "title": "Names", "json": "/json/names"} in listing["pages"]
            async with http.get(base + "/nothing") as r:
                assert r.status == 404
        assert pages.requests == 5 and pages.samples == 3  # two of /names, one of the index
    finally:
        await pages.close()
    await pages.close()  # idempotent


async def test_a_taken_port_is_an_oserror_and_nothing_stays_bound() -> None:
    first, _d1 = _pages([0.0])
    host, port = await first.start("127.0.0.1", 0)
    try:
        second, _d2 = _pages([0.0])
        with pytest.raises(OSError):
            await second.start(host, port)
        assert second.address is None
    finally:
        await first.close()
