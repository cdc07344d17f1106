"""Interface specifications, as UM accepts them, resolved to one local IPv4 address.

Theory of operation
-------------------
UM lets an operator name the interface to bind in several ways (seed 003 "Specifying Interfaces";
lbmrd man page, notes seed-srs-lbmrd.md 2.2):

- a dotted IP address: ``10.1.1.50`` (must be an address of this host);
- a CIDR network: ``10.0.0.0/8`` (abbreviations like ``10.29.3/24`` allowed) — the first local
  interface address inside it;
- a device name, quoted or not: ``"eth0"``, ``eth0``;
- a host name, optionally with a prefix: ``host.example.com`` (its address) or
  ``host.example.com/24`` (the first local address in that name's /24 network);
- ``0.0.0.0`` or nothing: NOT "any interface" (INADDR_ANY) but "the first interface found",
  which is often loopback.  :func:`resolve` returns it with ``defaulted=True`` so the daemon can
  warn loudly, as the seed recommends always naming an interface.

Local addresses come from the interface list (``socket.if_nameindex`` plus the ``SIOCGIFADDR``
ioctl: one primary IPv4 address per interface, in kernel index order, loopback first as on Linux).
Where that is unavailable (not Linux) we fall back to the host name's addresses plus loopback.

Daemons (through :mod:`umcore.daemon.interfaces`) and client contexts
(:func:`context_interface`, for ``*_interface`` options and the ``Iface`` of
``resolver_unicast_daemon`` entries) share this code.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import sys

from umcore.errors import ConfigError

__all__ = ["Resolved", "context_interface", "local_addresses", "resolve"]

_SIOCGIFADDR = 0x8915  # Linux <linux/sockios.h>


class Resolved:
    """The outcome: ``address`` to bind, ``how`` for the log, ``defaulted`` if nothing was named."""

    __slots__ = ("address", "defaulted", "how")

    def __init__(self, address: str, how: str, defaulted: bool = False) -> None:
        self.address = address
        self.how = how
        self.defaulted = defaulted

    def __repr__(self) -> str:
        return f"Resolved({self.address!r}, {self.how!r}, defaulted={self.defaulted})"


def local_addresses() -> list[tuple[str, str]]:
    """(interface name, IPv4 address) for each interface with one, in kernel index order."""
    out: list[tuple[str, str]] = []
    if sys.platform.startswith("linux"):
        import fcntl

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            for _index, name in socket.if_nameindex():
                try:
                    req = struct.pack("256s", name.encode()[:15])
                    reply = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, req)
                except OSError:
                    continue  # no IPv4 address on this interface
                out.append((name, socket.inet_ntoa(reply[20:24])))
        if out:
            return out
    seen = {"127.0.0.1"}
    out.append(("lo", "127.0.0.1"))
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            addr = str(info[4][0])
            if addr not in seen:
                seen.add(addr)
                out.append(("?", addr))
    except OSError:
        pass
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
    """Resolve an interface specification; ConfigError (located at source/line) if impossible.

    ``addresses`` overrides the local interface list (tests)."""
    local = local_addresses() if addresses is None else addresses

    def fail(message: str) -> ConfigError:
        known = ", ".join(f"{n}={a}" for n, a in local) or "none"
        return ConfigError(
            message, source=source, line=line, what=what, allowed=f"local interfaces: {known}"
        )

    text = (spec or "").strip()
    if text in ("", "0.0.0.0"):
        if not local:
            raise fail("no interface with an IPv4 address was found")
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
                return Resolved(addr, f"{name}, the first interface in {net}")
        raise fail(f"no local interface in {net}")
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
                return Resolved(addr, f"{name}, the first interface in {hnet} ({host})")
        raise fail(f"no local interface in {hnet} ({host})")
    for name, addr in local:
        if addr == resolved:
            return Resolved(addr, f"{host} ({name})")
    if ipaddress.IPv4Address(resolved).is_loopback:
        return Resolved(resolved, f"{host} (loopback)")
    raise fail(f"{host} resolves to {resolved}, not an address of this host")


def context_interface(value: object, *, what: str = "interface") -> str | None:
    """A context's interface option (a :class:`~umcore.config.values.Interface`, its text, or
    None) as the local address to bind, or None for "not named" (``0.0.0.0``, empty): the
    context then picks by route.  Device names, CIDR networks and host names are looked up
    among this host's interfaces as :func:`resolve` does; one that matches none is a
    :class:`~umcore.errors.ConfigError`."""
    if value is None:
        return None
    text = str(value).strip()
    if text in ("", "0.0.0.0", "0.0.0.0/0"):
        return None
    return resolve(text, source="context options", what=what).address
