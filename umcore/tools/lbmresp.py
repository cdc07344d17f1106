"""lbmresp: answer every request on a topic (UM's example responder).

Theory of operation
-------------------
Creates a context and a receiver for the topic.  Each REQUEST message gets ``-r`` responses of
``-l`` bytes (UM's example sends one 25-byte response), then its response object is closed so
the connection's deletion timer can start.  ``-v`` prints each request; BOS/EOS are printed as
"Beginning of Transport Session" / "End of Transport Session".  ``-N`` stops after that many
requests (default: run until interrupted).  Once its receiver exists it prints
``lbmresp: receiving requests on topic 'T'`` (wait for it before starting a requester).  At the
end::

    lbmresp: requests=N responses=M
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
    p = argparse.ArgumentParser(prog="lbmresp", description="Answer requests (UM example).")
    add_config_option(p, help="read a flat UM configuration file (repeatable)")
    p.add_argument("-l", dest="length", type=int, default=25, help="response length (25)")
    p.add_argument("-r", dest="responses", type=int, default=1, help="responses per request (1)")
    p.add_argument("-N", dest="count", type=int, default=0, help="exit after N requests")
    p.add_argument("-v", dest="verbose", action="store_true", help="print each request")
    p.add_argument("topic")
    return p


async def _main(args: argparse.Namespace) -> int:
    ctx_attr, _, rcv_attr = load_attributes(args.config)
    requests = responses = 0
    done = asyncio.Event()
    async with await Context.create(ctx_attr) as ctx:

        def on_message(msg: Message) -> None:
            nonlocal requests, responses
            if msg.type == m.MSG_BOS:
                print(f"[{msg.topic}][{msg.source}], Beginning of Transport Session", flush=True)
            elif msg.type == m.MSG_EOS:
                print(f"[{msg.topic}][{msg.source}], End of Transport Session", flush=True)
            elif msg.type == m.MSG_REQUEST:
                requests += 1
                if args.verbose:
                    print(f"Request [{msg.topic}][{msg.source}][{msg.sequence_number}], "
                          f"{len(msg.data)} bytes", flush=True)  # fmt: skip
                for k in range(args.responses):
                    msg.respond((f"response {k} ".encode() * args.length)[: args.length])
                    responses += 1
                msg.response.close()
                if args.count and requests >= args.count:
                    done.set()

        rcv = await ctx.create_receiver(args.topic, on_message, attributes=rcv_attr)
        # The readiness line: a requester started after it finds this receiver.
        print(f"lbmresp: receiving requests on topic {args.topic!r}", flush=True)
        await done.wait()
        await asyncio.sleep(0.2)  # let the last responses leave before the context closes
        await rcv.close()
    print(f"lbmresp: requests={requests} responses={responses}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return tool_main("lbmresp", _main(args), um_error_status=1, interrupted_status=0)


if __name__ == "__main__":
    sys.exit(main())
