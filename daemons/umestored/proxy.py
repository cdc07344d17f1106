"""umestored's proxy sources: the UM sources a Store opens when it wins a proxy election.

Theory of operation
-------------------
The election is the core's (:mod:`umcore.store.proxy`); this module acts on its events
(persistence-store.md 1.13):

- :class:`~umcore.store.events.ProxySourceCreated`: a UM source of the topic is opened on the
  Store's engine (``late_join 0``: the engine adds no late-join service of its own) whose TIR
  carries two topic options (:func:`proxy_tir`):

  * the UME option (0x01) naming **the Store's request port** and the real source's transport
    index: receivers send their SRI requests there (the core answers through
    :meth:`StoreCore.take_proxy_sris`) and register with the Stores the SRI names;
  * a late-join option (0x04) naming **the real source's** request address and transport index
    [inferred]: the Stores' retransmissions carry the real source's OTID (they splice the frames
    they stored with it), and a receiver maps a retransmission to its topic by the late-join
    option's address and transport index.  The receiver's RXREQs go to the Stores (persistent
    recovery), never to that address.

  The source's last SRI (with the real source's RegIDs, under the proxy's topic index, with the
  election token header) is written on the proxy's transport when the core says
  (:meth:`StoreCore.take_proxy_sris`: its announcements and its answers to SRI requests).
- :class:`~umcore.store.events.ProxySourceDeleted`: the UM source is closed.

Opening a source is asynchronous (its transport session may have to listen first); a proxy
deleted meanwhile is closed as soon as it is open.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from umcore.engine.context import Engine
from umcore.engine.options import Options
from umcore.engine.source import EngineSource
from umcore.errors import UMError
from umcore.store.core import StoreCore
from umcore.store.events import ProxySourceCreated, ProxySourceDeleted, StoreEvent
from umcore.wire import lbmr_options

__all__ = ["ProxySources", "proxy_tir"]

_UME_FLAGS = (
    lbmr_options.UME_FLAG_STORE | lbmr_options.UME_FLAG_LATEJOIN | lbmr_options.UME_FLAG_QCCAP
)


def proxy_tir(
    store: tuple[str, int], source: tuple[str, int], transport_idx: int
) -> tuple[lbmr_options.UMEOption, lbmr_options.LateJoinOption]:
    """The TIR options of a proxy: SRI requests to ``store``, the real ``source``'s identity."""
    return (
        lbmr_options.UMEOption(
            src_tcp_port=store[1], src_tcp_addr=store[0], transport_idx=transport_idx,
            flags=_UME_FLAGS,
        ),
        lbmr_options.LateJoinOption(source[1], source[0], transport_idx, 0, 0),
    )  # fmt: skip


class ProxySources:
    """One Store's running proxy sources (module docstring)."""

    def __init__(
        self,
        engine: Engine,
        core: StoreCore,
        log: logging.Logger,
        on_started: Callable[[], None],
    ) -> None:
        """``on_started``: a proxy's source opened (the daemon re-arms the core's timer)."""
        self.engine = engine
        self.on_started = on_started
        self.core = core
        self.log = log
        self.loop = asyncio.get_running_loop()
        self.sources: dict[int, EngineSource] = {}
        self._opening: dict[int, asyncio.Task[None]] = {}
        self._deleted: set[int] = set()
        #: SRIs for a proxy not (or no longer) open, and failed opens.
        self.dropped_sris = 0
        self.open_failures = 0

    def handle(self, events: list[StoreEvent]) -> None:
        for ev in events:
            if isinstance(ev, ProxySourceCreated):
                self._deleted.discard(ev.reg_id)
                task = self.loop.create_task(self._open(ev))
                self._opening[ev.reg_id] = task
            elif isinstance(ev, ProxySourceDeleted):
                src = self.sources.pop(ev.reg_id, None)
                if src is not None:
                    self.loop.create_task(self._close(src))
                elif ev.reg_id in self._opening:
                    self._deleted.add(ev.reg_id)

    def flush(self) -> None:
        for reg_id, data in self.core.take_proxy_sris():
            self._write(reg_id, data)

    def _write(self, reg_id: int, data: bytes) -> None:
        src = self.sources.get(reg_id)
        if src is None or src.closed:
            self.dropped_sris += 1
            return
        src.session.write(data)

    async def _open(self, ev: ProxySourceCreated) -> None:
        try:
            real = self.core.registry.sources.get(ev.reg_id)
            if real is None:
                return
            tir = proxy_tir(self.core.address, real.reply_to, real.transport_idx)
            opts = Options("source", {"late_join": "0"}, ev.topic)
            src = await self.engine.open_source(ev.topic, opts, None, tir_options=tir)
        except (UMError, OSError) as exc:
            self.open_failures += 1
            self.log.error("proxy source for topic %r not opened: %s", ev.topic, exc)
            return
        finally:
            self._opening.pop(ev.reg_id, None)
        if ev.reg_id in self._deleted:
            self._deleted.discard(ev.reg_id)
            await self._close(src)
            return
        self.sources[ev.reg_id] = src
        self.core.proxy.started(ev.reg_id, real.transport_idx, src.tidx, self.loop.time())
        self.log.info(
            "proxy source for topic %r (source RegID %d) running, topic index %d",
            ev.topic, ev.reg_id, src.tidx,
        )  # fmt: skip
        self.on_started()  # the core's timer: the first announcement is due now

    async def _close(self, src: EngineSource) -> None:
        try:
            await src.close()
        except UMError as exc:
            self.log.info("proxy source close: %s", exc)

    async def close(self) -> None:
        for task in list(self._opening.values()):
            task.cancel()
        for src in list(self.sources.values()):
            await self._close(src)
        self.sources.clear()
