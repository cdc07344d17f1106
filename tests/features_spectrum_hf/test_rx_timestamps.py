"""Software receive timestamps on LBT-RM (SO_TIMESTAMPNS) in msg.hr_timestamp; (0, 0) without
the option or on TCP."""

from __future__ import annotations

import socket
import time

import pytest

from tests.api.conftest import wait_for
from umcore.aio.rxstamp import AVAILABLE, enable_timestamps
from umcore.api import Context, Message
from umcore.api import message as m


@pytest.mark.skipif(not AVAILABLE, reason="no SO_TIMESTAMPNS on this platform")
async def test_lbtrm_receive_timestamps(opts: None) -> None:
    stamped: list[Message] = []
    plain: list[Message] = []
    async with (
        await Context.create({"transport_lbtrm_receiver_timestamp": "1"}) as b,
        await Context.create(opts) as c,
        await Context.create(opts) as a,
    ):
        await b.create_receiver("ts.rm", stamped.append)
        await b.create_receiver("ts.tcp", stamped.append)
        await c.create_receiver("ts.rm", plain.append)
        rm = await a.create_source("ts.rm", attributes={"transport": "lbtrm"})
        tcp = await a.create_source("ts.tcp")
        await wait_for(lambda: tcp.receivers == 1)
        await wait_for(lambda: any(x.type == m.MSG_BOS for x in stamped if x.topic == "ts.rm"))
        await wait_for(lambda: any(x.type == m.MSG_BOS for x in plain))
        before = time.time_ns()
        for i in range(20):
            await rm.send(b"rm%d" % i, flush=True)
        await tcp.send(b"tcp", flush=True)
        await wait_for(lambda: sum(x.type == m.MSG_DATA for x in stamped) == 21)
        await wait_for(lambda: sum(x.type == m.MSG_DATA for x in plain) == 20)
        after = time.time_ns()
        rm_msgs = [x for x in stamped if x.type == m.MSG_DATA and x.topic == "ts.rm"]
        for x in rm_msgs:
            sec, nsec = x.hr_timestamp
            assert 0 <= nsec < 10**9
            assert before <= sec * 10**9 + nsec <= after  # the kernel's wall-clock receive time
        stamps = [x.hr_timestamp for x in rm_msgs]
        assert stamps == sorted(stamps)
        tcp_msg = next(x for x in stamped if x.topic == "ts.tcp" and x.type == m.MSG_DATA)
        assert tcp_msg.hr_timestamp == (0, 0)
        assert all(x.hr_timestamp == (0, 0) for x in plain if x.type == m.MSG_DATA)
        await rm.close()
        await tcp.close()


def test_enable_timestamps_on_a_udp_socket() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        assert enable_timestamps(s) is AVAILABLE
