"""Everything umestored checks before anything binds: UM option files, directories, interfaces.

Theory of operation
-------------------
:func:`prepare` turns a loaded :class:`~umcore.config.store.StoreFile` into one
:class:`StorePlan` per ``<store>`` or raises :class:`~umcore.errors.ConfigError` (one line, file,
line, what, allowed values) -- the command line prints it and exits 1 with no socket opened:

1. **UM options.**  ``<lbm-config>`` (a flat file) is read line by line into the process
   configuration; a bad line or a missing file is a *warning* and the Store goes on (UM's Store
   since 6.13).  ``<xml-config application-name=...>`` loads an XML configuration; an error there
   stops start-up (the application must exist).
2. **Directories** (trap 20).  Each Store's ``disk-cache-directory`` and
   ``disk-state-directory`` (relative to the working directory) must exist, be directories and
   be writable -- for memory repositories too, as UM checks them for every Store.  They are
   never created.  One on an NFS mount is a warning, as in UM.  ``<pidfile>``'s directory must
   be writable (the file is written once the Stores listen).
3. **Interfaces.**  ``<store interface>`` is an address, a CIDR network (the first local
   interface in it) or ``0.0.0.0`` (all interfaces).
4. **Context options** per Store: the UM files, then the Store's ``lbm-context`` options,
   checked against the XML's restrictions now; the raw receivers' options per topic are made by
   :meth:`StorePlan.receiver_attributes` with the Store-receiver defaults Informatica recommends
   (``use_otr 1``, no burst loss: trap 19) unless configured.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from umcore.config.attributes import Attributes, global_configuration
from umcore.config.flatfile import parse_line, read_config_file
from umcore.config.options import REGISTRY
from umcore.config.store import StoreFile, StoreInstance
from umcore.config.xmlfile import MAX_CONFIG_BYTES, line_of, parse_text
from umcore.daemon import interfaces
from umcore.errors import ConfigError

__all__ = ["RECEIVER_DEFAULTS", "Prepared", "StorePlan", "check_directory", "prepare"]

# Informatica's advice for a Store's receivers (persistence-store.md trap 19): repair own loss
# with OTR, and never give up on a burst of loss (the largest value the option allows).
RECEIVER_DEFAULTS = {
    "use_otr": "1",
    "delivery_control_maximum_burst_loss": "4294967295",
}
DIRECTORY_OPTIONS = ("disk-cache-directory", "disk-state-directory")
ANY = "0.0.0.0"


@dataclass
class StorePlan:
    """One ``<store>``, checked: where it binds, its directories and its context's options."""

    instance: StoreInstance
    index: int
    bind_ip: str  # ANY = every interface
    cache_dir: str
    state_dir: str
    context_attributes: Attributes
    #: ``context-name`` (None when not configured).
    context_name: str | None

    def receiver_attributes(self, topic: str) -> Attributes:
        """The receiver options of the Store's raw receiver of ``topic``: UM files < the
        matching ``<topic>``'s ``lbm-receiver`` options; :data:`RECEIVER_DEFAULTS` where
        neither set the option."""
        attrs = global_configuration().attributes_from_xml("receiver", topic)
        matched = self.instance.match(topic)
        if matched is not None:
            attrs.apply_settings(matched.lbm_receiver)
        for name, value in RECEIVER_DEFAULTS.items():
            factory = REGISTRY["receiver"][name].default_value()
            if not attrs.is_set(name) and attrs.get_typed(name) == factory:
                attrs.set(name, value, source="umestored default")
        return attrs


@dataclass
class Prepared:
    file: StoreFile
    stores: list[StorePlan]
    #: Lines to log as warnings once the log is open (bad <lbm-config> lines, NFS ...).
    warnings: list[str] = field(default_factory=list)


def _lines(source: str) -> tuple[dict[str, int], dict[tuple[str, str], int]]:
    """Line of each ``<store>`` by name and of each store-level ``<option>`` by (store, name),
    for errors about values the loader accepted (nothing if the source is not a file)."""
    stores: dict[str, int] = {}
    options: dict[tuple[str, str], int] = {}
    try:
        # Already parsed and validated by the loader; parsed again the same guarded way.
        with open(source, "rb") as fh:
            tree = parse_text(fh.read(MAX_CONFIG_BYTES + 1), source)
    except (OSError, ConfigError):
        return stores, options
    for el in tree.iter("store"):
        name = el.get("name", "")
        stores[name] = line_of(el) or 0
        for attrs in el.iterchildren("ume-attributes"):
            for opt in attrs.iterchildren("option"):
                if opt.get("type") == "store":
                    options[(name, opt.get("name", "").lower())] = line_of(opt) or 0
    return stores, options


def _nfs(path: str) -> bool:
    """Whether ``path`` lies on an NFS mount (the longest matching mount point decides)."""
    real = os.path.realpath(path)
    best, fstype = "", ""
    try:
        parts = psutil.disk_partitions(all=True)
    except OSError:  # pragma: no cover - /proc not readable
        return False
    for p in parts:
        mp = p.mountpoint.rstrip("/") or "/"
        inside = real == mp or real.startswith(mp if mp == "/" else mp + "/")
        if inside and len(mp) > len(best):
            best, fstype = mp, p.fstype
    return fstype.startswith("nfs")


