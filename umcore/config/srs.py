"""The SRS configuration file (``<um-srs>``): load, validate against our XSD, dump defaults.

Theory of operation
-------------------
The SRS (Stateful Resolver Service, UM's TCP-based topic resolution daemon) reads one XML file
checked against an XSD (``schemas/srs.xsd``, printed by ``SRS -x``): containers take their
children in any order, each at most once.  :func:`load` validates the file and returns an
:class:`SRSConfig` holding every element's effective value — the documented default when the
element is absent.  Derived defaults follow the notes: ``source-state-lifetime`` and
``interest-state-lifetime`` default to ``state-lifetime`` (86400 s when that is unset); every
per-category publishing interval defaults to ``<default>`` (itself 0 = off), including
``internal-config-opts`` (observed behaviour, not the documented 10); the debug monitor's ping
interval is overridden by the daemon monitor's.

``<daemon-monitor><lbm-attributes>`` options (scopes context, source, receiver) are checked
against the option registry at load time and kept as :class:`~umcore.config.flatfile.Setting`
values; :meth:`SRSConfig.monitor_attributes` turns them into attribute objects for the
monitoring context.  :func:`dump` renders an effective configuration as ``<um-srs>`` XML — what
``SRS -d`` prints; its output validates against the same XSD.

``<srs><pyum-limits>`` is a pyum extension (UM's schema has no place for these bounds): the
SRS's connection, client and source tables, per-client and per-host source quotas, bytes
buffered for incomplete frames, and three timeouts (ms).  Absent elements take the core's
named constants (:mod:`umcore.srs.common`); :data:`LIMITS` lists them.  ``-d`` prints them.

Discrepancies we follow the XSD on: ``<log size>`` must be >= 1 (prose says 0 disables);
``ping-interval`` must be >= 100 (prose says 0 disables).  Log size is in MiB (2^20 bytes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from lxml import etree

from umcore.config import xmlfile
from umcore.config.attributes import ATTRIBUTE_CLASSES, Attributes, Configuration
from umcore.config.flatfile import Setting, make_setting
from umcore.config.xmlfile import line_of

__all__ = ["LIMITS", "SCHEMA", "SRSConfig", "SRSLimits", "dump", "load", "load_text", "xsd_text"]

SCHEMA = "srs.xsd"
MONITOR_SCOPES = ("context", "source", "receiver")
DEFAULT_STATE_LIFETIME = 86400
PUBLISH_CATEGORIES = (
    "srs-stats",
    "um-client-stats",
    "connection-events",
    "srs-error-stats",
    "um-client-error-stats",
    "config-opts",
    "internal-config-opts",
)


@dataclass
class SRSLog:
    type: str = "console"
    file: str = ""
    frequency: str = "disable"
    size: int = 10  # MiB
    max_history: int = 10
    total_size_cap: int = 1000  # MiB
    compression: str = "none"


@dataclass
class SRSLimits:
    """``<srs><pyum-limits>`` (pyum extension).  The defaults repeat the core's named constants
    (umcore.srs.common, where each is explained; config may not import the cores);
    tests/srs/test_hardening.py checks that they agree."""

    max_connections: int = 10_000
    max_clients: int = 10_000
    max_sources: int = 1_000_000
    max_sources_per_client: int = 100_000
    max_sources_per_host: int = 200_000
    max_buffered_bytes: int = 64 << 20
    frame_timeout: int = 10_000  # ms
    registration_timeout: int = 10_000  # ms
    max_silence: int = 120_000  # ms


#: The child elements of ``<pyum-limits>``, in the order ``-d`` prints them.
LIMITS = (
    "max-connections",
    "max-clients",
    "max-sources",
    "max-sources-per-client",
    "max-sources-per-host",
    "max-buffered-bytes",
    "frame-timeout",
    "registration-timeout",
    "max-silence",
)


@dataclass
class SRSConfig:
    """Every SRS setting, effective (defaults filled in)."""

    source: str = "<defaults>"
    version: str = "1.0"
    log: SRSLog = field(default_factory=SRSLog)
    pid_file: str | None = None
    interface: str = "localhost"
    port: int = 27000
    state_lifetime: int | None = None  # unset unless configured (the SRS reports it empty)
    source_state_lifetime: int = DEFAULT_STATE_LIFETIME
    interest_state_lifetime: int = DEFAULT_STATE_LIFETIME
    route_state_lifetime: int = 30
    context_name_state_lifetime: int = 86400
    source_leave_backoff: int = 500
    otidmap_shards: int = 4
    topicmap_shards: int = 4
    routemap_shards: int = 4
    namemap_shards: int = 4
    request_stream_max_msg_count: int = 1000
    record_queue_service_interval: int = 10
    batch_frame_max_record_count: int = 50
    batch_frame_max_datagram_size: int = 8192
    application_id: str | None = None
    limits: SRSLimits = field(default_factory=SRSLimits)  # <pyum-limits> (pyum extension)
    debug_monitor_interface: str = "localhost"
    # observed; the docs say 27000, which would collide.  0 = an ephemeral port (pyum; the
    # SRS logs the bound address: "debug monitor on http://HOST:PORT/")
    debug_monitor_port: int = 27001
    debug_monitor_enabled: bool = False
    ping_interval: int = 60000
    daemon_monitor: bool = False  # a <daemon-monitor> element is present
    monitor_topic: str | None = None  # without it nothing is published
    publishing_default: int = 0
    publishing: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PUBLISH_CATEGORIES, 0))
    lbm_attributes: list[Setting] = field(default_factory=list)
    publish_connection_events: bool = False
    remote_snapshot_request: bool = False
    remote_config_changes_request: bool = False
    monitor_format: str = "json"

    def monitor_attributes(self, scope: str, config: Configuration | None = None) -> Attributes:
        """Attributes for the monitoring context's objects: current defaults of ``config``
        (or factory defaults) with the ``<lbm-attributes>`` of that scope applied."""
        attrs = config.attributes(scope) if config else ATTRIBUTE_CLASSES[scope]()
        attrs.apply_settings(self.lbm_attributes)
        return attrs


def xsd_text() -> str:
    """The XSD ``SRS -x`` prints."""
    return xmlfile.schema_text(SCHEMA)


def load(path: str | Path) -> SRSConfig:
    """Validate and read an SRS configuration file; ConfigError (file, line, element) if bad."""
    return _build(xmlfile.load(path, SCHEMA), str(path))


def load_text(text: str | bytes, source: str = "<SRS XML>") -> SRSConfig:
    data = text.encode("utf-8") if isinstance(text, str) else text
    tree = xmlfile.parse_text(data, source)
    xmlfile.validate(tree, SCHEMA, source)
    return _build(tree, source)


def _int(el: etree._Element | None, tag: str, source: str, default: int) -> int:
    child = xmlfile.child(el, tag)
    return default if child is None else xmlfile.int_of(child, source)


def _text(el: etree._Element | None, tag: str, source: str, default: str | None) -> str | None:
    child = xmlfile.child(el, tag)
    return default if child is None else xmlfile.text_of(child, source)


def _build(tree: etree._ElementTree, source: str) -> SRSConfig:
    root = tree.getroot()
    cfg = SRSConfig(source=source, version=root.get("version", "1.0"))
    daemon = xmlfile.child(root, "daemon")
    log = xmlfile.child(daemon, "log")
    if log is not None:
        cfg.log = SRSLog(
            type=log.get("type", "console"),
            file=(log.text or "").strip(),
            frequency=log.get("frequency", "disable"),
            size=int(log.get("size", "10")),
            max_history=int(log.get("max-history", "10")),
            total_size_cap=int(log.get("total-size-cap", "1000")),
            compression=log.get("compression", "none"),
        )
    cfg.pid_file = _text(daemon, "pid-file", source, None)
    srs = xmlfile.child(root, "srs")
    cfg.interface = _text(srs, "interface", source, cfg.interface) or cfg.interface
    cfg.port = _int(srs, "port", source, cfg.port)
    if xmlfile.child(srs, "state-lifetime") is not None:
        cfg.state_lifetime = _int(srs, "state-lifetime", source, 0)
    base = DEFAULT_STATE_LIFETIME if cfg.state_lifetime is None else cfg.state_lifetime
    cfg.source_state_lifetime = _int(srs, "source-state-lifetime", source, base)
    cfg.interest_state_lifetime = _int(srs, "interest-state-lifetime", source, base)
    cfg.route_state_lifetime = _int(srs, "route-state-lifetime", source, cfg.route_state_lifetime)
    cfg.context_name_state_lifetime = _int(
        srs, "context-name-state-lifetime", source, cfg.context_name_state_lifetime
    )
    cfg.source_leave_backoff = _int(srs, "source-leave-backoff", source, cfg.source_leave_backoff)
    for m in ("otidmap", "topicmap", "routemap", "namemap"):
        attr = f"{m}_shards"
        setattr(cfg, attr, _int(xmlfile.child(srs, m), "shards", source, getattr(cfg, attr)))
    actor = xmlfile.child(srs, "clientactor")
    for tag in (
        "request-stream-max-msg-count",
        "record-queue-service-interval",
        "batch-frame-max-record-count",
        "batch-frame-max-datagram-size",
    ):
        attr = tag.replace("-", "_")
        setattr(cfg, attr, _int(actor, tag, source, getattr(cfg, attr)))
    cfg.application_id = _text(srs, "application-id", source, None)
    limits = xmlfile.child(srs, "pyum-limits")
    for tag in LIMITS:
        attr = tag.replace("-", "_")
        setattr(cfg.limits, attr, _int(limits, tag, source, getattr(cfg.limits, attr)))
    debug = xmlfile.child(root, "debug-monitor")
    cfg.debug_monitor_interface = (
        _text(debug, "interface", source, cfg.debug_monitor_interface) or "localhost"
    )
    cfg.debug_monitor_port = _int(debug, "port", source, cfg.debug_monitor_port)
    cfg.debug_monitor_enabled = _text(debug, "enabled", source, "false") == "true"
    cfg.ping_interval = _int(debug, "ping-interval", source, cfg.ping_interval)
    mon = xmlfile.child(root, "daemon-monitor")
    if mon is not None:
        cfg.daemon_monitor = True
        cfg.monitor_topic = mon.get("topic")
        # Only one ping interval exists: the daemon monitor's overrides the debug monitor's.
        cfg.ping_interval = _int(mon, "ping-interval", source, cfg.ping_interval)
        pub = xmlfile.child(mon, "publishing-interval")
        cfg.publishing_default = _int(pub, "default", source, 0)
        cfg.publishing = {
            c: _int(pub, c, source, cfg.publishing_default) for c in PUBLISH_CATEGORIES
        }
        attrs = xmlfile.child(mon, "lbm-attributes")
        if attrs is not None:
            for opt in attrs.iterchildren("option"):
                cfg.lbm_attributes.append(
                    make_setting(
                        opt.get("scope", ""),
                        opt.get("name", ""),
                        opt.get("value", ""),
                        source,
                        line_of(opt),
                        MONITOR_SCOPES,
                    )
                )
        for tag in (
            "publish-connection-events",
            "remote-snapshot-request",
            "remote-config-changes-request",
        ):
            el = xmlfile.child(mon, tag)
            setattr(cfg, tag.replace("-", "_"), el is not None and el.get("allow") == "true")
        cfg.monitor_format = _text(mon, "monitor-format", source, "json") or "json"
    return cfg


def dump(cfg: SRSConfig | None = None) -> str:
    """The effective configuration as ``<um-srs>`` XML (``SRS -d``); valid against the XSD."""
    c = cfg or SRSConfig()

    def el(tag: str, value: object, indent: int) -> str:
        return f"{' ' * indent}<{tag}>{escape(str(value))}</{tag}>"

    def tf(flag: bool) -> str:
        return "true" if flag else "false"

    lines = ['<?xml version="1.0" encoding="UTF-8" ?>', f"<um-srs version={quoteattr(c.version)}>"]
    lines.append("  <daemon>")
    log = c.log
    lines.append(
        f'    <log type="{log.type}" frequency="{log.frequency}" size="{log.size}" '
        f'max-history="{log.max_history}" total-size-cap="{log.total_size_cap}" '
        f'compression="{log.compression}">{escape(log.file)}</log>'
    )
    if c.pid_file:
        lines.append(el("pid-file", c.pid_file, 4))
    lines.append("  </daemon>")
    lines.append("  <srs>")
    lines.append(el("interface", c.interface, 4))
    lines.append(el("port", c.port, 4))
    if c.state_lifetime is not None:
        lines.append(el("state-lifetime", c.state_lifetime, 4))
    for tag in (
        "source-state-lifetime",
        "interest-state-lifetime",
        "route-state-lifetime",
        "context-name-state-lifetime",
        "source-leave-backoff",
    ):
        lines.append(el(tag, getattr(c, tag.replace("-", "_")), 4))
    for m in ("otidmap", "topicmap", "routemap", "namemap"):
        lines.append(f"    <{m}><shards>{getattr(c, f'{m}_shards')}</shards></{m}>")
    lines.append("    <clientactor>")
    for tag in (
        "request-stream-max-msg-count",
        "record-queue-service-interval",
        "batch-frame-max-record-count",
        "batch-frame-max-datagram-size",
    ):
        lines.append(el(tag, getattr(c, tag.replace("-", "_")), 6))
    lines.append("    </clientactor>")
    if c.application_id:
        lines.append(el("application-id", c.application_id, 4))
    lines.append("    <pyum-limits>")
    for tag in LIMITS:
        lines.append(el(tag, getattr(c.limits, tag.replace("-", "_")), 6))
    lines.append("    </pyum-limits>")
    lines.append("  </srs>")
    lines.append("  <debug-monitor>")
    lines.append(el("interface", c.debug_monitor_interface, 4))
    lines.append(el("port", c.debug_monitor_port, 4))
    lines.append(el("ping-interval", c.ping_interval, 4))
    lines.append(el("enabled", tf(c.debug_monitor_enabled), 4))
    lines.append("  </debug-monitor>")
    topic = f" topic={quoteattr(c.monitor_topic)}" if c.monitor_topic else ""
    lines.append(f"  <daemon-monitor{topic}>")
    lines.append(el("ping-interval", c.ping_interval, 4))
    lines.append("    <publishing-interval>")
    lines.append(el("default", c.publishing_default, 6))
    for cat in PUBLISH_CATEGORIES:
        lines.append(el(cat, c.publishing[cat], 6))
    lines.append("    </publishing-interval>")
    if c.lbm_attributes:
        lines.append("    <lbm-attributes>")
        for s in sorted(c.lbm_attributes, key=lambda s: (s.scope, s.name)):
            lines.append(
                f"      <option scope={quoteattr(s.scope)} name={quoteattr(s.name)} "
                f"value={quoteattr(s.text)}/>"
            )
        lines.append("    </lbm-attributes>")
    for tag in (
        "publish-connection-events",
        "remote-snapshot-request",
        "remote-config-changes-request",
    ):
        lines.append(f'    <{tag} allow="{tf(getattr(c, tag.replace("-", "_")))}"/>')
    lines.append(el("monitor-format", c.monitor_format, 4))
    lines.append("  </daemon-monitor>")
    lines.append("</um-srs>")
    return "\n".join(lines) + "\n"
