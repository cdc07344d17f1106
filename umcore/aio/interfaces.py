"""Interface specifications, as UM accepts them, resolved to one local IPv4 address.

Theory of operation
-------------------
UM lets an operator name the interface to bind in several ways (seed 003 "Specifying Interfaces";
lbmrd man page, notes seed-srs-lbmrd.md 2.2):

- a dotted IP address: ``10.1.1.50`` -- accepted when it is *any* IPv4 address of this host,
  secondary addresses included (a ``127.0.1.1/32`` on ``lo``, a service address beside an
  interface's primary one);
- a CIDR network: ``10.0.0.0/8`` (abbreviations like ``10.29.3/24`` allowed) -- the first local
  address inside it, in the order below, among *all* addresses (so a network holding only a
  device's secondary address picks that address);
- a device name, quoted or not: ``"eth0"``, ``eth0`` -- that device's *first* address (on Linux
  its primary one); to bind a secondary address, name the address or a network holding it;
- a host name, optionally with a prefix: ``host.example.com`` (its address) or
  ``host.example.com/24`` (the first local address in that name's /24 network);
- ``0.0.0.0`` or nothing: NOT "any interface" (INADDR_ANY) but, as UM documents, "the first
  interface found", which is often loopback.  pyum picks the first address of the first
  interface in the order below (on Linux: loopback, 127.0.0.1).  :func:`resolve` returns it
  with ``defaulted=True`` so the daemon can warn loudly, as the seed recommends always naming an
  interface.

Local addresses come from psutil's ``net_if_addrs()`` (``getifaddrs`` on Linux and macOS,
``GetAdaptersAddresses`` on Windows): every IPv4 address of every interface.  The order is the
operating system's, kept as reported: interfaces in the order the OS lists them (on Linux kernel
index order, loopback first), and each interface's addresses in the OS's order (on Linux the
primary address first, then secondary ones in the order they were added).  On Linux an address
added with a label (``ip addr add ... label eth0:1``) is reported under that label, after the
unlabelled interfaces, and the label works as a device name.  Interfaces without an IPv4
address (IPv6-only, link-layer only) are left out.

The discovery is a parameter (``discover`` of :func:`local_addresses`, ``addresses`` of
:func:`resolve` and :func:`context_interface`) so tests give a fake table instead of this host's.

Daemons (through :mod:`umcore.daemon.interfaces`) and client contexts
(:func:`context_interface`, for ``*_interface`` options and the ``Iface`` of
``resolver_unicast_daemon`` entries) share this code.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import psutil

from umcore.errors import ConfigError

__all__ = [
    "InterfaceAddress",
    "InterfaceTable",
    "Resolved",
    "context_interface",
    "local_addresses",
    "resolve",
]


class InterfaceAddress(Protocol):
    """One address of an interface, as psutil reports it (``psutil.net_if_addrs()`` values):
    only the address family and the address text are used."""

    @property
    def family(self) -> int: ...

    @property
    def address(self) -> str: ...


# A discovery function: interface name -> its addresses of every family, in the OS's order.
InterfaceTable = Callable[[], Mapping[str, Sequence[InterfaceAddress]]]


class Resolved:
    """The outcome: ``address`` to bind, ``how`` for the log, ``defaulted`` if nothing was named."""

    __slots__ = ("address", "defaulted", "how")

    def __init__(self, address: str, how: str, defaulted: bool = False) -> None:
        self.address = address
        self.how = how
        self.defaulted = defaulted

    def __repr__(self) -> str:
        return f"Resolved({self.address!r}, {self.how!r}, defaulted={self.defaulted})"


def local_addresses(discover: InterfaceTable = psutil.net_if_addrs) -> list[tuple[str, str]]:
    """(interface name, IPv4 address) for every IPv4 address of every interface, in the OS's
    order (see the module docstring); ``discover`` replaces psutil's table (tests)."""
    out: list[tuple[str, str]] = []
    for name, entries in discover().items():
        for entry in entries:
            if entry.family == socket.AF_INET:
                out.append((name, entry.address))
    return out


