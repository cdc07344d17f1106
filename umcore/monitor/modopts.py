"""Automatic-monitoring settings: the ``monitor_*`` options and the LBM transport module's options.

Theory of operation
-------------------
A context publishes its statistics when its ``monitor_interval`` is above 0 (seconds).  The other
options say how (dro-monitoring-config.md B2):

- ``monitor_transport``: the transport module.  Only ``lbm`` (statistics sent with an ordinary
  UM source) is implemented; ``lbmsnmp`` is refused with a :class:`ConfigError`.
- ``monitor_transport_opts``: ``name=value`` pairs separated by ``;`` for the LBM module:
  ``config=FILE`` (a flat UM configuration file applied to the module's own objects only, never
  to the process defaults), ``topic=NAME`` (default ``/29west/statistics``), ``wctopic=PATTERN``
  (receivers only), ``allow_debug=on|off``, and ``scope|option=value`` for ``context``,
  ``source``, ``receiver`` and ``wildcard_receiver``, applied after the file.
  :func:`parse_transport_opts` parses it.
- ``monitor_format``: ``pb`` (protobuf) is implemented.  The legacy ``csv`` format module -- UM's
  default -- is refused with a ConfigError naming the fix (``context monitor_format pb``): its
  text layout is not in our notes, and guessing it would publish something no collector reads.
- ``monitor_format_opts``: ``passthrough=off|on|convert`` (meaningful to receivers only).
- ``monitor_appid``: the application ID placed in every statistics message.

:func:`monitoring_attributes` builds the option sets of the *monitoring context* (named
``29west_statistics_context`` so an XML ``<context>`` can configure it) and of its source or
receiver: current defaults with that XML context applied, then the module-forced defaults, then
``config=FILE``, then the ``scope|option=value`` pairs; ``monitor_interval`` is always 0 there
(no self-monitoring).
"""

from __future__ import annotations

from typing import Any

from umcore.config.flatfile import make_setting, parse_file
from umcore.errors import ConfigError

__all__ = [
    "DEFAULT_TOPIC",
    "MONITOR_CONTEXT_NAME",
    "MonitorSettings",
    "TransportOpts",
    "monitoring_attributes",
    "parse_format_opts",
    "parse_transport_opts",
]

DEFAULT_TOPIC = "/29west/statistics"
"""The LBM transport module's default statistics topic."""

MONITOR_CONTEXT_NAME = "29west_statistics_context"
"""Name of the monitoring context (B2; the 6.17 Config guide's ``infa_statistics_context`` is a
documentation slip, see the notes' traps)."""

OPTION_SCOPES = ("context", "source", "receiver", "wildcard_receiver")
"""Scopes a ``scope|option=value`` pair of the transport options may name."""

MAX_TRANSPORT_OPTS = 256
"""Most ``name=value`` pairs we parse from one options string: far above any real use (a handful),
and it bounds what a mistaken value (a whole file pasted in) costs."""

# Forced defaults of the LBM module's objects (B2): settings the module makes before the user's.
_FORCED: dict[str, tuple[tuple[str, str], ...]] = {
    "context": (
        ("operational_mode", "embedded"),
        ("mim_incoming_address", "0.0.0.0"),
        ("resolver_cache", "0"),
        ("request_tcp_bind_request_port", "0"),
    ),
    "source": (
        ("transport_lbtru_transmission_window_size", "500000"),
        ("transport_lbtrm_transmission_window_size", "500000"),
    ),
}


class TransportOpts:
    """The parsed ``monitor_transport_opts`` of the LBM transport module."""

    __slots__ = ("allow_debug", "config", "options", "topic", "wctopic")

    def __init__(
        self,
        *,
        config: str | None = None,
        topic: str = DEFAULT_TOPIC,
        wctopic: str | None = None,
        allow_debug: bool = False,
        options: list[tuple[str, str, str]] | None = None,
    ) -> None:
        self.config = config
        self.topic = topic
        self.wctopic = wctopic
        self.allow_debug = allow_debug
        #: ``(scope, option, value)`` from ``scope|option=value`` pairs, in order.
        self.options = options if options is not None else []

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TransportOpts):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def key(self) -> tuple[object, ...]:
        """A hashable identity: objects with equal keys can share one monitoring context."""
        return (self.config, self.topic, self.wctopic, self.allow_debug, tuple(self.options))

    def __repr__(self) -> str:
        inner = ", ".join(f"{s}={getattr(self, s)!r}" for s in self.__slots__)
        return f"TransportOpts({inner})"


