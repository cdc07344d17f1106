"""umesrc: publish persisted messages on one topic, with the flags of UM's example persistent
source application.

Theory of operation
-------------------
As :mod:`umcore.tools.lbmsrc` (``-c``, ``-M``, ``-l``, ``-P``, ``-L``, ``-v``, ``-V``, ``-d``,
``-R`` mean the same), for a source with Stores.  The Stores come from the ``-c`` files
(``source ume_store 127.0.0.1:14567``, ``source ume_store_name store1``, groups, session IDs:
anything UM reads) and from UM's umesrc flags, applied after the files as UM's example applies
them after ``lbm_config``: ``-S`` (``ume_store``), ``-t`` (``ume_store_name``), ``-f``
(``ume_flight_size``), ``-j`` (``ume_late_join``).  No Store at all is an error before anything
starts, as in UM's umesrc ("to send without a store, use lbmsrc").

The source registers with its Stores; umesrc prints every registration event (UM's umesrc does
so without ``-v``) and, with ``-v``, stability, delivery confirmation, reclaim and flight-size
events.  Sending starts at Registration Complete.  A send refused because the source is not
registered with enough Stores (:class:`~umcore.errors.UMENoReg`: before Registration Complete,
or after "quorum lost") is not an error: umesrc prints why, waits until the Stores are back
(printing every few seconds how many Stores it is registered with and which are unresponsive)
and sends the same message again, as UM's umesrc retries on ``LBM_EUMENOREG``.  A full flight
size (``-f``) blocks the send (UM's default behaviour), or with ``-n`` makes it fail with
WouldBlock until the WAKEUP event.  ``-m`` paces to a message rate, ``-P`` pauses after each
message (not both, as in UM).  After the last send ``-D`` deregisters the source, then it
lingers ``-L`` seconds (stability keeps being counted) and is deleted.

Verifiable messages (``-V``, see :mod:`umcore.tools.common`) carry the message's topic sequence
number as their counter -- the sequence number of Registration Complete (the next one after an
OLD re-registration, 0 for a new source) plus the messages sent before -- so ``umercv -V`` checks
that every message it gets, live or recovered from a Store, is the one its sequence number
names.  That assumes one sequence number per message: messages that fit one datagram.

``stable`` counts the sequence numbers the Stores made stable (MESSAGE_STABLE_EX with the
STABLE flag, one per fragment or per message as ``ume_message_stability_notification`` says; 0
when it is 0).  The last line on stdout is the summary scripts read::

    umesrc: sent=N stable=S topic=T bytes=B seconds=X rate=R msgs/s
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from umcore.tools.common import (
    VERIFIABLE_MIN_LEN,
    add_config_option,
    apply_flag,
    count,
    load_attributes,
    make_verifiable,
    parse_rate,
    rate_group_options,
    seconds,
    signal_event,
    tool_main,
    wait_or_stop,
)

__all__ = ["main"]

# How often a wait for the Stores prints again what it is waiting for.
WAIT_REPORT_S = 5.0
_M32 = 0xFFFFFFFF


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="umesrc",
        description="Send persisted messages on a topic through UM Stores (UM example "
        "persistent source).",
        epilog="Stores: -S/-t, or ume_store / ume_store_name lines in a -c file (or the file "
        "LBM_DEFAULT_CONFIG_FILE names).  The last line is 'umesrc: sent=N stable=S ...'.",
    )
    add_config_option(p, "--config")
    p.add_argument(
        "-M",
        "--messages",
        dest="messages",
        type=count,
        default=10_000_000,
        help="number of messages to send (default 10000000)",
    )
    p.add_argument(
        "-l",
        "--length",
        dest="length",
        type=count,
        default=25,
        help="message length in bytes (default 25)",
    )
    p.add_argument(
        "-P",
        "--pause",
        dest="pause",
        type=seconds,
        default=0.0,
        metavar="MSEC",
        help="pause MSEC milliseconds after each send (default 0)",
    )
    p.add_argument(
        "-m",
        "--message-rate",
        dest="rate_msgs",
        type=count,
        default=0,
        metavar="NUM",
        help="send at NUM messages per second if the flight size allows (not with -P)",
    )
    p.add_argument(
        "-d",
        "--delay",
        dest="delay",
        type=seconds,
        default=1.0,
        metavar="SEC",
        help="delay sending for SEC seconds after creating the source (default 1)",
    )
    p.add_argument(
        "-L",
        "--linger",
        dest="linger",
        type=seconds,
        default=5.0,
        metavar="SEC",
        help="linger SEC seconds after the last send before deleting the source (default 5)",
    )
    stores = p.add_mutually_exclusive_group()
    stores.add_argument(
        "-S",
        "--store",
        dest="store",
        metavar="IP:PORT",
        help="use the Store at IP:PORT (ume_store: [DomainID:]IP:PORT[:RegID[:GroupIDX]]), "
        "added to those of the -c files",
    )
    stores.add_argument(
        "-t",
        "--storename",
        dest="storename",
        metavar="NAME",
        help="use the Store named NAME (ume_store_name: NAME[:RegID[:GroupIDX]], the Store's "
        "context-name, resolved through topic resolution)",
    )
    p.add_argument(
        "-f",
        "--flight-size",
        dest="flight_size",
        type=count,
        metavar="NUM",
        help="allow NUM messages in flight (not yet stable) (ume_flight_size; default 1000)",
    )
    p.add_argument(
        "-j", "--late-join", dest="late_join", action="store_true", help="turn on late join"
    )
    p.add_argument(
        "-D",
        "--deregister",
        dest="deregister",
        action="store_true",
        help="deregister the source from its Stores after sending",
    )
    p.add_argument(
        "-n",
        "--non-block",
        dest="nonblock",
        action="store_true",
        help="non-blocking sends: a full flight size fails the send until the WAKEUP event",
    )
    p.add_argument(
        "-N",
        "--seqnum-info",
        dest="seqnum_info",
        action="store_true",
        help="UM's per-send sequence number events: not available in pyum (refused)",
    )
    p.add_argument(
        "-R",
        "--rate",
        dest="rate",
        type=parse_rate,
        metavar="[UM]DATA/RETR",
        help="transport LBT-RM (M, the default) or LBT-RU (U), data and retransmit rate limits "
        "in bits per second, k/m/g suffixes allowed (as lbmsrc -R)",
    )
    p.add_argument(
        "-s",
        "--statistics",
        dest="stats",
        type=count,
        default=0,
        metavar="NUM",
        help="print sent and stable counts every NUM seconds",
    )
    p.add_argument(
        "-v",
        "--verbose",
        dest="verbose",
        action="count",
        default=0,
        help="print stability, confirmation, reclaim, flight-size and connect events",
    )
    p.add_argument(
        "-V",
        "--verifiable",
        dest="verifiable",
        action="store_true",
        help="send verifiable messages carrying their sequence number (umercv -V checks them)",
    )
    p.add_argument("topic")
    return p


def flag_lines(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(flag, flat configuration lines) the command line stands for, in UM's order."""
    out: list[tuple[str, str]] = []
    if args.store is not None:
        out.append(("-S", f"source ume_store {args.store}\n"))
    if args.storename is not None:
        out.append(("-t", f"source ume_store_name {args.storename}\n"))
    if args.flight_size is not None:
        out.append(("-f", f"source ume_flight_size {args.flight_size}\n"))
    if args.late_join:
        out.append(("-j", "source ume_late_join 1\n"))
    if args.rate is not None:
        out.append(("-R", rate_group_options(args.rate, None)))
    return out


