"""lbmmon: print the statistics published on the monitoring topic (UM's lbmmon example).

Theory of operation
-------------------
Creates a monitoring context (``29west_statistics_context``, configured like UM's LBM transport
module: the process configuration from ``-c FILE`` and the ``LBM_*`` environment, then
``--transport-opts``) and a receiver on the statistics topic (``/29west/statistics``, or
``--topic`` / ``topic=`` / ``wctopic=`` for a wildcard receiver).  Every message received is
taken apart as an lbmmon packet (:func:`umcore.monitor.attributes.decode_stats`): application
statistics (context, source and receiver transports, event queues, receiver topics, wildcard
receivers) and daemon statistics (Store, DRO, SRS) alike, and printed as lbmmon prints them
(:func:`umcore.monitor.textfmt.format_text`) or, with ``--json``, as one JSON object per line.

The SRS's deprecated JSON format is bare JSON text, not an lbmmon packet; it is printed too
(:func:`umcore.monitor.textfmt.format_unframed_json`).  Anything else that is not a valid lbmmon
packet is reported on stderr and counted; it never stops the tool.  ``-r N`` exits after N statistics messages; SIGINT/SIGTERM (Ctrl-C) end it at any
time.  The last line on stderr is a summary::

    lbmmon: messages=N errors=E
"""

from __future__ import annotations

import argparse
import sys

from umcore.errors import ConfigError
from umcore.tools.common import add_config_option, load_attributes, signal_event, tool_main

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lbmmon",
        description="Print UM statistics received on the monitoring topic (UM example lbmmon).",
    )
    add_config_option(
        p, "--config", help="read a UM configuration file (repeatable, applied in order)"
    )
    p.add_argument(
        "-t",
        "--transport",
        default="lbm",
        metavar="TRANS",
        help="transport module: lbm (the only one pyum implements)",
    )
    p.add_argument(
        "--transport-opts",
        default="",
        metavar="OPTS",
        help="transport module options: config=FILE;topic=NAME;wctopic=PATTERN;context|opt=val...",
    )
    p.add_argument(
        "-f",
        "--format",
        default="pb",
        choices=("pb", "csv"),
        help="format module (pb; payloads of other format modules are printed raw)",
    )
    p.add_argument(
        "--format-opts", default="", metavar="OPTS", help="format module options (passthrough=)"
    )
    p.add_argument("--topic", default=None, help="statistics topic (default /29west/statistics)")
    p.add_argument(
        "--json", action="store_true", help="print one JSON object per line instead of text"
    )
    p.add_argument(
        "-r", dest="count", type=int, default=0, metavar="N", help="exit after N messages"
    )
    return p


async def _main(args: argparse.Namespace) -> int:
    from umcore.api import Context
    from umcore.api import message as m
    from umcore.monitor.attributes import decode_stats
    from umcore.monitor.framing import LBMMonError
    from umcore.monitor.modopts import (
        MONITOR_CONTEXT_NAME,
        monitoring_attributes,
        parse_format_opts,
        parse_transport_opts,
    )
    from umcore.monitor.textfmt import format_json, format_text, format_unframed_json

    if args.transport.lower() != "lbm":
        raise ConfigError(
            f"the {args.transport!r} transport module is not implemented",
            source="command line",
            what="--transport",
            allowed="lbm",
        )
    load_attributes(args.config)
    opts = parse_transport_opts(args.transport_opts, source="--transport-opts")
    parse_format_opts(args.format_opts, source="--format-opts")
    if args.topic:
        opts.topic = args.topic
    attrs = monitoring_attributes(opts)

    done = signal_event()
    counts = {"messages": 0, "errors": 0}
    render = format_json if args.json else format_text
    out = sys.stdout

    def on_message(msg: m.Message) -> None:
        if msg.type != m.MSG_DATA:
            if msg.type in (m.MSG_BOS, m.MSG_EOS):
                print(f"lbmmon: [{msg.topic}][{msg.source}] {msg.type_name}", file=sys.stderr)
            return
        if done.is_set():
            return
        try:
            text = render(decode_stats(msg.data))
        except LBMMonError as exc:
            unframed = format_unframed_json(msg.data, msg.source, as_json=args.json)
            if unframed is None:
                counts["errors"] += 1
                print(f"lbmmon: bad statistics message from {msg.source}: {exc}", file=sys.stderr)
                return
            text = unframed
        out.write(text if text.endswith("\n") else text + "\n")
        out.flush()
        counts["messages"] += 1
        if args.count and counts["messages"] >= args.count:
            done.set()

    async with await Context.create(attrs["context"], name=MONITOR_CONTEXT_NAME) as ctx:
        if opts.wctopic:
            await ctx.create_wildcard_receiver(
                opts.wctopic, on_message, attributes=attrs["wildcard_receiver"]
            )
            where = f"topics matching {opts.wctopic!r}"
        else:
            await ctx.create_receiver(opts.topic, on_message, attributes=attrs["receiver"])
            where = f"topic {opts.topic!r}"
        print(f"lbmmon: receiving statistics on {where}", file=sys.stderr, flush=True)
        await done.wait()
    print(f"lbmmon: messages={counts['messages']} errors={counts['errors']}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    return tool_main("lbmmon", _main(_parser().parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
