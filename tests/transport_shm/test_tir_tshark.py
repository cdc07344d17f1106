"""What an LBT-IPC / LBT-SMX source advertises, as tshark reads it: the TIR's transport type
and its 10-byte block (host id, session id, transport id), with no Malformed or Error item."""

from __future__ import annotations

from tests.oracle import Tshark
from tests.transport_shm.peer import configure
from umcore.api import Context
from umcore.engine import shm
from umcore.wire import lbmr
from umcore.wire.pcap import udp_frame


async def test_ipc_and_smx_tirs_decode_cleanly(tshark: Tshark, unused_udp_port: int) -> None:
    configure("224.9.10.91", unused_udp_port, "lbtipc")
    async with await Context.create() as ctx:
        ipc = await ctx.create_source("tir.ipc")
        smx = await ctx.create_source("tir.smx", attributes={"transport": "lbtsmx"})
        sources = [ipc, smx]
        tirs = [lbmr.TIR(s.topic, s.tidx, s.transport_info) for s in sources]
        wire = lbmr.encode(lbmr.LBMRPacket(lbmr.LBMR_TYPE_NORMAL, tirs=tirs))
        # (to lbmrd's port, 15380: what tshark dissects as LBMR on unicast)
        decoded = tshark.decode([udp_frame("127.0.0.1", 14402, "127.0.0.1", 15380, wire)])
        decoded.assert_clean()
        for s, prefix in zip(sources, ("lbmr.tir.lbtipc", "lbmr.tir.lbtsmx"), strict=True):
            info = s.transport_info
            assert int(decoded.value(f"{prefix}.host_id"), 0) == shm.local_host_id()
            assert int(decoded.value(f"{prefix}.session_id"), 0) == info.session_id
            assert int(decoded.value(f"{prefix}.xport_id"), 0) == info.xport_id
            label = "LBT-IPC" if prefix.endswith("ipc") else "LBT-SMX"
            assert s.source_string == f"{label}:{info.session_id:08x}:{info.xport_id}"
        await ipc.close()
        await smx.close()
