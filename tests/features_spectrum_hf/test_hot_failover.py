"""Hot Failover (seed 003 10.17): HF sequence numbers from several contexts, each delivered once;
a source killed mid-stream costs nothing; intentional gaps, optional messages, 64-bit numbers,
duplicate delivery, reset, HF wildcard receivers; the filter core alone."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import pytest

from tests.api.conftest import WAIT, wait_for
from umcore.api import Context, Message
from umcore.api import message as m
from umcore.config.attributes import global_configuration
from umcore.features import hotfailover as hfc


def _info(sqn: int, bits: int = 32, optional: bool = False) -> hfc.HfInfo:
    return hfc.HfInfo(sqn, bits, optional, False)


def test_filter_core_ordered_and_arrival() -> None:
    f = hfc.HfFilter()
    verdicts = [f.receive(_info(s)) for s in (10, 11, 10, 12, 13, 25, 11, 26, 38, 38)]
    d, x = hfc.DELIVER, hfc.DROP
    assert verdicts == [d, d, x, d, d, d, x, d, d, x]
    # 32-bit numbers wrap (serial arithmetic); a jump beyond 2**30 reads as behind
    w = hfc.HfFilter()
    assert w.receive(_info(0xFFFFFFFF)) == d and w.receive(_info(0)) == d
    assert w.receive(_info(0xFFFFFFFE)) == x and w.receive(_info((1 << 30) + 5)) == x
    # arrival order: a late first copy of a skipped number is delivered once
    a = hfc.HfFilter(ordered=False)
    assert [a.receive(_info(s)) for s in (1, 4, 2, 2, 3, 4)] == [d, d, d, x, d, x]
    assert a.skipped == []
    # duplicates delivered and flagged / optional dropped after counting
    dup = hfc.HfFilter(duplicate_delivery=True, optional=False)
    assert dup.receive(_info(1)) == d and dup.receive(_info(1)) == hfc.DELIVER_DUPLICATE
    assert (
        dup.receive(_info(2, optional=True)) == x and dup.receive(_info(2)) == hfc.DELIVER_DUPLICATE
    )


def test_hf_element_bytes_and_decode() -> None:
    from umcore.wire import lbmc

    e32 = hfc.hf_element(0x01020304)
    e64 = hfc.hf_element(1 << 40, 64, optional=True)
    chain = lbmc.ApphdrChain((e32,))
    assert chain.body_bytes() == bytes.fromhex("00 02 ff 08 0000 01020304".replace(" ", ""))
    info = hfc.hf_info([lbmc.ApphdrChain((e64,))])
    assert info is not None and (info.sqn, info.bits, info.optional) == (1 << 40, 64, True)
    assert hfc.hf_info([lbmc.ApphdrChain((lbmc.ApphdrElement(2, b"\x01\x02"),))]) is None


async def test_two_hf_sources_one_killed_mid_stream(opts: None) -> None:
    count = 1500
    port = int(global_configuration().attributes("context").get("resolver_multicast_port"))
    got: list[Message] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_hf_receiver("hf.kill", got.append)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.features_spectrum_hf.hf_source_proc",
            str(port), "hf.kill", str(count),
            stdout=asyncio.subprocess.PIPE, cwd=os.getcwd(),
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            async with asyncio.timeout(WAIT * 2):
                assert (await proc.stdout.readline()).strip() == b"ready"
            src = await a.create_hf_source("hf.kill")
            await wait_for(lambda: src.receivers == 1)
            data = [x for x in got if x.type == m.MSG_DATA]
            # the other process leads; kill it after a few hundred messages
            await wait_for(lambda: sum(x.type == m.MSG_DATA for x in got) >= 300)
            for i in range(count):
                if i == 200:
                    proc.send_signal(signal.SIGKILL)
                await src.send_hf(i.to_bytes(4, "big"), i)
                if i % 50 == 0:
                    src.flush()
                    await asyncio.sleep(0.002)
            src.flush()
            await wait_for(lambda: sum(x.type == m.MSG_DATA for x in got) >= count)
            await wait_for(lambda: any(x.type == m.MSG_EOS for x in got))  # the killed one
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
        data = [x for x in got if x.type == m.MSG_DATA]
        assert [x.hf_sequence_number for x in data] == list(range(count))  # none lost, no dup
        assert [int.from_bytes(x.data, "big") for x in data] == list(range(count))
        assert all(x.flags & m.MSG_FLAG_HF_32 and x.sequence_number == x.hf_sequence_number
                   for x in data)  # fmt: skip
        assert {x.source for x in data} == {src.source_string} | {
            x.source for x in got if x.type == m.MSG_EOS
        }  # both sources delivered first copies
        assert rcv.hf_dropped >= 200  # the copies of whoever was second
        eos = [x for x in got if x.type == m.MSG_EOS]
        assert eos and all(x.flags & m.MSG_FLAG_HF_PASS_THROUGH for x in eos)
        await src.close()


async def test_intentional_gaps_optional_and_64_bit(opts: None) -> None:
    everything: list[Message] = []
    no_optional: list[Message] = []
    plain: list[Message] = []
    sqns = [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 25, 26, 38]
    optional = {13, 14, 16, 17, 18, 19}
    async with (
        await Context.create(opts) as a1,
        await Context.create(opts) as a2,
        await Context.create(opts) as b,
    ):
        await b.create_hf_receiver("hf.gaps", everything.append)
        await b.create_hf_receiver(
            "hf.gaps", no_optional.append, attributes={"hf_optional_messages": "0"}
        )
        await b.create_receiver("hf.gaps", plain.append)  # not HF: every copy
        s1 = await a1.create_hf_source("hf.gaps")
        s2 = await a2.create_hf_source("hf.gaps")
        await wait_for(lambda: s1.receivers == 1 and s2.receivers == 1)
        for s in sqns:
            big = (1 << 40) + s
            await s1.send_hf(b"%d" % s, big, 64, optional=s in optional, flush=True)
            await s2.send_hf(b"%d" % s, big, 64, optional=s in optional, flush=True)
        await s1.send(b"plain", flush=True)  # not HF-ordered: passes through
        await wait_for(lambda: sum(x.type == m.MSG_DATA for x in plain) == 2 * len(sqns) + 1)
        await wait_for(lambda: any(x.data == b"plain" for x in everything))
        await wait_for(lambda: any(x.data == b"plain" for x in no_optional))
        ev = [x for x in everything if x.type == m.MSG_DATA and x.hf_info is not None]
        assert [x.hf_sequence_number - (1 << 40) for x in ev] == sqns
        assert all(x.flags & m.MSG_FLAG_HF_64 and x.sequence_number == 0 for x in ev)
        assert all(x.original_sequence_number is not None for x in ev)
        assert [bool(x.flags & m.MSG_FLAG_HF_OPTIONAL) for x in ev] == [s in optional for s in sqns]
        no = [x.hf_sequence_number - (1 << 40) for x in no_optional
              if x.type == m.MSG_DATA and x.hf_info is not None]  # fmt: skip
        assert no == [10, 11, 12, 15, 20, 25, 26, 38]  # seed 10.17.7's example
        passed = [x for x in everything if x.data == b"plain"]
        assert passed[0].flags & m.MSG_FLAG_HF_PASS_THROUGH
        await s1.close()
        await s2.close()


async def test_duplicate_delivery_and_reset(opts: None) -> None:
    got: list[Message] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        await b.create_hf_receiver("hf.dup", got.append, attributes={"hf_duplicate_delivery": "1"})
        src = await a.create_hf_source("hf.dup")
        await wait_for(lambda: src.receivers == 1)
        for s in (5, 6, 6, 7):
            await src.send_hf(b"x", s, flush=True)
        await src.hf_send_rcv_reset()
        await src.send_hf(b"again", 1, flush=True)  # smaller than 7: accepted after the reset
        await wait_for(lambda: any(x.data == b"again" for x in got))
        seen = [(x.type, x.hf_sequence_number, bool(x.flags & m.MSG_FLAG_HF_DUPLICATE))
                for x in got if x.type in (m.MSG_DATA, m.MSG_HF_RESET)]  # fmt: skip
        assert seen == [
            (m.MSG_DATA, 5, False), (m.MSG_DATA, 6, False), (m.MSG_DATA, 6, True),
            (m.MSG_DATA, 7, False), (m.MSG_HF_RESET, 0, False), (m.MSG_DATA, 1, False),
        ]  # fmt: skip
        await src.close()


async def test_hf_wildcard_receiver_per_topic_and_forgets(opts: None) -> None:
    got: list[Message] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        w = await b.create_wildcard_receiver(
            r"^hfw\.", got.append,
            attributes={"hf_receiver": "1", "resolver_no_source_linger_timeout": "100"},
        )  # fmt: skip
        assert w.hot_failover
        s1 = await a.create_hf_source("hfw.one")
        s2 = await a.create_hf_source("hfw.two")
        await wait_for(lambda: s1.receivers == 1 and s2.receivers == 1)
        for s in (1, 2, 2, 3):
            await s1.send_hf(b"one", s, flush=True)
            await s2.send_hf(b"two", s, flush=True)  # the same numbers: another topic's state
        await wait_for(lambda: sum(x.type == m.MSG_DATA for x in got) == 6)
        per = {t: [x.hf_sequence_number for x in got if x.topic == t and x.type == m.MSG_DATA]
               for t in ("hfw.one", "hfw.two")}  # fmt: skip
        assert per == {"hfw.one": [1, 2, 3], "hfw.two": [1, 2, 3]}
        assert w.hf_filter("hfw.one") is not None
        await s1.close()
        await wait_for(lambda: any(x.type == m.MSG_EOS and x.topic == "hfw.one" for x in got))
        await wait_for(lambda: w.hf_filter("hfw.one") is None)  # forgotten after the linger
        assert w.hf_filter("hfw.two") is not None
        await s2.close()


async def test_hf_receiver_through_an_event_queue_and_batched_refused(opts: None) -> None:
    from umcore.api import EventQueue
    from umcore.api import eventqueue as eq
    from umcore.errors import UMError

    got: list[Message] = []
    evq = EventQueue()
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        await b.create_hf_receiver("hf.evq", got.append, event_queue=evq)
        plain = await b.create_receiver("hf.evq", on_messages=lambda msgs: None)
        with pytest.raises(UMError, match="on_messages"):
            plain.subscribe_channel(1)
        src = await a.create_hf_source("hf.evq")
        await wait_for(lambda: src.receivers == 1)
        for s in (1, 1, 2):
            await src.send_hf(b"x", s, flush=True)
        await wait_for(lambda: evq.size() >= 3)  # BOS + 1 + 2 (the duplicate never queued)
        assert got == []  # the filter ran on the loop, the callback waits for dispatch
        task = asyncio.create_task(evq.dispatch(eq.BLOCK))
        await wait_for(lambda: len(got) == 3)
        evq.unblock()
        await task
        assert [(x.type, x.hf_sequence_number) for x in got] == [
            (m.MSG_BOS, 0), (m.MSG_DATA, 1), (m.MSG_DATA, 2),
        ]  # fmt: skip
        await src.close()
        await plain.close()
    evq.close()
