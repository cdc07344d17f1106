"""The engine: what the client API, the persistent store and the DRO all stand on.

Theory of operation
-------------------
One :class:`~umcore.engine.context.Engine` per UM context composes the sans-IO cores
(:mod:`umcore.resolver`, :mod:`umcore.transport`, :mod:`umcore.features`) with their asyncio
adapters (:mod:`umcore.aio`): topic resolution (multicast, lbmrd, SRS), the transport sessions
of its sources (:mod:`~umcore.engine.source`) and of the sources it joined
(:mod:`~umcore.engine.receive`), the request port and immediate messages
(:mod:`~umcore.engine.features`), LBT-RU/LBT-RM specifics (:mod:`~umcore.engine.lbt`).  Every
option reaches a core through :class:`~umcore.engine.options.Options` (the registry).

Besides the subscribers and topic sources the API builds on, the engine offers the store and
the DRO their own handles (:mod:`~umcore.engine.raw`): a raw receiver, handed a source's LBMC
frames in arrival order with the session's identity, and a raw source, sending pre-framed
messages that keep their sequence numbers, with a normal source's back-pressure.

Nothing here imports :mod:`umcore.api`; the API's classes are subclasses of the engine's
(:attr:`Engine.source_class`, :attr:`Engine.subscriber_class`).
"""

from umcore.engine.context import Engine
from umcore.engine.options import Options
from umcore.engine.raw import RawReceiver, RawSession, RawSource

__all__ = ["Engine", "Options", "RawReceiver", "RawSession", "RawSource"]
