"""Typed values of UM configuration options: parsing from text and printing back.

Theory of operation
-------------------
Every UM option is set from a string (flat file line, ``um.xml`` ``default-value``, daemon
``<option value=...>``, ``str_setopt``) and read back as a string (``str_getopt``).  Each option in
the registry (:mod:`umcore.config.options`) carries one *value type* from this module.  A value
type turns text into a Python value (``parse``), prints the value back in UM's canonical form
(``format``), and describes what it accepts (``allowed``) so an error can say what would have
been right.  ``format(parse(default))`` is the default text itself for every option; the tests
check that for the whole table.

Value types raise :class:`BadValue` (a plain ``ValueError``); the caller — who knows whether the
text came from a file line, an environment variable or an API call — turns it into a located
:class:`~umcore.errors.ConfigError`.

List-valued options (``resolver_unicast_daemon``, ``resolver_service``, ``ume_store``,
``ume_store_group``, ``ume_store_name``, ``broker``) are *cumulative*: each setting appends to the
current list, and a "clear" entry (``0.0.0.0:0``, or ``0:0`` for store groups) empties it.
``parse`` returns the entries of one setting (clear markers included, as :data:`CLEAR`);
``merge(old, parsed)`` applies them to the current list.

Interfaces (``*_interface``, ``default_interface``, the interface part of resolver entries) are
``a.b.c.d[/n]`` (CIDR), a device name in double quotes (``"eth0"``) or ``hostname[/n]``.  Host
names are kept as text: resolving them is the socket layer's job, not the parser's.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import Any, NamedTuple

__all__ = [
    "ADDRESS",
    "BOOL",
    "BROKER_LIST",
    "CALLBACK",
    "CLEAR",
    "CONTEXT_NAME",
    "I32",
    "I32_MAX",
    "INTERFACE",
    "RESOLVER_SERVICE_LIST",
    "SESSION_ID",
    "SIZE",
    "STORE_GROUP_LIST",
    "STORE_LIST",
    "STORE_NAME_LIST",
    "STRING",
    "U8",
    "U16",
    "U32",
    "U64",
    "ULONG",
    "UNICAST_DAEMON_LIST",
    "BadValue",
    "BrokerEntry",
    "Enum",
    "Int",
    "IntChoice",
    "Interface",
    "Optional",
    "PowerOfTwo",
    "ResolverEntry",
    "StoreEntry",
    "StoreGroupEntry",
    "StoreNameEntry",
    "ValueType",
    "ZeroOr",
]

I32_MAX = 2**31 - 1

# Longest host name DNS allows; a longer "interface" is a typo, not a host.
MAX_HOSTNAME = 253
# Context names (and Store context names) are limited to 128 characters by UM.
MAX_CONTEXT_NAME = 128
# resolver_service takes at most five SRS entries (grptcpbasedresolveroperation.html).
MAX_RESOLVER_SERVICES = 5
# Bound on entries of any list option: far above real deployments, stops a runaway file.
MAX_LIST_ENTRIES = 1024

_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9-]{1,63})*$")
_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


class BadValue(ValueError):
    """A value text does not fit its option's type."""


class ValueType:
    """Base of the value types: parse text, format values, describe what is accepted."""

    __slots__ = ()
    cumulative = False

    def parse(self, text: str) -> Any:
        raise NotImplementedError

    def format(self, value: Any) -> str:
        return str(value)

    def allowed(self) -> str:
        raise NotImplementedError

    def merge(self, old: Any, new: Any) -> Any:
        """The value after setting ``new`` over ``old``: plain options replace."""
        return new


# --- integers -------------------------------------------------------------------------------


def _int(text: str) -> int:
    t = text.strip()
    try:
        if t.lower().startswith(("0x", "-0x", "+0x")):
            return int(t, 16)
        if not re.fullmatch(r"[+-]?\d+", t):
            raise ValueError
        return int(t, 10)
    except ValueError:
        raise BadValue(f"{text!r} is not an integer") from None


class Int(ValueType):
    """An integer in ``[low, high]`` (decimal, or hexadecimal with ``0x``)."""

    __slots__ = ("high", "low")

    def __init__(self, low: int, high: int) -> None:
        self.low = low
        self.high = high

    def parse(self, text: str) -> int:
        value = _int(text)
        if not self.low <= value <= self.high:
            raise BadValue(f"{value} is out of range")
        return value

    def allowed(self) -> str:
        return f"integers {self.low}..{self.high}"


