"""A portal that fails at run time is restarted by the runtime (and says so in the log).

The failure is a portal context closed under the running portal (public ``Engine.close``: what
a fatal error inside a context amounts to).  The runtime notices within its check interval,
logs the failure, closes the portal (the core hears it go down) and starts it again with new
contexts; afterwards messages cross the DRO through the restarted portal as before.
"""

from __future__ import annotations

import logging
import struct

import pytest

from tests.dro_proc.kit import Recorder, Trd, dro_xml, proxy_ready, running_dro
from tests.integration.helpers import until
from umcore.api import Context

TOPIC = "dro.restart"
COUNT = 500
_SEQ = struct.Struct("!I")


async def test_failed_portal_is_restarted_and_forwards(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tnwgd")
    trd1, trd2 = Trd(), Trd()
    rec = Recorder()
    async with running_dro(dro_xml([("TRD1", 1, trd1), ("TRD2", 2, trd2)])) as rt:
        portal = rt.portals["TRD2"]
        old = portal.rcv
        assert old is not None and portal.failure() is None
        await old.close()  # the portal's receiver context is gone under it
        assert portal.failure() == "its receiver context closed"
        await until(lambda: portal.restarts == 1 and portal.up, "the portal restarted")
        assert portal.rcv is not None and portal.rcv is not old and not portal.rcv.closed
        assert portal.failure() is None
        logged = [r.getMessage() for r in caplog.records]
        assert any("[TRD2] failed: its receiver context closed" in m for m in logged), logged
        assert any("[TRD2] restarted" in m for m in logged), logged
        async with (
            await Context.create(trd1.context()) as a,
            await Context.create(trd2.context()) as b,
        ):
            await b.create_receiver(TOPIC, rec, attributes=trd2.receiver())
            src = await a.create_source(TOPIC, attributes=trd1.source("tcp"))
            await until(lambda: proxy_ready(rt, "TRD2", TOPIC), "the path through the DRO")
            for i in range(COUNT):
                await src.send(_SEQ.pack(i), flush=i % 100 == 99)
            src.flush()
            await until(lambda: len(rec.sqns) >= COUNT, f"{COUNT} messages")
            assert rec.sqns == list(range(rec.sqns[0], rec.sqns[0] + COUNT))
            assert rec.losses == 0
            assert a.joined == {} and src.receivers == 1  # the DRO is the source's one peer
            await src.close()
