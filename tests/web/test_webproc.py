"""Pages served from a child process (umcore.daemon.webproc): the same pages as in-process, data
taken in the daemon at most once per page per second, actions run in the daemon, 404/405, the
child restarted when it dies and gone when the daemon closes, a bind failure reported."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import NamedTuple

import aiohttp
import pytest

from tests.web.procpages import Model, build
from umcore.daemon import webproc

pytestmark = pytest.mark.skipif(not webproc.supported(), reason="no child web process here")

FACTORY = "tests.web.procpages:child"
WAIT = 30.0


async def until(cond: Callable[[], bool], what: str) -> None:
    """Wait (bounded) for ``cond``: the child and the daemon are separate processes."""
    async with asyncio.timeout(WAIT):
        while not cond():
            await asyncio.sleep(0.02)
    assert cond(), what


class Served(NamedTuple):
    model: Model
    proc: webproc.WebProcess
    base: str


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    model = Model()
    proc = webproc.WebProcess(build(model), FACTORY)
    host, port = await proc.start("127.0.0.1", 0)
    try:
        yield Served(model, proc, f"http://{host}:{port}")
    finally:
        await proc.close()


async def get(http: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with http.get(url) as r:
        return r.status, await r.text()


async def test_pages_match_in_process_rendering(served: Served) -> None:
    _model, proc, base = served
    async with aiohttp.ClientSession() as http:
        status, body = await get(http, base + "/")
        assert status == 200
        assert "&lt;b&gt;escaped&lt;/b&gt;" in body and "<b>escaped" not in body
        assert "<td>alpha</td><td>1</td>" in body.replace("\n", "")
        assert "testd" in body and "sampled" in body  # the header
        status, body = await get(http, base + "/counters/beta")
        assert status == 200 and "<P>Counter beta = 2</P>" in body
        async with http.get(base + "/json/counters/beta") as r:
            assert r.status == 200 and await r.json() == {"name": "beta", "value": 2}
    # the in-process rendering of the same data has the same content (the header aside)
    local = build(Model()).html("/counters/beta")
    assert "<P>Counter beta = 2</P>" in local
    assert proc.pid is not None and proc.pid != os.getpid()


async def test_unknown_pages_are_404_and_actions_take_a_post(served: Served) -> None:
    model, _proc, base = served
    async with aiohttp.ClientSession() as http:
        assert (await get(http, base + "/counters/gamma"))[0] == 404
        assert (await get(http, base + "/no/such/page"))[0] == 404
        async with http.get(base + "/json/counters/gamma") as r:
            assert r.status == 404 and (await r.json())["error"] == "not found"
        assert (await get(http, base + "/counters/alpha/bump"))[0] == 405
        assert model.counters["alpha"] == 1
        async with http.post(base + "/counters/alpha/bump") as r:
            assert r.status == 200 and "Counter alpha = 2" in await r.text()
        assert model.counters["alpha"] == 2  # the action ran in the daemon
        async with http.post(base + "/json/counters/alpha/bump") as r:
            assert await r.json() == {"name": "alpha", "value": 3}
        async with http.post(base + "/counters/gamma/bump") as r:
            assert r.status == 404
        # the action dropped the child's samples: the page shows the new value at once
        assert "Counter alpha = 3" in (await get(http, base + "/counters/alpha"))[1]


async def test_data_is_taken_at_most_once_a_second_per_page(served: Served) -> None:
    model, proc, base = served
    async with aiohttp.ClientSession() as http:
        t0 = time.monotonic()
        await asyncio.gather(*(get(http, base + "/counters/alpha") for _ in range(20)))
        for _ in range(20):
            await get(http, base + "/counters/alpha")
            await get(http, base + "/json/counters/alpha")
        elapsed = time.monotonic() - t0
    # 60 requests of one page: one sample per started second, in the daemon and in the child
    assert 1 <= model.taken <= int(elapsed) + 1, (model.taken, elapsed)
    assert proc.answered <= int(elapsed) + 1


async def test_a_killed_child_is_replaced_on_the_same_address(served: Served) -> None:
    _model, proc, base = served
    first = proc.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    await until(lambda: proc.restarts == 1 and proc.pid not in (None, first), "restarted")
    async with aiohttp.ClientSession() as http:
        status, body = await get(http, base + "/counters/beta")
    assert status == 200 and "Counter beta = 2" in body


async def test_the_child_exits_with_the_daemon() -> None:
    proc = webproc.WebProcess(build(Model()), FACTORY)
    await proc.start("127.0.0.1", 0)
    pid = proc.pid
    assert pid is not None
    await proc.close()
    with pytest.raises(ProcessLookupError):  # reaped: no orphan keeps the port
        os.kill(pid, 0)


async def test_an_address_in_use_is_an_oserror() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        proc = webproc.WebProcess(build(Model()), FACTORY)
        with pytest.raises(OSError, match="in use"):
            await proc.start("127.0.0.1", taken.getsockname()[1])
        assert proc.pid is None
    finally:
        taken.close()