def _network(text: str) -> ipaddress.IPv4Network | None:
    addr, slash, prefix = text.partition("/")
    parts = addr.split(".")
    if not slash or not prefix.isdigit() or not all(p.isdigit() for p in parts):
        return None
    if not 1 <= len(parts) <= 4:
        return None
    try:
        return ipaddress.IPv4Network(
            ".".join(parts + ["0"] * (4 - len(parts))) + "/" + prefix, strict=False
        )
    except ValueError:
        return None


def resolve(
    spec: str | None,
    *,
    source: str = "command line",
    line: int | None = None,
    what: str = "interface",
    addresses: list[tuple[str, str]] | None = None,
) -> Resolved:
    """Resolve an interface specification; ConfigError (located at source/line) if impossible,
    naming the spec and listing every local address found.

    ``addresses`` replaces :func:`local_addresses` (tests): (name, IPv4 address) pairs in the
    order the rules above walk them."""
    local = local_addresses() if addresses is None else addresses

    def fail(message: str) -> ConfigError:
        known = ", ".join(f"{n}={a}" for n, a in local) or "none"
        return ConfigError(
            message, source=source, line=line, what=what, allowed=f"local interfaces: {known}"
        )

    text = (spec or "").strip()
    if text in ("", "0.0.0.0"):
        if not local:
            raise fail("no IPv4 address was found on any interface")
        name, addr = local[0]
        return Resolved(addr, f"first interface found ({name})", defaulted=True)
    unquoted = text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text
    for name, addr in local:
        if name == unquoted:
            return Resolved(addr, f"device {name}")
    if unquoted != text:
        raise fail(f"no device named {unquoted!r}")
    try:
        ip = ipaddress.IPv4Address(text)
    except ValueError:
        ip = None
    if ip is not None:
        for name, addr in local:
            if addr == str(ip):
                return Resolved(addr, f"address of {name}")
        raise fail(f"{text} is not an address of this host")
    net = _network(text)
    if net is not None:
        for name, addr in local:
            if ipaddress.IPv4Address(addr) in net:
                return Resolved(addr, f"{name}, the first local address in {net}")
        shown = text if text == str(net) else f"{text} ({net})"
        raise fail(f"no local address in {shown}")
    host, slash, prefix = text.partition("/")
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_DGRAM)
    except OSError as exc:
        raise fail(f"cannot resolve host name {host!r}: {exc}") from None
    if not infos:  # pragma: no cover
        raise fail(f"host name {host!r} has no IPv4 address")
    resolved = str(infos[0][4][0])
    if slash:
        if not prefix.isdigit() or int(prefix) > 32:
            raise fail(f"{text!r}: the prefix must be 0..32")
        hnet = ipaddress.IPv4Network(f"{resolved}/{prefix}", strict=False)
        for name, addr in local:
            if ipaddress.IPv4Address(addr) in hnet:
                return Resolved(addr, f"{name}, the first local address in {hnet} ({host})")
        raise fail(f"no local address in {text} ({hnet})")
    for name, addr in local:
        if addr == resolved:
            return Resolved(addr, f"{host} ({name})")
    if ipaddress.IPv4Address(resolved).is_loopback:
        return Resolved(resolved, f"{host} (loopback)")
    raise fail(f"{host} resolves to {resolved}, not an address of this host")


def context_interface(
    value: object,
    *,
    what: str = "interface",
    source: str = "context options",
    line: int | None = None,
    addresses: list[tuple[str, str]] | None = None,
) -> str | None:
    """A context's interface option (a :class:`~umcore.config.values.Interface`, its text, or
    None) as the local address to bind, or None for "not named" (``0.0.0.0``, empty): the
    context then picks by route.  Device names, CIDR networks and host names are looked up
    among this host's interfaces as :func:`resolve` does; one that matches none is a
    :class:`~umcore.errors.ConfigError` located at ``source``/``line`` (where the option was
    set: a flat file's line...).  ``addresses`` is passed to :func:`resolve` (tests)."""
    if value is None:
        return None
    text = str(value).strip()
    if text in ("", "0.0.0.0", "0.0.0.0/0"):
        return None
    return resolve(text, source=source, line=line, what=what, addresses=addresses).address
