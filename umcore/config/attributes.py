"""Attribute objects and the process configuration: where every option value comes from.

Theory of operation
-------------------
UM assigns option values in this order (notes C3 and seed-core-features 3.4):

1. **Factory defaults** (the registry) are copied into the process's *current defaults*.
2. **Flat files** (:meth:`Configuration.config_file`, ``LBM_DEFAULT_CONFIG_FILE``) write into the
   current defaults and *tag* what they set as user-set.
3. **XML files** (:meth:`Configuration.config_xml_file`, ``LBM_XML_CONFIG_FILENAME`` with
   ``LBM_XML_CONFIG_APPNAME``) load a table; they do not change the current defaults.  An
   application name that matches no ``<application>`` is an error at load time.
4. An **attribute object** is made either by :meth:`Attributes.create` (UM's
   ``*_attr_create``: a copy of the current defaults, XML defaults ignored) or by
   :meth:`Attributes.from_xml` (``*_attr_create_from_xml``: the copy, then the XML defaults for
   this object applied over it — over flat-file values too).  :meth:`Attributes.set` (UM's
   ``str_setopt``) tags what it sets.
5. **Object creation** (:meth:`Configuration.for_object`, what the client library calls when it
   creates a context, source, receiver, wildcard receiver or event queue): with no attribute
   object, the current defaults plus the XML defaults for every option *not tagged*; with one,
   that object as is.  Then XML restrictions are checked — always, however the attributes were
   made — and so are ``rule="deny"`` elements; a violation is a ConfigError and the object is
   not created.

Worked cases (``tests/config/test_precedence.py``): flat ``request_tcp_port_low 12000`` with XML
``default-value="13000"`` gives 12000 through ``create()`` and 13000 through ``from_xml()``;
adding ``order="allow,deny"`` with ``<allow>13000</allow>`` makes creation with ``create()``
fail.

API for the client library::

    from umcore.config.attributes import ContextAttributes, SourceAttributes, global_configuration

    attrs = ContextAttributes.from_environment()          # env files loaded once, XML applied
    attrs.set("resolver_unicast_daemon", "127.0.0.1:15380")
    cfg = global_configuration()
    effective = cfg.for_object("context", attrs)          # restrictions checked here
    port_low = effective.get_typed("request_tcp_port_low")  # int; a dict hit
    src = cfg.for_object("source", None, name="topic1", context_name=effective.get_typed("context_name") or None)

``get(name)`` returns UM's string form, ``get_typed(name)`` the parsed value (int, bool, str,
:class:`~umcore.config.values.Interface`, tuples of list entries).  Option names are
case-insensitive; exact lower-case names take the fast path.  ``set`` errors say where the value
came from (``source=``/``line=``; ``"API"`` by default).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

from umcore.config.flatfile import Setting, parse_text, read_config_file
from umcore.config.options import REGISTRY, Option, bad_value_error, lookup, parse_value
from umcore.config.umxml import Application, UMXml
from umcore.config.values import BadValue
from umcore.errors import ConfigError

__all__ = [
    "ATTRIBUTE_CLASSES",
    "Attributes",
    "Configuration",
    "ContextAttributes",
    "EventQueueAttributes",
    "ReceiverAttributes",
    "SourceAttributes",
    "WildcardReceiverAttributes",
    "global_configuration",
    "reset_global_configuration",
]

ENV_DEFAULT_CONFIG = "LBM_DEFAULT_CONFIG_FILE"
ENV_XML_FILE = "LBM_XML_CONFIG_FILENAME"
ENV_XML_APPNAME = "LBM_XML_CONFIG_APPNAME"
# Environment variables that override the *defaults* (not explicit settings) of monitoring options.
ENV_MONITOR = {
    "LBM_MONITOR_INTERVAL": "monitor_interval",
    "LBM_MONITOR_TRANSPORT": "monitor_transport",
    "LBM_MONITOR_TRANSPORT_OPTS": "monitor_transport_opts",
    "LBM_MONITOR_FORMAT": "monitor_format",
    "LBM_MONITOR_FORMAT_OPTS": "monitor_format_opts",
    "LBM_MONITOR_APPID": "monitor_appid",
}

_FACTORY: dict[str, dict[str, Any]] = {
    scope: {name: opt.default_value() for name, opt in options.items()}
    for scope, options in REGISTRY.items()
}


class Attributes:
    """The option values of one object kind (scope), with where each user-set value came from."""

    __slots__ = ("_origins", "_values", "scope")
    SCOPE: ClassVar[str] = ""

    def __init__(self, scope: str | None = None) -> None:
        self.scope = scope or self.SCOPE
        if self.scope not in REGISTRY:
            raise ValueError(f"unknown scope {self.scope!r}")
        self._values: dict[str, Any] = dict(_FACTORY[self.scope])
        # option -> where a user set it ("file:line", "API", ...); presence = UM's "tagged".
        self._origins: dict[str, str] = {}

    # --- construction -------------------------------------------------------------------------

    @classmethod
    def _scope(cls) -> str:
        if not cls.SCOPE:
            raise TypeError("use a scope-specific class such as ContextAttributes")
        return cls.SCOPE

    @classmethod
    def create(cls, config: Configuration | None = None) -> Attributes:
        """UM's ``*_attr_create``: a copy of the current defaults (XML defaults not applied)."""
        return (config or global_configuration()).attributes(cls._scope())

    @classmethod
    def from_xml(
        cls,
        name: str | None = None,
        *,
        context_name: str | None = None,
        config: Configuration | None = None,
    ) -> Attributes:
        """UM's ``*_attr_create_from_xml``: current defaults with the XML defaults applied.

        ``name``: context/event-queue name, topic (source/receiver) or pattern (wildcard)."""
        cfg = config or global_configuration()
        return cfg.attributes_from_xml(cls._scope(), name, context_name=context_name)

    @classmethod
    def from_environment(
        cls, name: str | None = None, *, context_name: str | None = None
    ) -> Attributes:
        """Like :meth:`from_xml` on the process configuration, whose environment variables
        (``LBM_DEFAULT_CONFIG_FILE``, ``LBM_XML_CONFIG_FILENAME``/``_APPNAME``,
        ``LBM_MONITOR_*``) are read on first use."""
        return cls.from_xml(name, context_name=context_name, config=global_configuration())

    def copy(self) -> Attributes:
        dup = ATTRIBUTE_CLASSES[self.scope]()
        dup._values = dict(self._values)
        dup._origins = dict(self._origins)
        return dup

    # --- access ---------------------------------------------------------------------------

    def get_typed(self, name: str) -> Any:
        """The parsed value of an option (a dictionary hit for lower-case names)."""
        try:
            return self._values[name]
        except KeyError:
            return self._values[lookup(self.scope, name, source="API").name]

    __getitem__ = get_typed

    def get(self, name: str) -> str:
        """UM's string form of an option's value (``str_getopt``)."""
        opt = lookup(self.scope, name, source="API")
        return opt.type.format(self._values[opt.name])

    def origin(self, name: str) -> str | None:
        """Where a user-set value came from, or None for defaults (factory or XML)."""
        return self._origins.get(lookup(self.scope, name, source="API").name)

    def is_set(self, name: str) -> bool:
        return self.origin(name) is not None

    def items(self) -> Iterator[tuple[str, str]]:
        """(name, string value) for every option of the scope, in registry order."""
        for name, opt in REGISTRY[self.scope].items():
            yield name, opt.type.format(self._values[name])

    def set(self, name: str, value: str, *, source: str = "API", line: int | None = None) -> None:
        """UM's ``str_setopt``: set an option from its string form.  List options append
        (``0.0.0.0:0`` clears).  Errors name the option, the allowed form and ``source``."""
        opt = lookup(self.scope, name, source=source, line=line)
        parsed = parse_value(opt, value, source=source, line=line)
        where = source if line is None else f"{source}:{line}"
        self._assign(opt, parsed, where, source, line)

    def set_callback(self, name: str, function: Any) -> None:
        """Set a function-valued option (API only; UM's callback options)."""
        opt = lookup(self.scope, name, source="API")
        if opt.type.format(None) != "" or not callable(function):
            raise ConfigError(
                "not a callback option, or not a callable", source="API", what=opt.name
            )
        self._values[opt.name] = function
        self._origins[opt.name] = "API"

    def _assign(
        self, opt: Option, value: Any, where: str | None, source: str | None, line: int | None
    ) -> None:
        if opt.type.cumulative:
            try:
                value = opt.type.merge(self._values[opt.name], value)
            except BadValue as exc:
                raise bad_value_error(opt, exc, source=source, line=line) from None
        for target in (opt.name, *opt.also):
            self._values[target] = value
            if where is not None:
                self._origins[target] = where
            else:
                self._origins.pop(target, None)

    def apply_settings(self, settings: Iterable[Setting]) -> None:
        """Apply parsed settings of this scope (from a flat file or a daemon's option list)."""
        for s in settings:
            if s.scope != self.scope:
                continue
            opt = REGISTRY[s.scope][s.name]
            where = s.source if s.line is None else f"{s.source}:{s.line}"
            self._assign(opt, s.value, where, s.source, s.line)

    def apply_xml(
        self,
        app: Application | None,
        name: str | None,
        *,
        context_name: str | None,
        skip_tagged: bool,
    ) -> None:
        """Apply the XML defaults for one object; ``skip_tagged`` keeps user-set values."""
        if app is None:
            return
        res = app.resolve(self.scope, name, context_name=context_name)
        for opt_name, rule in res.defaults.items():
            if skip_tagged and opt_name in self._origins:
                continue
            opt = rule.option
            for target in (opt.name, *opt.also):
                self._values[target] = rule.default
                self._origins.pop(target, None)

    def __repr__(self) -> str:
        user = ", ".join(f"{k}={self.get(k)!r}" for k in self._origins)
        return f"{type(self).__name__}({user})"


