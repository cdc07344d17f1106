"""A persistent source's bad inputs and faults, without a real Store: what UM refuses at
creation, and a "Store" that answers garbage or nothing costs that Store, never the context."""

from __future__ import annotations

import asyncio
import os

import pytest

from tests.api.conftest import WAIT
from umcore.aio.request_port import RequestPort
from umcore.api import Context
from umcore.errors import ConfigError, UMENoReg
from umcore.persist import events as ev
from umcore.wire import lbmc


async def test_persistence_without_a_request_port_is_refused_at_creation(opts: None) -> None:
    async with await Context.create({"request_tcp_bind_request_port": "0"}) as ctx:
        with pytest.raises(ConfigError, match="request_tcp_bind_request_port"):
            await ctx.create_source("p.t", attributes={"ume_store": "127.0.0.1:14567"})
        assert not ctx.sources


async def test_settings_um_refuses_are_errors_at_creation(opts: None) -> None:
    async with await Context.create() as ctx:
        too_many = ",".join(f"127.0.0.1:{20000 + i}" for i in range(26))
        with pytest.raises(ConfigError):
            await ctx.create_source("p.t", attributes={"ume_store": too_many})
        with pytest.raises(ConfigError):  # RPP needs ume_flight_size_bytes
            await ctx.create_source(
                "p.t",
                attributes={"ume_store": "127.0.0.1:1", "ume_receiver_paced_persistence": "1"},
            )
        assert not ctx.sources


class GarbageStore:
    """A peer at a "Store" address that answers every registration with bytes that decode as
    LBMC but not as a store message (a PREG_RESP with an unknown error code), or not at all."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.seen = 0
        self.port = RequestPort(self._on_message, ctxinst=os.urandom(8))

    def _on_message(self, msg: lbmc.LBMCMessage, peer_ip: str) -> None:
        self.seen += 1
        preg = msg.find(lbmc.UmePreg)
        if preg is None or not self.answer:
            return
        bad = lbmc.UmePregResp(lbmc.PREG_RESP_E | 0x0F, True, 0, 1, preg.transport_idx,
                               preg.topic_idx, 0, 0)  # fmt: skip
        data = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[bad]))
        self.port.send((lbmc.ip4_to_str(preg.resp_ip), preg.resp_port), data)


@pytest.mark.parametrize("answer", [True, False], ids=["garbage", "silent"])
async def test_a_store_answering_garbage_or_nothing_costs_that_store(
    opts: None, answer: bool
) -> None:
    store = GarbageStore(answer)
    await store.port.start("127.0.0.1", 0, 0)
    got: list[tuple[int, object]] = []
    try:
        ports = {
            "request_tcp_interface": "127.0.0.1",
            "request_tcp_port_low": "0",
            "request_tcp_port_high": "0",
        }
        async with await Context.create(ports) as ctx:
            src = await ctx.create_source(
                "p.t",
                attributes={
                    "ume_store": f"127.0.0.1:{store.port.port}",
                    "ume_registration_interval": "200",
                    "ume_store_activity_timeout": "600",
                    "ume_store_check_interval": "100",
                },
                on_event=lambda code, info: got.append((code, info)),
            )
            async with asyncio.timeout(WAIT):
                while not any(c == ev.SRC_EVENT_UME_STORE_UNRESPONSIVE for c, _ in got):
                    await asyncio.sleep(0.02)  # polling a condition, bounded by the timeout
            assert store.seen >= 2  # registration was retried
            with pytest.raises(UMENoReg):
                await src.send(b"x")
            assert not any(c == ev.SRC_EVENT_UME_REGISTRATION_COMPLETE_EX for c, _ in got)
            if answer:
                assert ctx.features.persist.malformed >= 1
            # the context is fine: a plain source on it still works
            plain = await ctx.create_source("p.plain")
            await plain.send(b"y", flush=True)
            await plain.close()
            await src.close()
    finally:
        await store.port.close()