def _pairs(text: str, what: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for part in text.split(";"):
        item = part.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(
                f"{item!r} is not name=value", what=what, allowed="name=value;name=value..."
            )
        out.append((name.strip(), value.strip()))
        if len(out) > MAX_TRANSPORT_OPTS:
            raise ConfigError(f"more than {MAX_TRANSPORT_OPTS} name=value pairs", what=what)
    return out


def _on_off(value: str, what: str) -> bool:
    v = value.lower()
    if v in ("on", "1", "yes", "true"):
        return True
    if v in ("off", "0", "no", "false"):
        return False
    raise ConfigError(f"{value!r} is not on or off", what=what, allowed="on, off")


def parse_transport_opts(text: str, *, source: str = "monitor_transport_opts") -> TransportOpts:
    """Parse the LBM transport module's options; a bad pair is a ConfigError.

    Option names and values of ``scope|option=value`` pairs are checked against the option
    registry here, so a typo fails when the context is created, not at the first sample.
    """
    opts = TransportOpts()
    for name, value in _pairs(text, source):
        key = name.lower()
        if "|" in key:
            scope, _, opt = name.partition("|")
            scope = scope.strip().lower()
            if scope not in OPTION_SCOPES:
                raise ConfigError(
                    f"unknown scope {scope!r}", what=name, allowed=", ".join(OPTION_SCOPES)
                )
            setting = make_setting(scope, opt.strip(), value, source, None)
            opts.options.append((setting.scope, setting.name, value))
        elif key == "config":
            if not value:
                raise ConfigError("config= needs a file name", what=source)
            opts.config = value
        elif key == "topic":
            if not value:
                raise ConfigError("topic= needs a topic name", what=source)
            opts.topic = value
        elif key == "wctopic":
            opts.wctopic = value or None
        elif key == "allow_debug":
            opts.allow_debug = _on_off(value, f"{source} allow_debug")
        else:
            raise ConfigError(
                f"unknown option {name!r}",
                what=source,
                allowed="config, topic, wctopic, allow_debug, context|opt, source|opt, "
                "receiver|opt, wildcard_receiver|opt",
            )
    return opts


PASSTHROUGH_VALUES = ("off", "on", "convert")


def parse_format_opts(text: str, *, source: str = "monitor_format_opts") -> dict[str, str]:
    """Parse the PB format module's options (``passthrough=off|on|convert``)."""
    out: dict[str, str] = {}
    for name, value in _pairs(text, source):
        key = name.lower()
        if key != "passthrough":
            raise ConfigError(f"unknown option {name!r}", what=source, allowed="passthrough")
        if value.lower() not in PASSTHROUGH_VALUES:
            raise ConfigError(
                f"passthrough={value!r}", what=source, allowed=", ".join(PASSTHROUGH_VALUES)
            )
        out[key] = value.lower()
    return out


class MonitorSettings:
    """One context's effective automatic-monitoring settings."""

    __slots__ = ("appid", "format", "format_opts", "interval", "transport", "transport_opts")

    def __init__(
        self,
        *,
        interval: int = 0,
        transport: str = "lbm",
        transport_opts: TransportOpts | None = None,
        format: str = "pb",
        format_opts: dict[str, str] | None = None,
        appid: str = "",
    ) -> None:
        self.interval = interval
        self.transport = transport
        self.transport_opts = transport_opts if transport_opts is not None else TransportOpts()
        self.format = format
        self.format_opts = format_opts if format_opts is not None else {}
        self.appid = appid

    @property
    def enabled(self) -> bool:
        return self.interval > 0

    @classmethod
    def from_options(cls, get: Any) -> MonitorSettings:
        """Settings from an option reader: ``get(name)`` returns a context option's typed value.

        Nothing but ``monitor_interval`` is checked while monitoring is off, so a context that
        does not monitor never fails on the (UM default) ``csv`` format.
        """
        interval = int(get("monitor_interval") or 0)
        if interval <= 0:
            return cls(interval=0)
        transport = str(get("monitor_transport") or "lbm").lower()
        if transport != "lbm":
            raise ConfigError(
                f"the {transport!r} monitoring transport module is not implemented",
                what="context monitor_transport",
                allowed="lbm",
            )
        fmt = str(get("monitor_format") or "csv").lower()
        if fmt != "pb":
            raise ConfigError(
                f"the {fmt!r} monitoring format module is not implemented by pyum; "
                "set 'context monitor_format pb' to publish protobuf statistics",
                what="context monitor_format",
                allowed="pb",
            )
        return cls(
            interval=interval,
            transport=transport,
            transport_opts=parse_transport_opts(str(get("monitor_transport_opts") or "")),
            format=fmt,
            format_opts=parse_format_opts(str(get("monitor_format_opts") or "")),
            appid=str(get("monitor_appid") or ""),
        )

    def __repr__(self) -> str:
        inner = ", ".join(f"{s}={getattr(self, s)!r}" for s in self.__slots__)
        return f"MonitorSettings({inner})"


def monitoring_attributes(opts: TransportOpts, config: Any = None) -> dict[str, Any]:
    """Attribute objects of the monitoring context and its objects, by scope.

    ``config``: the process :class:`~umcore.config.attributes.Configuration` (the global one
    when None); it is read, never changed.  Raises ConfigError for a bad ``config=`` file.
    """
    from umcore.config.attributes import global_configuration

    cfg = config if config is not None else global_configuration()
    out: dict[str, Any] = {}
    file_settings = parse_file(opts.config) if opts.config else []
    for scope in OPTION_SCOPES:
        name = MONITOR_CONTEXT_NAME if scope == "context" else None
        attrs = (
            cfg.attributes_from_xml(scope, name) if scope == "context" else cfg.attributes(scope)
        )
        for opt_name, value in _FORCED.get(scope, ()):
            attrs.set(opt_name, value, source="LBM monitoring module")
        attrs.apply_settings(file_settings)
        for s, opt_name, value in opts.options:
            if s == scope:
                attrs.set(opt_name, value, source="monitor_transport_opts")
        if scope == "context":
            attrs.set("monitor_interval", "0", source="LBM monitoring module")
        out[scope] = attrs
    return out
