"""Portals whose TRD resolves topics through an lbmrd or the SRS (configs/dro.xml's layout).

- TRD1 by an lbmrd (source side), TRD2 by multicast (receiver side): the portal's contexts talk
  to the lbmrd, the DRO's interest and requests reach TRD1 through it, messages flow in order.
- TRD1 by the SRS (source side, UDP topic resolution off), TRD2 by an lbmrd (receiver side):
  the proxy receiver resolves the source through the SRS (its SIR); the SRS has no datagram
  path, so the DRO's use queries and requests are not sent there (counted in ``tr_unsent``);
  its domain id and routes go as DIR / RTIR (test_transit checks applications learn them).
"""

from __future__ import annotations

import struct
from pathlib import Path

from tests.dro_proc.kit import Recorder, Trd, dro_xml, proxy_ready, running_dro
from tests.integration.daemon_proc import DaemonProcess
from tests.integration.helpers import until
from tests.integration.test_srs import srs_xml
from umcore.api import Context

_SEQ = struct.Struct("!I")
COUNT = 5000


async def _flow(trd1: Trd, trd2: Trd, topic: str) -> None:
    rec = Recorder()
    async with (
        running_dro(dro_xml([("TRD1", 1, trd1), ("TRD2", 2, trd2)], max_queue=64 << 20)) as rt,
        await Context.create(trd1.context()) as a,
        await Context.create(trd2.context()) as b,
    ):
        rcv = await b.create_receiver(topic, rec, attributes=trd2.receiver())
        src = await a.create_source(topic, attributes=trd1.source("tcp"))
        # the DRO learns of the source from its TIR (lbmrd) or its SIR (SRS), before any data
        await until(lambda: proxy_ready(rt, "TRD2", topic), "the path", timeout=30)
        assert rt.core.stats("TRD1").frames_received == 0
        await until(lambda: rt.portals["TRD2"].tr_sent > 0, "TR in TRD2")
        skip = len(rec.sqns)
        for i in range(COUNT):
            await src.send(_SEQ.pack(i) + bytes(12), flush=i % 100 == 99)
        src.flush()
        await until(lambda: len(rec.sqns) >= skip + COUNT, f"{COUNT} messages")
        got = rec.sqns[skip:]
        assert got == list(range(got[0], got[0] + COUNT))
        assert rec.losses == 0
        assert src.receivers == 1 and a.joined == {}  # the DRO is the source's one peer
        if trd1.srs is not None:
            # use queries and TR requests have no SRS form (the SRS reports receivers)
            assert rt.portals["TRD1"].tr_unsent > 0
            # the SRS portal received its sources from the SRS (SIR), not from UDP TR
            assert rt.portals["TRD1"].srs_sources >= 1 and rt.portals["TRD1"].tr_received == 0
        await rcv.close()
        await src.close()


async def test_lbmrd_trd_to_multicast_trd() -> None:
    lbmrd = await DaemonProcess.start("lbmrd", "-i", "127.0.0.1", "-p", "0")
    try:
        await _flow(Trd(lbmrd=lbmrd.address), Trd(), "dro.kinds.lbmrd")
    finally:
        await lbmrd.stop()


async def test_srs_trd_to_lbmrd_trd(tmp_path: Path) -> None:
    srs = await DaemonProcess.start("srs", str(srs_xml(tmp_path)))
    lbmrd = await DaemonProcess.start("lbmrd", "-i", "127.0.0.1", "-p", "0")
    try:
        await _flow(Trd(srs=srs.address), Trd(lbmrd=lbmrd.address), "dro.kinds.srs")
    finally:
        await lbmrd.stop()
        await srs.stop()
