"""A real browser over every daemon's pages: Debian's headless Chromium
(``chromium-headless-shell``) driven by Playwright with that executable (never ``playwright
install``).  Opens each daemon's index, follows its links to a source page (the Store), a
domain page (lbmrd) or the JSON twin (the SRS), checks the values shown, and takes screenshots.

Skipped on a machine without Chromium or Playwright; a failure when ``CI`` is set (``.ci/run``
installs both).  Screenshots go to the test's temporary directory, and also to the directory
named by ``PYUM_SCREENSHOTS`` when set (``PYUM_SCREENSHOTS=docs`` refreshes the committed
``docs/webmon-*.png``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.web.daemons import lbmrd_with_pages, srs_with_pages
from tests.web.storekit import Clock, build_store, monitor

CHROMIUM_NAMES = ("chromium-headless-shell", "chromium", "chromium-browser")
WAIT_MS = 10_000


def _missing(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what} is required in CI (.ci/run installs it) but was not found")
    pytest.skip(f"{what} not installed")


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        _missing("playwright (pip install playwright; never 'playwright install')")
    exe = next((p for n in CHROMIUM_NAMES if (p := shutil.which(n))), None)
    if exe is None:
        _missing("Chromium (apt-get install chromium-headless-shell)")
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        try:
            yield b
        finally:
            await b.close()


async def _shot(page: Any, tmp: Path, name: str) -> Path:
    path = tmp / name
    await page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 1000
    out = os.environ.get("PYUM_SCREENSHOTS")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(out) / name)
    return path


async def test_store_web_monitor_in_a_browser(browser: Any, tmp_path: Path) -> None:
    held = build_store(tmp_path / "store")
    s1 = held.sources[0]
    r1 = held.receivers[0]
    core = held.rig.core
    mon = monitor(held, Clock(), name="orders-store")
    host, port = await mon.start("127.0.0.1", 0)
    try:
        page = await browser.new_page(viewport={"width": 1000, "height": 700})
        page.set_default_timeout(WAIT_MS)
        await page.goto(f"http://{host}:{port}/")
        assert "pyum umestored" in await page.inner_text("h3")
        assert "umestored" in await page.inner_text(".hdr")
        await page.click("text=Stores")
        await page.click("text=orders-store")
        assert await page.inner_text("h3") == "Store 0: orders-store"
        body = await page.inner_text("body")
        assert "Configured Retransmission Request Processing Rate: 262144" in body
        assert f'"orders" - {s1.reg_id}(4242)' in body
        await _shot(page, tmp_path, "webmon-store.png")
        await page.click(f"text={s1.reg_id}(4242)")
        assert page.url.endswith(f"/stores/0/{s1.reg_id}")
        body = await page.inner_text("body")
        st = core.registry.sources[s1.reg_id].repository.stats()
        assert 'Topic: "orders"' in body and "Session ID: 4242" in body
        assert (
            f"Sync: [{st['sync_complete_sqn']:x}, {st['sync_sqn']:x}, {st['contig_sqn']:x}]" in body
        )
        assert "Receivers (2):" in body
        await _shot(page, tmp_path, "webmon-source.png")
        await page.click(f"text={r1.reg_id}(777)")
        body = await page.inner_text("body")
        assert "ACK: 9" in body and f"Source RegID: {s1.reg_id}" in body
        # the rate reset: a form posting, then UM's message
        await page.go_back()
        await page.go_back()
        await page.click("text=Reset Rate Stats")
        assert "Rate Statistics have been reset" in await page.inner_text("body")
        await page.goto(f"http://{host}:{port}/stores/0/1")
        assert "Not found" in await page.inner_text("h1")
    finally:
        await mon.close()


async def test_lbmrd_pages_in_a_browser(browser: Any, tmp_path: Path) -> None:
    async with lbmrd_with_pages(tmp_path) as (base, client):
        page = await browser.new_page(viewport={"width": 1000, "height": 700})
        page.set_default_timeout(WAIT_MS)
        await page.goto(base + "/")
        assert "lbmrd" in await page.inner_text(".hdr")
        body = await page.inner_text("body")
        assert "NAT domains (2)" in body and "127.0.0.0/8" in body
        await page.click("text=loopback")
        assert page.url.endswith("/domains/loopback")
        ip, port = client.getsockname()
        rows = await page.inner_text("table")
        assert ip in rows and str(port) in rows
        await _shot(page, tmp_path, "webmon-lbmrd.png")


async def test_srs_debug_monitor_in_a_browser(browser: Any, tmp_path: Path) -> None:
    async with srs_with_pages() as base:
        page = await browser.new_page(viewport={"width": 1000, "height": 700})
        page.set_default_timeout(WAIT_MS)
        await page.goto(base + "/")
        assert "SRS" in await page.inner_text(".hdr")
        body = await page.inner_text("body")
        assert "0x000000a1" in body and "orders" in body
        await _shot(page, tmp_path, "webmon-srs.png")
        await page.click("text=this page as JSON")
        assert '"sources": 1' in (await page.inner_text("body")).replace(
            '"sources":1', '"sources": 1'
        )
