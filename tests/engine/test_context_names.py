"""Context names between real engines on loopback: multicast topic resolution on a test group
(no daemon), and TCP-based resolution through an in-process SRS.  Every wait is bounded."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from umcore.aio.srs import SRSServerEndpoint
from umcore.engine.context import Engine
from umcore.errors import UMError
from umcore.resolver.names import ContextName
from umcore.srs.server import SRSServer

WAIT = 10.0  # bound on every wait: resolution on a shared 2-core machine


@pytest.fixture
def mcast(unused_udp_port: int) -> dict[str, str]:
    """Multicast TR on loopback on a test-only group and a free port; ephemeral request port."""
    return {
        "resolver_multicast_interface": "127.0.0.1",
        "resolver_multicast_address": "224.9.10.98",
        "resolver_multicast_port": str(unused_udp_port),
        "request_tcp_port_low": "0",
        "request_tcp_port_high": "0",
        "request_tcp_interface": "127.0.0.1",
    }


@pytest.fixture
async def engines() -> AsyncIterator[Callable[[dict[str, str]], Any]]:
    """``await start(options)``: a started Engine, closed after the test."""
    made: list[Engine] = []

    async def start(options: dict[str, str]) -> Engine:
        e = Engine(options)
        made.append(e)
        await e.start()
        return e

    yield start
    for e in made:
        await e.close()


async def until(pred: Callable[[], object], what: str) -> None:
    try:
        async with asyncio.timeout(WAIT):
            while not pred():
                await asyncio.sleep(0.01)  # polling a condition, bounded by the timeout
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def test_a_source_resolves_a_store_name_by_querying(
    mcast: dict[str, str], engines: Callable[[dict[str, str]], Any]
) -> None:
    source: Engine = await engines(mcast)
    got: list[ContextName] = []
    handle = source.resolve_context_name("store1", got.append)  # queries before the Store is up
    store: Engine = await engines(mcast)
    await until(lambda: source.context_names()[0].queries_sent >= 2, "queries going out")
    store.advertise_context_name("store1", "127.0.0.1", 14567)
    await until(lambda: got, "store1 resolved")
    assert [(e.name, e.domain_id, e.ip, e.port) for e in got] == [("store1", 0, "127.0.0.1", 14567)]
    (row,) = source.context_names()
    assert (row.name, row.role, row.entry) == ("store1", "resolved", got[0])
    handle.cancel()
    # the awaitable form, for a name known already: at once
    assert await source.wait_context_name("store1", WAIT) == got[0]


async def test_duplicates_warn_and_changes_are_reported(
    mcast: dict[str, str],
    engines: Callable[[dict[str, str]], Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="umcore.engine.names")
    source: Engine = await engines(mcast)
    first: Engine = await engines(mcast)
    first.advertise_context_name("store1", "127.0.0.1", 14567)
    got: list[ContextName] = []
    source.resolve_context_name("store1", got.append)
    await until(lambda: got, "store1 resolved")
    second: Engine = await engines(mcast)
    second.advertise_context_name("store1", "127.0.0.1", 14568)  # a second Store, same name
    await until(lambda: len(got) == 2, "the change reported")
    assert got[1].port == 14568
    messages = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert any(
        lvl == logging.WARNING and "more than one context" in msg for lvl, msg in messages
    ), messages
    assert any(
        lvl == logging.INFO and "changed from 0:127.0.0.1:14567" in msg for lvl, msg in messages
    )
    # the first Store heard the second's advertisement of its own name
    assert any(
        lvl == logging.WARNING and "another context advertises" in msg for lvl, msg in messages
    )


async def test_bad_names_are_refused_before_anything_is_sent(
    mcast: dict[str, str], engines: Callable[[dict[str, str]], Any]
) -> None:
    e: Engine = await engines(mcast)
    with pytest.raises(UMError):
        e.advertise_context_name("no spaces", "127.0.0.1", 14567)
    with pytest.raises(UMError):
        e.resolve_context_name("x" * 129, print)
    assert e.context_names() == []


async def test_names_through_an_srs(engines: Callable[[dict[str, str]], Any]) -> None:
    srs = SRSServerEndpoint(SRSServer(now=asyncio.get_running_loop().time()))
    host, port = await srs.start("127.0.0.1", 0)
    try:
        tcp_only = {
            "resolver_service": f"{host}:{port}",
            "resolver_disable_udp_topic_resolution": "1",
            "default_interface": "127.0.0.1",
            "request_tcp_port_low": "0",
            "request_tcp_port_high": "0",
            "request_tcp_interface": "127.0.0.1",
        }
        source: Engine = await engines(tcp_only)
        store: Engine = await engines(tcp_only)
        got: list[ContextName] = []
        source.resolve_context_name("store1", got.append)
        store.advertise_context_name("store1", "127.0.0.1", 14567)
        await until(lambda: got, "store1 resolved through the SRS")
        assert (got[0].name, got[0].ip, got[0].port) == ("store1", "127.0.0.1", 14567)
        # a later querier gets the answer from the SRS's table
        assert (await source.wait_context_name("store1", WAIT)).port == 14567
        late: Engine = await engines(tcp_only)
        assert (await late.wait_context_name("store1", WAIT)).port == 14567
    finally:
        await srs.close()
