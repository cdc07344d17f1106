"""RawSource.send_run_nowait over real sockets: a DRO queue's run of frames (same size, back to
back in one buffer) reaches an ordinary receiver with the frames' own sequence numbers, under
the raw source's topic index, in order; bad runs are refused before anything goes.
"""

from __future__ import annotations

import struct

import pytest

from tests.integration.helpers import until
from tests.integration.test_raw import _configure
from umcore.api import Context, Message
from umcore.api import message as m
from umcore.errors import LocalProtocolError
from umcore.wire import lbmc

pytestmark = pytest.mark.usefixtures("reset_configuration")

_SEQ = struct.Struct("!I")


@pytest.mark.parametrize("transport", ["tcp", "lbtru"])
async def test_runs_keep_their_sequence_numbers(transport: str) -> None:
    _configure(transport)
    got: list[Message] = []
    async with await Context.create() as a, await Context.create() as b:
        rcv = await b.create_receiver("run.topic", got.append)
        raw = await a.open_raw_source("run.topic")
        await until(lambda: raw.source.receivers >= 1, "receiver connected")
        first = 0xFFFFFF00  # the numbers wrap at 2**32 inside the second run
        frames = [lbmc.encode_data(123, (first + i) & 0xFFFFFFFF, _SEQ.pack(i)) for i in range(900)]
        size = len(frames[0])
        sent = 0
        for lo, hi in ((0, 1), (1, 300), (300, 900)):  # a lone frame, then runs
            data = memoryview(b"".join(frames[lo:hi]))
            while lo < hi:
                n = raw.send_run_nowait(data[: (hi - lo) * size], size, hi - lo, flush=True)
                assert n >= 1
                data = data[n * size :]
                lo += n
                sent += n
            if hi == 1:
                assert raw.source.core.batch_len > 0  # a lone frame: batched until flushed
                raw.flush()
            assert raw.source.core.batch_len == 0  # a run with flush: nothing left batched
        assert sent == 900
        await until(lambda: sum(1 for x in got if x.type == m.MSG_DATA) == 900, "all 900")
        data_msgs = [x for x in got if x.type == m.MSG_DATA]
        assert [x.sequence_number for x in data_msgs] == [
            (first + i) & 0xFFFFFFFF for i in range(900)
        ]
        assert [_SEQ.unpack(x.data)[0] for x in data_msgs] == list(range(900))
        assert raw.source.next_sequence_number() == (first + 900) & 0xFFFFFFFF
        assert not any(x.type == m.MSG_UNRECOVERABLE_LOSS for x in got)
        # not data frames of that size: refused, nothing sent
        with pytest.raises(LocalProtocolError):
            raw.send_run_nowait(
                b"\x08\xff\x00\x10" + bytes(12) + b"\x08\xff\x00\x10" + bytes(12), 16, 2
            )
        with pytest.raises(LocalProtocolError):
            raw.send_run_nowait(b"".join(frames[:3]), size, 4)
        assert raw.source.next_sequence_number() == (first + 900) & 0xFFFFFFFF
        await rcv.close()
        await raw.close()
