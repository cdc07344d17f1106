"""Two contexts in one process resolving through a real lbmrd subprocess, data over TCP."""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.daemon_proc import DaemonProcess
from tests.integration.helpers import lbmrd_client_lines, load_configuration, until
from umcore.api import Context, Message
from umcore.api import message as m
from umcore.config.attributes import Configuration
from umcore.tools.common import make_verifiable, verify

# Sessions on ephemeral ports, on loopback.
TCP_LINES = (
    "context transport_tcp_port_low 0\n"
    "context transport_tcp_port_high 0\n"
    "source transport_tcp_interface 127.0.0.1\n"
)


@pytest.fixture
def unicast(lbmrd: DaemonProcess, reset_configuration: None) -> Configuration:
    """Process configuration: topic resolution through the lbmrd, sessions on ephemeral ports."""
    return load_configuration(lbmrd_client_lines(lbmrd.address) + TCP_LINES)


@pytest.mark.slow
async def test_100k_messages_complete_and_in_order(
    unicast: Configuration, lbmrd: DaemonProcess
) -> None:
    n = 100_000
    got: list[Message] = []
    state = {"next": 0, "errors": 0, "frag": 0}

    def on_msg(msg: Message) -> None:
        if msg.type != m.MSG_DATA:
            got.append(msg)
            return
        _, err = verify(msg.data, state["next"])
        if err:
            state["errors"] += 1
        state["next"] += 1
        if len(msg.data) > 65535:
            state["frag"] += 1

    async with await Context.create() as a, await Context.create() as b:
        await b.create_receiver("bulk", on_msg)
        src = await a.create_source("bulk")
        await until(lambda: src.receivers == 1)
        for i in range(n):
            # every 10,000th message is 100 KB: UM fragmentation over TCP; the rest are batched
            length = 100_000 if i % 10_000 == 5_000 else 64
            await src.send(make_verifiable(i, length))
        src.flush()
        await until(lambda: state["next"] == n)
        assert state["errors"] == 0
        assert state["frag"] == 10
        assert [x.type for x in got] == [m.MSG_BOS]
        assert src.core.stats.datagrams_sent < n / 10  # implicit batching happened
        await src.close()
        await until(lambda: got[-1].type == m.MSG_EOS)
    assert any("new client" in line for line in lbmrd.lines)


async def test_late_receiver_bos_and_stopped_source_eos(unicast: Configuration) -> None:
    events: list[tuple[int, str]] = []
    async with await Context.create() as a, await Context.create() as b:
        src = await a.create_source("late")
        await src.send(b"before anyone listened", flush=True)  # head loss: nobody gets it
        await asyncio.sleep(0)  # the receiver is created later, in another context
        rcv = await b.create_receiver("late", lambda x: events.append((x.type, bytes(x.data))))
        await until(lambda: src.receivers == 1)
        await src.send(b"after", flush=True)
        await until(lambda: (m.MSG_DATA, b"after") in events)
        assert events[0][0] == m.MSG_BOS
        assert (m.MSG_DATA, b"before anyone listened") not in events
        await src.close()
        await until(lambda: events[-1][0] == m.MSG_EOS)
        # a new source for the topic is found again by the same receiver
        src2 = await a.create_source("late")
        await until(lambda: src2.receivers == 1)
        await src2.send(b"again", flush=True)
        await until(lambda: (m.MSG_DATA, b"again") in events)
        await src2.close()
        await rcv.close()


async def test_two_lbmrds_one_dead(unicast: Configuration, lbmrd: DaemonProcess) -> None:
    """With a dead lbmrd listed first, resolution still happens through the live one."""
    load_configuration(lbmrd_client_lines(("127.0.0.1", 9), lbmrd.address) + TCP_LINES)
    got: list[bytes] = []
    async with await Context.create() as a, await Context.create() as b:
        await b.create_receiver("two", lambda x: got.append(bytes(x.data)))
        src = await a.create_source("two")
        await until(lambda: src.receivers == 1)
        await src.send(b"via the live lbmrd", flush=True)
        await until(lambda: b"via the live lbmrd" in got)
        await src.close()
