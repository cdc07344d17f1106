"""lbmrd's XML configuration file, loaded into a typed :class:`LbmrdConfig`.

Theory of operation
-------------------
The file (seed 003 chapter 16; notes seed-srs-lbmrd.md 2.3) is validated against our DTD
``schemas/lbmrd.dtd`` (the one ``lbmrd -d`` prints), which already enforces the structure: the
root ``<lbmrd version="1.0">``, the mandatory ``<domains>`` and ``<transformations>``, unique
domain names (XML IDs), transform endpoints naming existing domains (IDREFs), ``<match>`` before
``<replace>``.  This module then checks what a DTD cannot: integers and their ranges, each
``<daemon>`` setting given at most once, networks and addresses that parse, ports that are ``*``
or a number.  Every failure is one :class:`~umcore.errors.ConfigError` naming file, line and
element, so the daemon prints one line and exits 1 before binding anything.

Units: ``<activity>`` and ``<ttl>`` are milliseconds in the file, while the ``-t`` option is in
seconds (a trap the seed sets: trap 21 in our notes).  The config stores both in ms; a ``<ttl>``
below 1000 is accepted but produces a warning, since it most likely meant seconds.

Precedence: a value given on the command line overrides the file (:func:`apply_command_line`);
the seed does not say, this is our decision, and it is what every other UM daemon does.

``<network>`` accepts the seed's abbreviated dotted forms (``192.168.1/24``): missing octets are
zeros.  DNS names are refused there.  ``<interface>`` is kept as written; it names something on
*this* host (an IP, a CIDR network to match local interfaces against, a device name, a host name)
and is resolved by the daemon at start-up (umcore.daemon.interfaces), not by ``-v``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path

from lxml import etree

from umcore.config import xmlfile
from umcore.errors import ConfigError

__all__ = [
    "DEFAULT_ACTIVITY_MS",
    "DEFAULT_PORT",
    "DEFAULT_SOCKET_BUFFER",
    "DEFAULT_TTL_MS",
    "SCHEMA",
    "Domain",
    "LbmrdConfig",
    "Rule",
    "Transform",
    "apply_command_line",
    "dtd_text",
    "load",
    "parse_network",
]

SCHEMA = "lbmrd.dtd"

# Defaults from the seed (003 L9655-9710, chapter 16), checked in notes 2.5.
DEFAULT_PORT = 15380
DEFAULT_ACTIVITY_MS = 60_000
DEFAULT_TTL_MS = 60_000
DEFAULT_SOCKET_BUFFER = 1_048_576

# Upper bounds: an int that setsockopt accepts for buffers; a day for the intervals (anything
# longer is certainly a unit mistake, and it keeps loop.call_at far from float trouble).
MAX_SOCKET_BUFFER = 2**31 - 1
MAX_INTERVAL_MS = 86_400_000
# A <ttl> under this many ms most likely meant seconds (the -t option is in seconds).
TTL_LOOKS_LIKE_SECONDS_MS = 1000


@dataclass(frozen=True)
class Rule:
    """One ``<rule>``; a port of None is ``*`` (match any / keep the matched one)."""

    match_address: str
    match_port: int | None
    replace_address: str
    replace_port: int | None
    line: int | None = None


@dataclass(frozen=True)
class Transform:
    source: str
    destination: str
    rules: tuple[Rule, ...]
    line: int | None = None


@dataclass(frozen=True)
class Domain:
    name: str
    networks: tuple[ipaddress.IPv4Network, ...]
    line: int | None = None


@dataclass(frozen=True)
class LbmrdConfig:
    """Everything lbmrd needs; defaults are the seed's.  ``interface`` None = not given (UM then
    takes the first interface it finds)."""

    activity_ms: int = DEFAULT_ACTIVITY_MS
    interface: str | None = None
    port: int = DEFAULT_PORT
    ttl_ms: int = DEFAULT_TTL_MS
    log: str | None = None
    rcvbuf: int = DEFAULT_SOCKET_BUFFER
    sndbuf: int = DEFAULT_SOCKET_BUFFER
    domains: tuple[Domain, ...] = ()
    transforms: tuple[Transform, ...] = ()
    #: The file this came from, or None for built-in defaults.
    source: str | None = None
    #: Things worth a warning in the log (not errors), e.g. a <ttl> that looks like seconds.
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @property
    def ttl_s(self) -> float:
        return self.ttl_ms / 1000.0

    @property
    def activity_s(self) -> float:
        return self.activity_ms / 1000.0


def dtd_text() -> str:
    """The DTD ``lbmrd -d`` prints and every file is validated against."""
    return xmlfile.schema_text(SCHEMA)


def parse_network(text: str) -> ipaddress.IPv4Network:
    """A ``<network>`` value: dotted host or CIDR, abbreviated forms padded (``192.168.1/24`` is
    ``192.168.1.0/24``).  Raises ValueError with a reason."""
    text = text.strip()
    addr, slash, prefix = text.partition("/")
    parts = addr.split(".")
    if not 1 <= len(parts) <= 4 or not all(p.isdigit() and len(p) <= 3 for p in parts):
        raise ValueError(f"{text!r} is not a dotted IPv4 address or CIDR network (no DNS names)")
    if len(parts) < 4 and not slash:
        raise ValueError(f"{text!r}: an abbreviated address needs a /prefix")
    padded = ".".join(parts + ["0"] * (4 - len(parts)))
    if slash and not (prefix.isdigit() and int(prefix) <= 32):
        raise ValueError(f"{text!r}: the prefix must be 0..32")
    try:
        return ipaddress.IPv4Network(f"{padded}/{prefix}" if slash else padded, strict=False)
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None


def _host_address(value: str) -> str:
    try:
        return str(ipaddress.IPv4Address(value.strip()))
    except ValueError:
        raise ValueError(f"{value!r} is not a dotted IPv4 host address") from None


def _port_attr(value: str) -> int | None:
    value = value.strip()
    if value == "*":
        return None
    if not value.isdigit() or int(value) > 65535:
        raise ValueError(f"port {value!r} is neither '*' nor an integer 0..65535")
    return int(value)


_DAEMON_INTS: dict[str, tuple[str, int, int]] = {
    # element: (field, low, high)
    "activity": ("activity_ms", 1, MAX_INTERVAL_MS),
    "port": ("port", 1, 65535),
    "ttl": ("ttl_ms", 1, MAX_INTERVAL_MS),
    "resolver_unicast_receiver_socket_buffer": ("rcvbuf", 1, MAX_SOCKET_BUFFER),
    "resolver_unicast_send_socket_buffer": ("sndbuf", 1, MAX_SOCKET_BUFFER),
}


def load(path: str | Path) -> LbmrdConfig:
    """Read, validate and check an lbmrd XML file.  Raises one located ConfigError."""
    source = str(path)
    tree = xmlfile.load(path, SCHEMA)
    return from_tree(tree, source)


def from_tree(tree: etree._ElementTree, source: str) -> LbmrdConfig:
    """Build the config from a tree already validated against the DTD."""
    root = tree.getroot()
    values: dict[str, object] = {}
    warnings: list[str] = []
    daemon = root.find("daemon")
    if daemon is not None:
        seen: dict[str, int | None] = {}
        for el in daemon:
            if not isinstance(el.tag, str):
                continue
            tag = el.tag
            line = xmlfile.line_of(el)
            if tag in seen:
                raise ConfigError(
                    f"given twice (first on line {seen[tag]})",
                    source=source,
                    line=line,
                    what=f"<{tag}>",
                )
            seen[tag] = line
            if tag in _DAEMON_INTS:
                name, low, high = _DAEMON_INTS[tag]
                values[name] = xmlfile.int_of(el, source, low=low, high=high)
            elif tag == "interface":
                values["interface"] = xmlfile.text_of(el, source)
            elif tag == "log":
                values["log"] = xmlfile.text_of(el, source)
        ttl = values.get("ttl_ms")
        if isinstance(ttl, int) and ttl < TTL_LOOKS_LIKE_SECONDS_MS:
            warnings.append(
                f"{source}:{seen.get('ttl')}: <ttl>: {ttl} is in milliseconds "
                f"(the -t option is in seconds); did you mean {ttl * 1000}?"
            )
    domains = []
    for dom in root.iterfind("domains/domain"):
        networks = []
        for net in dom.iterfind("network"):
            text = xmlfile.text_of(net, source)
            try:
                networks.append(parse_network(text))
            except ValueError as exc:
                raise ConfigError(
                    str(exc), source=source, line=xmlfile.line_of(net), what="<network>"
                ) from None
        domains.append(Domain(str(dom.get("name")), tuple(networks), xmlfile.line_of(dom)))
    transforms = []
    for tr in root.iterfind("transformations/transform"):
        rules = []
        for rule in tr.iterfind("rule"):
            parts: list[tuple[str, int | None]] = []
            for tag in ("match", "replace"):
                found = rule.find(tag)
                if found is None:  # pragma: no cover - the DTD requires both
                    raise ConfigError(
                        "missing", source=source, line=xmlfile.line_of(rule), what=f"<{tag}>"
                    )
                try:
                    parts.append(
                        (
                            _host_address(str(found.get("address"))),
                            _port_attr(str(found.get("port", "*"))),
                        )
                    )
                except ValueError as exc:
                    raise ConfigError(
                        str(exc), source=source, line=xmlfile.line_of(found), what=f"<{tag}>"
                    ) from None
            (m_addr, m_port), (r_addr, r_port) = parts
            rules.append(Rule(m_addr, m_port, r_addr, r_port, xmlfile.line_of(rule)))
        transforms.append(
            Transform(
                str(tr.get("source")), str(tr.get("destination")), tuple(rules), xmlfile.line_of(tr)
            )
        )
    return LbmrdConfig(
        domains=tuple(domains),
        transforms=tuple(transforms),
        source=source,
        warnings=tuple(warnings),
        **values,  # type: ignore[arg-type]
    )


def apply_command_line(
    config: LbmrdConfig,
    *,
    activity_ms: int | None = None,
    interface: str | None = None,
    port: int | None = None,
    ttl_s: int | None = None,
    logfile: str | None = None,
    rcvbuf: int | None = None,
    sndbuf: int | None = None,
) -> LbmrdConfig:
    """The command line wins over the file: each value given here replaces the file's.
    ``ttl_s`` is ``-t``, in seconds."""
    changes: dict[str, object] = {}
    if activity_ms is not None:
        changes["activity_ms"] = activity_ms
    if interface is not None:
        changes["interface"] = interface
    if port is not None:
        changes["port"] = port
    if ttl_s is not None:
        changes["ttl_ms"] = ttl_s * 1000
        # A -t replaces any <ttl>, and with it the warning about that <ttl>'s unit.
        changes["warnings"] = tuple(w for w in config.warnings if "<ttl>" not in w)
    if logfile is not None:
        changes["log"] = logfile
    if rcvbuf is not None:
        changes["rcvbuf"] = rcvbuf
    if sndbuf is not None:
        changes["sndbuf"] = sndbuf
    return dataclasses.replace(config, **changes)  # type: ignore[arg-type]
