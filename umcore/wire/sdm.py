"""SDM: UM's Self-Describing Messages -- named, typed fields carried with their names.

Theory of operation
-------------------
An SDM message (seed 003 section 10.13) is a set of fields, each a **name**, a **type** and a
**value**; a name appears once per message (arrays hold repeats), a nested message may reuse
its parent's names, and the receiver finds fields by name whatever their order.
:class:`SdmMessage` is a mutable mapping from names to values that also remembers each field's
:class:`SdmType`: ``msg["px"] = 1.5`` adds a DOUBLE (the type follows the Python value, see
:func:`infer_type`), ``msg.add("qty", 10, SdmType.INT32)`` picks the type, ``msg["qty"] = 20``
keeps the field's type, ``del msg["px"]`` deletes; iteration is in insertion order and
:meth:`SdmMessage.fields` yields :class:`SdmField` triples.  A value is checked against its
type when it is set, so a value that cannot be encoded fails where it was put in.

UM has not published SDM's byte layout (only the API and "endian conflicts are handled"), so
**the bytes are pyum's own** (every row of :data:`INFERRED`): an SDM message from a UM
application does not parse here, nor ours there.  The layout::

    header (16): magic 0x53444D31 ("SDM1") in the writer's byte order | version (u8, 1)
                 | flags (u8, 0) | reserved (u16) | field count (u32) | total length (u32)
    field:       type (u8) | reserved (u8) | name length (u16) | value length (u32)
                 | name (UTF-8) | value
    values:      scalars as PDM's (see :mod:`umcore.wire.pdm`), strings UTF-8 without NUL,
                 BLOB raw, MESSAGE a complete SDM message, arrays an element count (u32) then
                 the elements (fixed-size ones packed, variable ones each a u32 length + bytes)

Decoding checks every length against the buffer and raises :class:`SdmError` (a
:class:`~umcore.errors.RemoteProtocolError`) for anything wrong; values that cannot be encoded
raise :class:`SdmEncodeError` (a :class:`~umcore.errors.LocalProtocolError`).
"""

from __future__ import annotations

import datetime as _dt
import decimal
import struct
from collections.abc import Iterator, MutableMapping
from enum import IntEnum
from typing import Any, NamedTuple

from umcore.errors import LocalProtocolError, RemoteProtocolError
from umcore.wire.msgtypes import UMDecimal, UMTimestamp

__all__ = [
    "INFERRED",
    "SdmEncodeError",
    "SdmError",
    "SdmField",
    "SdmMessage",
    "SdmType",
    "infer_type",
]

MAGIC = 0x53444D31
SDM_VERSION = 1
HDR_LEN = 16
FIELD_HDR_LEN = 8
MAX_NAME_LEN = 255  # bytes of a field name (ours; UM documents a name limit, not its value here)
MAX_NESTING = 32  # MESSAGE in MESSAGE: bounds recursion on hostile input

INFERRED: dict[str, str] = {
    "whole format": "UM has not published SDM's bytes: header, field and value layouts are "
    "pyum's; not byte-compatible with UM's SDM library",
    "type codes": "SDM type codes reuse PDM's codes for the same types (no FIX_ types)",
    "name limit": f"field names are 1..{MAX_NAME_LEN} UTF-8 bytes",
    "byte order": "little-endian written by default, both read (the magic tells)",
}

_HDR = {o: struct.Struct(o + "IBBHII") for o in "<>"}
_FIELD = {o: struct.Struct(o + "BBHI") for o in "<>"}
_U32 = {o: struct.Struct(o + "I") for o in "<>"}


class SdmError(RemoteProtocolError):
    """Bytes that are not an SDM message we can parse."""

    def __init__(self, message: str, *, offset: int | None = None) -> None:
        super().__init__(message, record="SDM", offset=offset)


class SdmEncodeError(LocalProtocolError):
    """A field or value that an SDM message cannot hold."""


class SdmType(IntEnum):
    """The SDM field types (codes: see :data:`INFERRED`)."""

    BOOLEAN = 0
    INT8 = 1
    UINT8 = 2
    INT16 = 3
    UINT16 = 4
    INT32 = 5
    UINT32 = 6
    INT64 = 7
    UINT64 = 8
    FLOAT = 9
    DOUBLE = 10
    DECIMAL = 11
    TIMESTAMP = 12
    STRING = 14
    UNICODE = 16
    BLOB = 17
    MESSAGE = 18
    BOOLEAN_ARR = 19
    INT8_ARR = 20
    UINT8_ARR = 21
    INT16_ARR = 22
    UINT16_ARR = 23
    INT32_ARR = 24
    UINT32_ARR = 25
    INT64_ARR = 26
    UINT64_ARR = 27
    FLOAT_ARR = 28
    DOUBLE_ARR = 29
    DECIMAL_ARR = 30
    TIMESTAMP_ARR = 31
    STRING_ARR = 33
    UNICODE_ARR = 35
    BLOB_ARR = 36
    MESSAGE_ARR = 37

    @property
    def is_array(self) -> bool:
        return self >= SdmType.BOOLEAN_ARR

    @property
    def base(self) -> SdmType:
        return SdmType(self - 19) if self.is_array else self

    def array(self) -> SdmType:
        return self if self.is_array else SdmType(self + 19)