U8 = Int(0, 2**8 - 1)
U16 = Int(0, 2**16 - 1)
U32 = Int(0, 2**32 - 1)
U64 = Int(0, 2**64 - 1)
# UM's lbm_ulong_t / size_t are 64 bits on the 64-bit Unix builds we mirror.
ULONG = Int(0, 2**64 - 1)
SIZE = Int(0, 2**64 - 1)
I32 = Int(-(2**31), I32_MAX)


class ZeroOr(ValueType):
    """0 (meaning "off" or "use the generic option"), or a value of the inner range."""

    __slots__ = ("inner",)

    def __init__(self, inner: Int) -> None:
        self.inner = inner

    def parse(self, text: str) -> int:
        value = _int(text)
        if value == 0:
            return 0
        try:
            return self.inner.parse(text)
        except BadValue:
            raise BadValue(f"{value} is out of range") from None

    def allowed(self) -> str:
        return f"0 or {self.inner.allowed()}"


class IntChoice(ValueType):
    """One of a few integers (``ordered_delivery`` 1/-1/0, ``use_otr`` 0/1/2, rate ticks)."""

    __slots__ = ("choices",)

    def __init__(self, choices: Iterable[int]) -> None:
        self.choices = tuple(choices)

    def parse(self, text: str) -> int:
        value = _int(text)
        if value not in self.choices:
            raise BadValue(f"{value} is not one of the allowed values")
        return value

    def allowed(self) -> str:
        return " | ".join(str(c) for c in self.choices)


class PowerOfTwo(Int):
    """A power of two in ``[low, high]`` (``transport_lbtrm_tgsz``)."""

    __slots__ = ()

    def parse(self, text: str) -> int:
        value = super().parse(text)
        if value & (value - 1):
            raise BadValue(f"{value} is not a power of two")
        return value

    def allowed(self) -> str:
        return f"powers of two {self.low}..{self.high}"


class _SessionId(ValueType):
    """``ume_session_id``: hex ``0x..``, octal ``0..`` or decimal, 0..2^64-2."""

    __slots__ = ()
    MAX = 2**64 - 2

    def parse(self, text: str) -> int:
        t = text.strip()
        try:
            if t.lower().startswith("0x"):
                value = int(t[2:], 16)
            elif len(t) > 1 and t.startswith("0"):
                value = int(t[1:], 8)
            elif t.isdigit():
                value = int(t, 10)
            else:
                raise ValueError
        except ValueError:
            raise BadValue(f"{text!r} is not a session ID") from None
        if value > self.MAX:
            raise BadValue(f"{text!r} is out of range")
        return value

    def allowed(self) -> str:
        return (
            "0x hex up to FFFFFFFFFFFFFFFE, 0-prefixed octal, or decimal up to 18446744073709551614"
        )


SESSION_ID = _SessionId()


class _Bool(ValueType):
    """UM's 0/1 flags; read as Python ``bool``."""

    __slots__ = ()

    def parse(self, text: str) -> bool:
        t = text.strip()
        if t == "1":
            return True
        if t == "0":
            return False
        raise BadValue(f"{text!r} is not 0 or 1")

    def format(self, value: Any) -> str:
        return "1" if value else "0"

    def allowed(self) -> str:
        return "1 | 0"


BOOL = _Bool()


class Enum(ValueType):
    """A case-insensitive keyword.  Entries are ``"name"`` or ``("name", ("alias", ...))``;
    values read back as the canonical name, spelled as UM documents it."""

    __slots__ = ("_by_key", "names")

    def __init__(self, *entries: str | tuple[str, tuple[str, ...]]) -> None:
        names: list[str] = []
        by_key: dict[str, str] = {}
        for entry in entries:
            name, aliases = (entry, ()) if isinstance(entry, str) else entry
            names.append(name)
            for key in (name, *aliases):
                by_key[key.lower()] = name
        self.names = tuple(names)
        self._by_key = by_key

    def parse(self, text: str) -> str:
        try:
            return self._by_key[text.strip().lower()]
        except KeyError:
            raise BadValue(f"{text!r} is not an allowed value") from None

    def allowed(self) -> str:
        return " | ".join(sorted(set(self._by_key), key=list(self._by_key).index))


