"""lbmreq: send requests on a topic and print the responses (UM's example requester).

Theory of operation
-------------------
Creates a context and a source for the topic, waits ``-d`` seconds for responders to join,
then sends ``-R`` requests of ``-l`` bytes, one at a time: each request stays open ``-T``
seconds collecting responses (``-v`` prints each: ``Response [source], N bytes``), then is
deleted (later responses are dropped, seed L5466).  Prints "Receiver connect [TCP:...]" as the
responders join (the requester is a TCP source), and at the end::

    lbmreq: requests=R responses=N
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from umcore.api import Context, Message
from umcore.api import message as m
from umcore.tools.common import add_config_option, load_attributes, tool_main

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lbmreq", description="Send requests (UM example).")
    add_config_option(p, help="read a flat UM configuration file (repeatable)")
    p.add_argument("-R", dest="requests", type=int, default=10, help="requests to send (10)")
    p.add_argument("-l", dest="length", type=int, default=25, help="request length (25)")
    p.add_argument("-d", dest="delay", type=float, default=1.0,
                   help="seconds to wait for responders before sending (1)")  # fmt: skip
    p.add_argument("-T", dest="timeout", type=float, default=5.0,
                   help="seconds each request collects responses (5)")  # fmt: skip
    p.add_argument("-v", dest="verbose", action="store_true", help="print each response")
    p.add_argument("topic")
    return p


async def _main(args: argparse.Namespace) -> int:
    ctx_attr, src_attr, _ = load_attributes(args.config)
    total = 0
    async with await Context.create(ctx_attr) as ctx:

        def on_event(code: int, info: object) -> None:
            if code == m.SRC_EVENT_CONNECT:
                print(f"Receiver connect [TCP:{info}]", flush=True)

        src = await ctx.create_source(args.topic, attributes=src_attr, on_event=on_event)
        await asyncio.sleep(args.delay)  # UM's example waits for responders the same way
        for i in range(args.requests):
            got: list[Message] = []

            def on_response(msg: Message, got: list[Message] = got) -> None:
                got.append(msg)
                if args.verbose:
                    print(f"Response [{msg.source}], {len(msg.data)} bytes", flush=True)

            data = (f"request {i} ".encode() * args.length)[: args.length]
            req = await src.send_request(data, on_response)
            print(f"Sending request {i}", flush=True)
            await asyncio.sleep(args.timeout)  # the request's response window
            print(f"Done waiting for responses, {len(got)} received. Deleting request.",
                  flush=True)  # fmt: skip
            total += len(got)
            req.close()
        await src.close()
    print(f"lbmreq: requests={args.requests} responses={total}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return tool_main("lbmreq", _main(args), um_error_status=1, interrupted_status=None)


if __name__ == "__main__":
    sys.exit(main())
