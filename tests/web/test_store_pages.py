"""The Store web monitor over real HTTP (aiohttp client, ephemeral loopback port) against a
Store with known sources and receivers: every page and its JSON twin carry what the Store
holds; 404s for unknown stores, RegIDs and paths (never a trace); escaping; the rate reset as a
POST (GET refused unless allowed); one sample per page per second."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from daemons.umestored.webmon import RESET_MESSAGE, StoreWebMonitor, parse_web_monitor
from tests.web.storekit import NASTY, Clock, Held, build_store, monitor
from umcore.errors import ConfigError


@pytest.fixture
def held(tmp_path: Path) -> Held:
    return build_store(tmp_path)


@pytest.fixture
async def served(held: Held) -> AsyncIterator[tuple[str, StoreWebMonitor, Clock]]:
    clock = Clock()
    mon = monitor(held, clock)
    host, port = await mon.start("127.0.0.1", 0)
    try:
        yield f"http://{host}:{port}", mon, clock
    finally:
        await mon.close()


async def _get(http: aiohttp.ClientSession, url: str, status: int = 200) -> str:
    async with http.get(url) as r:
        text = await r.text()
        assert r.status == status, (url, r.status, text[:300])
        assert "Traceback" not in text
        return text


async def _json(http: aiohttp.ClientSession, url: str, status: int = 200) -> dict:
    async with http.get(url) as r:
        assert r.status == status, (url, r.status)
        assert r.content_type == "application/json"
        return await r.json()


async def test_every_page_and_its_json_twin_show_what_the_store_holds(
    held: Held, served: tuple[str, StoreWebMonitor, Clock]
) -> None:
    base, mon, _clock = served
    core = held.rig.core
    s1, s2, s3, s4 = held.sources
    r1, r2 = held.receivers
    async with aiohttp.ClientSession() as http:
        index = await _get(http, base + "/")
        assert "pyum umestored" in index and '<A HREF="/stores">Stores</A>' in index
        assert "class='uptime'" in index and "class='sampled'" in index  # header
        doc = await _json(http, base + "/json")
        assert doc["stores"][0]["sources"] == 4 and doc["stores"][0]["receivers"] == 2

        stores = await _get(http, base + "/stores")
        assert '<LI>Store 0:<A HREF="/stores/0">store1</A></LI>' in stores
        assert (await _json(http, base + "/json/stores"))["stores"] == [
            {"store": 0, "name": "store1", "href": "/stores/0"}
        ]

        page = await _get(http, base + "/stores/0")
        assert "<H3>Store 0: store1</H3>" in page
        assert "<DD>Interface: 10.0.0.100:14567</DD>" in page
        assert f"<DD>Cache Dir: {html.escape(core.cache_dir)}</DD>" in page
        assert "<DD>Configured Retransmission Request Processing Rate: 262144</DD>" in page
        d = await _json(http, base + "/json/stores/0")
        assert d["retransmission_request_processing_rate"] == 262144
        assert d["sources_total"] == 4 and d["more"] == 0
        orders = next(t for t in d["topics"] if t["topic"] == "orders")
        assert sorted((e["reg_id"], e["session_id"]) for e in orders["sources"]) == sorted(
            [(s1.reg_id, 4242), (s2.reg_id, 0)]
        )
        assert f'<A HREF="/stores/0/{s1.reg_id}">{s1.reg_id}(4242)</A>' in page

        src = await _get(http, f"{base}/stores/0/{s1.reg_id}")
        repo = core.registry.sources[s1.reg_id].repository.stats()
        assert f"<H3>{s1.reg_id}: Source [{s1.reg_id} 10.0.0.1.14391 11 3]</H3>" in src
        assert '<DD>Topic: "orders"</DD>' in src and "<DD>Session ID: 4242</DD>" in src
        assert repo["lead_sqn"] == 19  # 20 messages; a disk repository shows three values, hex
        window = ", ".join(f"{repo[k]:x}" for k in ("trail_sqn", "mem_trail_sqn", "lead_sqn"))
        assert f"<LI>Window: [{window}]</LI>" in src and window.endswith(", 13")
        sync = ", ".join(f"{repo[k]:x}" for k in ("sync_complete_sqn", "sync_sqn", "contig_sqn"))
        assert f"<LI>Sync: [{sync}]</LI>" in src
        assert "<DD>LBM Stats: [TCP:10.0.0.1:14371:11]</DD>" in src
        assert f'<A HREF="/stores/0/{r1.reg_id}">{r1.reg_id}(777)</A>' in src
        j = await _json(http, f"{base}/json/stores/0/{s1.reg_id}")
        assert j["window"] == [repo["trail_sqn"], repo["mem_trail_sqn"], 19]
        assert j["sync"] == [repo["sync_complete_sqn"], repo["sync_sqn"], repo["contig_sqn"]]
        assert {r["reg_id"]: r["ack"] for r in j["receivers"]} == {r1.reg_id: 9, r2.reg_id: 14}

        mem = await _json(http, f"{base}/json/stores/0/{s3.reg_id}")
        assert mem["repository"] == "memory" and mem["window"] == [0, 4]  # two values

        rcv = await _get(http, f"{base}/stores/0/{r2.reg_id}")
        assert f"<H3>{r2.reg_id}: Receiver [{r2.reg_id} 10.0.0.3.14393" in rcv
        assert f'<DD>Source RegID: <A HREF="/stores/0/{s1.reg_id}">{s1.reg_id}</A></DD>' in rcv
        assert "<DD>Source Session ID: 4242</DD>" in rcv and "<DD>ACK: e</DD>" in rcv
        jr = await _json(http, f"{base}/json/stores/0/{r1.reg_id}")
        assert (jr["kind"], jr["ack"], jr["source_reg_id"]) == ("receiver", 9, s1.reg_id)

        # escaping: the topic's name came from a peer
        nasty = await _get(http, f"{base}/stores/0/{s4.reg_id}")
        assert '<DD>Topic: "a&lt;b&gt;&amp;&quot;c&quot;"</DD>' in nasty and NASTY not in nasty
        assert NASTY not in page and "a&lt;b&gt;&amp;&quot;c&quot;" in page
        assert (await _json(http, f"{base}/json/stores/0/{s4.reg_id}"))["topic"] == NASTY
    assert mon.pages.errors == 0


async def test_unknown_store_regid_or_path_is_a_404_page_never_a_trace(
    held: Held, served: tuple[str, StoreWebMonitor, Clock]
) -> None:
    base, mon, _clock = served
    async with aiohttp.ClientSession() as http:
        for path in ("/stores/1", "/stores/x", "/stores/0/12345", "/stores/0/abc", "/nope",
                     "/stores/0/1/2", "/stores/-1", "/stores/99999999999999999999"):  # fmt: skip
            text = await _get(http, base + path, 404)
            assert "Not found" in text and "There is no page at" in text
            assert (await _json(http, base + "/json" + path, 404))["error"] == "not found"
        # UM's scrapers join the base URL and an absolute link: "//stores/0" is "/stores/0"
        assert "<H3>Store 0: store1</H3>" in await _get(http, base + "//stores/0")
        async with http.post(base + "/stores/0") as r:
            assert r.status == 405
    assert mon.pages.not_found == 16 and mon.pages.errors == 0


async def test_rate_reset_is_a_post_and_the_get_form_only_behind_the_option(
    held: Held, served: tuple[str, StoreWebMonitor, Clock]
) -> None:
    base, _mon, clock = served
    reset = base + "/stores/0/reset-rate-stats"
    async with aiohttp.ClientSession() as http:
        clock.now += 10
        d = await _json(http, base + "/json/stores/0")
        assert d["rate_seconds"] == 10 and d["rx_received_per_s"] == pytest.approx(0.1)
        page = await _get(http, base + "/stores/0")
        assert '<FORM method="post" action="/stores/0/reset-rate-stats">' in page
        await _get(http, reset, 405)  # a GET changes nothing
        assert (await _json(http, base + "/json/stores/0"))["rate_seconds"] == 10
        async with http.post(reset) as r:
            assert r.status == 200
            text = await r.text()
        assert "<H3>Store 0: store1</H3>" in text and RESET_MESSAGE in text
        d = await _json(http, base + "/json/stores/0")  # the sample was dropped
        assert d["rate_seconds"] == 0 and d["rx_received_per_s"] == 0.0
        assert d["rx_dropped_total"] == held.rig.core.retx.dropped
        async with http.post(base + "/json/stores/0/reset-rate-stats") as r:
            assert (await r.json())["message"] == RESET_MESSAGE
        async with http.post(base + "/stores/7/reset-rate-stats") as r:
            assert r.status == 404


async def test_the_get_reset_option(held: Held) -> None:
    clock = Clock()
    mon = monitor(held, clock, reset_by_get=True)
    host, port = await mon.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as http:
            base = f"http://{host}:{port}"
            page = await _get(http, base + "/stores/0")
            assert '<A HREF="/stores/0/reset-rate-stats">Reset Rate Stats</A>' in page
            assert RESET_MESSAGE in await _get(http, base + "/stores/0/reset-rate-stats")
    finally:
        await mon.close()


async def test_a_flood_of_requests_is_served_from_one_sample_per_second(
    held: Held, served: tuple[str, StoreWebMonitor, Clock]
) -> None:
    base, mon, clock = served
    async with aiohttp.ClientSession() as http:
        for _ in range(30):
            await _get(http, base + "/stores/0")
            await _json(http, base + "/json/stores/0")
        assert mon.pages.samples == 1
        held.sources[2].send(5)  # the Store moves on; the page shows it a second later
        assert (await _json(http, base + "/json/stores/0"))["topics"][2]["sources"][0][
            "lead_sqn"
        ] == 4
        clock.now += 1.0
        d = await _json(http, base + "/json/stores/0")
        assert mon.pages.samples == 2
        prices = next(t for t in d["topics"] if t["topic"] == "prices")
        assert prices["sources"][0]["lead_sqn"] == 5


async def test_lists_are_capped_and_say_how_many_more(held: Held) -> None:
    clock = Clock()
    mon = monitor(held, clock, max_sources=2, max_receivers=1)
    s1 = held.sources[0]
    d = mon.pages.sample("/stores/0")
    assert sum(len(t["sources"]) for t in d["topics"]) == 2 and d["more"] == 2
    assert "2 more sources not shown" in mon.pages.html("/stores/0")
    src = mon.pages.sample(f"/stores/0/{s1.reg_id}")
    assert len(src["receivers"]) == 1 and src["more"] == 1 and src["receivers_total"] == 2
    assert "1 more receivers not shown" in mon.pages.html(f"/stores/0/{s1.reg_id}")


def test_the_store_page_is_sampled_in_steps_leaving_out_a_source_gone_meanwhile(
    held: Held,
) -> None:
    mon = monitor(held, Clock(), sources_per_step=1)
    s1, s2, s3, s4 = held.sources
    steps = mon.store({"store": "0"})
    assert steps is not None
    next(steps)  # a step taken; the Store runs on between steps and s3 (prices) goes
    s3.deregister()
    taken = 1
    try:
        while True:
            next(steps)
            taken += 1
    except StopIteration as stop:
        d = stop.value
    listed = [s["reg_id"] for t in d["topics"] for s in t["sources"]]
    assert taken == 3  # a step per source; its topic went with s3
    assert [t["topic"] for t in d["topics"]] == sorted([NASTY, "orders"])
    assert sorted(listed) == sorted(s.reg_id for s in (s1, s2, s4))
    assert d["sources_total"] == 3 and d["more"] == 0


def test_web_monitor_address_parsing() -> None:
    assert parse_web_monitor("*:12000") == ("0.0.0.0", 12000)
    assert parse_web_monitor("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_web_monitor(":15000") == ("0.0.0.0", 15000)
    for bad in ("12000", "host:", "host:port", "*:70000"):
        with pytest.raises(ConfigError, match=re.escape("<web-monitor>")):
            parse_web_monitor(bad)