class Str(ValueType):
    """Free text, optionally bounded in length and restricted to a character set."""

    __slots__ = ("max_len", "pattern", "what")

    def __init__(
        self, max_len: int | None = None, pattern: re.Pattern[str] | None = None, what: str = ""
    ) -> None:
        self.max_len = max_len
        self.pattern = pattern
        self.what = what

    def parse(self, text: str) -> str:
        t = text.strip()
        if self.max_len is not None and len(t) > self.max_len:
            raise BadValue(f"longer than {self.max_len} characters")
        if t and self.pattern is not None and not self.pattern.match(t):
            raise BadValue(f"{text!r} has characters outside {self.what}")
        return t

    def allowed(self) -> str:
        if self.max_len is None:
            return "any text"
        return f"up to {self.max_len} characters" + (f" of {self.what}" if self.what else "")


STRING = Str()
CONTEXT_NAME = Str(MAX_CONTEXT_NAME, _NAME, "[A-Za-z0-9_-]")


class _Callback(ValueType):
    """A function-valued option: API only (``Attributes.set_callback``), never from text."""

    __slots__ = ()

    def parse(self, text: str) -> None:
        if text.strip() in ("", "NULL"):
            return None
        raise BadValue("a callback cannot be set from text; use set_callback() in code")

    def format(self, value: Any) -> str:
        return "" if value is None else getattr(value, "__qualname__", repr(value))

    def allowed(self) -> str:
        return "a Python callable, through Attributes.set_callback()"


CALLBACK = _Callback()


class Optional(ValueType):
    """Empty text means "not set" (``None``); anything else is the inner type."""

    __slots__ = ("inner",)

    def __init__(self, inner: ValueType) -> None:
        self.inner = inner

    def parse(self, text: str) -> Any:
        return None if not text.strip() else self.inner.parse(text)

    def format(self, value: Any) -> str:
        return "" if value is None else self.inner.format(value)

    def allowed(self) -> str:
        return self.inner.allowed()


# --- addresses and interfaces -----------------------------------------------------------------


def _ipv4(text: str) -> str:
    try:
        return str(ipaddress.IPv4Address(text.strip()))
    except ValueError:
        raise BadValue(f"{text!r} is not an IPv4 address") from None


class _Address(ValueType):
    """A dotted IPv4 address (``struct in_addr`` options: multicast groups and the like)."""

    __slots__ = ()

    def parse(self, text: str) -> str:
        return _ipv4(text)

    def allowed(self) -> str:
        return "a dotted IPv4 address such as 224.9.10.11"


ADDRESS = _Address()


class Interface(NamedTuple):
    """An interface specification: ``kind`` is ``"cidr"``, ``"device"`` or ``"host"``."""

    kind: str
    name: str  # address, device name (without quotes) or host name
    prefix: int | None = None  # /n when given

    def __str__(self) -> str:
        if self.kind == "device":
            return f'"{self.name}"'
        return self.name if self.prefix is None else f"{self.name}/{self.prefix}"

    @property
    def network(self) -> ipaddress.IPv4Network | None:
        """For a CIDR spec: the network whose first local interface is meant."""
        if self.kind != "cidr":
            return None
        prefix = 32 if self.prefix is None else self.prefix
        return ipaddress.IPv4Network(f"{self.name}/{prefix}", strict=False)

    @property
    def is_any(self) -> bool:
        return self.kind == "cidr" and self.name == "0.0.0.0" and self.prefix in (None, 0)

    def select(self, local: Iterable[tuple[str, str]]) -> str | None:
        """The local address this spec names among ``(device, ipv4)`` pairs, in order.

        CIDR with /n: the first address in that network; CIDR without /n: the exact address;
        device: its first address.  Host names are resolved by the caller first."""
        pairs = list(local)
        if self.kind == "device":
            return next((ip for dev, ip in pairs if dev == self.name), None)
        net = self.network
        if net is None:
            return None
        if self.prefix is None:
            return self.name if any(ip == self.name for _, ip in pairs) else None
        return next((ip for _, ip in pairs if ipaddress.IPv4Address(ip) in net), None)


def parse_interface(text: str) -> Interface:
    t = text.strip()
    if t.startswith('"'):
        if len(t) < 3 or not t.endswith('"') or '"' in t[1:-1]:
            raise BadValue(f'{text!r}: a device name goes in double quotes, e.g. "eth0"')
        return Interface("device", t[1:-1])
    addr, slash, bits = t.partition("/")
    prefix: int | None = None
    if slash:
        if not bits.isdigit() or not 0 <= int(bits) <= 32:
            raise BadValue(f"{text!r}: the /n after the address must be 0..32")
        prefix = int(bits)
    if re.fullmatch(r"[\d.]+", addr):
        return Interface("cidr", _ipv4(addr), prefix)
    if len(addr) <= MAX_HOSTNAME and _HOSTNAME.match(addr):
        return Interface("host", addr, prefix)
    raise BadValue(f"{text!r} is not an interface")