_CODES: dict[SdmType, str] = {
    SdmType.BOOLEAN: "?",
    SdmType.INT8: "b",
    SdmType.UINT8: "B",
    SdmType.INT16: "h",
    SdmType.UINT16: "H",
    SdmType.INT32: "i",
    SdmType.UINT32: "I",
    SdmType.INT64: "q",
    SdmType.UINT64: "Q",
    SdmType.FLOAT: "f",
    SdmType.DOUBLE: "d",
    SdmType.DECIMAL: "bq",
    SdmType.TIMESTAMP: "II",
}
_SIZES = {t: struct.calcsize("<" + c) for t, c in _CODES.items()}
_SCALAR = {o: {t: struct.Struct(o + c) for t, c in _CODES.items()} for o in "<>"}
_BY_CODE: dict[int, SdmType] = {int(t): t for t in SdmType}
# Per type, read once (enum properties are slow on the data path): array?, element type.
_ARRAY: dict[SdmType, bool] = {t: t.is_array for t in SdmType}
_BASE: dict[SdmType, SdmType] = {t: t.base for t in SdmType}


class SdmField(NamedTuple):
    """One field: name, type, value."""

    name: str
    type: SdmType
    value: Any


def infer_type(value: Any) -> SdmType:
    """The type a Python value gets when no type is given."""
    if isinstance(value, bool):
        return SdmType.BOOLEAN
    if isinstance(value, int):
        return SdmType.INT64
    if isinstance(value, float):
        return SdmType.DOUBLE
    if isinstance(value, str):
        return SdmType.STRING
    if isinstance(value, (bytes, bytearray, memoryview)):
        return SdmType.BLOB
    if isinstance(value, (UMDecimal, decimal.Decimal)):
        return SdmType.DECIMAL
    if isinstance(value, (UMTimestamp, _dt.datetime)):
        return SdmType.TIMESTAMP
    if isinstance(value, SdmMessage):
        return SdmType.MESSAGE
    if isinstance(value, (list, tuple)):
        if not value:
            raise SdmEncodeError("an empty array needs an explicit type")
        return infer_type(value[0]).array()
    raise SdmEncodeError(f"no SDM type for {type(value).__name__}")


def _normalise(ftype: SdmType, value: Any, name: str) -> Any:
    """The value as the message stores it; :class:`SdmEncodeError` when it does not fit."""
    if ftype.is_array:
        if not isinstance(value, (list, tuple)):
            raise SdmEncodeError(f"{name}: {ftype.name} wants a list")
        return [_normalise(ftype.base, v, name) for v in value]
    if ftype is SdmType.DECIMAL:
        if isinstance(value, (decimal.Decimal, int)) and not isinstance(value, bool):
            try:
                return UMDecimal.from_decimal(value)
            except LocalProtocolError as exc:
                raise SdmEncodeError(f"{name}: {exc}") from None
        if isinstance(value, tuple) and len(value) == 2:
            value = UMDecimal(*value)
    elif ftype is SdmType.TIMESTAMP:
        if isinstance(value, _dt.datetime):
            try:
                return UMTimestamp.from_datetime(value)
            except LocalProtocolError as exc:
                raise SdmEncodeError(f"{name}: {exc}") from None
        if isinstance(value, tuple) and len(value) == 2:
            value = UMTimestamp(*value)
    elif ftype in (SdmType.STRING, SdmType.UNICODE):
        if not isinstance(value, str):
            raise SdmEncodeError(f"{name}: {ftype.name} wants str")
        return value
    elif ftype is SdmType.BLOB:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise SdmEncodeError(f"{name}: BLOB wants bytes")
        return bytes(value)
    elif ftype is SdmType.MESSAGE:
        if not isinstance(value, SdmMessage):
            raise SdmEncodeError(f"{name}: MESSAGE wants an SdmMessage")
        return value
    elif ftype is SdmType.BOOLEAN:
        if not isinstance(value, (bool, int)) or value not in (0, 1):
            raise SdmEncodeError(f"{name}: BOOLEAN wants a bool")
        return bool(value)
    if ftype in (SdmType.FLOAT, SdmType.DOUBLE) and isinstance(value, int):
        value = float(value)
    flat = value if ftype in (SdmType.DECIMAL, SdmType.TIMESTAMP) else (value,)
    if ftype is SdmType.DECIMAL:
        flat = (value[1], value[0])
    try:
        struct.pack("<" + _CODES[ftype], *flat)
    except (struct.error, TypeError) as exc:
        raise SdmEncodeError(f"{name}: {value!r} is not a {ftype.name}: {exc}") from None
    return value


