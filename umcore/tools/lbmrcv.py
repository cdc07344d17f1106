"""lbmrcv: receive a topic, with the flags of UM's example receiver application.

Theory of operation
-------------------
Creates a context and a receiver for the topic and counts what arrives through the receiver
callback (the fast path).  ``-r N`` exits after N data messages, ``-E`` when the sources it had
are gone (EOS on every session that gave BOS), ``-V`` checks verifiable messages (see
:mod:`umcore.tools.common`), ``-v`` prints every event (``-vv`` every message), ``-s`` prints
statistics each second.  ``--hfx`` is UM's ``lbmhfxrcv``: an HFX object (:mod:`umcore.api.hfx`)
with one context per ``-I`` interface (one context without ``-I``), each context's
``resolver_multicast_interface`` and its receiver's TCP / LBT-RU interfaces set to it as
``lbmhfxrcv`` does; lbmhfxrcv's ``-a`` and ``-d`` are ``hfx ordered_delivery -1`` and ``hfx
duplicate_delivery 1`` in a ``-c`` file.  SIGINT/SIGTERM end it too.  The last line on stdout
is the summary scripts read::

    lbmrcv: messages=N bytes=B unrecoverable=U bursts=K verify_errors=E bos=X eos=Y seconds=S rate=R
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from typing import Any

from umcore.tools.common import add_config_option, load_attributes, signal_event, tool_main, verify

__all__ = ["main"]


def _parser(wildcard: bool = False) -> argparse.ArgumentParser:
    if wildcard:
        p = argparse.ArgumentParser(
            prog="lbmwrcv",
            description="Receive every topic matching a PCRE pattern (UM example wildcard "
            "receiver).",
        )
    else:
        p = argparse.ArgumentParser(
            prog="lbmrcv",
            description="Receive messages on a topic (UM example receiver).",
            epilog="Transports: a receiver joins whatever transport (TCP, LBT-RU, LBT-RM, "
            "LBT-IPC, LBT-SMX) the "
            "source's TIR names, so, as UM's lbmrcv, it has no -R/-G; receiver-side options "
            "(transport_lbtrm_nak_*, ordered_delivery...) come from the -c files.",
        )
    add_config_option(p)
    p.add_argument(
        "-r", dest="count", type=int, default=0, metavar="N", help="exit after receiving N messages"
    )
    p.add_argument(
        "-E",
        dest="exit_on_eos",
        action="store_true",
        help="exit when the sources stop (end of stream)",
    )
    p.add_argument(
        "-v",
        dest="verbose",
        action="count",
        default=0,
        help="be verbose: events (-v), every message (-vv)",
    )
    p.add_argument(
        "-V", dest="verify", action="store_true", help="verify message contents (sent by lbmsrc -V)"
    )
    p.add_argument("-s", dest="stats", action="store_true", help="print statistics every second")
    p.add_argument(
        "-N",
        "--channel",
        dest="channels",
        type=int,
        action="append",
        metavar="NUM",
        help="subscribe to Spectrum channel NUM (repeatable; as UM's lbmrcv -N); messages on "
        "other channels follow unrecognized_channel_behavior (-c files)",
    )
    p.add_argument(
        "--hf",
        dest="hf",
        action="store_true",
        help="pyum's spelling of UM's lbmhfrcv: a Hot Failover receiver delivering each HF "
        "sequence number once (lbmwrcv: hf_receiver 1)",
    )
    if not wildcard:
        p.add_argument(
            "--hfx",
            dest="hfx",
            action="store_true",
            help="pyum's spelling of UM's lbmhfxrcv: Hot Failover across contexts, one context "
            "per -I interface, each HF sequence number once (hfx options such as "
            "ordered_delivery -1 or duplicate_delivery 1 from the -c files)",
        )
        p.add_argument(
            "-I",
            "--iface",
            dest="ifaces",
            action="append",
            metavar="CIDR",
            help="with --hfx: a context on this interface (repeatable, as lbmhfxrcv -I)",
        )
    p.add_argument("topic", metavar="pattern" if wildcard else "topic")
    return p


class _Counts:
    def __init__(self) -> None:
        self.messages = 0
        self.bytes = 0
        self.unrecoverable = 0
        self.bursts = 0
        self.verify_errors = 0
        self.bos = 0
        self.eos = 0
        self.first: float | None = None
        self.last = 0.0
        self.expected: dict[str, int] = {}
        self.sessions: set[str] = set()


async def _main(args: argparse.Namespace, wildcard: bool = False) -> int:
    from umcore.api import Context
    from umcore.api import message as m

    ctx_attr, _, rcv_attr = load_attributes(args.config)
    done = signal_event()
    c = _Counts()
    verbose, check, limit = args.verbose, args.verify, args.count

    def on_message(msg: m.Message) -> None:
        t = msg.type
        if t == m.MSG_DATA:
            c.messages += 1
            c.bytes += len(msg.data)
            c.last = now = time.monotonic()
            if c.first is None:
                c.first = now
            if check:
                counter, err = verify(msg.data, c.expected.get(msg.source + msg.topic))
                if err is not None:
                    c.verify_errors += 1
                    if c.verify_errors <= 10:
                        print(f"lbmrcv: verify: {err} from {msg.source}", flush=True)
                if counter is not None:
                    c.expected[msg.source + msg.topic] = counter + 1
            if verbose > 1:
                extra = "" if msg.channel_info is None else f" channel={msg.channel_info}"
                if msg.hf_info is not None:
                    extra += f" hf={msg.hf_sequence_number}"
                print(
                    f"lbmrcv: [{msg.topic}][{msg.source}][{msg.sequence_number}] "
                    f"{len(msg.data)} bytes{extra}",
                    flush=True,
                )
            if limit and c.messages >= limit:
                done.set()
            return
        if t == m.MSG_BOS:
            c.bos += 1
            c.sessions.add(msg.source + msg.topic)
        elif t == m.MSG_EOS:
            c.eos += 1
            c.sessions.discard(msg.source + msg.topic)
            c.expected.pop(msg.source + msg.topic, None)
            if args.exit_on_eos and not c.sessions:
                done.set()
        elif t == m.MSG_UNRECOVERABLE_LOSS:
            c.unrecoverable += msg.count or 1
        elif t == m.MSG_UNRECOVERABLE_LOSS_BURST:
            c.bursts += 1
            c.unrecoverable += msg.count
        if verbose:
            print(
                f"lbmrcv: [{msg.topic}][{msg.source}] {msg.type_name} sqn={msg.sequence_number}",
                flush=True,
            )

    async def stats() -> None:
        prev = 0
        while True:
            await asyncio.sleep(1.0)
            n = c.messages
            print(
                f"lbmrcv: {n - prev} msgs/s, total {n} messages, {c.unrecoverable} unrecoverable",
                flush=True,
            )
            prev = n

    if getattr(args, "hfx", False):
        await _hfx(args, on_message, done, stats)
        return _summary(c)
    async with await Context.create(ctx_attr) as ctx:
        if wildcard:
            wattr = {"hf_receiver": "1"} if args.hf else None
            r = await ctx.create_wildcard_receiver(args.topic, on_message, attributes=wattr)
            ready = f"lbmrcv: receiving topics matching {args.topic!r}"
        else:
            create = ctx.create_hf_receiver if args.hf else ctx.create_receiver
            r = await create(args.topic, on_message, attributes=rcv_attr)
            ready = f"lbmrcv: receiving topic {args.topic!r}"
        for channel in args.channels or ():
            r.subscribe_channel(channel)
        print(ready, flush=True)  # the readiness line last: its channels are subscribed
        stats_task = asyncio.create_task(stats()) if args.stats else None
        await done.wait()
        if stats_task is not None:
            stats_task.cancel()
    return _summary(c)


async def _hfx(args: argparse.Namespace, on_message: Any, done: asyncio.Event, stats: Any) -> None:
    """``--hfx``: lbmhfxrcv's contexts (one per ``-I``) and HFX object."""
    from umcore.api import Context
    from umcore.api.hfx import Hfx

    ifaces: list[str | None] = list(args.ifaces or [None])
    async with contextlib.AsyncExitStack() as stack:
        hfx = Hfx(args.topic, on_message)
        for iface in ifaces:
            cattr = None if iface is None else {"resolver_multicast_interface": iface}
            ctx = await stack.enter_async_context(await Context.create(cattr))
            rattr = None
            if iface is not None:
                rattr = {"transport_tcp_interface": iface, "transport_lbtru_interface": iface}
            await hfx.add_context(ctx, attributes=rattr)
        stack.push_async_callback(hfx.close)  # runs before the contexts close
        print(f"lbmrcv: receiving topic {args.topic!r} (HFX, {len(ifaces)} contexts)", flush=True)
        stats_task = asyncio.create_task(stats()) if args.stats else None
        await done.wait()
        if stats_task is not None:
            stats_task.cancel()


def _summary(c: _Counts) -> int:
    secs = (c.last - c.first) if c.first is not None else 0.0
    rate = c.messages / secs if secs > 0 else 0.0
    print(
        f"lbmrcv: messages={c.messages} bytes={c.bytes} unrecoverable={c.unrecoverable} "
        f"bursts={c.bursts} verify_errors={c.verify_errors} bos={c.bos} eos={c.eos} "
        f"seconds={secs:.3f} rate={rate:.0f}",
        flush=True,
    )
    return 1 if c.verify_errors else 0


def main(argv: list[str] | None = None, *, wildcard: bool = False) -> int:
    parser = _parser(wildcard)
    args = parser.parse_args(argv)
    if getattr(args, "ifaces", None) and not args.hfx:
        parser.error("-I/--iface makes one context per interface for --hfx only")
    if getattr(args, "hfx", False) and (args.hf or args.channels):
        parser.error("--hfx takes neither --hf (its receivers are HF ones) nor -N")
    return tool_main("lbmrcv", _main(args, wildcard))


if __name__ == "__main__":
    sys.exit(main())
