"""The public asyncio client API of pyum.

::

    async with await Context.create() as ctx:
        rcv = await ctx.create_receiver("greetings", lambda msg: print(msg.data))
        src = await ctx.create_source("greetings")
        await src.send(b"hello", flush=True)

See :mod:`umcore.api.context` for the theory of operation and :mod:`umcore.api.message` for
what receivers are handed.
"""

from umcore.api.context import Context, Receiver, Source
from umcore.api.eventqueue import EventQueue
from umcore.api.hfx import Hfx
from umcore.api.message import Message

__all__ = ["Context", "EventQueue", "Hfx", "Message", "Receiver", "Source"]