def check_args(args: argparse.Namespace) -> None:
    """What argparse cannot see; a ConfigError before anything starts."""
    from umcore.errors import ConfigError

    if args.seqnum_info:
        raise ConfigError(
            "per-send sequence number events (UM's LBM_SRC_SEND_EX_FLAG_SEQUENCE_NUMBER_INFO) "
            "are not in pyum's send API",
            source="command line",
            what="-N/--seqnum-info",
        )
    if args.rate_msgs and args.pause:
        raise ConfigError(
            "-m and -P are conflicting options", source="command line", what="-m/--message-rate"
        )


class Plan:
    """The source's persistence settings as the configuration gives them (printed at start)."""

    def __init__(self, topic: str) -> None:
        from umcore.engine.options import Options
        from umcore.errors import ConfigError

        src = Options("source", None, topic)
        ctx = Options("context")
        self.stores = [str(e) for e in src.get("ume_store") or ()]
        self.stores += [f"name {e}" for e in src.get("ume_store_name") or ()]
        if not self.stores:
            raise ConfigError(
                f"no Store for topic {topic!r}: give -S IP:PORT, -t NAME, or a 'source "
                "ume_store IP:PORT' line in a -c file (to send without a Store, use lbmsrc)",
                what="ume_store",
            )
        self.flight_size = int(src.get("ume_flight_size"))
        self.session_id = int(src.get("ume_session_id") or 0)
        self.session_scope = "source"
        if not self.session_id:
            self.session_id = int(ctx.get("ume_session_id") or 0)
            self.session_scope = "context"
        self._validate(src, ctx)

    @staticmethod
    def _validate(src: Any, ctx: Any) -> None:
        """The settings UM refuses at source creation (groups, counts...): refused here,
        before the context exists."""
        from umcore.persist.source import SourceConfig

        SourceConfig.from_options(src, context_session_id=int(ctx.get("ume_session_id") or 0))

    def describe(self) -> str:
        sid = (
            f"{self.session_scope} session ID {self.session_id} (RegIDs are ignored)"
            if self.session_id
            else "no session ID"
        )
        return f"stores [{', '.join(self.stores)}], flight size {self.flight_size} messages, {sid}"


