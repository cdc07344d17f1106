"""Typed reads of one object's effective UM options, for the engine's cores.

Theory of operation
-------------------
Every setting a core is built with comes from the option registry
(:mod:`umcore.config.options`) through one :class:`Options` object: its defaults, types,
ranges and units live there and nowhere else.  :meth:`Options.get` returns the parsed value;
:meth:`Options.seconds` converts a time option to seconds from the unit the registry records
for it (``milliseconds``, ``microseconds`` or ``seconds``).  Asking for an option that the
object's scope does not have raises :class:`~umcore.errors.ConfigError`: a misspelt name is a
failure at construction, never a silent default.

``attributes`` may be an attribute object of the right scope, a mapping of option name to UM's
string form (set over the current defaults, as ``str_setopt`` would), or None (the process
configuration: flat files, ``LBM_*`` environment variables, XML, whose restrictions are
checked here: a violation is a ConfigError).

The small helpers below turn option values the engine's adapters need into plain data: the
local address an ``*_interface`` option names (also in ``resolver_unicast_daemon`` entries),
UM's random session ids.  The cores build their own settings from options
(``from_options`` constructors: :class:`~umcore.resolver.core.ResolverConfig`,
:class:`~umcore.transport.tcp.TcpSourceSession`, the LBT configs...).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from umcore.aio.interfaces import context_interface
from umcore.config.attributes import global_configuration
from umcore.config.options import lookup
from umcore.errors import ConfigError

__all__ = [
    "Options",
    "daemon_bindings",
    "interface_ip",
    "random_session_id",
]

# Seconds per unit of the registry's time units.
_TIME_UNITS = {"milliseconds": 1e-3, "microseconds": 1e-6, "seconds": 1.0}


class Options:
    """One object's effective options (see the module docstring)."""

    __slots__ = ("attrs", "scope")

    def __init__(self, scope: str, attributes: Any = None, name: str | None = None) -> None:
        cfg = global_configuration()
        if isinstance(attributes, Mapping):
            base = cfg.attributes(scope)
            for key, value in attributes.items():
                base.set(key, value if isinstance(value, str) else str(value))
            attributes = base
        self.scope = scope
        self.attrs = cfg.for_object(scope, attributes, name=name)

    def get(self, name: str) -> Any:
        """The parsed value of ``name``; ConfigError when this scope has no such option."""
        return self.attrs.get_typed(name)

    def seconds(self, name: str) -> float:
        """A time option in seconds, converted from the registry's unit for it."""
        unit = lookup(self.scope, name, source="API").unit
        factor = _TIME_UNITS.get(unit)
        if factor is None:
            raise ConfigError(f"{name} is not a time option (unit {unit!r})", source="API")
        return float(self.attrs.get_typed(name) or 0) * factor

    def interface(self, name: str) -> str | None:
        """The local address the ``*_interface`` option ``name`` names, or None (``0.0.0.0``):
        see :func:`interface_ip`.  A spec matching no local address is a ConfigError naming
        the option and where it was set (a flat file and its line, an environment variable,
        the API; ``<scope> options`` for a default or an XML setting)."""
        source, line = _where(self.attrs.origin(name), f"{self.scope} options")
        return context_interface(self.get(name), what=name, source=source, line=line)


def _where(origin: str | None, fallback: str) -> tuple[str, int | None]:
    """An attribute origin (``file:line``, ``environment variable X``, ``API``) split into
    the ConfigError's source and line."""
    if not origin:
        return fallback, None
    head, sep, tail = origin.rpartition(":")
    if sep and head and tail.isdigit():
        return head, int(tail)
    return origin, None


def interface_ip(value: Any, what: str = "interface") -> str | None:
    """An interface option's local address, or None when it names none (``0.0.0.0``): the
    caller then binds "any" and advertises the address routed towards its peers.  Device
    names, CIDR networks and host names are resolved among this host's interfaces as the
    daemons do; a spec matching no local address is a ConfigError."""
    return context_interface(value, what=what)


def daemon_bindings(value: Any) -> dict[tuple[str, int], tuple[str | None, int | None]]:
    """For each ``resolver_unicast_daemon`` entry with an ``Iface[:SrcPort]->`` part: the
    local (address, source port) to talk to that lbmrd from (None parts: the context's
    ``resolver_unicast_interface`` / port range)."""
    out: dict[tuple[str, int], tuple[str | None, int | None]] = {}
    for entry in value or ():
        iface = getattr(entry, "interface", None)
        sport = getattr(entry, "source_port", None)
        if iface is None and sport is None:
            continue
        ip = context_interface(iface, what="resolver_unicast_daemon interface")
        out[(str(entry.address), int(entry.port))] = (ip, sport)
    return out


def random_session_id() -> int:
    """A transport session id: UM's are random, non-zero 32-bit numbers."""
    return random.SystemRandom().randrange(1, 0x1_0000_0000)