class SdmMessage(MutableMapping[str, Any]):
    """A self-describing message: a mapping of field names to values, each with a type."""

    __slots__ = ("_fields",)

    def __init__(self, fields: dict[str, Any] | None = None) -> None:
        self._fields: dict[str, tuple[SdmType, Any]] = {}
        for name, value in (fields or {}).items():
            self.add(name, value)

    # -- the mapping -----------------------------------------------------------------------

    def __getitem__(self, name: str) -> Any:
        return self._fields[name][1]

    def __setitem__(self, name: str, value: Any) -> None:
        """Set a value; a new field's type follows the value, an existing field keeps its
        type (use :meth:`set` with a type to change it)."""
        if name in self._fields:
            ftype = self._fields[name][0]
            self._fields[name] = (ftype, _normalise(ftype, value, name))
        else:
            self.add(name, value)

    def __delitem__(self, name: str) -> None:
        del self._fields[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SdmMessage):
            return NotImplemented
        return list(self._fields.items()) == list(other._fields.items())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(f"{n!r}: {t.name} {v!r}" for n, (t, v) in self._fields.items())
        return f"SdmMessage({{{inner}}})"

    # -- UM's operations -------------------------------------------------------------------

    def add(self, name: str, value: Any, type: SdmType | None = None) -> None:
        """Add a new field (UM's add: a name appears once; :class:`SdmEncodeError` if taken)."""
        if name in self._fields:
            raise SdmEncodeError(f"field {name!r} already exists")
        self._check_name(name)
        ftype = infer_type(value) if type is None else SdmType(type)
        self._fields[name] = (ftype, _normalise(ftype, value, name))

    def set(self, name: str, value: Any, type: SdmType | None = None) -> None:
        """Set a field, adding it if absent; ``type`` changes an existing field's type."""
        if type is None and name in self._fields:
            self[name] = value
            return
        self._check_name(name)
        ftype = infer_type(value) if type is None else SdmType(type)
        self._fields[name] = (ftype, _normalise(ftype, value, name))

    def type_of(self, name: str) -> SdmType:
        return self._fields[name][0]

    def field(self, name: str) -> SdmField:
        ftype, value = self._fields[name]
        return SdmField(name, ftype, value)

    def fields(self) -> Iterator[SdmField]:
        """Every field, in order (UM's iterator)."""
        for name, (ftype, value) in self._fields.items():
            yield SdmField(name, ftype, value)

    @staticmethod
    def _check_name(name: str) -> None:
        if not isinstance(name, str) or not 1 <= len(name.encode("utf-8")) <= MAX_NAME_LEN:
            raise SdmEncodeError(f"field name {name!r}: 1..{MAX_NAME_LEN} UTF-8 bytes")

    # -- serialise -------------------------------------------------------------------------

    def to_bytes(self, *, big_endian: bool = False) -> bytes:
        order = ">" if big_endian else "<"
        fhdr = _FIELD[order]
        parts = [b""]
        for name, (ftype, value) in self._fields.items():
            raw = _encode_value(ftype, value, order)
            encoded = name.encode("utf-8")
            parts.append(fhdr.pack(ftype, 0, len(encoded), len(raw)))
            parts.append(encoded)
            parts.append(raw)
        total = HDR_LEN + sum(len(p) for p in parts)
        parts[0] = _HDR[order].pack(MAGIC, SDM_VERSION, 0, 0, len(self._fields), total)
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> SdmMessage:
        """Parse ``data``; raises :class:`SdmError`."""
        return _parse(memoryview(data).cast("B"), 0)


def _encode_value(ftype: SdmType, value: Any, order: str) -> bytes:
    if ftype.is_array:
        base = ftype.base
        head = _U32[order].pack(len(value))
        if base in _CODES:
            flat: list[Any] = []
            for v in value:
                flat.extend(_flat(base, v))
            return head + struct.pack(order + _CODES[base] * len(value), *flat)
        u32 = _U32[order]
        parts = [head]
        for v in value:
            raw = _encode_value(base, v, order)
            parts.append(u32.pack(len(raw)))
            parts.append(raw)
        return b"".join(parts)
    scalar = _SCALAR[order].get(ftype)
    if scalar is not None:
        return scalar.pack(*_flat(ftype, value))
    if ftype is SdmType.BLOB:
        return bytes(value)
    if ftype is SdmType.MESSAGE:
        return bytes(value.to_bytes(big_endian=order == ">"))
    return bytes(value.encode("utf-8"))


