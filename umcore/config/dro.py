"""The DRO daemon's configuration file (``<tnw-gateway>``, tnwgd): load and validate.

Theory of operation
-------------------
The DRO (Dynamic Routing Option) reads one XML file checked against a DTD
(``schemas/tnwgd.dtd``, printed by ``tnwgd -d``).  Element order matters (DTD sequences).
:func:`load` validates the file and returns a :class:`DROConfig`: the ``<daemon>`` settings and
the list of portals (:class:`Endpoint` or :class:`Peer`), with every element's documented default
filled in and every number typed.  Attribute-only elements map onto small dataclasses whose field
names are the attribute names with ``-`` turned into ``_`` and whose defaults are the documented
ones (notes A10); :func:`_fill` reads them generically and reports bad numbers with file, line and
element.  Deprecated and eliminated elements (``topic-purge``, ``*-interest-generate``,
``*-domain-activity``, ``*-use-check``, ``late-join``, ``propagation-delay``, ``tcp``/
``companion``) parse and are ignored.

Each portal's ``<lbm-attributes>`` options are checked against the option registry and kept as
settings; :meth:`DROConfig.portal_attributes` builds a portal context's attributes the way the DRO
does: current defaults → ``<lbm-config>`` file → ``<lbm-attributes>`` → the ``<xml-config>``
defaults for the context's name, which are applied last (``<lbm-attributes>`` do not override
``<xml-config>`` defaults).  The XML application is ``tnwgd`` unless told otherwise (the docs do
not say which one the DRO uses).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lxml import etree

from umcore.config import xmlfile
from umcore.config.attributes import Attributes, Configuration
from umcore.config.daemonmon import read_daemon_monitor
from umcore.config.flatfile import Setting, make_setting, parse_file
from umcore.config.umxml import UMXml
from umcore.config.xmlfile import line_of
from umcore.errors import ConfigError

__all__ = ["SCHEMA", "DROConfig", "DROdaemon", "Endpoint", "Peer", "load", "load_text"]

SCHEMA = "tnwgd.dtd"
DEFAULT_XML_APPLICATION = "tnwgd"


@dataclass
class RateLimit:
    bps: int = 500000
    objects_per_second: int = 500


@dataclass
class UseQuery:
    timeout: int = 3000
    max: int = 5
    periodic_interval: int = 300000
    rate_limit: RateLimit = field(default_factory=RateLimit)


@dataclass
class Interest:
    min_interval: int = 1000
    max_interval: int = 60000
    rate_limit: RateLimit = field(default_factory=lambda: RateLimit(500000, 0))


@dataclass
class DomainRoute:
    min_interval: int = 100
    max_interval: int = 1000
    rate_limit: RateLimit = field(default_factory=lambda: RateLimit(0, 50))


@dataclass
class InitialRequest:
    periodic_interval: int = 1000
    duration: int = 10


@dataclass
class TopicResolution:
    topic_use_query: UseQuery = field(default_factory=UseQuery)
    pattern_use_query: UseQuery = field(default_factory=UseQuery)
    remote_topic_interest: Interest = field(default_factory=Interest)
    remote_pattern_interest: Interest = field(default_factory=Interest)
    domain_route: DomainRoute = field(default_factory=DomainRoute)
    initial_request: InitialRequest = field(default_factory=InitialRequest)


@dataclass
class RemoteTopic:
    check_interval: int = 90000
    max_topics: int = 100
    timeout: int = 300000


@dataclass
class RemotePattern:
    check_interval: int = 90000
    max_patterns: int = 100
    timeout: int = 300000


@dataclass
class SqnWindow:
    size: int = 16384
    increment: int = 2048


@dataclass
class ContextQuery:
    periodic_interval: int = 300000
    max_contexts: int = 20
    interval: int = 200
    timeout: int = 900  # seconds


@dataclass
class GatewayKeepalive:
    idle: str = "yes"
    interval: int = 5000  # 0 = off
    timeout: int = 15000


@dataclass
class AceCondition:
    kind: str  # topic, pcre-pattern, regex-pattern, transport, source-ip, ...
    value: str
    comparison: str = "eq"


@dataclass
class Ace:
    match: str  # accept | reject
    conditions: list[AceCondition] = field(default_factory=list)
    line: int | None = None


@dataclass
class Acl:
    inbound: list[Ace] = field(default_factory=list)
    outbound: list[Ace] = field(default_factory=list)


@dataclass
class Tls:
    certificate: str = ""
    certificate_key: str = ""
    certificate_key_password: str | None = None
    trusted_certificates: str | None = None
    cipher_suites: str | None = None


@dataclass
class SingleTcp:
    interface: str | None = None
    receive_buffer: int = 0  # 0 = autotune
    send_buffer: int = 0
    keepalive: bool = False
    nodelay: bool = False
    compression: str | None = None
    tls: Tls | None = None
    role: str = "acceptor"  # initiator | acceptor
    address: str | None = None  # initiator: the acceptor's address
    port: int | None = None  # initiator: acceptor's port; acceptor: listen port
    reconnect_interval: int = 5000


@dataclass
class TransmissionWindow:
    size: int = 25165824
    limit: int = 0


@dataclass
class PeerRateLimit:
    data: int = 10000000
    retransmit: int = 5000000
    interval: int = 100


@dataclass
class NakHandling:
    initial_backoff_interval: int = 0
    backoff_interval: int = 200
    suppress_interval: int = 1000
    generation_interval: int = 10000
    send_naks: str = "yes"
    ignore_interval: int = 100


@dataclass
class SessionMessage:
    min_interval: int = 200
    max_interval: int = 10000
    activity_timeout: int = 60000


@dataclass
class Connect:
    attempt_interval: int = 200
    max_attempts: int = 10


@dataclass
class Udp:
    port: int = 0
    receive_buffer: int = 8388608
    send_buffer: int = 1048576
    multiple_receive_max_datagrams: int = 0
    coalesce_threshold: int = 15
    transmission_window: TransmissionWindow = field(default_factory=TransmissionWindow)
    peer_rate_limit: PeerRateLimit = field(default_factory=PeerRateLimit)
    nak_handling: NakHandling = field(default_factory=NakHandling)
    session_message: SessionMessage = field(default_factory=SessionMessage)
    connect: Connect = field(default_factory=Connect)


@dataclass
class Portal:
    name: str = ""
    cost: int = 1
    source_deletion_delay: int = 1000
    max_queue: int = 1000000
    smart_batch: int = 0
    lbm_config: str | None = None
    lbm_attributes: list[Setting] = field(default_factory=list)
    acl: Acl | None = None
    source_context_name: str | None = None
    receiver_context_name: str | None = None
    sqn_window: SqnWindow = field(default_factory=SqnWindow)
    context_query: ContextQuery = field(default_factory=ContextQuery)
    publishing_interval: dict[str, int] = field(default_factory=dict)
    line: int | None = None


@dataclass
class Endpoint(Portal):
    domain_id: int = 0
    hotlink_index: int = 0
    topic_resolution: TopicResolution = field(default_factory=TopicResolution)
    remote_topic: RemoteTopic = field(default_factory=RemoteTopic)
    remote_pattern: RemotePattern = field(default_factory=RemotePattern)


@dataclass
class Batching:
    min_length: int = 8192
    batch_interval: int = 200


@dataclass
class Peer(Portal):
    sourcemap_size: int = 131072
    single_tcp: SingleTcp = field(default_factory=SingleTcp)
    udp: Udp | None = None
    max_datagram: int = 65500
    batching: Batching = field(default_factory=Batching)
    batching_configured: bool = False  # <batching> present: without it the link does not batch
    gateway_keepalive: GatewayKeepalive = field(default_factory=GatewayKeepalive)


@dataclass
class MapTuning:
    hash_function: str = "murmur2"
    size: int = 131111


@dataclass
class RouteInfo:
    propagation_interval: int = 1000
    check_interval: int = 750
    timeout: int = 4000
    max_hop_count: int = 100


@dataclass
class RouteRecalculation:
    backoff_interval: int = 5000
    warning_interval: int = 10000


@dataclass
class DROdaemon:
    name: str | None = None
    log_type: str = "console"
    log_file: str | None = None
    log_frequency: str = "disable"
    log_size: int = 0  # millions of bytes; 0 = no size rolling
    uid: str | None = None
    gid: str | None = None
    pidfile: str | None = None
    lbm_license_file: str | None = None
    topicmap: MapTuning = field(default_factory=MapTuning)
    patternmap: MapTuning = field(default_factory=MapTuning)
    monitor_interval: int = 0  # seconds; 0 = off
    monitor_transport: str = "lbm"
    monitor_transport_options: str | None = None
    monitor_format: str = "csv"
    monitor_format_options: str | None = None
    web_monitor: str | None = None
    daemon_monitor: bool = False
    daemon_monitor_topic: str = "tnwgd.monitor"
    daemon_monitor_lbm_config: str | None = None
    daemon_monitor_intervals: dict[str, int] = field(default_factory=dict)
    remote_snapshot_request: bool = False
    remote_config_changes_request: bool = False
    xml_config: str | None = None
    route_info: RouteInfo = field(default_factory=RouteInfo)
    route_recalculation: RouteRecalculation = field(default_factory=RouteRecalculation)


@dataclass
class DROConfig:
    source: str
    version: str
    daemon: DROdaemon
    portals: list[Endpoint | Peer]

    @property
    def endpoints(self) -> list[Endpoint]:
        return [p for p in self.portals if isinstance(p, Endpoint)]

    @property
    def peers(self) -> list[Peer]:
        return [p for p in self.portals if isinstance(p, Peer)]

    def portal(self, name: str) -> Endpoint | Peer:
        for p in self.portals:
            if p.name == name:
                return p
        raise KeyError(name)

    def xml_table(self, base: Path | None = None) -> UMXml | None:
        """The ``<xml-config>`` file, loaded (paths relative to ``base`` when given)."""
        if self.daemon.xml_config is None:
            return None
        path = Path(self.daemon.xml_config)
        if base is not None and not path.is_absolute():
            path = base / path
        return UMXml.load(path)

    def portal_attributes(
        self,
        portal: Portal,
        scope: str = "context",
        *,
        xml: UMXml | None = None,
        application: str = DEFAULT_XML_APPLICATION,
        base: Path | None = None,
        role: str | None = None,
    ) -> Attributes:
        """A portal's attributes: lbm-config file, lbm-attributes, then XML defaults for the
        context name (``role`` "source"/"receiver" picks source-/receiver-context-name)."""
        cfg = Configuration()
        if portal.lbm_config:
            path = Path(portal.lbm_config)
            if base is not None and not path.is_absolute():
                path = base / path
            cfg.apply(parse_file(path))
        attrs = cfg.attributes(scope)
        attrs.apply_settings(portal.lbm_attributes)
        if xml is not None:
            app = xml.application(application)
            name: str | None = None
            if scope == "context":
                if role == "source" and portal.source_context_name:
                    name = portal.source_context_name
                elif role == "receiver" and portal.receiver_context_name:
                    name = portal.receiver_context_name
                else:
                    name = attrs.get_typed("context_name") or None
            attrs.apply_xml(app, name, context_name=None, skip_tagged=False)
        return attrs


def load(path: str | Path) -> DROConfig:
    """Validate and read a DRO configuration file; ConfigError (file, line, element) if bad."""
    return _Builder(str(path)).build(xmlfile.load(path, SCHEMA))


def load_text(text: str | bytes, source: str = "<DRO XML>") -> DROConfig:
    data = text.encode("utf-8") if isinstance(text, str) else text
    tree = xmlfile.parse_text(data, source)
    xmlfile.validate(tree, SCHEMA, source)
    return _Builder(source).build(tree)


# Bound for every DRO integer: all are counts, bytes or milliseconds of 32-bit or 64-bit fields.
MAX_DRO_INT = 2**63 - 1
_PORTAL_TEXT_INTS = {
    "cost": (1, MAX_DRO_INT),
    "hotlink-index": (0, 65535),
    "source-deletion-delay": (0, MAX_DRO_INT),
    "max-queue": (0, MAX_DRO_INT),
    "smart-batch": (0, 1),
    "max-datagram": (1, 65500),
    "domain-id": (0, 2**32 - 1),
}
_DEPRECATED = {
    "late-join",
    "topic-purge",
    "pattern-purge",
    "topic-interest-generate",
    "pattern-interest-generate",
    "topic-domain-activity",
    "pattern-domain-activity",
    "topic-use-check",
    "pattern-use-check",
    "propagation-delay",
}


class _Builder:
    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, el: etree._Element, message: str, allowed: str | None = None) -> ConfigError:
        return ConfigError(
            message, source=self.source, line=line_of(el), what=f"<{el.tag}>", allowed=allowed
        )

    def fill(self, obj: Any, el: etree._Element) -> Any:
        """Set dataclass fields from an element's attributes (``a-b`` -> ``a_b``)."""
        fields = {f.name: f for f in dataclasses.fields(obj)}
        for raw_key, text in el.attrib.items():
            key = str(raw_key)
            name = key.replace("-", "_")
            if name not in fields:
                continue
            current = getattr(obj, name)
            if isinstance(current, bool) or not isinstance(current, int):
                setattr(obj, name, text)
                continue
            try:
                value = int(text.strip(), 10)
            except ValueError:
                raise self.error(el, f"{key}={text!r} is not an integer", "integers") from None
            if value < 0 or value > MAX_DRO_INT:
                raise self.error(el, f"{key}={value} is out of range", f"integers 0..{MAX_DRO_INT}")
            setattr(obj, name, value)
        return obj

    def int_text(self, el: etree._Element, low: int = 0, high: int = MAX_DRO_INT) -> int:
        return xmlfile.int_of(el, self.source, low=low, high=high)

    def build(self, tree: etree._ElementTree) -> DROConfig:
        root = tree.getroot()
        daemon_el = next(root.iterchildren("daemon"), None)
        daemon = self.daemon(daemon_el) if daemon_el is not None else DROdaemon()
        portals: list[Endpoint | Peer] = []
        names: set[str] = set()
        for portal_el in next(root.iterchildren("portals")):
            if not isinstance(portal_el.tag, str):
                continue
            portal = self.portal(portal_el)
            if portal.name in names:
                raise self.error(portal_el, f"duplicate portal name {portal.name!r}")
            names.add(portal.name)
            portals.append(portal)
        domains: dict[int, str] = {}
        for p in portals:
            if isinstance(p, Endpoint):
                if p.domain_id in domains:
                    raise ConfigError(
                        f"endpoints {domains[p.domain_id]!r} and {p.name!r} share domain-id "
                        f"{p.domain_id}; each endpoint of a DRO needs its own domain",
                        source=self.source,
                        line=p.line,
                        what="<domain-id>",
                    )
                domains[p.domain_id] = p.name
        return DROConfig(self.source, root.get("version", ""), daemon, portals)

    def daemon(self, el: etree._Element) -> DROdaemon:
        d = DROdaemon()
        for child in el:
            tag = child.tag
            if not isinstance(tag, str) or tag in _DEPRECATED:
                continue
            if tag == "log":
                d.log_type = child.get("type", "console")
                d.log_frequency = child.get("frequency", "disable")
                d.log_file = (child.text or "").strip() or None
                size = child.get("size", "0")
                if not size.isdigit() or int(size) > 4000:
                    raise self.error(
                        child, f"size={size!r}", "integers 0..4000 (millions of bytes)"
                    )
                d.log_size = int(size)
            elif tag in ("topicmap", "patternmap"):
                self.fill(getattr(d, tag), child)
            elif tag == "monitor":
                self.fill_monitor(d, child)
            elif tag == "daemon-monitor":
                read_daemon_monitor(
                    d, child, default_topic="tnwgd.monitor", source=self.source, groups=self.groups
                )
            elif tag == "route-info":
                self.fill(d.route_info, child)
            elif tag == "route-recalculation":
                self.fill(d.route_recalculation, child)
            else:
                setattr(d, tag.replace("-", "_"), xmlfile.text_of(child, self.source))
        return d

    def fill_monitor(self, d: DROdaemon, el: etree._Element) -> None:
        interval = el.get("interval", "0")
        if not interval.isdigit():
            raise self.error(el, f"interval={interval!r} is not an integer", "seconds, 0 = off")
        d.monitor_interval = int(interval)
        for sub in el:
            if sub.tag == "transport-module":
                d.monitor_transport = sub.get("module", "lbm")
                d.monitor_transport_options = sub.get("options")
            elif sub.tag == "format-module":
                d.monitor_format = sub.get("module", "csv")
                d.monitor_format_options = sub.get("options")

    def groups(self, el: etree._Element) -> dict[str, int]:
        out: dict[str, int] = {}
        for g in el.iterchildren("group"):
            ivl = g.get("ivl", "")
            if not ivl.isdigit():
                raise self.error(g, f"ivl={ivl!r} is not an integer", "seconds")
            out[str(g.get("name"))] = int(ivl)
        return out

    def portal(self, el: etree._Element) -> Endpoint | Peer:
        portal: Endpoint | Peer = (
            Endpoint(line=line_of(el)) if el.tag == "endpoint" else Peer(line=line_of(el))
        )
        for child in el:
            tag = child.tag
            if not isinstance(tag, str) or tag in _DEPRECATED:
                continue
            attr = tag.replace("-", "_")
            if tag == "name":
                portal.name = xmlfile.text_of(child, self.source)
            elif tag in _PORTAL_TEXT_INTS:
                low, high = _PORTAL_TEXT_INTS[tag]
                setattr(portal, attr, self.int_text(child, low, high))
            elif tag in ("lbm-config", "source-context-name", "receiver-context-name"):
                setattr(portal, attr, xmlfile.text_of(child, self.source))
            elif tag == "lbm-attributes":
                for opt in child.iterchildren("option"):
                    portal.lbm_attributes.append(
                        make_setting(
                            opt.get("scope", ""),
                            opt.get("name", ""),
                            opt.get("value", ""),
                            self.source,
                            line_of(opt),
                        )
                    )
            elif tag == "acl":
                portal.acl = self.acl(child)
            elif tag in (
                "sqn-window",
                "context-query",
                "remote-topic",
                "remote-pattern",
                "gateway-keepalive",
            ):
                self.fill(getattr(portal, attr), child)
            elif tag == "publishing-interval":
                portal.publishing_interval = self.groups(child)
            elif tag == "topic-resolution" and isinstance(portal, Endpoint):
                self.topic_resolution(portal.topic_resolution, child)
            elif tag == "sourcemap" and isinstance(portal, Peer):
                size = child.get("size", "131072")
                if not size.isdigit() or int(size) < 1 or int(size) & (int(size) - 1):
                    raise self.error(child, f"size={size!r}", "a power of two")
                portal.sourcemap_size = int(size)
            elif tag == "single-tcp" and isinstance(portal, Peer):
                portal.single_tcp = self.single_tcp(child)
            elif tag == "tcp" and isinstance(portal, Peer):
                raise self.error(
                    child, "the dual-TCP <tcp> peer link was removed in UM 6.10", "<single-tcp>"
                )
            elif tag == "udp" and isinstance(portal, Peer):
                portal.udp = self.udp(child)
            elif tag == "batching" and isinstance(portal, Peer):
                portal.batching_configured = True
                for sub in child:
                    if sub.tag == "min-length":
                        portal.batching.min_length = self.int_text(sub)
                    elif sub.tag == "batch-interval":
                        portal.batching.batch_interval = self.int_text(sub, 3)
        return portal

    def topic_resolution(self, tr: TopicResolution, el: etree._Element) -> None:
        for child in el:
            if not isinstance(child.tag, str):
                continue
            target = getattr(tr, str(child.tag).replace("-", "_"))
            self.fill(target, child)
            rate = next(child.iterchildren("rate-limit"), None)
            if rate is not None:
                self.fill(target.rate_limit, rate)

    def acl(self, el: etree._Element) -> Acl:
        acl = Acl()
        for direction in el:
            if direction.tag not in ("inbound", "outbound"):
                continue
            aces = acl.inbound if direction.tag == "inbound" else acl.outbound
            for ace_el in direction.iterchildren("ace"):
                ace = Ace(str(ace_el.get("match")), line=line_of(ace_el))
                for cond in ace_el:
                    if not isinstance(cond.tag, str):
                        continue
                    if cond.tag in ("topic", "pcre-pattern", "regex-pattern"):
                        value = xmlfile.text_of(cond, self.source)
                    else:
                        value = cond.get("value", "")
                    ace.conditions.append(
                        AceCondition(str(cond.tag), value, cond.get("comparison", "eq"))
                    )
                aces.append(ace)
        return acl

    def single_tcp(self, el: etree._Element) -> SingleTcp:
        st = SingleTcp()
        for child in el:
            tag = child.tag
            if tag == "interface":
                st.interface = xmlfile.text_of(child, self.source)
            elif tag in ("receive-buffer", "send-buffer"):
                setattr(st, str(tag).replace("-", "_"), self.int_text(child))
            elif tag in ("keepalive", "nodelay"):
                setattr(st, str(tag), True)
            elif tag == "compression":
                st.compression = (child.text or "LZ4").strip() or "LZ4"
            elif tag == "tls":
                tls = Tls()
                for sub in child:
                    if isinstance(sub.tag, str):
                        setattr(tls, sub.tag.replace("-", "_"), xmlfile.text_of(sub, self.source))
                st.tls = tls
            elif tag == "initiator":
                st.role = "initiator"
                self.fill(st, child)
                for sub in child:
                    if sub.tag == "address":
                        st.address = xmlfile.text_of(sub, self.source)
                    elif sub.tag == "port":
                        st.port = self.int_text(sub, 1, 65535)
            elif tag == "acceptor":
                st.role = "acceptor"
                st.port = self.int_text(next(child.iterchildren("listen-port")), 0, 65535)
        return st

    def udp(self, el: etree._Element) -> Udp:
        udp = Udp()
        for child in el:
            tag = child.tag
            if not isinstance(tag, str):
                continue
            attr = tag.replace("-", "_")
            if tag == "port":
                udp.port = self.int_text(child, 1, 65535)
            elif tag in (
                "receive-buffer",
                "send-buffer",
                "multiple-receive-max-datagrams",
                "coalesce-threshold",
            ):
                setattr(udp, attr, self.int_text(child))
            elif attr in ("transmission_window", "peer_rate_limit", "nak_handling",
                          "session_message", "connect"):  # fmt: skip
                self.fill(getattr(udp, attr), child)
        self.check_udp(udp, el)
        return udp

    def check_udp(self, udp: Udp, el: etree._Element) -> None:
        """What the UDP peer link cannot run with, refused with the element's line."""
        if not udp.port:
            raise self.error(el, "<udp> needs a <port> (the local and remote UDP port)", "1..65535")
        where = {str(c.tag): c for c in el if isinstance(c.tag, str)}

        def bad(tag: str, message: str, allowed: str) -> ConfigError:
            return self.error(where.get(tag, el), message, allowed)

        if udp.nak_handling.send_naks not in ("yes", "no"):
            raise bad("nak-handling", f"send-naks={udp.nak_handling.send_naks!r}", "yes, no")
        if udp.connect.max_attempts < 1 or udp.connect.attempt_interval < 1:
            raise bad(
                "connect",
                f"max-attempts={udp.connect.max_attempts} "
                f"attempt-interval={udp.connect.attempt_interval}",
                "max-attempts >= 1 and attempt-interval >= 1 (ms)",
            )
        if udp.peer_rate_limit.interval < 1:
            raise bad("peer-rate-limit", "interval=0", "a rate interval >= 1 (ms)")
        sm = udp.session_message
        if not 0 < sm.min_interval <= sm.max_interval < sm.activity_timeout:
            raise bad(
                "session-message",
                f"min-interval={sm.min_interval} max-interval={sm.max_interval} "
                f"activity-timeout={sm.activity_timeout}",
                "0 < min-interval <= max-interval < activity-timeout (ms)",
            )
