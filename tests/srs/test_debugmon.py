"""The SRS debug monitor's data and page, without a process: bounded lists, escaping, and the
SRS page on the shared runner (sampling, JSON twin)."""

from __future__ import annotations

import json

from daemons.srs import debugmon
from daemons.srs.debugmon import debug_pages, render_html, snapshot
from tests.srs.harness import Net, sir
from umcore.config.srs import SRSConfig
from umcore.daemon import web
from umcore.srs.client import SRSClient
from umcore.srs.server import SRSServer

ADDR = ("127.0.0.1", 27000)


def _net(topics: int) -> tuple[Net, SRSServer]:
    net = Net()
    server = net.add_server(ADDR, SRSServer())
    src = net.add_client(SRSClient([ADDR], session_id=0xA1, client_port=1))
    rcv = net.add_client(SRSClient([ADDR], session_id=0xB2, client_port=2))
    net.pump()
    for i in range(topics):
        net.clients[src].send_source(sir(f"t/{i:04d}", i))
    net.clients[rcv].send_receiver("t/0000")
    net.clients[rcv].send_receiver("<script>")
    net.pump()
    return net, server


def test_lists_are_capped_with_the_rest_counted() -> None:
    n = debugmon.MAX_TOPICS_SHOWN + 37
    _unused, server = _net(n)
    data = snapshot(server, SRSConfig(), listening=ADDR, uptime=1.5, wall_clock=0.0)
    topics = data["topics"]
    assert topics["total"] == n + 1  # every source topic and the interest-only one
    assert len(topics["shown"]) == debugmon.MAX_TOPICS_SHOWN
    assert topics["more"] == n + 1 - debugmon.MAX_TOPICS_SHOWN
    first = topics["shown"][0]
    assert first == {"topic": "<script>", "sources": 0, "interested": 1}  # name order
    assert topics["shown"][1] == {"topic": "t/0000", "sources": 1, "interested": 1}
    rows = {c["session_id"]: c for c in data["clients"]["shown"]}
    assert rows["0x000000a1"]["sources"] == n
    assert rows["0x000000b2"]["receiver_topics"] == 2
    assert rows["0x000000b2"]["stream_credit"] is None  # UM clients grant unbounded credit
    page = render_html(data)
    assert f"{topics['more']} more topics not shown" in page
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "0x000000a1" in page


def test_clients_list_is_capped(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(debugmon, "MAX_CLIENTS_SHOWN", 1)
    _unused, server = _net(1)
    data = snapshot(server, SRSConfig(), listening=ADDR, uptime=0.0, wall_clock=0.0)
    assert data["clients"]["total"] == 2 and len(data["clients"]["shown"]) == 1
    assert data["clients"]["more"] == 1
    assert "1 more clients not shown" in render_html(data)


def test_samples_are_reused_within_the_minimum_interval() -> None:
    net, server = _net(1)
    clock = [100.0]
    pages = debug_pages(server, SRSConfig(), listening=ADDR, monotonic=lambda: clock[0])
    first = pages.sample("/")
    assert first["sources"] == 1
    net.clients[0].send_source(sir("new", 999))
    net.pump()
    clock[0] += web.MIN_SAMPLE_INTERVAL / 2
    assert pages.sample("/") is first and pages.samples == 1
    assert json.loads(pages.json_text("/"))["sources"] == 1  # the twin shares the sample
    clock[0] += web.MIN_SAMPLE_INTERVAL
    again = pages.sample("/")
    assert again["sources"] == 2 and pages.samples == 2
    assert again["uptime_s"] == 1.5 * web.MIN_SAMPLE_INTERVAL
    page = pages.html("/")
    assert "0x000000a1" in page and "&lt;script&gt;" in page and "<script>" not in page
    assert "href='/json'" in page and "content='60'" in page  # ping-interval 60 s: the refresh