def _flat(ftype: SdmType, value: Any) -> tuple[Any, ...]:
    if ftype is SdmType.DECIMAL:
        return (value[1], value[0])
    if ftype is SdmType.TIMESTAMP:
        return (value[0], value[1])
    return (value,)


def _parse(buf: memoryview, depth: int) -> SdmMessage:
    size = len(buf)
    if size < HDR_LEN:
        raise SdmError(f"{size} bytes: shorter than the SDM header", offset=0)
    magic = bytes(buf[:4])
    if magic == b"1MDS":
        order = "<"
    elif magic == b"SDM1":
        order = ">"
    else:
        raise SdmError(f"bad magic {magic.hex()}", offset=0)
    _m, version, _flags, _res, count, total = _HDR[order].unpack_from(buf, 0)
    if version != SDM_VERSION:
        raise SdmError(f"SDM version {version} (this library reads 1)", offset=4)
    if total != size:
        raise SdmError(f"header length {total}, {size} bytes given", offset=12)
    msg = SdmMessage()
    fields = msg._fields
    pos = HDR_LEN
    fhdr = _FIELD[order]
    for _ in range(count):
        if pos + FIELD_HDR_LEN > size:
            raise SdmError("field header cut", offset=pos)
        code, _r, name_len, value_len = fhdr.unpack_from(buf, pos)
        ftype = _BY_CODE.get(code)
        if ftype is None:
            raise SdmError(f"field type {code} unknown", offset=pos)
        name_at = pos + FIELD_HDR_LEN
        value_at = name_at + name_len
        end = value_at + value_len
        if end > size:
            raise SdmError("field runs past the message", offset=pos)
        if not 1 <= name_len <= MAX_NAME_LEN:
            raise SdmError(f"field name of {name_len} bytes", offset=pos)
        try:
            name = bytes(buf[name_at:value_at]).decode("utf-8")
        except UnicodeDecodeError:
            raise SdmError("field name is not UTF-8", offset=name_at) from None
        if name in fields:
            raise SdmError(f"field {name!r} appears twice", offset=pos)
        fields[name] = (ftype, _decode_value(ftype, buf, value_at, end, order, depth))
        pos = end
    if pos != size:
        raise SdmError(f"{size - pos} bytes after the last field", offset=pos)
    return msg


def _decode_value(
    ftype: SdmType, buf: memoryview, start: int, end: int, order: str, depth: int
) -> Any:
    if _ARRAY[ftype]:
        base = _BASE[ftype]
        if start + 4 > end:
            raise SdmError("array count cut", offset=start)
        (count,) = _U32[order].unpack_from(buf, start)
        pos = start + 4
        if base in _CODES:
            if count * _SIZES[base] != end - pos:
                raise SdmError(f"{count} elements do not fill {end - pos} bytes", offset=start)
            flat = struct.unpack_from(order + _CODES[base] * count, buf, pos)
            if base is SdmType.DECIMAL:
                return [UMDecimal(flat[2 * k + 1], flat[2 * k]) for k in range(count)]
            if base is SdmType.TIMESTAMP:
                return [UMTimestamp(flat[2 * k], flat[2 * k + 1]) for k in range(count)]
            return list(flat)
        if count > end - pos:  # each element takes at least 4 bytes: bounds the loop
            raise SdmError(f"{count} elements cannot fit {end - pos} bytes", offset=start)
        values = []
        u32 = _U32[order]
        for _ in range(count):
            if pos + 4 > end:
                raise SdmError("element length cut", offset=pos)
            (n,) = u32.unpack_from(buf, pos)
            if pos + 4 + n > end:
                raise SdmError("element runs past its array", offset=pos)
            values.append(_decode_value(base, buf, pos + 4, pos + 4 + n, order, depth))
            pos += 4 + n
        if pos != end:
            raise SdmError("bytes left after the last element", offset=pos)
        return values
    scalar = _SCALAR[order].get(ftype)
    if scalar is not None:
        if end - start != scalar.size:
            raise SdmError(f"{ftype.name} of {end - start} bytes", offset=start)
        flat = scalar.unpack_from(buf, start)
        if ftype is SdmType.DECIMAL:
            return UMDecimal(flat[1], flat[0])
        if ftype is SdmType.TIMESTAMP:
            return UMTimestamp(flat[0], flat[1])
        return flat[0]
    if ftype is SdmType.BLOB:
        return bytes(buf[start:end])
    if ftype is SdmType.MESSAGE:
        if depth >= MAX_NESTING:
            raise SdmError(f"messages nested deeper than {MAX_NESTING}", offset=start)
        try:
            return _parse(buf[start:end], depth + 1)
        except SdmError as exc:
            raise SdmError(
                f"nested message: {exc.message}", offset=start + (exc.offset or 0)
            ) from None
    try:
        return bytes(buf[start:end]).decode("utf-8")
    except UnicodeDecodeError:
        raise SdmError("string is not UTF-8", offset=start) from None
