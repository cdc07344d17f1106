"""A raw source on a real TCP source session with the test's clock and a capturing writer.

What it writes (frames re-indexed to its topic, sequence numbers kept, batching as a source's),
its back-pressure (a blocked session makes ``send`` wait and ``send_nowait`` raise WouldBlock,
then WAKEUP), and what it refuses (anything that is not one LBMC data frame).
"""

from __future__ import annotations

import asyncio

import pytest

from tests.api.harness import data_messages, make_sources
from umcore.api import message as m
from umcore.engine.raw import RawSource
from umcore.errors import LocalProtocolError, WouldBlock
from umcore.wire import lbmc


async def test_frames_are_reindexed_and_keep_their_sequence_numbers() -> None:
    h = await make_sources("other", "fwd")
    raw = RawSource(h.sources[1])
    for sqn in (500, 501, 502, 900):  # a jump is forwarded as it came
        await raw.send(lbmc.encode_data(77, sqn, b"x%d" % sqn))
    raw.flush()
    msgs = data_messages(h.writer.chunks)
    assert [(x.tidx, x.sqn, x.payload) for x in msgs] == [
        (raw.source.tidx, s, b"x%d" % s) for s in (500, 501, 502, 900)
    ]
    assert raw.source.next_sequence_number() == 901
    # The other topic of the session is untouched.
    assert h.sources[0].next_sequence_number() == 0


async def test_frames_are_batched_like_a_source_s_messages() -> None:
    h = await make_sources("fwd", batching_minimum_length=200)
    raw = RawSource(h.sources[0])
    frame = lbmc.encode_data(1, 0, bytes(40))
    for sqn in range(3):
        await raw.send(frame[:8] + sqn.to_bytes(4, "big") + frame[12:])
    assert h.writer.chunks == []  # 3 * 52 bytes: below the minimum length, held
    assert h.deadline is not None  # the batching deadline is armed
    await raw.send(frame[:8] + (3).to_bytes(4, "big") + frame[12:])
    assert len(h.writer.chunks) == 1  # the fourth reached 200 bytes: one write of the batch
    assert [x.sqn for x in data_messages(h.writer.chunks)] == [0, 1, 2, 3]


async def test_back_pressure_is_a_source_s() -> None:
    h = await make_sources("fwd")
    raw = RawSource(h.sources[0])
    h.writer.block_next = True
    raw.send_nowait(lbmc.encode_data(1, 10, b"a"), flush=True)  # this write blocks
    assert h.writer.paused
    with pytest.raises(WouldBlock):
        raw.send_nowait(lbmc.encode_data(1, 11, b"b"), flush=True)
    assert h.engine.send_would_block == 1
    waiting = asyncio.ensure_future(raw.send(lbmc.encode_data(1, 11, b"b"), flush=True))
    await asyncio.sleep(0)  # let it reach the wait (one loop turn; it must not have sent)
    assert not waiting.done() and len(h.writer.chunks) == 1
    h.writer.unblock()
    await asyncio.wait_for(waiting, 5)
    assert [x.sqn for x in data_messages(h.writer.chunks)] == [10, 11]
    assert ("fwd", m.SRC_EVENT_WAKEUP, None) in h.events  # after the WouldBlock


@pytest.mark.parametrize(
    "frame, why",
    [
        (b"\x00\x00\x00\x08abcd", "shorter than"),
        (lbmc.encode_data(1, 0, b"abc")[:-1], "msglen"),
        (lbmc.encode_data(1, 0, b"abc") + b"!", "msglen"),
        (
            lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, 0, 0, [lbmc.Tsni([(1, 2)])], b"")),
            "ver/type",
        ),
    ],
)
async def test_anything_but_one_data_frame_is_refused(frame: bytes, why: str) -> None:
    h = await make_sources("fwd")
    raw = RawSource(h.sources[0])
    with pytest.raises(LocalProtocolError, match=why):
        await raw.send(frame)
    assert h.writer.chunks == [] and raw.source.next_sequence_number() == 0


async def test_a_closed_raw_source_refuses() -> None:
    h = await make_sources("fwd", "keep")
    raw = RawSource(h.sources[0])
    await raw.close()
    with pytest.raises(Exception, match="closed"):
        raw.send_nowait(lbmc.encode_data(1, 0, b"late"))
