"""The DRO web monitor over HTTP (aiohttp client, loopback, ephemeral port): main page, the
configuration, one page per portal with the core's figures, topology, path info, each with its
JSON twin; unknown portals and paths are 404s; names from the TRDs are escaped.  One real
browser check (Playwright on Debian's headless Chromium) when it is installed."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from daemons.tnwgd.webmon import DroWebMonitor, shortest_path, start_dro_web_monitor
from tests.dro.kit import config
from tests.dro_monitor.kit import FAR_ID, FRAME, MAX_QUEUE, FakeRuntime, dro_config, feed, runtime
from umcore.config.dro import load
from umcore.dro import InterestKey

HOSTILE = "<script>alert(1)</script>"


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[str, FakeRuntime, Clock]]:
    path = tmp_path / "dro.xml"  # the kit's configuration, as a file (the /config page)
    path.write_text(_xml_of(dro_config().daemon.name or ""))
    rt = runtime(load(path))
    feed(rt)
    rt.core.receive_tqr("TRD2", HOSTILE, 1.0)
    clock = Clock()
    rt.started_at = clock.t - 3661
    mon = DroWebMonitor(rt, monotonic=clock)
    host, port = await mon.start("127.0.0.1", 0)
    try:
        yield f"http://{host}:{port}", rt, clock
    finally:
        await mon.close()


def _xml_of(name: str) -> str:
    return (
        f'<tnw-gateway version="1.0"><daemon><name>{name}</name></daemon><portals>'
        "<endpoint><name>TRD1</name><domain-id>1</domain-id><cost>1</cost></endpoint>"
        "<endpoint><name>TRD2</name><domain-id>2</domain-id><cost>3</cost>"
        f"<max-queue>{MAX_QUEUE}</max-queue></endpoint>"
        "<peer><name>PEER</name><cost>2</cost><single-tcp><acceptor><listen-port>9000"
        "</listen-port></acceptor></single-tcp></peer>"
        "</portals></tnw-gateway>\n"
    )


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with session.get(url) as r:
        return r.status, await r.text()


async def _json(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as r:
        assert r.status == 200, url
        return await r.json()


async def test_main_page_links_every_page(served: tuple[str, FakeRuntime, Clock]) -> None:
    base, _rt, _ = served
    async with aiohttp.ClientSession() as s:
        status, page = await _get(s, base + "/")
        assert status == 200
        for href in ("/config", "/portals", "/topology", "/path", "/portals/TRD2"):
            assert f'HREF="{href}"' in page
        assert "01:01:01" in page  # uptime from the runtime's start
        main = await _json(s, base + "/json")
        assert [p["name"] for p in main["portals"]] == ["TRD1", "TRD2", "PEER"]
        assert all(p["up"] for p in main["portals"])
        status, text = await _get(s, base + "/config")
        assert status == 200 and "&lt;tnw-gateway" in text  # the file, escaped
        assert (await _json(s, base + "/json/config"))["text"] == _xml_of("dro-a")


async def test_portal_pages_show_the_cores_figures(
    served: tuple[str, FakeRuntime, Clock],
) -> None:
    base, rt, clock = served
    fits = MAX_QUEUE // FRAME
    async with aiohttp.ClientSession() as s:
        d = await _json(s, base + "/json/portals/TRD2")
        assert (d["domain_id"], d["cost"], d["type"]) == (2, 3, "endpoint")
        assert d["local_interest"]["topics"] == sorted(["orders", HOSTILE])
        assert d["local_interest"]["pcre_patterns"] == [r"^md\."]
        assert d["receiver_interest"]["topics"] == ["fx"]  # wanted beyond, asked in TRD2
        assert d["proxy_sources_count"] == 1 and d["proxy_sources"][0]["topic"] == "orders"
        send = {row[0]: row[1:] for row in d["send"]}
        assert send["transport_topic_fragments_forwarded"] == [fits, 0]
        assert send["transport_topic_fragments_dropped_would_block"] == [
            6 - fits,
            (6 - fits) * FRAME,
        ]
        assert d["enqueued"] == {
            "current": (fits - 1) * FRAME,
            "max": MAX_QUEUE,
            "limit": MAX_QUEUE,
        }
        status, page = await _get(s, base + "/portals/TRD2")
        assert status == 200
        assert HOSTILE not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
        assert f"Current/maximum data bytes enqueued: {(fits - 1) * FRAME}/{MAX_QUEUE}" in page
        assert f"(limit: {MAX_QUEUE})" in page
        trd1 = await _json(s, base + "/json/portals/TRD1")
        rcv = {row[0]: row[1:] for row in trd1["receive"]}
        assert rcv["transport_topic_fragments_rcvd"] == [8, 8 * FRAME]
        assert trd1["core"]["unknown_source"] == 1
        peer = await _json(s, base + "/json/portals/PEER")
        assert peer["type"] == "peer" and peer["adjacent"] == f"DRO {FAR_ID:#x}"
        assert peer["interest"]["topics"] == ["fx"]
        # samples are at most one a second: a change shows after that
        rt.core.receive_tqr("TRD2", "later", 2.0)
        d = await _json(s, base + "/json/portals/TRD2")
        assert "later" not in d["local_interest"]["topics"]
        clock.t += 1.0
        d = await _json(s, base + "/json/portals/TRD2")
        assert "later" in d["local_interest"]["topics"]
        for bad in ("/portals/NOPE", "/json/portals/NOPE", "/path/1/x", "/nothing"):
            status, _ = await _get(s, base + bad)
            assert status == 404, bad


async def test_topology_and_path_info(served: tuple[str, FakeRuntime, Clock]) -> None:
    base, rt, _ = served
    async with aiohttp.ClientSession() as s:
        t = await _json(s, base + "/json/topology")
        assert (t["name"], t["id"], t["dro_count"]) == ("dro-a", rt.core.node_id, 2)
        (far,) = t["others"]
        assert (far["name"], far["id"]) == ("far", FAR_ID)
        assert {(a["kind"], a["id"], a["cost"]) for a in far["adjacent"]} == {
            ("DRO", rt.core.node_id, 2),
            ("TRD", 3, 1),
        }
        status, page = await _get(s, base + "/topology")
        assert status == 200 and "Last Activity" in page and "Local UM Router ID" in page
        p = await _json(s, base + "/json/path/1/2")
        cost = rt.config.portal("TRD1").cost + rt.config.portal("TRD2").cost
        assert (p["hop_count"], p["cost"]) == (2, cost)
        assert p["path"][0] == "TRD 1" and p["path"][-1] == "TRD 2"
        assert "dro-a" in p["path"][1]
        none = await _json(s, base + "/json/path/1/99")
        assert none["hop_count"] is None
        status, page = await _get(s, base + "/path")
        assert status == 200 and "Calculate Shortest Path" in page and 'HREF="/path/1/2"' in page


def test_shortest_path_through_two_dros() -> None:
    """Route information from a second DRO puts domain 3 two DROs away from domain 1."""
    from umcore.dro import Adjacency, RouteInfo
    from umcore.dro.routing import domain_node

    rt = runtime(config([("A1", 1, 1), ("A2", 2, 5)], name="a"))
    rt.core.receive_portal_up("A1", 0.0, address=("10.0.0.1", 1))
    rt.core.receive_portal_up("A2", 0.0, address=("10.0.0.2", 2))
    b = RouteInfo(9, "b", 1, 0, (Adjacency(domain_node(2), 4), Adjacency(domain_node(3), 7)))
    for step in range(13):  # b keeps talking while the recalculation backoff (5 s) runs out
        rt.core.receive_route_info("A2", b, step / 2)
        rt.core.handle_timer(step / 2)
    p = shortest_path(rt, 1, 3)
    assert p is not None
    assert p["path"] == ["TRD 1", f"DRO a ({rt.core.node_id:#x})", "TRD 2", "DRO b (0x9)", "TRD 3"]
    assert (p["hop_count"], p["cost"]) == (4, 1 + 5 + 4 + 7)
    assert shortest_path(rt, 1, 1) == {
        "from": 1, "to": 1, "hop_count": 0, "cost": 0, "path": ["TRD 1"],
    }  # fmt: skip


async def test_a_portal_name_with_a_space_links_to_its_page() -> None:
    rt = runtime(config([("TRD 1", 1, 1), ("TRD 2", 2, 1)], name="spaces"))
    mon = DroWebMonitor(rt, monotonic=Clock())
    host, port = await mon.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as s:
            _status, page = await _get(s, f"http://{host}:{port}/portals")
            assert 'HREF="/portals/TRD%201"' in page
            status, page = await _get(s, f"http://{host}:{port}/portals/TRD%201")
            assert status == 200 and "Domain ID: 1" in page
    finally:
        await mon.close()


async def test_not_configured_or_address_taken() -> None:
    rt = runtime()
    assert await start_dro_web_monitor(rt, monotonic=Clock()) is None
    cfg = config([("E1", 1, 1)], name="w", daemon_extra="<web-monitor>127.0.0.1:0</web-monitor>")
    mon = await start_dro_web_monitor(runtime(cfg), monotonic=Clock())
    assert mon is not None and mon.pages.address is not None
    try:
        port = mon.pages.address[1]
        cfg2 = config(
            [("E1", 1, 1)], name="w2", daemon_extra=f"<web-monitor>127.0.0.1:{port}</web-monitor>"
        )
        assert await start_dro_web_monitor(runtime(cfg2), monotonic=Clock()) is None
    finally:
        await mon.close()


async def test_in_a_browser(served: tuple[str, FakeRuntime, Clock], tmp_path: Path) -> None:
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        pytest.skip("playwright not installed")
    exe = next((p for n in ("chromium-headless-shell", "chromium") if (p := shutil.which(n))), None)
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is required in CI")
        pytest.skip("Chromium not installed")
    base, _rt, _ = served
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        try:
            page = await browser.new_page(viewport={"width": 1000, "height": 700})
            page.set_default_timeout(10_000)
            await page.goto(base + "/")
            await page.click("text=Path Info")
            await page.fill("input[name=d1]", "2")
            await page.fill("input[name=d2]", "1")
            await page.click("input[type=submit]")
            await page.wait_for_url("**/path/2/1")
            body = await page.inner_text("body")
            assert "Hop Count: 2" in body and "Path: TRD 2 > DRO dro-a" in body
            await page.goto(base + "/portals/TRD2")
            assert HOSTILE in await page.inner_text("body")  # shown as text, not run
            await page.screenshot(path=str(tmp_path / "webmon-dro.png"), full_page=True)
            assert (tmp_path / "webmon-dro.png").stat().st_size > 1000
        finally:
            await browser.close()


def test_interest_key_kinds_render() -> None:
    rt = runtime()
    feed(rt)
    rt.core.receive_wildcard_tqr("TRD2", "x.*", 2, 1.0)
    mon = DroWebMonitor(rt, monotonic=Clock())
    d = mon.portal({"portal": "TRD2"})
    assert d is not None
    assert d["local_interest"]["regex_patterns"] == ["x.*"]
    assert InterestKey("x.*", 2) in {k for k, _ in rt.core.interest("TRD2")}
