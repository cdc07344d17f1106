"""The raw receiver hands the Store what it matches sessions with: the topic, the source's IP
and the TIR's topic options (umcore/engine/raw.py), and the core matches on them."""

from __future__ import annotations

from pathlib import Path

from tests.store.corekit import Source, make_rig, topic_config
from umcore.engine.raw import RawReceiver, RawSession
from umcore.resolver.core import SourceInfo
from umcore.wire import lbmc, lbmr, lbmr_options


def test_sink_sessions_carry_topic_ip_and_options(tmp_path: Path) -> None:
    opt = lbmr_options.LateJoinOption(14391, "10.0.0.1", 1, 0, 0)
    info = SourceInfo("t", 0, lbmr.TCPInfo("10.0.0.1", 14371, 1), options=(opt,))
    got: list[RawSession] = []
    raw = RawReceiver("t", lambda s, f: got.append(s), None)
    raw.sink_for(info, "TCP:10.0.0.1:14371:1")([b"frame"])
    (session,) = got
    assert (session.topic, session.source_ip, session.topic_index) == ("t", "10.0.0.1", 0)
    assert session.options == (opt,)
    # a late-join option (what a persistent source's TIR has) matches the registration
    rig = make_rig(tmp_path, [topic_config("t")])
    src = Source(rig, "t", advertise=False)
    src.register()
    rig.core.receive_frame(session, lbmc.encode_data(0, 0, b"m"), rig.now)
    rig.pump()
    # it offers late join: held until the source says where its stream starts (catchup.py)
    assert src.acked() == []
    src.lj_info(0, -1)  # nothing sent before the registration: next sequence number 0
    assert src.acked() == [0]