class _State:
    """What the source's events told (see the module docstring)."""

    def __init__(self, plan: Plan, verbose: int) -> None:
        self.plan = plan
        self.verbose = verbose
        self.registered: dict[int, str] = {}
        self.unresponsive: dict[int, str] = {}
        self.old = False
        self.start: int | None = None
        self.stable = 0
        self._last_stable: int | None = None
        self.dereg_done = asyncio.Event()
        self.wakeup = asyncio.Event()

    def waiting_for(self) -> str:
        total = len(self.plan.stores)
        text = f"registered with {len(self.registered)} of {total} store(s)"
        if self.registered:
            text += " (" + ", ".join(self.registered[i] for i in sorted(self.registered)) + ")"
        if self.unresponsive:
            text += "; unresponsive: " + ", ".join(
                self.unresponsive[i] for i in sorted(self.unresponsive)
            )
        return text + "; waiting for a quorum of them to register"

    def on_event(self, code: int, info: Any) -> None:
        from umcore.engine import message as m
        from umcore.persist import events as ev

        verbose = self.verbose
        if code == ev.SRC_EVENT_UME_MESSAGE_STABLE_EX:
            flags = info.flags
            if flags & ev.STABLE_FLAG_STABLE and info.sequence_number != self._last_stable:
                # (the same sequence number twice in a row: per fragment, then per message)
                self._last_stable = info.sequence_number
                self.stable += 1
            if verbose:
                who = (
                    f"store {info.store_index}: {info.store} message stable"
                    if flags & ev.STABLE_FLAG_STORE
                    else "message stable"
                )
                names = _flag_names(
                    flags,
                    (
                        (ev.STABLE_FLAG_INTRAGROUP, "IA"),
                        (ev.STABLE_FLAG_INTERGROUP, "IR"),
                        (ev.STABLE_FLAG_STABLE, "STABLE"),
                        (ev.STABLE_FLAG_STORE, "STORE"),
                        (ev.STABLE_FLAG_WHOLE_MESSAGE_STABLE, "MESSAGE"),
                    ),
                )
                _out(f"UME {who}. SQN {info.sequence_number}. Flags 0x{flags:x} {names}")
            return
        if code == ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX:
            self.registered[info.store_index] = info.store
            self.unresponsive.pop(info.store_index, None)
            old = ""
            if info.flags & ev.REG_FLAG_OLD:
                if self.start is None:
                    self.old = True
                old = f"OLD[SQN {info.sequence_number}] "
            noacks = "NOACKS " if info.flags & ev.REG_FLAG_NOACKS else ""
            _out(
                f"UME store {info.store_index}: {info.store} registration success. RegID "
                f"{info.registration_id}. Flags 0x{info.flags:x} {old}{noacks}".rstrip()
            )
        elif code == ev.SRC_EVENT_UME_REGISTRATION_COMPLETE_EX:
            if self.start is None:
                self.start = (info.sequence_number + 1) & _M32 if self.old else 0
            quorum = " QUORUM" if info.flags & ev.REG_COMPLETE_FLAG_QUORUM else ""
            _out(
                f"UME registration complete. SQN {info.sequence_number}. "
                f"Flags 0x{info.flags:x}{quorum}"
            )
        elif code == ev.SRC_EVENT_UME_REGISTRATION_ERROR:
            _out(f"error registering source with UME store: {info.text}")
        elif code == ev.SRC_EVENT_UME_STORE_UNRESPONSIVE:
            self.unresponsive[info.store_index] = self.registered.pop(
                info.store_index, f"store {info.store_index}"
            )
            _out(f"UME store: {info.text}")
        elif code == ev.SRC_EVENT_UME_DEREGISTRATION_SUCCESS_EX:
            self.registered.pop(info.store_index, None)
            _out(
                f"UME store {info.store_index}: {info.store} deregistration success. RegID "
                f"{info.registration_id}"
            )
        elif code == ev.SRC_EVENT_UME_DEREGISTRATION_COMPLETE_EX:
            _out("UME deregistration is complete")
            self.dereg_done.set()
        elif code == m.SRC_EVENT_WAKEUP:
            self.wakeup.set()
        elif not verbose:
            return
        elif code == ev.SRC_EVENT_UME_MESSAGE_NOT_STABLE:
            why = "LOSS" if info.flags & ev.NOT_STABLE_FLAG_LOSS else ""
            why = "TIMEOUT" if info.flags & ev.NOT_STABLE_FLAG_TIMEOUT else why
            who = f"store {info.store_index}: {info.store} " if info.store else ""
            _out(
                f"UME {who}message NOT stable!! SQN {info.sequence_number}. "
                f"Flags 0x{info.flags:x} {why}".rstrip()
            )
        elif code == ev.SRC_EVENT_UME_DELIVERY_CONFIRMATION_EX:
            _out(
                f"UME delivery confirmation. SQN {info.sequence_number}, RcvRegID "
                f"{info.rcv_registration_id}. Flags 0x{info.flags:x}"
            )
        elif code == ev.SRC_EVENT_UME_MESSAGE_RECLAIMED_EX:
            forced = " FORCED" if info.flags & ev.RECLAIMED_FLAG_FORCED else ""
            _out(f"UME message reclaimed (ex) - SQN {info.sequence_number}.{forced}")
        elif code == ev.SRC_EVENT_FLIGHT_SIZE_NOTIFICATION:
            state = "OVER" if info.state == ev.FLIGHT_SIZE_OVER else "UNDER"
            _out(f"Flight Size Notification. Inflight is {state} specified flight size")
        elif code == m.SRC_EVENT_CONNECT:
            _out(f"receiver connect [{info}]")
        elif code == m.SRC_EVENT_DISCONNECT:
            _out(f"receiver disconnect [{info}]")
        else:
            _out(f"source event {code}: {info}")


