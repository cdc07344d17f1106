"""Context names for an :class:`~umcore.engine.context.Engine`: advertise, resolve, report.

Theory of operation
-------------------
UM's Store name resolution (seed 003 8.1.7): a Store with a ``context-name`` advertises its
``DomainID:IP:port`` on the topic resolution channel and answers queries for its name; a source
with ``ume_store_name`` queries until the name resolves.  The table and its schedules are the
resolver core's (:mod:`umcore.resolver.names`, owned by the context's topic resolver, so UDP TR
and, with ``resolver_service``, the SRSes carry the records); this module is the context's side:

- :meth:`EngineNames.advertise` / :meth:`EngineNames.withdraw`: this context's own names;
- :meth:`EngineNames.resolve`: a :class:`NameResolution` handle whose callback gets the
  :class:`~umcore.resolver.names.ContextName` when the name resolves and again whenever its
  address changes; :meth:`NameResolution.cancel` stops it (and the queries, with the last
  handle of that name).  :meth:`EngineNames.wait` is the awaitable form;
- :meth:`EngineNames.dispatch` takes the table's events after every resolver input (the
  engine's ``flush_resolver``): callbacks, and UM's log messages -- a warning for a name
  advertised by two contexts (at the querier) or for one of our own names advertised elsewhere
  (at the advertiser), information for a resolved name whose address changed.

Callbacks run on the event loop; one that raises is logged and does not disturb resolution.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from umcore.resolver.core import TopicResolver
from umcore.resolver.names import (
    ContextName,
    DuplicateName,
    NameChanged,
    NameEvent,
    NameExpired,
    NameQueryGaveUp,
    NameResolved,
    NameRow,
    OwnNameElsewhere,
    check_name,
)

__all__ = ["EngineNames", "NameResolution", "NamesHost", "OnResolved"]

log = logging.getLogger("umcore.engine.names")

OnResolved = Callable[[ContextName], object]


class NamesHost(Protocol):
    """What the name side needs of its context (the engine)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def resolver(self) -> TopicResolver: ...

    def flush_resolver(self) -> None: ...

    def check(self) -> None: ...


class NameResolution:
    """A wish to know where ``name`` is; ``current`` is the last address delivered."""

    __slots__ = ("active", "current", "name", "on_resolved", "owner")

    def __init__(self, owner: EngineNames, name: str, on_resolved: OnResolved) -> None:
        self.owner = owner
        self.name = name
        self.on_resolved = on_resolved
        self.current: ContextName | None = None
        self.active = True

    def deliver(self, entry: ContextName) -> None:
        """Hand ``entry`` to the callback if it is news to this handle."""
        if not self.active or (self.current is not None and self.current.address == entry.address):
            return
        self.current = entry
        try:
            self.on_resolved(entry)
        except Exception:
            log.exception("context name %r: the on_resolved callback raised", self.name)

    def cancel(self) -> None:
        """No more callbacks; the queries stop with the name's last handle."""
        if self.active:
            self.active = False
            self.owner.cancel(self)


class EngineNames:
    """One context's context names (see the module docstring)."""

    def __init__(self, host: NamesHost) -> None:
        self.host = host
        self._handles: dict[str, list[NameResolution]] = {}

    def advertise(self, name: str, ip: str, port: int, domain_id: int = 0) -> ContextName:
        h = self.host
        h.check()
        entry = h.resolver.advertise_context_name(
            name, ip, port, h.loop.time(), domain_id=domain_id
        )
        h.flush_resolver()
        return entry

    def withdraw(self, name: str) -> bool:
        return self.host.resolver.withdraw_context_name(name)

    def resolve(self, name: str, on_resolved: OnResolved) -> NameResolution:
        h = self.host
        h.check()
        check_name(name)
        handle = NameResolution(self, name, on_resolved)
        self._handles.setdefault(name, []).append(handle)
        known = h.resolver.query_context_name(name, h.loop.time())
        if known is not None:
            h.loop.call_soon(handle.deliver, known)  # after resolve() has returned the handle
        h.flush_resolver()
        return handle

    async def wait(self, name: str, timeout: float | None = None) -> ContextName:
        """The address ``name`` resolves to (TimeoutError after ``timeout`` seconds)."""
        fut: asyncio.Future[ContextName] = self.host.loop.create_future()

        def done(entry: ContextName) -> None:
            if not fut.done():
                fut.set_result(entry)

        handle = self.resolve(name, done)
        try:
            async with asyncio.timeout(timeout):
                return await fut
        finally:
            handle.cancel()

    def cancel(self, handle: NameResolution) -> None:
        handles = self._handles.get(handle.name)
        if handles is None or handle not in handles:
            return
        handles.remove(handle)
        if not handles:
            del self._handles[handle.name]
        self.host.resolver.cancel_context_name(handle.name)

    def table(self) -> list[NameRow]:
        return self.host.resolver.names.table()

    def close(self) -> None:
        """The context closes: every handle stops."""
        for handles in list(self._handles.values()):
            for handle in list(handles):
                handle.cancel()

    def dispatch(self, events: list[NameEvent]) -> None:
        """The name table's events: UM's log messages, and the callbacks."""
        for ev in events:
            if isinstance(ev, NameResolved):
                log.info("context name %s resolved", ev.entry)
                self._deliver(ev.entry)
            elif isinstance(ev, NameChanged):
                log.info(
                    "context name %s changed from %s to %s",
                    ev.new.name,
                    _where(ev.old),
                    _where(ev.new),
                )
                self._deliver(ev.new)
            elif isinstance(ev, DuplicateName):
                log.warning(
                    "context name %s is advertised by more than one context: %s and %s",
                    ev.other.name,
                    _where(ev.current),
                    _where(ev.other),
                )
            elif isinstance(ev, OwnNameElsewhere):
                log.warning(
                    "another context advertises this context's name %s (at %s; ours: %s)",
                    ev.mine.name,
                    _where(ev.other),
                    _where(ev.mine),
                )
            elif isinstance(ev, NameExpired):
                log.info("context name %s unresolved (%s); querying again", ev.entry, ev.reason)
            elif isinstance(ev, NameQueryGaveUp):
                log.warning(
                    "context name %s not resolved within resolver_context_name_query_duration",
                    ev.name,
                )

    def _deliver(self, entry: ContextName) -> None:
        for handle in list(self._handles.get(entry.name, ())):
            handle.deliver(entry)


def _where(entry: ContextName) -> str:
    return f"{entry.domain_id}:{entry.ip}:{entry.port}"