def check_directory(path: str, *, source: str, line: int | None, what: str) -> str:
    """The directory ``path`` as an absolute path; ConfigError if it is missing, not a
    directory or not writable (never created: trap 20)."""
    full = os.path.abspath(path)
    where = "" if os.path.isabs(path) else f" (relative to the working directory {os.getcwd()})"
    if not os.path.exists(full):
        raise ConfigError(
            f"directory {path!r} does not exist{where}; umestored does not create it",
            source=source,
            line=line,
            what=what,
            allowed="an existing, writable directory",
        )
    if not os.path.isdir(full):
        raise ConfigError(
            f"{path!r} is not a directory{where}",
            source=source,
            line=line,
            what=what,
            allowed="an existing, writable directory",
        )
    if not os.access(full, os.W_OK | os.X_OK):
        raise ConfigError(
            f"directory {path!r} is not writable by this user{where}",
            source=source,
            line=line,
            what=what,
            allowed="an existing, writable directory",
        )
    return full


def _load_lbm_config(path: str, warn: Callable[[str], None]) -> None:
    """``<lbm-config>``: every good line applied; bad lines and a missing file are warnings."""
    cfg = global_configuration()
    try:
        text = read_config_file(path)
    except ConfigError as exc:
        warn(f"<lbm-config>: {exc} (going on without it)")
        return
    if text.lstrip().startswith("<"):
        warn(f"<lbm-config> {path}: an XML file; use <xml-config> for XML (ignored)")
        return
    for number, raw in enumerate(text.splitlines(), start=1):
        try:
            setting = parse_line(raw, path, number)
            if setting is not None:
                cfg.apply((setting,))
        except ConfigError as exc:
            warn(f"<lbm-config>: {exc} (line ignored)")


def _check_pidfile(path: str, source: str) -> None:
    """``<pidfile>`` is written once the Stores listen: its directory must be writable now."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(
            f"cannot write the pid file {path!r}: {folder} is not a writable directory",
            source=source,
            what="<pidfile>",
            allowed="a file in an existing, writable directory",
        )


def _bind_ip(instance: StoreInstance, source: str, line: int | None) -> str:
    iface = instance.interface
    if iface.is_any:
        return ANY
    return interfaces.resolve(
        str(iface), source=source, line=line, what=f'<store name="{instance.name}"> interface'
    ).address


def prepare(file: StoreFile) -> Prepared:
    """Check ``file`` against this host and build the Stores' plans (module docstring)."""
    warnings: list[str] = []
    cfg = global_configuration()
    daemon = file.daemon
    if daemon.lbm_config:
        _load_lbm_config(daemon.lbm_config, warnings.append)
    if daemon.xml_config:
        cfg.config_xml_file(daemon.xml_config, daemon.xml_config_application)
    if daemon.pidfile:
        _check_pidfile(daemon.pidfile, file.source)
    if not file.stores:
        warnings.append(f"{file.source}: no <store> configured: umestored runs without a Store")
    store_lines, option_lines = _lines(file.source)
    plans: list[StorePlan] = []
    fixed: dict[tuple[str, int], str] = {}
    for index, inst in enumerate(file.stores):
        sline = store_lines.get(inst.name)
        dirs: list[str] = []
        for opt in DIRECTORY_OPTIONS:
            path = str(inst.options[opt])
            full = check_directory(
                path,
                source=file.source,
                line=option_lines.get((inst.name, opt), sline),
                what=f'<store name="{inst.name}"> {opt}',
            )
            if _nfs(full):
                warnings.append(
                    f'store "{inst.name}": {opt} {path!r} appears to be on an NFS mount '
                    "(local disks are recommended)"
                )
            dirs.append(full)
        bind_ip = _bind_ip(inst, file.source, sline)
        if inst.port:
            for (ip, port), other in fixed.items():
                if port == inst.port and (ip == bind_ip or ANY in (ip, bind_ip)):
                    raise ConfigError(
                        f"port {inst.port} is already the port of store {other!r}",
                        source=file.source,
                        line=sline,
                        what=f'<store name="{inst.name}"> port',
                        allowed="a port no other <store> of this file uses, or 0",
                    )
            fixed[(bind_ip, inst.port)] = inst.name
        context_name = str(inst.options["context-name"]) or None
        attrs = cfg.attributes_from_xml("context", context_name)
        attrs.apply_settings(inst.lbm_context)
        if context_name is not None and not attrs.is_set("context_name"):
            attrs.set("context_name", context_name, source=f"{file.source}: context-name")
        cfg.for_object("context", attrs)  # the XML's restrictions: refused now, not at bind
        plans.append(StorePlan(inst, index, bind_ip, dirs[0], dirs[1], attrs, context_name))
    return Prepared(file, plans, warnings)
