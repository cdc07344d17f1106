"""Persistent sources and receivers end to end with real umestored processes on loopback.

The acceptance checks of persistence-store.md section 7 from the application's side: a pyum
source with ``ume_store`` entries and pyum receivers, the Stores as subprocesses, topic
resolution through an lbmrd.  Each test states the check numbers it covers.  Every wait is
bounded; Store timers are shortened through the Stores' XML and the clients' options so that
unresponsive Stores and quorum loss show within seconds.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
from pathlib import Path

import pytest

from tests.integration.helpers import lbmrd_client_lines, until
from tests.integration.persistkit import (
    TCP_LINES,
    TOPIC,
    WAIT,
    Received,
    SourceEvents,
    Topology,
    free_port,
    send_all,
    source_attrs,
)
from tests.oracle import Tshark
from umcore.api import Context
from umcore.engine import message as m
from umcore.errors import UMENoReg, WouldBlock
from umcore.persist import events as ev

pytestmark = pytest.mark.usefixtures("reset_configuration")


# --- checks 1, 6, 7: registration, stability, a late receiver recovering from the Store -------


async def test_register_send_stable_and_late_receiver_recovers(topo: Topology) -> None:
    st = await topo.add_store()
    n = 50
    payloads = [f"msg {i}".encode() for i in range(n)]
    events = SourceEvents()
    async with await Context.create() as sctx:
        src = await sctx.create_source(TOPIC, attributes=source_attrs([st]), on_event=events)
        assert src.persistent
        with pytest.raises(UMENoReg):
            await src.send(b"too early")
        await asyncio.wait_for(src.wait_registered(), WAIT)
        (succ,) = events.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)
        assert not succ.flags & ev.REG_FLAG_OLD and succ.registration_id != 0
        (complete,) = events.of(ev.SRC_EVENT_UME_REGISTRATION_COMPLETE_EX)
        assert complete.flags & ev.REG_COMPLETE_FLAG_QUORUM
        await send_all(src, payloads)
        await until(lambda: events.stable() >= set(range(n)), "every message stable", timeout=WAIT)
        store_acks = events.of(
            ev.SRC_EVENT_UME_MESSAGE_STABLE_EX, lambda i: i.flags & ev.STABLE_FLAG_STORE
        )
        assert {i.sequence_number for i in store_acks} >= set(range(n))

        # A receiver that first registers now recovers 0..n-1 from the Store, then goes live.
        got = Received()
        async with await Context.create() as rctx:
            rcv = await rctx.create_receiver(TOPIC, got)
            await until(lambda: len(got.data()) >= n, "the recovered messages", timeout=WAIT)
            assert got.sqns()[:n] == list(range(n))
            assert [x.data for x in got.data()[:n]] == payloads
            assert all(x.flags & m.MSG_FLAG_RETRANSMIT for x in got.data()[:n])
            assert got.of(m.MSG_BOS) is not None
            (rsucc,) = got.of(ev.MSG_UME_REGISTRATION_SUCCESS_EX)
            assert rsucc.src_registration_id == succ.registration_id
            assert got.of(ev.MSG_UME_REGISTRATION_COMPLETE_EX)
            await src.send(b"live", flush=True)
            await until(lambda: len(got.data()) > n, "the live message", timeout=WAIT)
            live = got.data()[n]
            assert live.sequence_number == n and live.data == b"live"
            assert not live.flags & m.MSG_FLAG_RETRANSMIT
            await rcv.close()
        await src.close()


# --- issue 17: what the source sent before a receiver joined, past the Stores' range --------


async def test_tail_sent_before_the_receiver_joined_is_recovered(topo: Topology) -> None:
    """The Store never joins the source's transport (it resolves through an lbmrd that does not
    exist) and the source makes no proactive retransmissions: the Store gets 0..4 by its late
    join to the source (umcore.store.catchup) and never 5 and 6, sent after that.  A receiver
    that starts afterwards registers with the Store's range 0..4 and joins an idle session: only
    the source's TSNI shows it 5 and 6 (issue 17: before, it never learnt of them).  It asks
    the Store, which forwards to the source (``retransmission-request-forwarding`` 1); nothing
    is sent after the receiver starts, and it gets 0..6 in order, each once."""
    st = await topo.add_store(
        "disk", start=False, topics={TOPIC: {"retransmission-request-forwarding": "1"}}
    )
    nowhere = lbmrd_client_lines(("127.0.0.1", free_port())) + TCP_LINES
    (st.dir / "store.cfg").write_text(nowhere)
    await st.start()
    events = SourceEvents()
    attrs = source_attrs(
        [st],
        ume_message_stability_timeout="0",
        transport_topic_sequence_number_info_interval="300",
    )
    async with await Context.create() as sctx:
        src = await sctx.create_source(TOPIC, attributes=attrs, on_event=events)
        await asyncio.wait_for(src.wait_registered(), WAIT)
        await send_all(src, [b"%d" % i for i in range(5)])
        await until(lambda: events.stable() >= set(range(5)), "0..4 stable", timeout=WAIT)
        await send_all(src, [b"5", b"6"])
        got = Received()
        async with await Context.create() as rctx:
            rcv = await rctx.create_receiver(TOPIC, got)
            await until(
                lambda: {5, 6} <= set(got.sqns()),
                "5 and 6 at the receiver",
                timeout=WAIT,
                detail=lambda: f"receiver: {[(x.type, x.sequence_number) for x in got.msgs]}",
            )
            (complete,) = got.of(ev.MSG_UME_REGISTRATION_COMPLETE_EX)
            assert complete.sequence_number == 0
            assert got.sqns() == list(range(7))
            assert [x.data for x in got.data()] == [b"%d" % i for i in range(7)]
            assert all(x.flags & m.MSG_FLAG_RETRANSMIT for x in got.data())
            await src.send(b"7", flush=True)
            await until(lambda: got.sqns()[-1:] == [7], "live 7", timeout=WAIT)
            assert got.sqns() == list(range(8))  # no duplicate at the seam
            await rcv.close()
        await src.close()


# --- check 11: a receiver restarted with its Session ID recovers exactly what it missed ------


@pytest.mark.parametrize("maximum", [0, 10])
async def test_receiver_restart_recovers_what_it_missed(topo: Topology, maximum: int) -> None:
    st = await topo.add_store()
    events = SourceEvents()
    rattrs = {"ume_session_id": "0x4242", "retransmit_request_maximum": str(maximum)}
    async with await Context.create() as sctx:
        src = await sctx.create_source(TOPIC, attributes=source_attrs([st]), on_event=events)
        await asyncio.wait_for(src.wait_registered(), WAIT)
        first = Received()
        async with await Context.create() as rctx:
            rcv = await rctx.create_receiver(TOPIC, first, attributes=rattrs)
            await until(
                lambda: first.of(ev.MSG_UME_REGISTRATION_COMPLETE_EX), "registration", timeout=WAIT
            )
            await send_all(src, [b"%d" % i for i in range(42)])
            await until(lambda: len(first.data()) >= 42, "0..41 live", timeout=WAIT)
            await rcv.close()  # the consumption ACKs went out on the way
        await send_all(src, [b"%d" % i for i in range(42, 100)])
        await until(lambda: events.stable() >= set(range(100)), "0..99 stable", timeout=WAIT)

        again = Received()
        async with await Context.create() as rctx:
            rcv = await rctx.create_receiver(TOPIC, again, attributes=rattrs)
            expect_first = 42 if maximum == 0 else 99 - maximum
            await until(lambda: len(again.data()) >= 100 - expect_first, "recovery", timeout=WAIT)
            assert again.sqns() == list(range(expect_first, 100))
            assert all(x.flags & m.MSG_FLAG_RETRANSMIT for x in again.data())
            (succ,) = again.of(ev.MSG_UME_REGISTRATION_SUCCESS_EX)
            assert succ.flags & ev.RCV_REG_FLAG_OLD and succ.sequence_number == 42
            (complete,) = again.of(ev.MSG_UME_REGISTRATION_COMPLETE_EX)
            assert bool(complete.flags & ev.RCV_COMPLETE_FLAG_RXREQMAX) == (maximum != 0)
            await src.send(b"100", flush=True)
            await until(lambda: again.sqns()[-1:] == [100], "live 100", timeout=WAIT)
            await rcv.close()
        await src.close()


# --- checks 2, 12: a source restarted with its Session ID resumes after the consensus -------


async def test_source_restart_resumes_after_consensus(topo: Topology) -> None:
    st = await topo.add_store()
    attrs = source_attrs([st], ume_session_id="0x77")
    first = SourceEvents()
    async with await Context.create() as sctx:
        src = await sctx.create_source(TOPIC, attributes=attrs, on_event=first)
        await asyncio.wait_for(src.wait_registered(), WAIT)
        await send_all(src, [b"%d" % i for i in range(5)])
        await until(lambda: first.stable() >= set(range(5)), "0..4 stable", timeout=WAIT)
        reg_id = first.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)[0].registration_id
        await src.close()

    got = Received()
    again = SourceEvents()
    async with await Context.create() as rctx, await Context.create() as sctx:
        rcv = await rctx.create_receiver(TOPIC, got)
        src = await sctx.create_source(TOPIC, attributes=attrs, on_event=again)
        await asyncio.wait_for(src.wait_registered(), WAIT)
        (succ,) = again.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)
        assert succ.flags & ev.REG_FLAG_OLD
        assert succ.registration_id == reg_id and succ.sequence_number == 4
        (complete,) = again.of(ev.SRC_EVENT_UME_REGISTRATION_COMPLETE_EX)
        assert complete.sequence_number == 4
        # Sent at once, whether or not the receiver joined the restarted source's session yet
        # (registration does not wait for it): 5 and 6 reach it live, or, sent before its
        # join, through the Store, the session's first message or TSNI showing the gap
        # (issue 17, TopicRecovery.on_tail).
        await send_all(src, [b"5", b"6"])
        await until(
            lambda: {5, 6} <= set(got.sqns()),
            "5 and 6 at the receiver",
            timeout=WAIT,
            # say what the receiver, the source and the Store saw
            detail=lambda: (
                f"receiver: {[(x.type, x.sequence_number, x.flags) for x in got.msgs]}\n"
                f"source events: {[code for code, _ in again.got]}\n"
                f"source receivers: {src.receivers}\nStore log:\n" + "\n".join(st.lines()[-40:])
            ),
        )
        assert got.sqns()[-2:] == [5, 6]
        await until(lambda: again.stable() >= {5, 6}, "5, 6 stable", timeout=WAIT)
        await rcv.close()
        await src.close()


# --- checks 15, 16: three Stores under quorum, one and then two down --------------------------


async def test_quorum_one_down_continues_two_down_refuses(topo: Topology) -> None:
    stores = [await topo.add_store(), await topo.add_store(), await topo.add_store()]
    events = SourceEvents()
    attrs = source_attrs(
        stores,
        ume_store_activity_timeout="1500",
        ume_store_check_interval="250",
        ume_registration_interval="500",
        # the source retains what it sent (stable or not), so a Store that was down catches up
        retransmit_retention_size_threshold="1000000",
    )
    async with await Context.create() as sctx:
        src = await sctx.create_source(TOPIC, attributes=attrs, on_event=events)
        await asyncio.wait_for(src.wait_registered(), WAIT)
        assert len(events.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)) == 3
        await send_all(src, [b"a%d" % i for i in range(10)])
        await until(lambda: events.stable() >= set(range(10)), "0..9 stable", timeout=WAIT)

        await stores[1].kill()
        await until(
            lambda: events.of(ev.SRC_EVENT_UME_STORE_UNRESPONSIVE), "unresponsive", timeout=WAIT
        )
        (unresp,) = events.of(ev.SRC_EVENT_UME_STORE_UNRESPONSIVE)
        assert "(quorum lost)" not in unresp.text and unresp.store_index == 1
        await send_all(src, [b"b%d" % i for i in range(10)])
        await until(lambda: events.stable() >= set(range(20)), "10..19 stable", timeout=WAIT)

        await stores[2].kill()
        await until(
            lambda: any(
                "(quorum lost)" in i.text for i in events.of(ev.SRC_EVENT_UME_STORE_UNRESPONSIVE)
            ),
            "quorum lost",
            timeout=WAIT,
        )
        with pytest.raises(UMENoReg):
            await src.send(b"refused")

        await stores[1].start()
        await until(
            lambda: src.gate.core.send_check() is None, "quorum back after a restart", timeout=WAIT
        )
        await send_all(src, [b"c%d" % i for i in range(5)])
        await until(lambda: events.stable() >= set(range(25)), "20..24 stable", timeout=WAIT)
        # Store 1 caught up on 10..19 (sent while it was down) from the source's retention: a
        # disk repository ACKs in sequence order, so its ACKs of 20..24 say it holds 10..19.
        by_b = {
            i.sequence_number
            for i in events.of(ev.SRC_EVENT_UME_MESSAGE_STABLE_EX)
            if i.flags & ev.STABLE_FLAG_STORE and i.store_index == 1
        }
        assert set(range(20, 25)) <= by_b
        await src.close()


# --- check 9: flight size, both behaviours --------------------------------------------------


async def test_flight_size_blocks_then_wakes(topo: Topology) -> None:
    st = await topo.add_store()
    events = SourceEvents()
    attrs = source_attrs([st], ume_flight_size="10")
    async with await Context.create() as sctx:
        src = await sctx.create_source(TOPIC, attributes=attrs, on_event=events)
        await asyncio.wait_for(src.wait_registered(), WAIT)
        assert st.proc is not None
        st.proc.proc.send_signal(signal.SIGSTOP)  # no stability ACKs while stopped
        try:
            for i in range(10):
                src.send_nowait(b"%d" % i, flush=True)
            with pytest.raises(WouldBlock):
                src.send_nowait(b"10", flush=True)
            blocked = asyncio.ensure_future(src.send(b"10", flush=True))
            await asyncio.sleep(0)
            assert not blocked.done()
        finally:
            st.proc.proc.send_signal(signal.SIGCONT)
        await asyncio.wait_for(blocked, WAIT)
        await until(lambda: events.of(m.SRC_EVENT_WAKEUP), "WAKEUP", timeout=WAIT)
        await until(lambda: events.stable() >= set(range(11)), "0..10 stable", timeout=WAIT)
        await src.close()


async def test_flight_size_notify_over_then_under(topo: Topology) -> None:
    st = await topo.add_store()
    events = SourceEvents()
    attrs = source_attrs([st], ume_flight_size="5", ume_flight_size_behavior="notify")
    async with await Context.create() as sctx:
        src = await sctx.create_source(TOPIC, attributes=attrs, on_event=events)
        await asyncio.wait_for(src.wait_registered(), WAIT)
        assert st.proc is not None
        st.proc.proc.send_signal(signal.SIGSTOP)
        try:
            for i in range(8):
                src.send_nowait(b"%d" % i, flush=True)  # never refused with Notify
        finally:
            st.proc.proc.send_signal(signal.SIGCONT)
        await until(
            lambda: (
                [i.state for i in events.of(ev.SRC_EVENT_FLIGHT_SIZE_NOTIFICATION)]
                == [ev.FLIGHT_SIZE_OVER, ev.FLIGHT_SIZE_UNDER]
            ),
            "OVER then UNDER",
            timeout=WAIT,
        )
        await src.close()


# --- check 28 and the source's deregistration ------------------------------------------------


async def test_deregistration(topo: Topology) -> None:
    st = await topo.add_store()
    events = SourceEvents()
    got = Received()
    async with await Context.create() as sctx, await Context.create() as rctx:
        src = await sctx.create_source(TOPIC, attributes=source_attrs([st]), on_event=events)
        await asyncio.wait_for(src.wait_registered(), WAIT)
        rcv = await rctx.create_receiver(TOPIC, got)
        await until(
            lambda: got.of(ev.MSG_UME_REGISTRATION_COMPLETE_EX), "receiver registered", timeout=WAIT
        )
        await rcv.deregister()
        await until(
            lambda: got.of(ev.MSG_UME_DEREGISTRATION_COMPLETE_EX), "receiver deregistered",
            timeout=WAIT,
        )  # fmt: skip
        assert len(got.of(ev.MSG_UME_DEREGISTRATION_SUCCESS_EX)) == 1
        await src.deregister()
        await until(
            lambda: events.of(ev.SRC_EVENT_UME_DEREGISTRATION_COMPLETE_EX),
            "source deregistered",
            timeout=WAIT,
        )
        with pytest.raises(UMENoReg):
            await src.send(b"after deregistration")
        await rcv.close()
        await src.close()


# --- check 13: a disk Store restarted keeps what it acknowledged ----------------------------


async def test_disk_store_restart_keeps_messages(topo: Topology) -> None:
    st = await topo.add_store("disk")
    events = SourceEvents()
    attrs = source_attrs(
        [st], ume_session_id="0x99", ume_store_activity_timeout="1500",
        ume_store_check_interval="250", ume_registration_interval="500",
    )  # fmt: skip
    async with await Context.create() as sctx:
        src = await sctx.create_source(TOPIC, attributes=attrs, on_event=events)
        await asyncio.wait_for(src.wait_registered(), WAIT)
        await send_all(src, [b"%d" % i for i in range(30)])
        await until(lambda: events.stable() >= set(range(30)), "0..29 stable", timeout=WAIT)
        assert st.proc is not None
        assert await st.proc.stop(signal.SIGINT) == 0
        st.proc = None
        await st.start()
        await until(
            lambda: len(events.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)) >= 2,
            "re-registration after the Store restarted",
            timeout=WAIT,
        )
        again = events.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)[-1]
        assert again.flags & ev.REG_FLAG_OLD and again.sequence_number == 29
        got = Received()
        async with await Context.create() as rctx:
            rcv = await rctx.create_receiver(TOPIC, got)
            await until(lambda: len(got.data()) >= 30, "recovered after restart", timeout=WAIT)
            assert got.sqns() == list(range(30))
            await rcv.close()
        await src.close()


# --- tshark on a live capture of the persisted pair ------------------------------------------


async def captured_so_far(pcap: Path) -> None:
    """Wait until dumpcap has written everything the loopback carried until now.  dumpcap says
    "Capturing on" before it captures, and on a busy machine it can lag seconds behind (packets
    wait in the kernel's ring, and at SIGINT it stops without reading them): a UDP datagram
    with a fresh token (to the discard port, which the capture filter lets in) goes out until
    the token is in the file; packets are written in order, so all before it are too."""
    token = os.urandom(16)

    def written() -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(token, ("127.0.0.1", 9))
        return pcap.exists() and token in pcap.read_bytes()

    await until(written, "dumpcap to catch up", timeout=WAIT)


@pytest.mark.tshark
async def test_live_capture_of_the_persisted_pair_decodes_clean(
    topo: Topology, tshark: Tshark, tmp_path: Path
) -> None:
    dumpcap = shutil.which("dumpcap")
    if dumpcap is None or os.geteuid() != 0:
        pytest.skip("a live capture needs dumpcap and root")
    pcap = tmp_path / "pair.pcapng"
    errlog = tmp_path / "dumpcap.err"
    with errlog.open("wb") as err:  # a file, not a pipe nobody reads while capturing
        cap = await asyncio.create_subprocess_exec(
            dumpcap, "-q", "-i", "lo", "-f", "tcp or udp port 9", "-w", str(pcap),
            stdout=asyncio.subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    try:
        await until(lambda: b"Capturing on" in errlog.read_bytes(), "dumpcap", timeout=WAIT)
        await captured_so_far(pcap)
        st = await topo.add_store()
        events = SourceEvents()
        got = Received()
        n = 20
        async with await Context.create() as sctx, await Context.create() as rctx:
            src = await sctx.create_source(TOPIC, attributes=source_attrs([st]), on_event=events)
            await asyncio.wait_for(src.wait_registered(), WAIT)
            await send_all(src, [b"early %d" % i for i in range(n)])
            rcv = await rctx.create_receiver(TOPIC, got)
            await until(lambda: len(got.data()) >= n, "recovery", timeout=WAIT)
            await send_all(src, [b"live %d" % i for i in range(n)])
            await until(lambda: len(got.data()) >= 2 * n, "live", timeout=WAIT)
            await until(lambda: events.stable() >= set(range(2 * n)), "stable", timeout=WAIT)
            ports = {
                st.port,
                src.transport_info.port,
                sctx.features.require_port().port,
                rctx.features.require_port().port,
            }
            await rcv.close()
            await src.close()
        await captured_so_far(pcap)
    finally:
        if cap.returncode is None:
            cap.send_signal(signal.SIGINT)
            await asyncio.wait_for(cap.wait(), WAIT)
    decoded = tshark.decode_file(
        pcap,
        decode_as=[f"tcp.port=={p},lbttcp" for p in sorted(ports)],
        display_filter="lbmc",
    )
    assert len(decoded) > 0
    decoded.assert_clean()
    kinds = set(decoded.values("lbmc.ume_preg.reg_id")) | set(decoded.values("lbmc.sri.version"))
    assert kinds, "no registration or SRI in the capture"
    assert decoded.values("lbmc.ume_ack.seqnum")
    assert decoded.values("lbmc.ume_rxreq.seqnum")