class _InterfaceType(ValueType):
    __slots__ = ()

    def parse(self, text: str) -> Interface:
        return parse_interface(text)

    def format(self, value: Any) -> str:
        return str(value)

    def allowed(self) -> str:
        return 'a.b.c.d[/n], a device name in double quotes ("eth0"), or hostname[/n]'


INTERFACE = _InterfaceType()


def _port(text: str) -> int:
    t = text.strip()
    if not t.isdigit() or int(t) > 65535:
        raise BadValue(f"{text!r} is not a port 0..65535")
    return int(t)


def _host(text: str) -> str:
    t = text.strip()
    if re.fullmatch(r"[\d.]+", t):
        return _ipv4(t)
    if len(t) <= MAX_HOSTNAME and _HOSTNAME.match(t):
        return t
    raise BadValue(f"{text!r} is not an IPv4 address or host name")


# --- list entries ---------------------------------------------------------------------------


class _Clear:
    """The marker a list setting uses to empty the list (``0.0.0.0:0``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "CLEAR"


CLEAR = _Clear()


class ResolverEntry(NamedTuple):
    """One lbmrd (``resolver_unicast_daemon``) or SRS (``resolver_service``) entry:
    ``[Iface[:SrcPort]->]IP:Port``.  ``interface``/``source_port`` are None when omitted."""

    address: str
    port: int
    interface: Interface | None = None
    source_port: int | None = None

    def __str__(self) -> str:
        left = ""
        if self.interface is not None:
            left = str(self.interface)
            if self.source_port is not None:
                left += f":{self.source_port}"
            left += "->"
        return f"{left}{self.address}:{self.port}"


class StoreEntry(NamedTuple):
    """``ume_store``: ``DomainID:IP:port:RegID:GroupIDX`` (omitted parts are 0)."""

    address: str
    port: int
    domain_id: int = 0
    registration_id: int = 0
    group_index: int = 0

    def __str__(self) -> str:
        if self.domain_id == self.registration_id == self.group_index == 0:
            return f"{self.address}:{self.port}"
        return (
            f"{self.domain_id}:{self.address}:{self.port}:{self.registration_id}:{self.group_index}"
        )


class StoreGroupEntry(NamedTuple):
    """``ume_store_group``: ``GroupIDX:GroupSZ``."""

    group_index: int
    group_size: int

    def __str__(self) -> str:
        return f"{self.group_index}:{self.group_size}"


class StoreNameEntry(NamedTuple):
    """``ume_store_name``: ``name:RegID:GroupIDX`` (name is the Store's ``context-name``)."""

    name: str
    registration_id: int = 0
    group_index: int = 0

    def __str__(self) -> str:
        if self.registration_id == self.group_index == 0:
            return self.name
        return f"{self.name}:{self.registration_id}:{self.group_index}"


class BrokerEntry(NamedTuple):
    """``broker``: ``IP:port``."""

    address: str
    port: int

    def __str__(self) -> str:
        return f"{self.address}:{self.port}"


def _u32(text: str, what: str) -> int:
    t = text.strip()
    if not t.isdigit() or int(t) > 2**32 - 1:
        raise BadValue(f"{what} {text!r} is not an integer 0..4294967295")
    return int(t)


def _split_host_port(text: str) -> tuple[str, int]:
    host, colon, port = text.strip().rpartition(":")
    if not colon:
        raise BadValue(f"{text!r}: expected IP:port")
    return _host(host), _port(port)


def _resolver_entry(text: str) -> ResolverEntry | _Clear:
    left, arrow, right = text.partition("->")
    if not arrow:
        right, left = left, ""
    address, port = _split_host_port(right)
    if address == "0.0.0.0" and port == 0:
        return CLEAR
    if not arrow:
        return ResolverEntry(address, port)
    left = left.strip()
    source_port: int | None = None
    if left.startswith('"'):
        end = left.find('"', 1)
        if end < 0:
            raise BadValue(f"{text!r}: unterminated device name")
        iface_text, rest = left[: end + 1], left[end + 1 :]
    else:
        iface_text, _, rest = left.partition(":")
        rest = ":" + rest if _ else ""
    if rest:
        if not rest.startswith(":"):
            raise BadValue(f"{text!r}: expected Iface[:SrcPort] before '->'")
        source_port = _port(rest[1:])
    return ResolverEntry(address, port, parse_interface(iface_text), source_port)


def _store_entry(text: str) -> StoreEntry | _Clear:
    parts = text.strip().split(":")
    domain = 0
    if len(parts) >= 3 and parts[0].isdigit() and not re.fullmatch(r"[\d.]+\.[\d.]+", parts[0]):
        domain = _u32(parts[0], "DomainID")
        parts = parts[1:]
    if not 2 <= len(parts) <= 4:
        raise BadValue(f"{text!r}: expected [DomainID:]IP:port[:RegID[:GroupIDX]]")
    address, port = _host(parts[0]), _port(parts[1])
    if address == "0.0.0.0" and port == 0:
        return CLEAR
    regid = _u32(parts[2], "RegID") if len(parts) > 2 else 0
    group = _u32(parts[3], "GroupIDX") if len(parts) > 3 else 0
    return StoreEntry(address, port, domain, regid, group)


def _store_group_entry(text: str) -> StoreGroupEntry | _Clear:
    idx, colon, size = text.strip().partition(":")
    if not colon:
        raise BadValue(f"{text!r}: expected GroupIDX:GroupSZ")
    entry = StoreGroupEntry(_u32(idx, "GroupIDX"), _u32(size, "GroupSZ"))
    return CLEAR if entry == (0, 0) else entry


def _store_name_entry(text: str) -> StoreNameEntry:
    parts = text.strip().split(":")
    if not 1 <= len(parts) <= 3:
        raise BadValue(f"{text!r}: expected name[:RegID[:GroupIDX]]")
    name = CONTEXT_NAME.parse(parts[0])
    if not name:
        raise BadValue(f"{text!r}: the Store name is empty")
    regid = _u32(parts[1], "RegID") if len(parts) > 1 else 0
    group = _u32(parts[2], "GroupIDX") if len(parts) > 2 else 0
    return StoreNameEntry(name, regid, group)


def _broker_entry(text: str) -> BrokerEntry | _Clear:
    address, port = _split_host_port(text)
    if address == "0.0.0.0" and port == 0:
        return CLEAR
    return BrokerEntry(address, port)


class ListType(ValueType):
    """A cumulative list option; entries are comma- or semicolon-separated in one value."""

    __slots__ = ("_entry", "ascending", "form", "max_entries")
    cumulative = True

    def __init__(
        self, entry: Any, form: str, max_entries: int = MAX_LIST_ENTRIES, ascending: bool = False
    ) -> None:
        self._entry = entry
        self.form = form
        self.max_entries = max_entries
        self.ascending = ascending

    def parse(self, text: str) -> tuple[Any, ...]:
        items = [p for p in re.split(r"[,;]", text) if p.strip()]
        if len(items) > MAX_LIST_ENTRIES:
            raise BadValue(f"more than {MAX_LIST_ENTRIES} entries")
        return tuple(self._entry(p) for p in items)

    def merge(self, old: Any, new: Any) -> tuple[Any, ...]:
        acc: list[Any] = list(old or ())
        for entry in new:
            if entry is CLEAR:
                acc = []
                continue
            if self.ascending and acc and entry[0] <= acc[-1][0]:
                raise BadValue(
                    f"group {entry[0]} is not above group {acc[-1][0]}: add groups in ascending order"
                )
            acc.append(entry)
            if len(acc) > self.max_entries:
                raise BadValue(f"at most {self.max_entries} entries")
        return tuple(acc)

    def format(self, value: Any) -> str:
        return ",".join(str(e) for e in value if e is not CLEAR)

    def allowed(self) -> str:
        extra = f", at most {self.max_entries}" if self.max_entries < MAX_LIST_ENTRIES else ""
        return f"{self.form}[,...]{extra}"


UNICAST_DAEMON_LIST = ListType(_resolver_entry, "[Iface[:SrcPort]->]IP:Port (0.0.0.0:0 clears)")
RESOLVER_SERVICE_LIST = ListType(
    _resolver_entry, "[Iface[:SrcPort]->]Host:Port (0.0.0.0:0 clears)", MAX_RESOLVER_SERVICES
)
STORE_LIST = ListType(_store_entry, "[DomainID:]IP:port[:RegID[:GroupIDX]] (0.0.0.0:0 clears)")
STORE_GROUP_LIST = ListType(
    _store_group_entry, "GroupIDX:GroupSZ in ascending order (0:0 clears)", ascending=True
)
STORE_NAME_LIST = ListType(_store_name_entry, "name[:RegID[:GroupIDX]]")
BROKER_LIST = ListType(_broker_entry, "IP:port (0.0.0.0:0 clears)")