def _flag_names(flags: int, names: tuple[tuple[int, str], ...]) -> str:
    return " ".join(name for bit, name in names if flags & bit)


def _out(text: str) -> None:
    print(f"umesrc: {text}", flush=True)


async def _first(stop: asyncio.Event, other: asyncio.Event | asyncio.Future[Any]) -> None:
    """Wait until ``stop`` or ``other`` (an event, or a future left running) is done."""
    waiters: set[asyncio.Future[Any]] = {asyncio.ensure_future(stop.wait())}
    target = asyncio.ensure_future(other.wait()) if isinstance(other, asyncio.Event) else other
    waiters.add(target)
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            if w is not other and not w.done():
                w.cancel()


async def _registered(src: Any, st: _State, stop: asyncio.Event) -> bool:
    """Wait for Registration Complete (again), saying every WAIT_REPORT_S seconds what for;
    False when stopped first."""
    waited = 0.0
    while not stop.is_set():
        try:
            await asyncio.wait_for(src.wait_registered(), WAIT_REPORT_S)
        except TimeoutError:
            waited += WAIT_REPORT_S
            _out(f"still waiting ({waited:.0f} s): {st.waiting_for()}")
            continue
        return True
    return False


async def _main(args: argparse.Namespace) -> int:
    from umcore.api import Context
    from umcore.errors import UMENoReg, WouldBlock

    check_args(args)
    load_attributes(args.config)
    for flag, lines in flag_lines(args):
        apply_flag(flag, lines)
    plan = Plan(args.topic)
    length = args.length
    if args.verifiable and length < VERIFIABLE_MIN_LEN:
        _out(
            f"message length {length} is too small for verifiable messages: using {VERIFIABLE_MIN_LEN}"
        )
        length = VERIFIABLE_MIN_LEN
    stop = signal_event()
    st = _State(plan, args.verbose)
    sent = nbytes = 0

    async def stats() -> None:
        while True:
            await asyncio.sleep(args.stats)
            _out(f"app sent {sent} stable {st.stable}")

    ctx = await Context.create(None)
    start = end = time.monotonic()
    stats_task = None
    try:
        src = await ctx.create_source(args.topic, on_event=st.on_event)
        _out(f"topic {args.topic!r} source {src.source_string}; {plan.describe()}")
        if args.stats:
            stats_task = asyncio.create_task(stats())
        if args.delay > 0:
            _out(f"delaying for {args.delay:g} second(s)")
        stopped = await wait_or_stop(stop, args.delay)
        if not stopped and st.start is None:
            _out(f"waiting for the stores: {st.waiting_for()}")
        if not stopped and await _registered(src, st, stop):
            _out(f"sending {args.messages} messages of size {length} bytes to topic [{args.topic}]")
            plain = bytes(length)
            pause = args.pause / 1000
            rate = args.rate_msgs
            first = st.start or 0
            start = time.monotonic()
            while sent < args.messages and not stop.is_set():
                data = make_verifiable((first + sent) & _M32, length) if args.verifiable else plain
                try:
                    if args.nonblock:
                        st.wakeup.clear()
                        try:
                            src.send_nowait(data)
                        except WouldBlock:
                            await _first(stop, st.wakeup)
                            continue
                    else:
                        aw = src.send(data)
                        if not (isinstance(aw, asyncio.Future) and aw.done()):
                            # blocked (flight size, a slow receiver): a stop interrupts it
                            task = asyncio.ensure_future(aw)
                            await _first(stop, task)
                            if not task.done():
                                task.cancel()
                                break
                            aw = task
                        aw.result()
                except UMENoReg as exc:
                    _out(f"send unsuccessful: {exc}; waiting... ({st.waiting_for()})")
                    if not await _registered(src, st, stop):
                        break
                    _out("send OK, continuing")
                    continue
                sent += 1
                nbytes += len(data)
                if rate:
                    ahead = start + sent / rate - time.monotonic()
                    if ahead > 0.001:
                        src.flush()
                        await wait_or_stop(stop, ahead)
                elif pause:
                    src.flush()
                    await wait_or_stop(stop, pause)
                elif sent & 0x3FF == 0:
                    await asyncio.sleep(0)  # let the loop breathe (signals, timers, ACKs)
            src.flush()
            end = time.monotonic()
            _out(f"sent {sent} messages of size {length} bytes in {end - start:.3f} seconds")
        if args.deregister and not stop.is_set():
            _out("deregistering source")
            await src.deregister()
        if args.linger > 0 and not stop.is_set():
            _out(f"lingering for {args.linger:g} seconds...")
            await wait_or_stop(stop, args.linger)
        await src.close()
    finally:
        if stats_task is not None:
            stats_task.cancel()
        async with ctx:
            pass
    secs = max(end - start, 1e-9)
    print(
        f"umesrc: sent={sent} stable={st.stable} topic={args.topic} bytes={nbytes} "
        f"seconds={end - start:.3f} rate={sent / secs:.0f} msgs/s",
        flush=True,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    return tool_main("umesrc", _main(_parser().parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
