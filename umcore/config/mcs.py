"""The Monitoring Collector Service's configuration (``<um-mcs>``) and its connector properties.

Theory of operation
-------------------
UM's MCS reads one XML file (root ``<um-mcs version="1.0">``): ``<daemon>`` (``<log>``,
``<pid-file>``), ``<connector>`` (``<type>``, ``<properties-file>``) and
``<receiver-transport-opts>`` (``<topic>``, ``<wildcard-topic>``, ``<config-file>``), every one
optional (dro-monitoring-config.md B5).  UM checks it against an XSD it ships; ours is
``schemas/mcs.xsd`` (written from UM's element table; ``MCS -x`` prints it).  :func:`load`
validates and returns an :class:`McsConfig` with every effective value.

The connector's settings are a Java properties file (UM's MCS is a Java program):
``key=value`` or ``key: value`` lines, ``#``/``!`` comments, a trailing backslash continuing a
line (:func:`load_properties`).  Keys per connector (:data:`PROPERTY_KEYS`, what ``MCS -p``
prints): ``sqlite`` -- ``sqlite_database_path`` (UM's; the database must exist, as UM's does:
``MCS --init-db PATH`` creates it); ``parquet`` (a pyum addition) -- ``parquet_directory``.
UM's ``hdfs`` connector is refused with what pyum has instead.  Relative paths in the XML and in
the properties file are relative to the file that names them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lxml import etree

from umcore.config import xmlfile
from umcore.config.xmlfile import line_of
from umcore.errors import ConfigError

__all__ = [
    "CONNECTORS",
    "DEFAULT_TOPIC",
    "PROPERTY_KEYS",
    "SCHEMA",
    "McsConfig",
    "McsLog",
    "load",
    "load_properties",
    "load_text",
    "xsd_text",
]

SCHEMA = "mcs.xsd"
# UM's statistics topic (the lbmmon transport module's default).
DEFAULT_TOPIC = "/29west/statistics"
# Connector type -> the properties it reads (and whether each is required).
PROPERTY_KEYS: dict[str, dict[str, str]] = {
    "sqlite": {"sqlite_database_path": "the SQLite database (it must exist: MCS --init-db)"},
    "parquet": {"parquet_directory": "the directory the Parquet files go to (pyum)"},
}
CONNECTORS = tuple(PROPERTY_KEYS)
# Bigger than any properties file by far: a mistaken path (a log, a device) is refused.
MAX_PROPERTIES_BYTES = 1024 * 1024


@dataclass
class McsLog:
    type: str = "console"
    file: str = ""
    frequency: str = "disable"
    size: int = 10  # MiB; 0: no size rolling
    max_history: int = 10
    compression: str = "none"


@dataclass
class McsConfig:
    """Every effective value of a ``<um-mcs>`` file (defaults where an element is absent)."""

    source: str = "<defaults>"
    version: str = "1.0"
    log: McsLog = field(default_factory=McsLog)
    pid_file: str | None = None
    connector: str = "sqlite"
    properties_file: str | None = None
    #: The connector's properties (from the properties file), with paths made absolute.
    properties: dict[str, str] = field(default_factory=dict)
    topic: str = DEFAULT_TOPIC
    wildcard_topic: str | None = None
    config_file: str | None = None

    @property
    def database(self) -> str | None:
        return self.properties.get("sqlite_database_path")

    @property
    def parquet_directory(self) -> str | None:
        return self.properties.get("parquet_directory")


def xsd_text() -> str:
    """The XSD ``MCS -x`` prints."""
    return xmlfile.schema_text(SCHEMA)


def load(path: str | Path) -> McsConfig:
    """Validate and read an MCS configuration file and its properties file; ConfigError (file,
    line, element, what, allowed values) if anything is wrong."""
    return _build(xmlfile.load(path, SCHEMA), str(path))


def load_text(text: str | bytes, source: str = "<MCS XML>") -> McsConfig:
    data = text.encode("utf-8") if isinstance(text, str) else text
    tree = xmlfile.parse_text(data, source)
    xmlfile.validate(tree, SCHEMA, source)
    return _build(tree, source)


def _text(el: etree._Element | None, tag: str, source: str) -> tuple[str, int | None] | None:
    child = xmlfile.child(el, tag)
    return None if child is None else (xmlfile.text_of(child, source), line_of(child))


def _relative(path: str, to: str) -> str:
    """``path`` as written, or relative to the directory of the file ``to`` that names it."""
    p = Path(path)
    if p.is_absolute() or to.startswith("<"):
        return str(p)
    return str(Path(to).resolve().parent / p)


def _build(tree: etree._ElementTree, source: str) -> McsConfig:
    root = tree.getroot()
    cfg = McsConfig(source=source, version=root.get("version", "1.0"))
    daemon = xmlfile.child(root, "daemon")
    log = xmlfile.child(daemon, "log")
    if log is not None:
        cfg.log = McsLog(
            type=log.get("type", "console"),
            file=(log.text or "").strip(),
            frequency=log.get("frequency", "disable"),
            size=int(log.get("size", "10")),
            max_history=int(log.get("max-history", "10")),
            compression=log.get("compression", "none"),
        )
        if cfg.log.type == "file" and not cfg.log.file:
            raise ConfigError(
                'type="file" needs the log file name as the element\'s text',
                source=source, line=line_of(log), what="<log>",
            )  # fmt: skip
        if cfg.log.file:
            cfg.log.file = _relative(cfg.log.file, source)
    pid = _text(daemon, "pid-file", source)
    if pid is not None:
        cfg.pid_file = _relative(pid[0], source)
    connector = xmlfile.child(root, "connector")
    kind = _text(connector, "type", source)
    if kind is not None:
        name, line = kind
        if name not in CONNECTORS:
            hint = " (UM's HDFS connector is not in pyum: use parquet)" if name == "hdfs" else ""
            raise ConfigError(
                f"unknown connector type {name!r}{hint}",
                source=source, line=line, what="<connector><type>",
                allowed=", ".join(CONNECTORS),
            )  # fmt: skip
        cfg.connector = name
    props = _text(connector, "properties-file", source)
    if props is not None:
        cfg.properties_file = _relative(props[0], source)
        cfg.properties = load_properties(cfg.properties_file)
        unknown = sorted(set(cfg.properties) - set(PROPERTY_KEYS[cfg.connector]))
        if unknown:
            raise ConfigError(
                f"unknown propert{'ies' if len(unknown) > 1 else 'y'} "
                f"{', '.join(unknown)} for the {cfg.connector} connector",
                source=cfg.properties_file, what=unknown[0],
                allowed=", ".join(PROPERTY_KEYS[cfg.connector]),
            )  # fmt: skip
        for key in PROPERTY_KEYS[cfg.connector]:
            if key in cfg.properties:
                cfg.properties[key] = _relative(cfg.properties[key], cfg.properties_file)
    receiver = xmlfile.child(root, "receiver-transport-opts")
    topic = _text(receiver, "topic", source)
    if topic is not None:
        cfg.topic = topic[0]
    wild = _text(receiver, "wildcard-topic", source)
    if wild is not None:
        cfg.wildcard_topic = wild[0]
    conf = _text(receiver, "config-file", source)
    if conf is not None:
        cfg.config_file = _relative(conf[0], source)
    return cfg


def load_properties(path: str | Path) -> dict[str, str]:
    """A Java properties file's keys and values (``=``, ``:`` or whitespace separates them;
    ``#``/``!`` comment lines; a trailing backslash continues a line; ``\\\\`` is one
    backslash).  ConfigError naming the file when it cannot be read."""
    source = str(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_PROPERTIES_BYTES + 1)
    except OSError as exc:
        raise ConfigError(
            f"cannot read the properties file: {exc.strerror or exc}", source=source
        ) from None
    if len(data) > MAX_PROPERTIES_BYTES:
        raise ConfigError(f"larger than {MAX_PROPERTIES_BYTES} bytes", source=source)
    out: dict[str, str] = {}
    pending = ""
    for raw in data.decode("utf-8", "replace").splitlines():
        line = pending + raw.lstrip() if pending else raw.strip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        pending = ""
        key, value = _split_property(line)
        out[key] = value.replace("\\\\", "\\")
    if pending:
        key, value = _split_property(pending)
        out[key] = value
    return out


def _split_property(line: str) -> tuple[str, str]:
    for i, ch in enumerate(line):
        if ch in "=:" or ch.isspace():
            rest = line[i + 1 :].lstrip()
            if ch.isspace() and rest[:1] in ("=", ":"):
                rest = rest[1:].lstrip()
            return line[:i], rest
    return line, ""
