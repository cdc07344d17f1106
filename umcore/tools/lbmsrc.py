"""lbmsrc: publish messages on one topic, with the flags of UM's example source application.

Theory of operation
-------------------
Creates a context and a source for the topic, waits ``-d`` seconds (so receivers can resolve and
join), sends ``-M`` messages of ``-l`` bytes (``-V``: verifiable messages that ``lbmrcv -V``
checks), pausing ``-P`` ms after each, flushes, lingers ``-L`` seconds so receivers drain what
is in flight, then deletes the source (receivers get EOS) and the context.  Blocking sends: a
slow receiver slows the source (TCP receiver pacing).  At the end it prints one summary line::

    lbmsrc: topic=T messages=N bytes=B seconds=S rate=R msgs/s
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from typing import Any

from umcore.tools.common import (
    add_config_option,
    load_attributes,
    make_verifiable,
    parse_rate,
    rate_group_options,
    signal_event,
    tool_main,
)

__all__ = ["main", "parse_rate", "rate_group_options"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lbmsrc", description="Send messages on a topic (UM example source)."
    )
    add_config_option(p)
    p.add_argument(
        "-M",
        dest="messages",
        type=int,
        default=10_000_000,
        help="number of messages to send (default 10000000)",
    )
    p.add_argument(
        "-l", dest="length", type=int, default=25, help="message length in bytes (default 25)"
    )
    p.add_argument(
        "-P",
        dest="pause",
        type=float,
        default=0.0,
        metavar="MSEC",
        help="pause MSEC milliseconds after each send (default 0)",
    )
    p.add_argument(
        "-d",
        dest="delay",
        type=float,
        default=1.0,
        metavar="SEC",
        help="delay sending for SEC seconds after creating the source (default 1)",
    )
    p.add_argument(
        "-L",
        dest="linger",
        type=float,
        default=5.0,
        metavar="SEC",
        help="linger SEC seconds after the last send before deleting (default 5, as UM's: "
        "time for LBT-RU/LBT-RM receivers to repair their last losses)",
    )
    p.add_argument(
        "-v",
        dest="verbose",
        action="count",
        default=0,
        help="be verbose: print source events and progress each second",
    )
    p.add_argument(
        "-V",
        dest="verifiable",
        action="store_true",
        help="send verifiable messages (checked by lbmrcv -V)",
    )
    p.add_argument(
        "-R",
        dest="rate",
        type=parse_rate,
        metavar="[UM]DATA/RETR",
        help="as UM's lbmsrc: transport LBT-RM (M, the default) or LBT-RU (U), data rate limit "
        "DATA and retransmit rate limit RETR in bits per second, k/m/g suffixes allowed "
        "('-R 1m/500k' = '-R M1000000/500000'); applied after the -c files",
    )
    p.add_argument(
        "-G",
        dest="group",
        metavar="GROUP[:PORT]",
        help="pyum's reading (UM's example lbmsrc documents no -G): send over LBT-RM on "
        "multicast group GROUP (transport_lbtrm_multicast_address) and destination PORT "
        "(transport_lbtrm_destination_port, default 14400); applied after the -c files and -R",
    )
    p.add_argument(
        "-T",
        dest="transport",
        choices=("tcp", "lbtru", "lbtrm", "lbtipc", "lbtsmx"),
        help="pyum's shorthand for 'source transport T' (UM's lbmsrc takes it from -c): tcp, "
        "lbtru, lbtrm, lbtipc or lbtsmx; applied after the -c files, before -R/-G",
    )
    p.add_argument(
        "-N",
        "--channel",
        dest="channel",
        type=int,
        metavar="NUM",
        help="send on Spectrum channel NUM (as UM's lbmsrc -N)",
    )
    p.add_argument(
        "--hf",
        dest="hf",
        action="store_true",
        help="pyum's spelling of UM's lbmhfsrc: a Hot Failover source; message i carries HF "
        "sequence number --hf-start + i (run the same command in several processes)",
    )
    p.add_argument(
        "--hf-start",
        dest="hf_start",
        type=int,
        default=0,
        metavar="NUM",
        help="first HF sequence number (default 0)",
    )
    p.add_argument("--hf-64", dest="hf_64", action="store_true", help="64-bit HF sequence numbers")
    p.add_argument("topic")
    return p


async def _main(args: argparse.Namespace) -> int:
    from umcore.api import Context
    from umcore.api.message import SRC_EVENT_CONNECT, SRC_EVENT_DISCONNECT

    ctx_attr, src_attr, _ = load_attributes(args.config)
    extra = rate_group_options(args.rate, args.group)
    if args.transport:
        extra = f"source transport {args.transport}\n" + extra
    if extra:
        from umcore.config.attributes import global_configuration

        global_configuration().config_text(extra, "lbmsrc command line")
    stop = signal_event()

    def on_event(code: int, info: object) -> None:
        if args.verbose:
            name = {SRC_EVENT_CONNECT: "connect", SRC_EVENT_DISCONNECT: "disconnect"}.get(
                code, f"event {code}"
            )
            print(f"lbmsrc: receiver {name} {info}", flush=True)

    ctx = await Context.create(ctx_attr)
    sent = nbytes = 0
    start = end = time.monotonic()
    try:
        create = ctx.create_hf_source if args.hf else ctx.create_source
        src = await create(args.topic, attributes=src_attr, on_event=on_event)
        print(f"lbmsrc: topic {args.topic!r} source {src.source_string}", flush=True)
        if args.delay > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), args.delay)
        plain = bytes(args.length)
        pause = args.pause / 1000
        start = time.monotonic()
        last_report = start
        send: Any = src.send
        chan = src.channel(args.channel) if args.channel is not None else None
        if chan is not None:
            send = chan.send
        bits = 64 if args.hf_64 else 32
        for i in range(args.messages):
            if stop.is_set():
                break
            data = make_verifiable(i, args.length) if args.verifiable else plain
            if args.hf:
                await src.send_hf(data, args.hf_start + i, bits, channel=chan)
            else:
                await send(data)
            sent += 1
            nbytes += len(data)
            if pause:
                src.flush()
                await asyncio.sleep(pause)
            elif sent & 0x3FF == 0:
                await asyncio.sleep(0)  # let the loop breathe (signals, timers)
            if args.verbose and sent & 0x3FF == 0:
                now = time.monotonic()
                if now - last_report >= 1.0:
                    print(f"lbmsrc: sent {sent} messages", flush=True)
                    last_report = now
        src.flush()
        end = time.monotonic()
        if args.linger > 0 and not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), args.linger)
        await src.close()
    finally:
        async with ctx:
            pass
    secs = max(end - start, 1e-9)
    print(
        f"lbmsrc: topic={args.topic} messages={sent} bytes={nbytes} seconds={secs:.3f} "
        f"rate={sent / secs:.0f} msgs/s",
        flush=True,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    return tool_main("lbmsrc", _main(_parser().parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
