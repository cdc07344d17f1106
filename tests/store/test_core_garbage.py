"""Bad input never crashes the core: mutated store messages into receive_control and garbage
frames into receive_frame are counted (and reported for the daemon to drop the peer), with no
internal error and no exception."""

from __future__ import annotations

import dataclasses
import random
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.store.corekit import Receiver, Rig, Source, make_rig, topic_config
from tests.store.test_compose import STRATEGIES
from umcore.errors import ProtocolError
from umcore.store import compose
from umcore.store.events import ControlRejected
from umcore.wire import lbmc

_POOL = [0, 1, 2, 0x7F, 0x80, 0xFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF]


def _rig(tmp: Path) -> tuple[Rig, Source, Receiver]:
    rig = make_rig(
        tmp,
        [topic_config("t", repository_allow_receiver_paced_persistence=1,
                      retransmission_request_forwarding=1)],
    )  # fmt: skip
    src = Source(rig, "t")
    src.register()
    src.send(0, 1, 2)
    rcv = Receiver(rig, src)
    rcv.register()
    return rig, src, rcv


def _mutate(rng: random.Random, msg: lbmc.LBMCMessage, known: list[int]) -> lbmc.LBMCMessage | None:
    headers = list(msg.headers)
    for _ in range(rng.randint(1, 3)):
        op = rng.random()
        if op < 0.2 and headers:
            del headers[rng.randrange(len(headers))]
        elif op < 0.3 and headers:
            headers.insert(rng.randrange(len(headers) + 1), rng.choice(headers))
        elif headers:
            i = rng.randrange(len(headers))
            hdr = headers[i]
            ints = [f.name for f in dataclasses.fields(hdr) if type(getattr(hdr, f.name)) is int]  # type: ignore[arg-type]
            if ints:
                value = rng.choice(_POOL + known + [rng.getrandbits(32)])
                headers[i] = dataclasses.replace(hdr, **{rng.choice(ints): value})  # type: ignore[type-var]
    if not headers:
        return None
    try:
        wire = lbmc.encode(lbmc.LBMCMessage(msg.msg_type, msg.tidx, msg.sqn, headers, msg.payload))
    except (ProtocolError, ValueError, TypeError, OverflowError):
        return None
    if rng.random() < 0.3 and len(wire) > 6:
        data = bytearray(wire)
        data[rng.randrange(4, len(data))] = rng.randrange(256)
        wire = bytes(data)
    try:
        return lbmc.decode(wire)
    except ProtocolError:
        return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    comps=st.lists(st.one_of(*STRATEGIES.values()), min_size=1, max_size=6),
    seed=st.integers(0, 2**32),
)
def test_mutated_store_messages_never_raise(comps: list[Any], seed: int) -> None:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        rig, src, rcv = _rig(Path(tmp))
        known = [src.reg_id, rcv.reg_id]
        core = rig.core
        fed = 0
        for comp in comps:
            msg = _mutate(rng, lbmc.decode(comp.encode()), known)
            if msg is None:
                continue
            core.receive_control(msg, "10.0.0.66", rig.now)
            fed += 1
            rig.pump()
            rig.advance(rng.choice([0.0, 0.3, 5.0]))
        stats = core.stats().counters
        assert stats["internal_errors"] == 0, [e.text for e in rig.events]
        assert stats["control_messages"] == fed + 2  # and the kit's two registrations


def test_a_registration_that_does_not_parse_is_reported_for_the_peer(tmp_path: Path) -> None:
    rig, _src, _ = _rig(tmp_path)
    bad = lbmc.LBMCMessage(
        lbmc.MSG_CONTROL, headers=[lbmc.UmePreg(0, True, 0, 0, 1, 0, 0, 1, 0, 1)]
    )
    rig.core.receive_control(bad, "10.9.9.9", rig.now)
    rig.pump()
    (ev,) = rig.events_of(ControlRejected)
    assert ev.peer_ip == "10.9.9.9" and "TOPICNAME" in ev.text
    assert rig.core.stats().counters["bad_control"] == 1
    assert rig.take(("0.0.0.1", 1)) == []  # nothing answered


def test_messages_that_are_not_for_the_store_are_counted(tmp_path: Path) -> None:
    rig, _src, _ = _rig(tmp_path)
    for comp in (
        compose.StabilityAck(1, 0, 5, 5),
        compose.SriRequest(1, 0),
        compose.RegistrationResponse(True, 5, 1, 0),
    ):
        rig.control(comp.encode())
    tsni = lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[lbmc.Tsni(((0, 1),))])
    rig.core.receive_control(tsni, "10.0.0.1", rig.now)
    assert rig.core.stats().counters["unexpected_control"] == 4
    assert rig.core.stats().counters["internal_errors"] == 0


@settings(max_examples=200, deadline=None)
@given(frames=st.lists(st.binary(max_size=40), max_size=20))
def test_garbage_frames_never_raise(frames: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rig, src, _ = _rig(Path(tmp))
        for frame in frames:
            rig.core.receive_frame(src.session, frame, rig.now)
            # the same bytes as a data frame of the session's topic index, lengths fixed up
            body = lbmc.encode_data(src.topic_idx, len(frame), frame)
            rig.core.receive_frame(src.session, body, rig.now)
            rig.pump()
        assert rig.core.stats().counters["internal_errors"] == 0
