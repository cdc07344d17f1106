"""The web-page runner's long samples in steps: a stepped page's chunks run with the loop's turns
between them (in-process and as a daemon's answer to its web process), requests arriving
meanwhile wait for that one sample, a failing step is a 500 for each of them; json_steps writes
exactly json.dumps's text, a slice at a time."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import OrderedDict
from collections.abc import Generator
from typing import Any

import aiohttp
import pytest

from umcore.daemon.web import (
    PageSteps,
    Para,
    WebPages,
    finish_steps,
    json_steps,
    json_text_if_small,
)


class Ticker:
    """A task standing in for the daemon's data path: counts the loop's turns it gets."""

    def __init__(self) -> None:
        self.turns = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.turns += 1
            await asyncio.sleep(0)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self._task


class Stepped:
    """A page whose data is taken in ``chunks`` steps, noting the ticker's turns at each."""

    def __init__(self, ticker: Ticker, chunks: int = 5, fail: bool = False) -> None:
        self.ticker = ticker
        self.chunks = chunks
        self.fail = fail
        self.calls = 0
        self.seen: list[int] = []

    def data(self, params: dict[str, str]) -> PageSteps:
        self.calls += 1
        rows = []
        for i in range(self.chunks):
            self.seen.append(self.ticker.turns)
            rows.append({"row": i, "name": params["name"]})
            yield
        if self.fail:
            raise RuntimeError("the daemon's table went away")
        return {"rows": rows}


def _pages(page: Stepped) -> WebPages:
    pages = WebPages(monotonic=lambda: 1000.0, label="stepped pages", title="stepped")
    pages.add_route(
        "/things/{name}",
        title="Thing {name}",
        data=page.data,
        render=lambda d: [Para(f"{len(d['rows'])} rows")],
    )
    return pages


def _strictly_rising(xs: list[int]) -> bool:
    return all(a < b for a, b in itertools.pairwise(xs))


async def test_a_daemons_answer_takes_a_stepped_sample_between_the_loops_turns() -> None:
    ticker = Ticker()
    page = Stepped(ticker)
    pages = _pages(page)
    ticker.start()
    try:
        replies = await asyncio.gather(
            *(pages.answer_async("GET", "/things/a") for _ in range(3))
        )  # fmt: skip
    finally:
        await ticker.stop()
    assert page.calls == 1 and pages.samples == 1  # the later requests waited for that one
    assert _strictly_rising(page.seen), page.seen  # the data path ran between every two steps
    rows = [{"row": i, "name": "a"} for i in range(5)]
    assert all(r["status"] == 200 and r["data"] == {"rows": rows} for r in replies)
    # The synchronous accessors run the steps back to back, and keep to one sample a second.
    assert pages.sample("/things/a") == {"rows": rows} and page.calls == 1
    assert pages.answer("GET", "/things/b")["data"]["rows"][0]["name"] == "b"


async def test_a_failing_stepped_sample_is_a_500_for_every_request_waiting() -> None:
    ticker = Ticker()
    page = Stepped(ticker, fail=True)
    pages = _pages(page)
    ticker.start()
    try:
        replies = await asyncio.gather(*(pages.answer_async("GET", "/things/a") for _ in range(2)))
    finally:
        await ticker.stop()
    assert [r["status"] for r in replies] == [500, 500] and page.calls == 1
    assert pages.errors == 2


async def test_a_stepped_page_served_in_process() -> None:
    ticker = Ticker()
    page = Stepped(ticker, chunks=40)
    pages = _pages(page)
    host, port = await pages.start("127.0.0.1", 0)
    ticker.start()
    try:
        async with aiohttp.ClientSession() as http:

            async def get(path: str) -> tuple[int, str]:
                async with http.get(f"http://{host}:{port}{path}") as r:
                    return r.status, await r.text()

            got = await asyncio.gather(get("/things/x"), get("/json/things/x"), get("/things/x"))
            missing = await get("/json/things")
    finally:
        await ticker.stop()
        await pages.close()
    assert [s for s, _ in got] == [200, 200, 200] and missing[0] == 404
    assert "40 rows" in got[0][1] and got[0][1] == got[2][1]
    assert json.loads(got[1][1]) == {"rows": [{"row": i, "name": "x"} for i in range(40)]}
    assert page.calls == 1 and _strictly_rising(page.seen)


class Odd:
    def __str__(self) -> str:
        return "odd <thing>"


VALUES: list[Any] = [
    None,
    3,
    "text \u00e9\n",
    [],
    {},
    [list(range(1000)), {"k": list(range(600))}],
    {
        "store": 0,
        "topics": [
            {
                "topic": f"t{t}",
                "sources": [
                    {
                        "reg_id": t * 1000 + i,
                        "href": f"/stores/0/{i}",
                        "ok": i % 2 == 0,
                        "lead": 1.5 * i,
                        "none": None,
                        "tuple": (i, "x"),
                    }
                    for i in range(n)
                ],
            }
            for t, n in enumerate([1000, 0, 3, 300])
        ],
        7: "an int key",
        "odd": Odd(),
        "nested": [[[list(range(300))]]],
    },
    tuple(range(700)),
    [OrderedDict((str(i), list(range(50))) for i in range(30)), list(range(400))],
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
@pytest.mark.parametrize("budget", [1, 16, 256])
def test_json_steps_write_json_dumps_text(value: Any, budget: int) -> None:
    assert finish_steps(json_steps(value, budget=budget)) == json.dumps(value, default=str)


def _count_steps(steps: Generator[None, None, str]) -> tuple[int, str]:
    n = 0
    try:
        while True:
            next(steps)
            n += 1
    except StopIteration as stop:
        return n, stop.value


def test_json_steps_slice_a_large_value_and_not_a_small_one() -> None:
    big = {"topics": [{"sources": [{"reg_id": i, "a": 1, "b": "x"} for i in range(1000)]}]}
    n, text = _count_steps(json_steps(big, budget=256))
    assert text == json.dumps(big) and 10 <= n <= 40  # 4,000 values: about 16 slices
    n, text = _count_steps(json_steps({"a": [1, 2, 3]}, budget=256))
    assert text == '{"a": [1, 2, 3]}' and n == 0


def test_a_small_value_is_encoded_at_once_and_a_large_one_left_to_the_steps() -> None:
    assert json_text_if_small({"status": 200, "data": {"a": [1, 2]}}) == (
        '{"status": 200, "data": {"a": [1, 2]}}'
    )
    assert json_text_if_small({"data": [{"rows": list(range(300))}]}) is None
