"""lbmrd's web pages (a pyum addition) through its daemon entry (``serve(..., web=...)``) and the
SRS's debug monitor with the shared header: over real HTTP, each page with its JSON twin."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from tests.web.daemons import lbmrd_with_pages, srs_with_pages


async def test_lbmrd_pages_show_clients_rates_and_nat_domains(tmp_path: Path) -> None:
    async with lbmrd_with_pages(tmp_path) as (base, client):
        me = client.getsockname()
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/") as r:
                assert r.status == 200
                index = await r.text()
            assert "<b>lbmrd</b>" in index and "class='uptime'" in index
            async with http.get(base + "/json") as r:
                d = await r.json()
            assert d["clients"] == 1 and d["counters"]["client_keepalives"] == 1
            assert {x["name"]: x["clients"] for x in d["domains"]} == {
                "loopback": 1,
                "far-away": 0,
            }
            assert d["transforms"] == [
                {"source": "loopback", "destination": "far-away", "rules": 1}
            ]
            async with http.get(base + "/json/clients") as r:
                c = await r.json()
            assert c["shown"][0]["ip"] == me[0] and c["shown"][0]["port"] == me[1]
            assert c["shown"][0]["domain"] == "loopback" and c["more"] == 0
            async with http.get(base + "/json/domains/loopback") as r:
                assert (await r.json())["total"] == 1
            async with http.get(base + "/domains/nowhere") as r:
                assert r.status == 404 and "Traceback" not in await r.text()


async def test_srs_debug_monitor_has_the_shared_header() -> None:
    async with srs_with_pages() as base, aiohttp.ClientSession() as http:
        async with http.get(base + "/") as r:
            page = await r.text()
        assert "<b>SRS</b>" in page and "class='uptime'" in page and "0x000000a1" in page
        async with http.get(base + "/nothing") as r:
            assert r.status == 404
