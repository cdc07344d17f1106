"""Hot Failover across contexts (HFX, seed 003 10.17.9): the HFX core alone, then two networks
on loopback (two resolver ports: each receiving context sees only its own HF source), one
source closed mid-stream, loss of a number both sources lack, the hfx options from the API,
flat files and ``<hfxs>`` XML, and what HFX refuses (64-bit numbers, reset)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.api.conftest import wait_for
from umcore.api import Context, EventQueue, Message
from umcore.api import eventqueue as eq
from umcore.api import message as m
from umcore.api.hfx import Hfx
from umcore.config.attributes import Configuration, ReceiverAttributes
from umcore.errors import ConfigError, UMError
from umcore.features.hfx import HfxCore, HfxLoss, HfxSettings

# ------------------------------------------------------------------ the core (sans-IO)


def _run(core: HfxCore, sqns: list[int], now: float = 0.0) -> list[object]:
    out: list[object] = []
    for s in sqns:
        core.receive_message(s, f"m{s}", now)
        out += core.take_events()
    return out


def test_core_orders_across_legs_and_drops_duplicates() -> None:
    core = HfxCore(HfxSettings())
    # leg A lost 3, leg B delivers it later; every number arrives twice
    out = _run(core, [1, 2, 1, 4, 2, 5, 3, 4, 5, 3, 6])
    assert out == ["m1", "m2", "m3", "m4", "m5", "m6"]
    assert core.duplicates == 5 and core.held == 0 and core.missing == 0
    # 32-bit numbers wrap
    w = HfxCore(HfxSettings())
    assert _run(w, [0xFFFFFFFF, 0, 0xFFFFFFFF, 1]) == ["m4294967295", "m0", "m1"]
    with pytest.raises(ValueError):
        w.receive_message(1 << 32, "x", 0.0)


def test_core_loss_after_max_delay_on_receive_events_and_timer() -> None:
    core = HfxCore(HfxSettings(max_delay=1.0, loss_check_interval=0.1))
    assert _run(core, [1, 2, 4, 5], now=0.0) == ["m1", "m2"]  # 4, 5 wait for 3
    assert core.next_timer() == pytest.approx(0.1)
    core.handle_timer(0.5)  # not yet given up
    assert core.take_events() == [] and core.next_timer() == pytest.approx(0.6)
    core.handle_timer(1.0)
    assert core.take_events() == [HfxLoss(3, 1, False), "m4", "m5"]
    assert core.next_timer() is None and core.lost == 1
    assert _run(core, [3], now=1.1) == [] and core.duplicates == 1  # too late: a duplicate
    # without the periodic check, loss waits for the next message (UM's default)
    lazy = HfxCore(HfxSettings(max_delay=1.0))
    assert _run(lazy, [1, 3], now=0.0) == ["m1"] and lazy.next_timer() is None
    assert _run(lazy, [4], now=2.0) == [HfxLoss(2, 1, False), "m3", "m4"]


def test_core_burst_arrival_and_map_limit() -> None:
    core = HfxCore(HfxSettings(max_burst_loss=512))
    assert _run(core, [1, 3]) == ["m1"]  # 3 held
    # a gap wider than 512: one burst event, the held 3 discarded, 600 delivered
    assert _run(core, [600]) == [HfxLoss(2, 598, True), "m600"]
    assert core.held == 0 and core.missing == 0
    arrival = HfxCore(HfxSettings(ordered=False, max_delay=1.0))
    assert _run(arrival, [1, 3, 2, 3, 5]) == ["m1", "m3", "m2", "m5"]
    # arrival order: the message goes at once, then the receive event's loss check
    assert _run(arrival, [6], now=5.0) == ["m6", HfxLoss(4, 1, False)]
    limited = HfxCore(HfxSettings(max_map_entries=2))
    assert _run(limited, [1, 3, 4]) == ["m1"]
    assert _run(limited, [5]) == [HfxLoss(2, 1, False), "m3", "m4", "m5"]


# ------------------------------------------------------------------ two networks on loopback


def _network(port: int) -> dict[str, str]:
    """Context attributes for one of two resolver networks (another TR port)."""
    return {"resolver_multicast_port": str(port)}


def _data(got: list[Message]) -> list[Message]:
    return [x for x in got if x.type == m.MSG_DATA]


async def test_two_networks_one_source_closed_mid_stream(
    opts: None, unused_udp_port_factory: Callable[[], int]
) -> None:
    count = 400
    net1, net2 = _network(unused_udp_port_factory()), _network(unused_udp_port_factory())
    got: list[Message] = []
    async with (
        await Context.create(net1) as s1ctx,
        await Context.create(net2) as s2ctx,
        await Context.create(net1) as r1,
        await Context.create(net2) as r2,
    ):
        hfx = await Hfx.create("hfx.two", [r1, r2], got.append)
        assert len(hfx.legs) == 2
        # legs hand on late first copies; the HFX orders (umcore.api.hfx)
        assert all(leg.receiver.ordered_delivery == -1 for leg in hfx.legs)
        s1 = await s1ctx.create_hf_source("hfx.two")
        s2 = await s2ctx.create_hf_source("hfx.two")
        await wait_for(lambda: s1.receivers == 1 and s2.receivers == 1)  # one leg each
        for i in range(count):
            if i == count // 2:
                await s1.close()  # network 1's source stops mid-stream
            if i < count // 2:
                await s1.send_hf(i.to_bytes(4, "big"), i)
            await s2.send_hf(i.to_bytes(4, "big"), i)
            if i % 50 == 49:
                s2.flush()
                if i < count // 2:
                    s1.flush()
        s2.flush()
        await wait_for(lambda: len(_data(got)) >= count)
        await wait_for(lambda: any(x.type == m.MSG_EOS for x in got))  # s1's, through leg 1
        data = _data(got)
        assert [x.hf_sequence_number for x in data] == list(range(count))  # none lost, no dup
        assert [int.from_bytes(x.data, "big") for x in data] == list(range(count))
        assert all(x.flags & m.MSG_FLAG_HF_32 and x.sequence_number == x.hf_sequence_number
                   and not x.flags & m.MSG_FLAG_HF_DUPLICATE for x in data)  # fmt: skip
        # both legs carried copies: leg 1 the first half, leg 2 all of it
        assert {x.source for x in data} == {s1.source_string, s2.source_string}
        assert hfx.duplicates == count // 2 and hfx.delivered == count
        assert hfx.lost == 0 and not any(x.type in (4, 5) for x in got)
        eos = [x for x in got if x.type == m.MSG_EOS]
        assert eos and all(x.flags & m.MSG_FLAG_HF_PASS_THROUGH for x in eos)
        legs = [leg.receiver for leg in hfx.legs]
        await hfx.close()
        assert all(r.closed for r in legs) and not hfx.legs
        await s2.close()


async def test_loss_of_a_number_both_sources_lack_and_refusals(
    opts: None, unused_udp_port_factory: Callable[[], int]
) -> None:
    net1, net2 = _network(unused_udp_port_factory()), _network(unused_udp_port_factory())
    got: list[Message] = []
    async with (
        await Context.create(net1) as s1ctx,
        await Context.create(net2) as s2ctx,
        await Context.create(net1) as r1,
        await Context.create(net2) as r2,
    ):
        hfx = await Hfx.create(
            "hfx.loss", [r1, r2], got.append,
            attributes={
                "delivery_control_max_delay": "1000",
                "delivery_control_loss_check_interval": "50",
            },
        )  # fmt: skip
        s1 = await s1ctx.create_hf_source("hfx.loss")
        s2 = await s2ctx.create_hf_source("hfx.loss")
        await wait_for(lambda: s1.receivers == 1 and s2.receivers == 1)
        # source 1 lacks 3, source 2 lacks 7: the other network fills them; both lack 5
        for i in range(10):
            if i not in (3, 5):
                await s1.send_hf(b"%d" % i, i, flush=True)
            if i not in (5, 7):
                await s2.send_hf(b"%d" % i, i, flush=True)
        await wait_for(lambda: len(_data(got)) >= 9)
        seen = [(x.type, x.hf_sequence_number) for x in got
                if x.type in (m.MSG_DATA, m.MSG_UNRECOVERABLE_LOSS)]  # fmt: skip
        assert seen == [(m.MSG_DATA, i) for i in range(5)] + [(m.MSG_UNRECOVERABLE_LOSS, 5)] + [
            (m.MSG_DATA, i) for i in range(6, 10)
        ]
        loss = next(x for x in got if x.type == m.MSG_UNRECOVERABLE_LOSS)
        assert loss.sequence_number == 5 and loss.topic == "hfx.loss" and hfx.lost == 1
        # HFX refuses 64-bit HF numbers and HF resets (seed 10.17.9); the legs pass them on
        await s1.send_hf(b"10", 10, flush=True)
        await s2.send_hf(b"10", 10, flush=True)
        await s1.send_hf(b"big", 20, 64, flush=True)  # ahead for leg 1's filter: handed on
        await s2.hf_send_rcv_reset()  # leg 2 forgets; the HFX does not
        await wait_for(lambda: hfx.refused_64bit == 1 and hfx.refused_reset == 1)
        dups = hfx.duplicates
        await s2.send_hf(b"2", 2, flush=True)  # new to leg 2 after its reset, old to the HFX
        await s2.send_hf(b"11", 11, flush=True)
        await wait_for(lambda: len(_data(got)) == 11)
        assert [x.hf_sequence_number for x in _data(got)[-2:]] == [10, 11]
        assert hfx.duplicates == dups + 1
        assert not any(x.data == b"big" for x in got)
        assert sum(x.data == b"2" for x in got) == 1  # the first 2 only
        await hfx.close()
        await s1.close()
        await s2.close()


async def test_async_iteration_and_duplicate_delivery(opts: None) -> None:
    async with (
        await Context.create(opts) as a,
        await Context.create(opts) as r1,
        await Context.create(opts) as r2,
    ):
        hfx = await Hfx.create("hfx.iter", [r1, r2], attributes={"duplicate_delivery": "1"})
        src = await a.create_hf_source("hfx.iter")
        await wait_for(lambda: src.receivers == 2)
        for i in (1, 2):
            await src.send_hf(b"x", i, flush=True)
        firsts: list[int] = []
        dups: list[int] = []
        async for msg in hfx:
            if msg.type != m.MSG_DATA:
                continue
            (dups if msg.flags & m.MSG_FLAG_HF_DUPLICATE else firsts).append(msg.hf_sequence_number)
            if len(firsts) + len(dups) == 4:
                break
        assert firsts == [1, 2] and sorted(dups) == [1, 2]  # one copy per leg
        await hfx.close()
        assert [x async for x in hfx if x.type == m.MSG_DATA] == []
        await src.close()

        # legs whose receiver attributes refuse optional messages (a mapping, an attribute
        # object): the optional number still counts in the HFX's order, nothing waits for it
        no_opt = ReceiverAttributes.create()
        no_opt.set("hf_optional_messages", "0")
        got: list[Message] = []
        hfx2 = Hfx("hfx.opt", got.append)
        await hfx2.add_context(r1, attributes={"hf_optional_messages": "0"})
        await hfx2.add_context(r2, attributes=no_opt)
        with pytest.raises(UMError):
            await hfx2.add_context(r2)  # one leg per context
        src2 = await a.create_hf_source("hfx.opt")
        await wait_for(lambda: src2.receivers == 2)
        for i in (1, 2, 3):
            await src2.send_hf(b"%d" % i, i, optional=i == 2, flush=True)
        await wait_for(lambda: len(_data(got)) == 2)
        assert [x.hf_sequence_number for x in _data(got)] == [1, 3]
        assert hfx2.dropped_optional == 1 and hfx2.lost == 0
        await hfx2.close()
        await src2.close()

        # through an event queue: the callback runs at dispatch; the queue outlives the HFX
        evq = EventQueue()
        queued: list[Message] = []
        with pytest.raises(UMError, match="callback"):
            Hfx("hfx.evq", event_queue=evq)
        hfx3 = await Hfx.create("hfx.evq", [r1, r2], queued.append, event_queue=evq)
        src3 = await a.create_hf_source("hfx.evq")
        await wait_for(lambda: src3.receivers == 2)
        await src3.send_hf(b"q", 7, flush=True)
        await wait_for(lambda: hfx3.delivered == 1 and hfx3.duplicates == 1)
        assert not _data(queued)  # waits for dispatch
        with pytest.raises(UMError):
            evq.close()
        while evq.size():  # BOS events, then the data message
            await evq.dispatch(eq.POLL)
        assert [x.hf_sequence_number for x in _data(queued)] == [7]
        await hfx3.close()
        await src3.close()
        evq.close()


# ------------------------------------------------------------------ options


def test_unknown_or_bad_hfx_option_raises(mcast_config: Configuration) -> None:
    with pytest.raises(ConfigError, match="bogus"):
        Hfx("hfx.bad", attributes={"bogus": "1"})
    with pytest.raises(ConfigError):
        Hfx("hfx.bad", attributes={"hf_optional_messages": "0"})  # a receiver option
    with pytest.raises(ConfigError):
        Hfx("hfx.bad", attributes={"ordered_delivery": "0"})  # hfx allows 1 and -1 only
    with pytest.raises(ConfigError):
        Hfx("", None)
    d = Hfx("hfx.defaults").settings
    assert d == HfxSettings(True, 10.0, 0.0, 512, 200_000, False)  # the registry's


def test_xml_hfxs_and_flat_file_options_reach_the_hfx(mcast_config: Configuration) -> None:
    mcast_config.config_text("hfx delivery_control_max_delay 2500\n", "flat.cfg")
    mcast_config.config_xml_string(
        """<um-configuration version="1.0"><applications><application>
        <hfxs><topic topicname="hfx.xml"><options type="hfx">
          <option name="ordered_delivery" default-value="-1"/>
          <option name="delivery_control_maximum_burst_loss" default-value="100"/>
          <option name="duplicate_delivery" default-value="1"/>
        </options></topic><topic pattern="^hfx\\.no" rule="deny"/></hfxs>
        </application></applications></um-configuration>"""
    )
    s = Hfx("hfx.xml").settings
    assert (s.ordered, s.max_burst_loss, s.duplicate_delivery) == (False, 100, True)
    assert s.max_delay == 2.5  # the flat file's
    other = Hfx("hfx.other").settings
    assert (other.ordered, other.max_burst_loss, other.max_delay) == (True, 512, 2.5)
    # the API's attributes are taken as they are (no XML over them)
    assert Hfx("hfx.xml", attributes={"ordered_delivery": "1"}).settings.ordered
    with pytest.raises(ConfigError, match="denied"):
        Hfx("hfx.not.this")  # <hfxs> rules apply as to sources and receivers
