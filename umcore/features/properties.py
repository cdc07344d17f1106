"""Message properties and application headers: the API over the LBMC codecs.

Theory of operation
-------------------
Both ride in one LBMC APPHDR_CHAIN header (0x07) of the data message (seed 10.9/10.10,
wire-lbmc-ump.md 5 and 8):

- **Message properties** (send-ex flag PROPERTIES): a typed name/value block appended to the
  *end* of the payload; a PROPERTIES_LENGTH element (type 6) of the chain gives its length.  The
  block codec is :mod:`umcore.wire.lbmc_props`.  An empty :class:`MessageProperties` still sends
  a block, so the receiver gets an (empty) properties object rather than None (seed L5220).
- **Application headers** (deprecated, send-ex flag APPHDR_CHAIN): USER_DATA elements (type 5),
  each an integer subtype and bytes.  The subtype travels in the element's 16-bit reserved word
  [inferred: UM's layout of the subtype is not in the dissector]; so subtypes are 0..65535 and
  data at most 251 bytes (the element length is one byte).

:func:`encode_extras` gives the chain header and the payload tail for a send;
:func:`decode_extras` splits a received message back into (data, properties, app headers).
Python types map onto property types as JMS does: bool → BOOLEAN, int → INT when it fits in 32
bits else LONG, float → DOUBLE, str → STRING; :meth:`MessageProperties.set` takes an explicit
type for BYTE/SHORT/FLOAT or to force one.  Decoding raises only
:class:`~umcore.wire.lbmc.LBMCError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from umcore.errors import LocalProtocolError
from umcore.wire import lbmc
from umcore.wire.lbmc_props import (
    PROP_BOOLEAN,
    PROP_BYTE,
    PROP_DOUBLE,
    PROP_FLOAT,
    PROP_INT,
    PROP_LONG,
    PROP_SHORT,
    PROP_STRING,
    Property,
    encode_properties,
    split_properties,
)

__all__ = [
    "MAX_APPHDR_DATA",
    "MAX_PROPERTY_NAME",
    "PROP_BOOLEAN",
    "PROP_BYTE",
    "PROP_DOUBLE",
    "PROP_FLOAT",
    "PROP_INT",
    "PROP_LONG",
    "PROP_SHORT",
    "PROP_STRING",
    "AppHeader",
    "MessageProperties",
    "decode_extras",
    "encode_extras",
]

# UM's documented maximum property name length (lbm.h LBM_MSG_MAX_PROPERTY_NAME_LEN - 1 [api]).
MAX_PROPERTY_NAME = 250
# A chain element is next(1) len(1) res(2) data: its one-byte length caps the data at 251.
MAX_APPHDR_DATA = 255 - 4
_RANGES = {
    PROP_BYTE: (-(1 << 7), (1 << 7) - 1),
    PROP_SHORT: (-(1 << 15), (1 << 15) - 1),
    PROP_INT: (-(1 << 31), (1 << 31) - 1),
    PROP_LONG: (-(1 << 63), (1 << 63) - 1),
}

AppHeader = tuple[int, bytes]  # (subtype, data) of one USER_DATA element


class MessageProperties:
    """An ordered set of typed properties (``lbm_msg_properties_t``).

    ``MessageProperties({"a": 1, "b": "x"})`` infers types; ``props.set("n", 7, PROP_SHORT)``
    chooses one.  Reading: ``props["a"]`` (the value), ``props.type_of("a")``, iteration over
    names, ``len(props)``.
    """

    __slots__ = ("_items",)

    def __init__(self, values: Mapping[str, Any] | Iterable[Property] | None = None) -> None:
        self._items: dict[str, Property] = {}
        if values is None:
            return
        if isinstance(values, Mapping):
            for name, value in values.items():
                self.set(name, value)
        else:
            for prop in values:
                self.set(prop.name, prop.value, prop.prop_type)

    @staticmethod
    def _infer(value: Any) -> int:
        if isinstance(value, bool):
            return PROP_BOOLEAN
        if isinstance(value, int):
            lo, hi = _RANGES[PROP_INT]
            return PROP_INT if lo <= value <= hi else PROP_LONG
        if isinstance(value, float):
            return PROP_DOUBLE
        if isinstance(value, str):
            return PROP_STRING
        raise LocalProtocolError(f"no property type for {type(value).__name__}")

    def set(self, name: str, value: Any, prop_type: int | None = None) -> None:
        if not name or len(name.encode()) > MAX_PROPERTY_NAME or "\0" in name:
            raise LocalProtocolError(f"property name must be 1..{MAX_PROPERTY_NAME} bytes")
        ptype = self._infer(value) if prop_type is None else prop_type
        if ptype in _RANGES:
            lo, hi = _RANGES[ptype]
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise LocalProtocolError(f"property {name!r}: {value!r} does not fit type {ptype}")
        elif ptype == PROP_BOOLEAN:
            value = bool(value)
        elif ptype in (PROP_FLOAT, PROP_DOUBLE):
            if isinstance(value, (bool, str)) or not isinstance(value, (int, float)):
                raise LocalProtocolError(f"property {name!r}: {value!r} is not a number")
            value = float(value)
        elif ptype == PROP_STRING:
            if not isinstance(value, str) or "\0" in value:
                raise LocalProtocolError(f"property {name!r}: STRING needs a str without NUL")
        else:
            raise LocalProtocolError(f"property {name!r}: unknown type {ptype}")
        self._items[name] = Property(name, ptype, value)

    def __getitem__(self, name: str) -> Any:
        return self._items[name].value

    def type_of(self, name: str) -> int:
        return self._items[name].prop_type

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> list[Property]:
        return list(self._items.values())

    def as_dict(self) -> dict[str, Any]:
        return {p.name: p.value for p in self._items.values()}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageProperties):
            return NotImplemented
        return self.items() == other.items()

    def __repr__(self) -> str:
        return f"MessageProperties({self.as_dict()!r})"


def encode_extras(
    properties: MessageProperties | None,
    app_headers: Sequence[AppHeader | lbmc.ApphdrElement] = (),
) -> tuple[list[lbmc.Header], bytes]:
    """The APPHDR_CHAIN header list (empty when there is nothing) and the payload tail."""
    if properties is None and not app_headers:
        return [], b""
    elements: list[lbmc.ApphdrElement] = []
    for item in app_headers:
        if type(item) is lbmc.ApphdrElement:
            # A ready element (a Spectrum channel or an HF sequence number: umcore.features.
            # spectrum / hotfailover) rides in the chain as it is.
            elements.append(item)
            continue
        subtype, data = item  # type: ignore[misc]  # (the element case is handled above)
        if not 0 <= subtype <= 0xFFFF:
            raise LocalProtocolError(f"application header subtype out of range: {subtype}")
        if len(data) > MAX_APPHDR_DATA:
            raise LocalProtocolError(f"application header data over {MAX_APPHDR_DATA} bytes")
        elements.append(lbmc.ApphdrElement(lbmc.APPHDR_ELEM_USER, bytes(data), subtype))
    tail = b""
    if properties is not None:
        # First in the chain: tshark 4.0.17 recognises the properties-length element only there
        # (after a USER_DATA element it shows it as a generic element).
        tail = encode_properties(properties.items())
        elements.insert(0, lbmc.ApphdrChain.for_properties(len(tail)).elements[0])
    return [lbmc.ApphdrChain(tuple(elements))], tail


def decode_extras(
    headers: Iterable[lbmc.Header], payload: bytes
) -> tuple[bytes, MessageProperties | None, list[AppHeader]]:
    """(application data, properties or None, application headers) of a received message."""
    chain = None
    for h in headers:
        if type(h) is lbmc.ApphdrChain:
            chain = h
            break
    if chain is None:
        return payload, None, []
    app = [(e.res, e.data) for e in chain.elements if e.elem_type == lbmc.APPHDR_ELEM_USER]
    if chain.properties_length() is None:
        return payload, None, app
    data, decoded = split_properties(payload, chain)
    props = MessageProperties()
    for prop in decoded:
        props._items[prop.name] = prop  # a peer's values as sent: no local validation
    return data, props, app
