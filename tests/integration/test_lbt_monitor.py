"""Automatic monitoring of LBT-RU / LBT-RM sessions: ums_mon transport stats equal the counters.

A lossy run (pyum fault injection, not a UM option) makes the sessions NAK, retransmit and send
NCFs; then :func:`umcore.monitor.automatic.sample_context` of each context must report every
LBT session with the ums_mon.proto member of its kind, and each field must be the value the
session's core counted -- also after encoding to a UMSMonMsg and decoding it again.
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from tests.integration.test_lbt import configure
from umcore.api import Context, Message
from umcore.api import message as m
from umcore.monitor import automatic, umsstats
from umcore.monitor.pb import ums_mon_pb2

N = 3000

pytestmark = pytest.mark.usefixtures("reset_configuration")


def _pb_fields(sample: umsstats.TransportSample) -> dict[str, int]:
    raw = umsstats.transport_message(sample).SerializeToString()
    stats = ums_mon_pb2.UMSMonMsg.FromString(raw).stats
    (back,) = (
        stats.source_transports if sample.direction == "source" else (stats.receiver_transports)
    )
    assert back.WhichOneof("TransportType") == sample.kind
    assert back.source_string == sample.source_string
    member = getattr(back, sample.kind)
    return {f.name: v for f, v in member.ListFields()}


@pytest.mark.parametrize("transport", ["lbtru", "lbtrm"])
async def test_lbt_sessions_are_sampled_with_their_counters(transport: str) -> None:
    configure(transport, 0.05)
    got: list[int] = []
    done = asyncio.Event()
    bos = asyncio.Event()

    def on_msg(msg: Message) -> None:
        if msg.type == m.MSG_DATA:
            got.append(1)
            if len(got) == N:
                done.set()
        elif msg.type == m.MSG_BOS:
            bos.set()

    async with await Context.create() as a, await Context.create() as b:
        rcv = await b.create_receiver("lbt.mon", on_msg)
        src = await a.create_source("lbt.mon")
        await asyncio.wait_for(bos.wait(), 10)
        async with asyncio.timeout(40):
            for i in range(N):
                await src.send(struct.pack("!Q", i) + bytes(56), flush=True)
                if i & 0x3F == 0:
                    await asyncio.sleep(0.001)
            await done.wait()
        score = src.core
        (js,) = b.joined.values()
        rcore = js.core

        (s_sample,) = [t for t in automatic.sample_context(a).transports if t.kind == transport]
        (r_sample,) = [t for t in automatic.sample_context(b).transports if t.kind == transport]
        assert s_sample.direction == "source" and r_sample.direction == "receiver"
        assert s_sample.source_string == src.source_string
        assert r_sample.source_string == js.source_string

        ls = score.lstats
        sf = s_sample.fields
        assert sf["msgs_sent"] == score.stats.datagrams_sent == ls.msgs_sent >= N
        assert sf["bytes_sent"] == score.stats.bytes_sent > 0
        assert sf["naks_rcved"] == ls.naks_rcved > 0
        assert sf["nak_pckts_rcved"] == ls.nak_pckts_rcved > 0
        assert sf["rxs_sent"] == ls.rxs_sent > 0
        assert sf["rx_bytes_sent"] == ls.rx_bytes_sent > 0
        assert sf["naks_ignored"] == ls.naks_ignored
        assert sf["naks_shed"] == ls.naks_shed
        if transport == "lbtru":
            assert sf["num_clients"] == 1
            assert "txw_msgs" not in sf
        else:
            assert sf["txw_msgs"] == len(score._window) > 0
            assert sf["txw_bytes"] == score._window_bytes > 0

        st = rcore.stats
        rf = r_sample.fields
        for name in ("msgs_rcved", "bytes_rcved", "naks_sent", "nak_pckts_sent", "lost",
                     "lbm_msgs_rcved", "duplicate_data", "ncfs_ignored", "unrecovered_tmo"):  # fmt: skip
            assert rf[name] == getattr(st, name), name
        assert rf["msgs_rcved"] >= N and rf["naks_sent"] > 0 and rf["lost"] > 0
        assert rf["lbm_msgs_rcved"] >= N
        assert rf["nak_stm_min"] == umsstats.NO_SAMPLE_MIN
        extra = "dgrams_dropped_sid" if transport == "lbtru" else "out_of_order"
        assert rf[extra] == getattr(st, extra)

        # What goes on the wire says the same.
        pb_s = _pb_fields(s_sample)
        pb_r = _pb_fields(r_sample)
        assert pb_s["naks_rcved"] == ls.naks_rcved and pb_s["rxs_sent"] == ls.rxs_sent
        assert pb_r["naks_sent"] == st.naks_sent and pb_r["msgs_rcved"] == st.msgs_rcved

        ctx_fields = automatic.sample_context(b).context
        if transport == "lbtrm":
            assert "lbtrm_unknown_msgs_rcved" in ctx_fields
        await src.close()
        await rcv.close()