class ContextAttributes(Attributes):
    __slots__ = ()
    SCOPE = "context"


class SourceAttributes(Attributes):
    __slots__ = ()
    SCOPE = "source"


class ReceiverAttributes(Attributes):
    __slots__ = ()
    SCOPE = "receiver"


class WildcardReceiverAttributes(Attributes):
    __slots__ = ()
    SCOPE = "wildcard_receiver"


class EventQueueAttributes(Attributes):
    __slots__ = ()
    SCOPE = "event_queue"


class _HfxAttributes(Attributes):
    __slots__ = ()
    SCOPE = "hfx"


class _XspAttributes(Attributes):
    __slots__ = ()
    SCOPE = "xsp"


ATTRIBUTE_CLASSES: dict[str, type[Attributes]] = {
    cls.SCOPE: cls
    for cls in (
        ContextAttributes,
        SourceAttributes,
        ReceiverAttributes,
        WildcardReceiverAttributes,
        EventQueueAttributes,
        _HfxAttributes,
        _XspAttributes,
    )
}


class Configuration:
    """One process's configuration: current defaults per scope and the loaded XML table."""

    __slots__ = ("_app", "_defaults", "xml")

    def __init__(self) -> None:
        self._defaults: dict[str, Attributes] = {s: cls() for s, cls in ATTRIBUTE_CLASSES.items()}
        self.xml: UMXml | None = None
        self._app: Application | None = None

    @property
    def application(self) -> Application | None:
        """The ``<application>`` selected from the loaded XML file, if any."""
        return self._app

    def defaults(self, scope: str) -> Attributes:
        """The live current-defaults object of a scope (read it; change it through files)."""
        return self._defaults[scope]

    # --- loading --------------------------------------------------------------------------

    def apply(self, settings: Iterable[Setting]) -> None:
        """Write flat-file style settings into the current defaults, in order."""
        for s in settings:
            self._defaults[s.scope].apply_settings((s,))

    def config_text(self, text: str, source: str = "API") -> None:
        self.apply(parse_text(text, source))

    def config_file(self, path: str | Path) -> None:
        """UM's ``lbm_config``: a flat file, or an XML file (then ``LBM_XML_CONFIG_APPNAME`` is
        ignored and the unnamed application is used)."""
        text = read_config_file(path)
        if text.lstrip().startswith("<"):
            self._set_xml(UMXml.from_text(text, str(path)), None)
        else:
            self.config_text(text, str(path))

    def config_xml_file(self, path: str | Path, appname: str | None = None) -> None:
        """UM's ``lbm_config_xml_file``: load the XML table for application ``appname``."""
        self._set_xml(UMXml.load(path), appname)

    def config_xml_string(
        self, text: str, appname: str | None = None, source: str = "<XML string>"
    ) -> None:
        self._set_xml(UMXml.from_text(text, source), appname)

    def _set_xml(self, xml: UMXml, appname: str | None) -> None:
        app = xml.application(appname)  # an unknown application fails here, before anything runs
        self.xml, self._app = xml, app

    def load_environment(self, environ: Mapping[str, str] | None = None) -> None:
        """Read ``LBM_DEFAULT_CONFIG_FILE``, ``LBM_XML_CONFIG_FILENAME`` (+ ``_APPNAME``) and
        the ``LBM_MONITOR_*`` default overrides."""
        env = os.environ if environ is None else environ
        for var, name in ENV_MONITOR.items():
            text = env.get(var)
            if text is None:
                continue
            for scope in ("context", "event_queue"):
                defaults = self._defaults[scope]
                if defaults.is_set(name):
                    continue  # an explicit setting wins over the environment
                opt = REGISTRY[scope][name]
                value = parse_value(opt, text, source=f"environment variable {var}")
                defaults._assign(opt, value, None, None, None)
        path = env.get(ENV_DEFAULT_CONFIG)
        if path:
            try:
                self.config_file(path)
            except ConfigError as exc:
                exc.message = f"{exc.message} (from environment variable {ENV_DEFAULT_CONFIG})"
                exc.args = (str(exc),)
                raise
        xml_path = env.get(ENV_XML_FILE)
        if xml_path:
            appname = env.get(ENV_XML_APPNAME) or None
            try:
                self.config_xml_file(xml_path, appname)
            except ConfigError as exc:
                exc.message = f"{exc.message} (from environment variable {ENV_XML_FILE})"
                exc.args = (str(exc),)
                raise

    # --- attribute objects and object creation ----------------------------------------------

    def attributes(self, scope: str) -> Attributes:
        """``*_attr_create``: a copy of the current defaults."""
        return self._defaults[scope].copy()

    def attributes_from_xml(
        self, scope: str, name: str | None = None, *, context_name: str | None = None
    ) -> Attributes:
        """``*_attr_create_from_xml``: current defaults, XML defaults applied over them."""
        attrs = self.attributes(scope)
        if scope == "context" and name is None:
            name = attrs.get_typed("context_name") or None
        attrs.apply_xml(self._app, name, context_name=context_name, skip_tagged=False)
        return attrs

    def for_object(
        self,
        scope: str,
        attrs: Attributes | None = None,
        *,
        name: str | None = None,
        context_name: str | None = None,
    ) -> Attributes:
        """The effective attributes of an object being created; raises ConfigError when the
        XML denies the object or restricts a value it would get.

        ``name``: context/event-queue name, topic or wildcard pattern.  For contexts, a None
        ``name`` falls back to the ``context_name`` option."""
        if attrs is None:
            eff = self.attributes(scope)
            key = name
            if scope == "context" and key is None:
                key = eff.get_typed("context_name") or None
            eff.apply_xml(self._app, key, context_name=context_name, skip_tagged=True)
        else:
            if attrs.scope != scope:
                raise ConfigError(f"{attrs.scope} attributes given for a {scope}", source="API")
            eff = attrs.copy()
        self.check(eff, name, context_name=context_name)
        return eff

    def check(
        self, attrs: Attributes, name: str | None = None, *, context_name: str | None = None
    ) -> None:
        """Enforce the XML's rules and restrictions for one object."""
        app = self._app
        if app is None:
            return
        key = name
        if attrs.scope == "context" and key is None:
            key = attrs.get_typed("context_name") or None
        res = app.resolve(attrs.scope, key, context_name=context_name)
        label = attrs.scope.replace("_", " ")
        if res.denied is not None:
            raise ConfigError(
                f"creating {label} {key!r} is denied by the XML configuration: {res.denied}",
                source=app.source,
                what=f"{label} {key}",
            )
        for opt_name, rule in res.restrictions.items():
            value = attrs.get_typed(opt_name)
            if not rule.permits(value):
                came = attrs._origins.get(opt_name) or "default"
                raise ConfigError(
                    f"value {rule.option.type.format(value)!r} (from {came}) is not permitted",
                    source=rule.source,
                    line=rule.line,
                    what=f"{attrs.scope} {opt_name}",
                    allowed=rule.describe(),
                )


_GLOBAL: Configuration | None = None


def global_configuration() -> Configuration:
    """The process configuration; environment variables are read on first use."""
    global _GLOBAL
    if _GLOBAL is None:
        cfg = Configuration()
        cfg.load_environment()
        _GLOBAL = cfg
    return _GLOBAL


def reset_global_configuration(config: Configuration | None = None) -> None:
    """Replace (or forget) the process configuration — for tests and embedding."""
    global _GLOBAL
    _GLOBAL = config
