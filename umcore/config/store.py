"""The Store daemon's configuration file (``<ume-store>``, umestored): load and validate.

Theory of operation
-------------------
``umestored`` reads one XML file checked against a DTD (``schemas/umestored.dtd``, printed by
``umestored -d``): ``<daemon>`` settings, then ``<stores>``, each ``<store>`` a Store instance with
its own name, interface and port, store-level ``<ume-attributes>`` and a list of ``<topic>``
patterns, each with repository options.  :func:`load` validates the file and returns a
:class:`StoreFile`: every element and every Store/repository option with its documented default
filled in, typed.

``<option type=...>`` kinds: ``store`` inside ``<store>`` is a Store-instance option
(:data:`STORE_OPTIONS`), inside ``<topic>`` a repository option (:data:`TOPIC_OPTIONS`);
``lbm-context`` (store level) and ``lbm-receiver``/``lbm-source`` (topic level) are UM options
checked against the option registry and kept as settings — precedence is UM file
(``lbm-config``/``xml-config``) < store-level ``lbm-context`` < topic-level ``lbm-*``.  Unknown
names get the closest known names in the error, bad values the allowed range.

Topic matching (:meth:`StoreInstance.match`): ``direct`` is an exact name; ``PCRE``/``pcre`` and
the deprecated POSIX ``regexp`` are searched with Python's ``re`` (see :mod:`umcore.config.umxml`
for the differences).  When several patterns match, the first in file order wins (the docs do not
say; a topic matching none is refused by the Store).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lxml import etree

from umcore.config import xmlfile
from umcore.config.daemonmon import read_daemon_monitor
from umcore.config.flatfile import Setting, make_setting
from umcore.config.values import (
    BOOL,
    INTERFACE,
    BadValue,
    Enum,
    Int,
    Interface,
    Str,
    ValueType,
)
from umcore.config.xmlfile import line_of
from umcore.errors import ConfigError

__all__ = [
    "SCHEMA",
    "STORE_OPTIONS",
    "TOPIC_OPTIONS",
    "StoreDaemon",
    "StoreFile",
    "StoreInstance",
    "StoreTopic",
    "load",
    "load_text",
]

SCHEMA = "umestored.dtd"
_U31 = Int(0, 2**31 - 1)
_U64 = Int(0, 2**64 - 1)
_PATH = Str(230)
_STORE_NAME = Str(128, re.compile(r"^[A-Za-z0-9_-]+$"), "[A-Za-z0-9_-]")

# name -> (type, default text, meaning): Store-instance options (persistence-store.md 2.4).
STORE_OPTIONS: dict[str, tuple[ValueType, str, str]] = {
    "disk-cache-directory": (_PATH, "umestored-cache", "message cache directory (must exist)"),
    "disk-state-directory": (_PATH, "umestored-state", "state directory (must exist)"),
    "allow-proxy-source": (BOOL, "0", "the Store may act as proxy source"),
    "proxy-source-repo-quorum-required": (BOOL, "0", "proxy election algorithm 2"),
    "context-name": (_STORE_NAME, "", "Store name for ume_store_name; unique network-wide"),
    "retransmission-request-processing-rate": (
        _U31,
        "262144",
        "retransmission requests per second across the instance",
    ),
}

# name -> (type, default text, meaning): repository options (persistence-store.md 2.5).
TOPIC_OPTIONS: dict[str, tuple[ValueType, str, str]] = {
    "repository-type": (
        Enum("memory", "disk", "reduced-fd", "no-cache"),
        "memory",
        "repository kind",
    ),
    "repository-size-threshold": (_U64, "1024", "memory cache floor, bytes"),
    "repository-size-limit": (_U64, "50331648", "memory cache ceiling, bytes"),
    "repository-age-threshold": (_U64, "0", "seconds before a message may leave memory; 0 off"),
    "repository-disk-file-size-limit": (
        Int(196992, 2**64 - 1),
        "104857600",
        "disk bytes per repository",
    ),
    "repository-disk-file-preallocate": (BOOL, "0", "create the cache file at full size"),
    "repository-disk-async-buffer-length": (
        Int(65664, 2**64 - 1),
        "1024000",
        "async I/O buffer, bytes",
    ),
    "repository-disk-max-read-async-cbs": (_U31, "10000", "outstanding async reads"),
    "repository-disk-max-async-cbs": (_U31, "10000", "alias of the read limit"),
    "repository-disk-max-write-async-cbs": (_U31, "1", "deprecated; must be 1"),
    "repository-disk-message-checksum": (BOOL, "0", "checksum per message, verified on restart"),
    "repository-disk-write-delay": (_U31, "0", "RPP: ms before writing to disk"),
    "repository-allow-receiver-paced-persistence": (BOOL, "0", "permit RPP"),
    "repository-allow-ack-on-reception": (BOOL, "0", "permit RPP ack-on-reception"),
    "source-flight-size-bytes-maximum": (_U64, "4194304", "RPP max ume_flight_size_bytes"),
    "source-activity-timeout": (_U31, "30000", "ms of source silence before inactive"),
    "source-state-lifetime": (_U31, "0", "ms before source state is deleted; 0 off"),
    "receiver-activity-timeout": (_U31, "30000", "ms of receiver silence before inactive"),
    "receiver-state-lifetime": (_U31, "0", "ms before receiver state is deleted; 0 off"),
    "source-check-interval": (_U31, "750", "activity check period, ms"),
    "keepalive-interval": (_U31, "3000", "Store keepalive period when idle, ms"),
    "receiver-new-registration-rollback": (
        Int(1, 2**31 - 1),
        "2147483647",
        "max messages a new receiver recovers",
    ),
    "proxy-election-interval": (_U31, "60000", "base of the random proxy election wait, ms"),
    "retransmission-request-forwarding": (BOOL, "0", "forward requests for missing data"),
    "stability-ack-interval": (_U31, "200", "max batching delay of stability ACKs, ms"),
    "stability-ack-minimum-number": (Int(1, 2**31 - 1), "1", "fragments per stability ACK"),
    # pyum-only, NOT one of UM's options: 1 = fdatasync a disk repository's writes before they
    # count as stable (power-loss safety).  UM's "stable" is "the operating system accepted the
    # write" (survives the Store being killed, not a power cut): that is the default, 0.
    # Documented in docs/store-format.md.
    "pyum-repository-disk-fdatasync": (BOOL, "0", "pyum only: fdatasync before the ACK"),
}


def _defaults(table: dict[str, tuple[ValueType, str, str]]) -> dict[str, Any]:
    return {name: t.parse(d) for name, (t, d, _) in table.items()}


@dataclass
class RestoreLast:
    behavior: str = "hours"
    value: int = 0  # hours, 0..336; 0 = disabled


@dataclass
class StoreTopic:
    pattern: str
    type: str = "direct"
    restore_last: RestoreLast | None = None  # None = the store's setting applies
    options: dict[str, Any] = field(default_factory=lambda: _defaults(TOPIC_OPTIONS))
    lbm_receiver: list[Setting] = field(default_factory=list)
    lbm_source: list[Setting] = field(default_factory=list)
    line: int | None = None
    regex: re.Pattern[str] | None = None

    def matches(self, topic: str) -> bool:
        if self.regex is None:
            return topic == self.pattern
        return self.regex.search(topic) is not None


@dataclass
class StoreInstance:
    name: str
    port: int
    interface: Interface = field(default_factory=lambda: INTERFACE.parse("0.0.0.0"))
    restore_last: RestoreLast = field(default_factory=RestoreLast)
    publishing_interval: dict[str, int] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=lambda: _defaults(STORE_OPTIONS))
    lbm_context: list[Setting] = field(default_factory=list)
    topics: list[StoreTopic] = field(default_factory=list)

    def match(self, topic: str) -> StoreTopic | None:
        """The first ``<topic>`` whose pattern matches ``topic`` (None: the Store refuses it)."""
        return next((t for t in self.topics if t.matches(topic)), None)


@dataclass
class StoreDaemon:
    log_type: str = "console"
    log_file: str | None = None
    log_frequency: str = "disable"
    log_size: int = 10  # MiB; 0 = no size-based rolling
    uid: str | None = None
    gid: str | None = None
    pidfile: str | None = None
    lbm_config: str | None = None
    xml_config: str | None = None
    xml_config_application: str = "umestored"
    lbm_license_file: str | None = None
    web_monitor: str | None = None  # "Address:Port", "*" = any; None = off
    daemon_monitor: bool = False
    daemon_monitor_topic: str = "umestore.monitor"
    daemon_monitor_lbm_config: str | None = None
    daemon_monitor_intervals: dict[str, int] = field(default_factory=dict)
    remote_snapshot_request: bool = False
    remote_config_changes_request: bool = False


@dataclass
class StoreFile:
    source: str
    version: str
    daemon: StoreDaemon
    stores: list[StoreInstance]


def load(path: str | Path) -> StoreFile:
    """Validate and read a Store configuration file; ConfigError (file, line, element) if bad."""
    return _Builder(str(path)).build(xmlfile.load(path, SCHEMA))


def load_text(text: str | bytes, source: str = "<store XML>") -> StoreFile:
    data = text.encode("utf-8") if isinstance(text, str) else text
    tree = xmlfile.parse_text(data, source)
    xmlfile.validate(tree, SCHEMA, source)
    return _Builder(source).build(tree)


def _text(el: etree._Element) -> str:
    return (el.text or "").strip()


class _Builder:
    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, el: etree._Element, message: str, allowed: str | None = None) -> ConfigError:
        return ConfigError(
            message, source=self.source, line=line_of(el), what=f"<{el.tag}>", allowed=allowed
        )

    def int_attr(self, el: etree._Element, name: str, low: int, high: int, default: str) -> int:
        text = el.get(name, default)
        try:
            return Int(low, high).parse(text)
        except BadValue as exc:
            raise self.error(el, f"{name}={text!r}: {exc}", f"integers {low}..{high}") from None

    def build(self, tree: etree._ElementTree) -> StoreFile:
        root = tree.getroot()
        daemon = self.daemon(next(root.iterchildren("daemon")))
        stores: list[StoreInstance] = []
        names: set[str] = set()
        for stores_el in root.iterchildren("stores"):
            for el in stores_el.iterchildren("store"):
                store = self.store(el)
                if store.name in names:
                    raise self.error(el, f"duplicate store name {store.name!r}")
                names.add(store.name)
                stores.append(store)
        return StoreFile(self.source, root.get("version", ""), daemon, stores)

    def daemon(self, el: etree._Element) -> StoreDaemon:
        d = StoreDaemon()
        for child in el:
            tag = child.tag
            if tag == "log":
                d.log_type = child.get("type", "console")
                d.log_frequency = child.get("frequency", "disable")
                d.log_size = self.int_attr(child, "size", 0, 2**31 - 1, "10")
                d.log_file = _text(child) or None
            elif tag == "xml-config":
                d.xml_config = xmlfile.text_of(child, self.source)
                d.xml_config_application = child.get("application-name", "umestored")
            elif tag == "daemon-monitor":
                read_daemon_monitor(
                    d,
                    child,
                    default_topic="umestore.monitor",
                    source=self.source,
                    groups=self.groups,
                )
            elif isinstance(tag, str):
                setattr(d, tag.replace("-", "_"), xmlfile.text_of(child, self.source))
        return d

    def groups(self, el: etree._Element) -> dict[str, int]:
        return {
            str(g.get("name")): self.int_attr(g, "ivl", 0, 2**31 - 1, "0")
            for g in el.iterchildren("group")
        }

    def restore_last(self, el: etree._Element) -> RestoreLast:
        return RestoreLast(el.get("behavior", "hours"), self.int_attr(el, "value", 0, 336, "0"))

    def store(self, el: etree._Element) -> StoreInstance:
        name = el.get("name", "")
        if not name:
            raise self.error(el, "a <store> needs a non-empty name")
        port = self.int_attr(el, "port", 0, 65535, "0")
        try:
            interface = INTERFACE.parse(el.get("interface", "0.0.0.0"))
        except BadValue as exc:
            raise self.error(el, f"interface: {exc}", INTERFACE.allowed()) from None
        store = StoreInstance(name, port, interface)
        for child in el:
            if child.tag == "restore-last":
                store.restore_last = self.restore_last(child)
            elif child.tag == "publishing-interval":
                store.publishing_interval = self.groups(child)
            elif child.tag == "ume-attributes":
                for opt in child.iterchildren("option"):
                    kind = opt.get("type")
                    if kind == "store":
                        self.option(opt, STORE_OPTIONS, store.options)
                    elif kind == "lbm-context":
                        store.lbm_context.append(self.lbm(opt, "context"))
                    else:
                        raise self.error(
                            opt,
                            f'type="{kind}" is not usable at store level',
                            "store | lbm-context",
                        )
            elif child.tag == "topics":
                for t in child.iterchildren("topic"):
                    store.topics.append(self.topic(t))
        return store

    def topic(self, el: etree._Element) -> StoreTopic:
        pattern = el.get("pattern", "")
        kind = el.get("type", "direct")
        topic = StoreTopic(pattern, kind, line=line_of(el))
        if kind != "direct":
            try:
                topic.regex = re.compile(pattern)
            except re.error as exc:
                raise self.error(el, f"pattern {pattern!r} does not compile: {exc}") from None
        for child in el:
            if child.tag == "restore-last":
                topic.restore_last = self.restore_last(child)
            elif child.tag == "ume-attributes":
                for opt in child.iterchildren("option"):
                    otype = opt.get("type")
                    if otype == "store":
                        self.option(opt, TOPIC_OPTIONS, topic.options)
                    elif otype == "lbm-receiver":
                        topic.lbm_receiver.append(self.lbm(opt, "receiver"))
                    elif otype == "lbm-source":
                        topic.lbm_source.append(self.lbm(opt, "source"))
                    else:
                        raise self.error(
                            opt,
                            f'type="{otype}" is not usable at topic level',
                            "store | lbm-receiver | lbm-source",
                        )
        return topic

    def option(
        self,
        el: etree._Element,
        table: dict[str, tuple[ValueType, str, str]],
        into: dict[str, Any],
    ) -> None:
        name, text = el.get("name", ""), el.get("value", "")
        entry = table.get(name) or table.get(name.lower())
        if entry is None:
            close = difflib.get_close_matches(name.lower(), table, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ConfigError(
                f"unknown store option {name!r}{hint}",
                source=self.source,
                line=line_of(el),
                what=f"<option name={name!r}>",
            )
        vtype = entry[0]
        try:
            into[name.lower()] = vtype.parse(text)
        except BadValue as exc:
            raise ConfigError(
                str(exc),
                source=self.source,
                line=line_of(el),
                what=f"store option {name}",
                allowed=vtype.allowed(),
            ) from None

    def lbm(self, el: etree._Element, scope: str) -> Setting:
        return make_setting(
            scope, el.get("name", ""), el.get("value", ""), self.source, line_of(el), (scope,)
        )
