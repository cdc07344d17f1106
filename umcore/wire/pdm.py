"""PDM: UM's Pre-Defined Messages -- definitions, messages, serialise and deserialise.

Theory of operation
-------------------
A PDM **definition** (seed 003 section 10.14) has an id, a major and minor version and a list of
fields; each field has a name (all integers or all strings in one definition), a
:class:`FieldType`, required or optional, and for FIX_STRING/FIX_UNICODE a fixed length and
for ``*_ARR`` types an optional fixed element count.  A **message** holds one value per field
and serialises to bytes that a receiver holding the same definition (or a definition cache, or
the definition carried in the message) parses back.

The bytes (UM's PDM wire format as Wireshark's ``packet-lbmpdm.c``, contributed by Informatica,
describes it; tshark 4.0 decodes what we write, see ``tests/msgfmt``)::

    message header (16):  magic 0xA71CCAFE in the writer's byte order | ver<<4|type (u8)
                          | next_hdr (u8) | def major (u8) | def minor (u8) | def id (u32)
                          | total length (u32, header included)
    segments, chained by next_hdr (0 data, 1 offset table, 2 definition, 0xFF end):
      segment header (8): next_hdr (u8) | flags (u8) | reserved (u16) | data length (u32)
      definition:   id (i32) | field count (i32) | names type (u8: 0 string, 1 integer)
                    | finalized (u8) | major (u8) | minor (u8) | fixed-required section
                    length (u32) | field info length (u32), then per field: [entry length (u32),
                    string names only] id (u32) | len (u32) | fixed string length (u32) | array
                    elements (u32) | required (u8) | fixed (u8) | integer name (i32) | string
                    name length (i32) | [NUL-terminated name] | type (u16)
      offset table: (field id u32, offset u32) for every set field outside the fixed-required
                    section; offsets count from the start of the data segment's data
      data:         the fixed-required fields packed back to back in definition order, then
                    the other set fields, each where the offset table says

Field ids are the fields' positions in the definition.  A *fixed-required* field (required,
fixed length: scalars, decimals, timestamps, fixed strings, fixed-size arrays of those) has no
prefix and a fixed place; every other field is found through the offset table; a variable
field is a u32 length then its bytes; an array of variable elements is a u32 total length then
each element as a u32 length and its bytes.

Everything the public description leaves open is decided in :data:`INFERRED` (one table, so a
capture from a real UM application that disagrees points at the row to change).  What is
byte-compatible and what is not is summed up in the README: the header, segment chain,
definition segment, offset table, fixed-required layout, type codes, decimal and timestamp
layouts and both byte orders are UM's as published; the rows of :data:`INFERRED` are ours.

Performance: a finalised definition compiles one :class:`struct.Struct` per byte order for its
fixed-required section; a definition whose fields are all fixed-required (the common market
data record) also gets a whole-message struct whose constant prefix (header and segment
headers) is packed in the same call, so serialising is one ``pack`` and parsing one prefix check
and one ``unpack_from``.

Decoding never trusts a length: every read is bounds-checked and anything wrong raises
:class:`PdmError` (a :class:`~umcore.errors.RemoteProtocolError`) naming the offset; a message
whose definition is unknown or whose version differs from the one the receiver insists on
raises :class:`PdmDefinitionError`, a :class:`PdmError`.  Values we are asked to encode that do
not fit raise :class:`PdmEncodeError` (a :class:`~umcore.errors.LocalProtocolError`).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import operator
import struct
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from enum import IntEnum
from typing import Any, Generic, TypeVar

from umcore.errors import LocalProtocolError, RemoteProtocolError
from umcore.wire.msgtypes import UMDecimal, UMTimestamp

__all__ = [
    "INFERRED",
    "FieldInfo",
    "FieldType",
    "PdmCodec",
    "PdmDefinition",
    "PdmDefinitionCache",
    "PdmDefinitionError",
    "PdmEncodeError",
    "PdmError",
    "PdmField",
    "PdmMessage",
    "codec",
    "dumps",
    "loads",
    "message",
]

# --------------------------------------------------------------------------------------------
# Constants of the wire format (public: packet-lbmpdm.c)

MAGIC = 0xA71CCAFE
PDM_VERSION = 1
HDR_DATA = 0
HDR_OFFSET_TABLE = 1
HDR_DEFINITION = 2
HDR_END = 0xFF
NAMES_STRING = 0
NAMES_INT = 1
SEGMENT_IGNORE_FLAG = 0x80  # PDM_IGNORE_FLAG in the published header

_MSG_HDR = {o: struct.Struct(o + "IBBBBII") for o in "<>"}
_SEG_HDR = {o: struct.Struct(o + "BBHI") for o in "<>"}
_DEFN_HDR = {o: struct.Struct(o + "iiBBBBII") for o in "<>"}
_FIELD_INFO = {o: struct.Struct(o + "IIIIBBii") for o in "<>"}
_U32 = {o: struct.Struct(o + "I") for o in "<>"}
_U16 = {o: struct.Struct(o + "H") for o in "<>"}
_OFS_ENTRY = {o: struct.Struct(o + "II") for o in "<>"}
MSG_HDR_LEN = 16
SEG_HDR_LEN = 8
DEFN_HDR_LEN = 20
FIELD_INFO_LEN = 26  # before the optional name and the u16 type

# --------------------------------------------------------------------------------------------
# Limits (ours: they bound what a hostile definition can make us compile or allocate)

MAX_FIELDS = 65_535  # fields in one definition; a definition from the wire is bounded anyway
MAX_ARRAY_ELEMENTS = 65_536  # declared element count of a fixed-size array (bounds its struct)
MAX_FIXED_STR_LEN = 65_535  # declared FIX_STRING/FIX_UNICODE length (bounds its struct)
MAX_NESTING = 32  # MESSAGE fields inside MESSAGE fields: bounds recursion on hostile input
MAX_DEFINITION_ID = (1 << 31) - 1  # the definition segment carries the id as int32

# --------------------------------------------------------------------------------------------
# Inferred choices: the one place where pyum decides what the public description leaves open.

INFERRED: dict[str, str] = {
    "header type nibble": "low nibble of ver_type is 1 on what we write; any value is accepted",
    "segment order": "definition (if included), offset table, data; the offset table is always "
    "written, even empty, because the published decoder finds fields only through it",
    "fixed string size": "a FIX_STRING/FIX_UNICODE element takes fixed_str_len + 1 bytes "
    "(room for C's NUL); the value is NUL-padded and ends at its first NUL",
    "variable string": "STRING/UNICODE values carry no NUL; UNICODE and FIX_UNICODE are UTF-8, "
    "STRING and FIX_STRING are UTF-8 too (ASCII is a subset)",
    "variable field len": "a variable-length field's definition len is 0",
    "variable-size array": "an array without a declared size has num_arr_elem 0 and is a u32 "
    "byte length then its elements (fixed elements packed, variable ones u32 length + bytes)",
    "string-name entry": "a string-named field's entry length counts the bytes after itself; "
    "its integer name is 0 and its string name length counts the NUL",
    "field info length": "field_info_len is the byte length of all field entries",
    "definition flags": "finalized is 1 on what we write",
    "nested message": "a MESSAGE value is a complete PDM message (own header) as a variable field",
    "unset optional": "an unset optional field is absent from the offset table",
    "byte order": "we write little-endian by default (UM writes its host's order); both are read",
    "ignore flag": "an unknown segment type is skipped if its flags have 0x80, refused otherwise",
    "version match": "a receiver holding a definition of the message's id reads with it only "
    "if major and minor match too (else PdmDefinitionError), even when the message carries its "
    "own; the cache is looked up by exact (id, major, minor)",
}


class PdmError(RemoteProtocolError):
    """Bytes that are not a PDM message we can parse."""

    def __init__(self, message: str, *, offset: int | None = None, record: str = "PDM") -> None:
        super().__init__(message, record=record, offset=offset)


class PdmDefinitionError(PdmError):
    """The message's definition is unknown, or not the version the receiver holds."""


class PdmEncodeError(LocalProtocolError):
    """A definition or a value we were asked to serialise cannot be encoded."""


class FieldType(IntEnum):
    """UM's PDM field types (the codes are the wire's)."""

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
    FIX_STRING = 13
    STRING = 14
    FIX_UNICODE = 15
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
    FIX_STRING_ARR = 32
    STRING_ARR = 33
    FIX_UNICODE_ARR = 34
    UNICODE_ARR = 35
    BLOB_ARR = 36
    MESSAGE_ARR = 37

    @property
    def is_array(self) -> bool:
        return self >= FieldType.BOOLEAN_ARR

    @property
    def base(self) -> FieldType:
        """The element type of an array type (itself for a scalar type)."""
        return FieldType(self - 19) if self.is_array else self


_ARRAY_OFFSET = 19
# struct code and size of the fixed-size base types
_CODES: dict[FieldType, str] = {
    FieldType.BOOLEAN: "?",
    FieldType.INT8: "b",
    FieldType.UINT8: "B",
    FieldType.INT16: "h",
    FieldType.UINT16: "H",
    FieldType.INT32: "i",
    FieldType.UINT32: "I",
    FieldType.INT64: "q",
    FieldType.UINT64: "Q",
    FieldType.FLOAT: "f",
    FieldType.DOUBLE: "d",
    FieldType.DECIMAL: "bq",  # exponent then mantissa
    FieldType.TIMESTAMP: "II",  # seconds then microseconds
}
_FIX_STRINGS = (FieldType.FIX_STRING, FieldType.FIX_UNICODE)
_VARIABLE = (FieldType.STRING, FieldType.UNICODE, FieldType.BLOB, FieldType.MESSAGE)
_PLAIN = frozenset(_CODES) - {FieldType.DECIMAL, FieldType.TIMESTAMP}


class _Unset:
    """The value of a field nobody set."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


class FieldInfo:
    """One field of a definition (UM's PDMFieldInfo); built by :meth:`PdmDefinition.add_field`."""

    __slots__ = (
        "_base",
        "_codes",
        "_is_array",
        "_nflat",
        "_plain",
        "elem_len",
        "fixed",
        "fixed_required",
        "fixed_str_len",
        "id",
        "length",
        "name",
        "num_arr_elem",
        "required",
        "type",
    )

    def __init__(
        self,
        fid: int,
        name: int | str,
        ftype: FieldType,
        required: bool,
        fixed_str_len: int,
        num_arr_elem: int,
    ) -> None:
        self.id = fid
        self.name = name
        self.type = ftype
        self.required = required
        self.fixed_str_len = fixed_str_len
        self.num_arr_elem = num_arr_elem
        base = ftype.base
        if base in _FIX_STRINGS:
            elem_len = fixed_str_len + 1
        elif base in _CODES:
            elem_len = struct.calcsize("<" + _CODES[base])
        else:
            elem_len = 0
        self.elem_len = elem_len
        self.fixed = elem_len > 0 and (not ftype.is_array or num_arr_elem > 0)
        self.length = (elem_len * (num_arr_elem if ftype.is_array else 1)) if self.fixed else 0
        self.fixed_required = self.fixed and required
        self._plain = ftype in _PLAIN  # one struct item, no conversion
        self._base = base  # (enum properties are slow on the data path)
        self._is_array = ftype.is_array
        if not self.fixed:
            self._codes, self._nflat = "", 0
        elif base in _FIX_STRINGS:
            self._codes, self._nflat = f"{self.length}s", 1
        elif ftype.is_array:
            code = _CODES[base]
            self._codes = code * num_arr_elem if len(code) > 1 else f"{num_arr_elem}{code}"
            self._nflat = num_arr_elem * len(code)
        else:
            self._codes, self._nflat = _CODES[base], len(_CODES[base])

    def __repr__(self) -> str:
        extra = f", fixed_str_len={self.fixed_str_len}" if self.fixed_str_len else ""
        extra += f", num_arr_elem={self.num_arr_elem}" if self.num_arr_elem else ""
        return (
            f"FieldInfo(id={self.id}, name={self.name!r}, type={self.type.name}, "
            f"required={self.required}{extra})"
        )

    def same_layout(self, other: FieldInfo) -> bool:
        return (self.name, self.type, self.required, self.fixed_str_len, self.num_arr_elem) == (
            other.name,
            other.type,
            other.required,
            other.fixed_str_len,
            other.num_arr_elem,
        )

    # -- fixed fields: to and from the flat tuple of a precompiled struct ---------------------

    def _flatten(self, value: Any, out: list[Any]) -> None:
        base = self._base
        if base in _FIX_STRINGS:
            out.append(self._fix_bytes(value))
        elif not self._is_array:
            out.extend(_scalar_flat(base, value, self))
        else:
            if len(value) != self.num_arr_elem:
                raise PdmEncodeError(
                    f"field {self.name!r}: {len(value)} elements, the definition says "
                    f"{self.num_arr_elem}"
                )
            if base in _PLAIN:
                out.extend(value)
            else:
                for v in value:
                    out.extend(_scalar_flat(base, v, self))

    def _fix_bytes(self, value: Any) -> bytes:
        items = value if self.type.is_array else (value,)
        if self.type.is_array and len(items) != self.num_arr_elem:
            raise PdmEncodeError(
                f"field {self.name!r}: {len(items)} elements, the definition says "
                f"{self.num_arr_elem}"
            )
        return b"".join(self._fix_one(item) for item in items)

    def _fix_one(self, item: Any) -> bytes:
        width = self.fixed_str_len
        raw = _text_bytes(item, self)
        if len(raw) > width or b"\0" in raw:
            raise PdmEncodeError(
                f"field {self.name!r}: {raw[:40]!r} does not fit FIX length {width} "
                "(or holds a NUL)"
            )
        return raw.ljust(width + 1, b"\0")

    def _unflatten(self, flat: Sequence[Any], i: int) -> Any:
        if self._plain:
            return flat[i]
        base = self._base
        if base in _FIX_STRINGS:
            raw: bytes = flat[i]
            step = self.elem_len
            texts = [_fix_text(raw[k : k + step], self) for k in range(0, len(raw), step)]
            return texts if self._is_array else texts[0]
        if not self._is_array:
            if base is FieldType.DECIMAL:
                return UMDecimal(flat[i + 1], flat[i])
            if base is FieldType.TIMESTAMP:
                return UMTimestamp(flat[i], flat[i + 1])
            return flat[i]
        n = self.num_arr_elem
        if base in _PLAIN:
            return list(flat[i : i + n])
        if base is FieldType.DECIMAL:
            return [UMDecimal(flat[i + 2 * k + 1], flat[i + 2 * k]) for k in range(n)]
        return [UMTimestamp(flat[i + 2 * k], flat[i + 2 * k + 1]) for k in range(n)]

    # -- fields outside the fixed-required section ------------------------------------------

    def _encode(self, value: Any, order: str) -> bytes:
        if self.fixed:
            flat: list[Any] = []
            self._flatten(value, flat)
            try:
                return struct.pack(order + self._codes, *flat)
            except struct.error as exc:
                raise PdmEncodeError(f"field {self.name!r}: {exc}") from None
        u32 = _U32[order]
        base = self.type.base
        if not self.type.is_array:
            raw = _variable_bytes(base, value, order, self)
            return u32.pack(len(raw)) + raw
        if self.num_arr_elem and len(value) != self.num_arr_elem:
            raise PdmEncodeError(
                f"field {self.name!r}: {len(value)} elements, the definition says "
                f"{self.num_arr_elem}"
            )
        if base in _VARIABLE:
            parts = []
            for v in value:
                raw = _variable_bytes(base, v, order, self)
                parts.append(u32.pack(len(raw)))
                parts.append(raw)
            body = b"".join(parts)
        elif base in _FIX_STRINGS:
            body = b"".join(self._fix_one(v) for v in value)
        else:
            flat = []
            for v in value:
                flat.extend(_scalar_flat(base, v, self))
            try:
                body = struct.pack(order + _CODES[base] * len(value), *flat)
            except struct.error as exc:
                raise PdmEncodeError(f"field {self.name!r}: {exc}") from None
        return u32.pack(len(body)) + body

    def _decode(self, buf: memoryview, pos: int, end: int, ctx: _Ctx) -> tuple[Any, int]:
        """The value at ``pos`` (bytes up to ``end`` are available) and where it ends."""
        order = ctx.order
        if self.fixed:
            stop = pos + self.length
            if stop > end:
                raise PdmError(f"field {self.name!r} runs past the data segment", offset=pos)
            flat = struct.unpack_from(order + self._codes, buf, pos)
            return self._unflatten(flat, 0), stop
        if pos + 4 > end:
            raise PdmError(f"field {self.name!r}: length past the data segment", offset=pos)
        (size,) = _U32[order].unpack_from(buf, pos)
        start, stop = pos + 4, pos + 4 + size
        if stop > end:
            raise PdmError(f"field {self.name!r}: {size} bytes past the data segment", offset=pos)
        base = self.type.base
        if not self.type.is_array:
            return _variable_value(base, buf[start:stop], ctx, self, start), stop
        values: list[Any] = []
        if base in _VARIABLE:
            p = start
            while p < stop:
                if p + 4 > stop:
                    raise PdmError(f"field {self.name!r}: element length cut", offset=p)
                (n,) = _U32[order].unpack_from(buf, p)
                if p + 4 + n > stop:
                    raise PdmError(f"field {self.name!r}: element past its array", offset=p)
                values.append(_variable_value(base, buf[p + 4 : p + 4 + n], ctx, self, p + 4))
                p += 4 + n
        else:
            if size % self.elem_len:
                raise PdmError(
                    f"field {self.name!r}: {size} bytes is not a whole number of elements",
                    offset=pos,
                )
            count = size // self.elem_len
            if base in _FIX_STRINGS:
                step = self.elem_len
                values = [_fix_text(buf[k : k + step], self) for k in range(start, stop, step)]
            else:
                flat = struct.unpack_from(order + _CODES[base] * count, buf, start)
                if base in _PLAIN:
                    values = list(flat)
                elif base is FieldType.DECIMAL:
                    values = [UMDecimal(flat[2 * k + 1], flat[2 * k]) for k in range(count)]
                else:
                    values = [UMTimestamp(flat[2 * k], flat[2 * k + 1]) for k in range(count)]
        if self.num_arr_elem and len(values) != self.num_arr_elem:
            raise PdmError(
                f"field {self.name!r}: {len(values)} elements, the definition says "
                f"{self.num_arr_elem}",
                offset=pos,
            )
        return values, stop


def _scalar_flat(base: FieldType, value: Any, field: FieldInfo) -> tuple[Any, ...]:
    if base is FieldType.DECIMAL:
        if isinstance(value, (decimal.Decimal, int)) and not isinstance(value, bool):
            value = UMDecimal.from_decimal(value)
        if not isinstance(value, tuple) or len(value) != 2:
            raise PdmEncodeError(f"field {field.name!r}: DECIMAL wants a UMDecimal or Decimal")
        return (value[1], value[0])
    if base is FieldType.TIMESTAMP:
        if isinstance(value, _dt.datetime):
            value = UMTimestamp.from_datetime(value)
        if not isinstance(value, tuple) or len(value) != 2:
            raise PdmEncodeError(f"field {field.name!r}: TIMESTAMP wants a UMTimestamp")
        return (value[0], value[1])
    return (value,)


def _text_bytes(value: Any, field: FieldInfo) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise PdmEncodeError(f"field {field.name!r}: wants str, got {type(value).__name__}")


def _fix_text(raw: bytes | memoryview, field: FieldInfo) -> str:
    data = bytes(raw).partition(b"\0")[0]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise PdmError(f"field {field.name!r}: not UTF-8") from None


def _variable_bytes(base: FieldType, value: Any, order: str, field: FieldInfo) -> bytes:
    if base is FieldType.BLOB:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise PdmEncodeError(f"field {field.name!r}: BLOB wants bytes")
        return bytes(value)
    if base is FieldType.MESSAGE:
        if isinstance(value, PdmMessage):
            return value.to_bytes()
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value)
        codec_ = getattr(type(value), "__pdm_codec__", None)
        if isinstance(codec_, PdmCodec):
            return codec_.encode(value)
        raise PdmEncodeError(f"field {field.name!r}: MESSAGE wants a PdmMessage")
    return _text_bytes(value, field)


def _variable_value(base: FieldType, raw: memoryview, ctx: _Ctx, field: FieldInfo, at: int) -> Any:
    if base is FieldType.BLOB:
        return bytes(raw)
    if base is FieldType.MESSAGE:
        if ctx.depth >= MAX_NESTING:
            raise PdmError(f"messages nested deeper than {MAX_NESTING}", offset=at)
        try:
            return PdmMessage._parse_nested(raw, ctx)
        except PdmError as exc:
            raise type(exc)(
                f"field {field.name!r}: nested message: {exc.message}",
                offset=at + (exc.offset or 0),
            ) from None
    try:
        return bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise PdmError(f"field {field.name!r}: not UTF-8", offset=at) from None


class _Layout:
    """What a finalised definition precompiles for one byte order."""

    __slots__ = ("defn_bytes", "fixed_struct", "prefix", "whole_struct")

    def __init__(self, defn: PdmDefinition, order: str) -> None:
        codes = "".join(f._codes for f in defn.fixed_required)
        self.fixed_struct = struct.Struct(order + codes)
        self.defn_bytes = defn._definition_segment(order)
        self.prefix = b""
        self.whole_struct: struct.Struct | None = None
        if not defn.others:
            fixed_len = self.fixed_struct.size
            total = MSG_HDR_LEN + 2 * SEG_HDR_LEN + fixed_len
            seg = _SEG_HDR[order]
            self.prefix = (
                _MSG_HDR[order].pack(
                    MAGIC,
                    PDM_VERSION << 4 | 1,
                    HDR_OFFSET_TABLE,
                    defn.version[0],
                    defn.version[1],
                    defn.id,
                    total,
                )
                + seg.pack(HDR_DATA, 0, 0, 0)
                + seg.pack(HDR_END, 0, 0, fixed_len)
            )
            self.whole_struct = struct.Struct(f"{order}{len(self.prefix)}s{codes}")


class PdmDefinition:
    """A PDM definition (UM's PDMDefinition): id, version, fields; finalise before use."""

    def __init__(self, id: int, version: tuple[int, int] = (1, 0), *, int_names: bool = True):
        if not 0 <= id <= MAX_DEFINITION_ID:
            raise PdmEncodeError(f"definition id {id} outside 0..{MAX_DEFINITION_ID}")
        if not all(0 <= v <= 255 for v in version) or len(version) != 2:
            raise PdmEncodeError(f"version {version} is not two numbers 0..255")
        self.id = id
        self.version = (version[0], version[1])
        self.int_names = int_names
        self.fields: list[FieldInfo] = []
        self.finalized = False
        self._by_name: dict[int | str, FieldInfo] = {}
        self.fixed_required: tuple[FieldInfo, ...] = ()
        self.others: tuple[FieldInfo, ...] = ()
        self.all_plain = False
        self._layouts: dict[str, _Layout] = {}

    def __repr__(self) -> str:
        return (
            f"PdmDefinition(id={self.id}, version={self.version}, "
            f"fields={len(self.fields)}, finalized={self.finalized})"
        )

    @property
    def key(self) -> tuple[int, int, int]:
        """(id, major, minor): what the definition cache is indexed by."""
        return (self.id, self.version[0], self.version[1])

    def add_field(
        self,
        name: int | str,
        type: FieldType,
        required: bool = True,
        *,
        fixed_str_len: int = 0,
        num_arr_elem: int = 0,
    ) -> FieldInfo:
        """Add a field (UM's addFieldInfo); returns its :class:`FieldInfo`."""
        if self.finalized:
            raise PdmEncodeError("definition is finalized: no more fields")
        ftype = FieldType(type)
        if self.int_names:
            if (
                not isinstance(name, int)
                or isinstance(name, bool)
                or not -(1 << 31) <= name < (1 << 31)
            ):
                raise PdmEncodeError(f"{name!r}: this definition has int32 field names")
        elif not isinstance(name, str) or not name or "\0" in name or not name.isascii():
            raise PdmEncodeError(f"{name!r}: this definition has non-empty ASCII string names")
        if name in self._by_name:
            raise PdmEncodeError(f"field {name!r} is already defined")
        if len(self.fields) >= MAX_FIELDS:
            raise PdmEncodeError(f"more than {MAX_FIELDS} fields")
        is_fix = ftype.base in _FIX_STRINGS
        if is_fix and not 1 <= fixed_str_len <= MAX_FIXED_STR_LEN:
            raise PdmEncodeError(f"field {name!r}: fixed_str_len must be 1..{MAX_FIXED_STR_LEN}")
        if not is_fix and fixed_str_len:
            raise PdmEncodeError(f"field {name!r}: fixed_str_len only for FIX_ types")
        if not 0 <= num_arr_elem <= MAX_ARRAY_ELEMENTS or (num_arr_elem and not ftype.is_array):
            raise PdmEncodeError(
                f"field {name!r}: num_arr_elem 0..{MAX_ARRAY_ELEMENTS}, arrays only"
            )
        info = FieldInfo(len(self.fields), name, ftype, bool(required), fixed_str_len, num_arr_elem)
        self.fields.append(info)
        self._by_name[name] = info
        return info

    def finalize(self) -> PdmDefinition:
        """Lock the definition and compile its structs (UM's finalizeDef); returns self."""
        if self.finalized:
            return self
        self.finalized = True
        self.fixed_required = tuple(f for f in self.fields if f.fixed_required)
        self.others = tuple(f for f in self.fields if not f.fixed_required)
        self.all_plain = all(f.type in _PLAIN for f in self.fixed_required)
        for order in "<>":
            self._layouts[order] = _Layout(self, order)
        return self

    def _pack_fixed_only(self, order: str, values: Sequence[Any]) -> bytes | None:
        """The whole message in one ``pack`` when every field is fixed-required; None when that
        does not apply or a value is off (the general path then names the problem)."""
        layout = self._layouts[order]
        whole = layout.whole_struct
        if whole is None or UNSET in values or None in values:
            return None
        try:
            if self.all_plain:
                return whole.pack(layout.prefix, *values)
            flat: list[Any] = [layout.prefix]
            for f, v in zip(self.fields, values, strict=True):
                if f._plain:
                    flat.append(v)
                else:
                    f._flatten(v, flat)
            return whole.pack(*flat)
        except (struct.error, PdmEncodeError, TypeError, ValueError):
            return None

    def _unpack_fixed_only(self, data: bytes | bytearray | memoryview) -> list[Any] | None:
        """The values of a message of this definition when it is exactly the precompiled
        fixed-required-only layout (header and segment headers as we write them); None
        otherwise (the general parser then decides)."""
        if not data:
            return None
        order = "<" if data[0] == 0xFE else ">"
        layout = self._layouts.get(order)
        if layout is None or layout.whole_struct is None:
            return None
        whole = layout.whole_struct
        prefix = layout.prefix
        if len(data) != whole.size or data[: len(prefix)] != prefix:
            return None
        flat = whole.unpack_from(data, 0)
        if self.all_plain:
            return list(flat[1:])
        values = []
        i = 1
        try:
            for f in self.fields:
                values.append(f._unflatten(flat, i))
                i += f._nflat
        except PdmError as exc:
            raise PdmError(exc.message, offset=len(prefix)) from None
        return values

    def field(self, name: int | str) -> FieldInfo:
        """The field called ``name`` (UM's getFieldInfo); KeyError if there is none."""
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def same_layout(self, other: PdmDefinition) -> bool:
        return (
            self.key == other.key
            and self.int_names == other.int_names
            and len(self.fields) == len(other.fields)
            and all(a.same_layout(b) for a, b in zip(self.fields, other.fields, strict=True))
        )

    def _layout(self, order: str) -> _Layout:
        if not self.finalized:
            raise PdmEncodeError("definition is not finalized")
        return self._layouts[order]

    # -- the definition segment ------------------------------------------------------------

    def _definition_segment(self, order: str) -> bytes:
        entries = []
        info = _FIELD_INFO[order]
        for f in self.fields:
            if self.int_names:
                assert isinstance(f.name, int)
                body = info.pack(
                    f.id, f.length, f.fixed_str_len, f.num_arr_elem, f.required, f.fixed, f.name, 0
                ) + _U16[order].pack(f.type)
                entries.append(body)
            else:
                assert isinstance(f.name, str)
                name = f.name.encode("ascii") + b"\0"
                body = (
                    info.pack(
                        f.id,
                        f.length,
                        f.fixed_str_len,
                        f.num_arr_elem,
                        f.required,
                        f.fixed,
                        0,
                        len(name),
                    )
                    + name
                    + _U16[order].pack(f.type)
                )
                entries.append(_U32[order].pack(len(body)) + body)
        field_info = b"".join(entries)
        fixed_len = sum(f.length for f in self.fields if f.fixed_required)
        head = _DEFN_HDR[order].pack(
            self.id,
            len(self.fields),
            NAMES_INT if self.int_names else NAMES_STRING,
            1,
            self.version[0],
            self.version[1],
            fixed_len,
            len(field_info),
        )
        return head + field_info

    @classmethod
    def _from_segment(cls, buf: memoryview, start: int, end: int, order: str) -> PdmDefinition:
        if start + DEFN_HDR_LEN > end:
            raise PdmError("definition segment shorter than its header", offset=start)
        did, nfields, names_type, _fin, major, minor, fixed_len, info_len = _DEFN_HDR[
            order
        ].unpack_from(buf, start)
        if did < 0:
            raise PdmError(f"definition id {did} is negative", offset=start)
        if names_type not in (NAMES_STRING, NAMES_INT):
            raise PdmError(f"field names type {names_type} is neither 0 nor 1", offset=start + 8)
        if not 0 <= nfields <= MAX_FIELDS:
            raise PdmError(f"{nfields} fields (allowed 0..{MAX_FIELDS})", offset=start + 4)
        pos = start + DEFN_HDR_LEN
        if pos + info_len != end:
            raise PdmError(
                f"field info length {info_len} does not fill the definition segment", offset=pos
            )
        defn = cls(did, (major, minor), int_names=names_type == NAMES_INT)
        info = _FIELD_INFO[order]
        for index in range(nfields):
            entry_at = pos
            if defn.int_names:
                stop = pos + FIELD_INFO_LEN + 2
            else:
                if pos + 4 > end:
                    raise PdmError("field entry length cut", offset=pos)
                (size,) = _U32[order].unpack_from(buf, pos)
                pos += 4
                stop = pos + size
                if size < FIELD_INFO_LEN + 2:
                    raise PdmError(f"field entry of {size} bytes", offset=entry_at)
            if stop > end:
                raise PdmError("field entry runs past the definition segment", offset=entry_at)
            fid, flen, fstr, narr, req, fixed, int_name, name_len = info.unpack_from(buf, pos)
            if fid != index:
                raise PdmError(f"field entry {index} has id {fid}", offset=pos)
            name: int | str
            if defn.int_names:
                name = int_name
            else:
                if name_len != stop - pos - FIELD_INFO_LEN - 2 or name_len < 2:
                    raise PdmError(f"string name length {name_len} does not fit", offset=pos)
                raw = bytes(buf[pos + FIELD_INFO_LEN : pos + FIELD_INFO_LEN + name_len])
                if raw[-1] != 0 or 0 in raw[:-1] or not raw.isascii():
                    raise PdmError("field name is not a NUL-terminated ASCII string", offset=pos)
                name = raw[:-1].decode("ascii")
            (ftype,) = _U16[order].unpack_from(buf, stop - 2)
            if ftype > FieldType.MESSAGE_ARR:
                raise PdmError(f"field type {ftype} unknown", offset=stop - 2)
            if req > 1 or fixed > 1:
                raise PdmError("required/fixed flags are not 0 or 1", offset=pos + 16)
            try:
                f = defn.add_field(
                    name, FieldType(ftype), bool(req), fixed_str_len=fstr, num_arr_elem=narr
                )
            except PdmEncodeError as exc:
                raise PdmError(f"field entry {index}: {exc}", offset=entry_at) from None
            if f.length != flen or f.fixed != bool(fixed):
                raise PdmError(
                    f"field {name!r}: len {flen}/fixed {fixed} disagree with its type",
                    offset=entry_at,
                )
            pos = stop
        if pos != end:
            raise PdmError("bytes left after the last field entry", offset=pos)
        defn.finalize()
        if defn._layouts[order].fixed_struct.size != fixed_len:
            raise PdmError(
                f"fixed-required section length {fixed_len} disagrees with the fields",
                offset=start + 12,
            )
        return defn

    # -- the dataclass way ------------------------------------------------------------------

    @classmethod
    def from_dataclass(
        cls, klass: type, id: int, version: tuple[int, int] = (1, 0)
    ) -> PdmDefinition:
        """The definition of a dataclass's fields (see :func:`message`)."""
        return _DataclassPlan(klass, id, version).definition


class PdmDefinitionCache:
    """Definitions by (id, major, minor) (UM's PDMDefinitionCache, one per owner here)."""

    def __init__(self) -> None:
        self._defs: dict[tuple[int, int, int], PdmDefinition] = {}

    def put(self, definition: PdmDefinition) -> None:
        self._defs[definition.finalize().key] = definition

    def get(self, id: int, major: int, minor: int) -> PdmDefinition | None:
        return self._defs.get((id, major, minor))

    def remove(self, id: int, major: int, minor: int) -> None:
        self._defs.pop((id, major, minor), None)

    def __len__(self) -> int:
        return len(self._defs)


class _Ctx:
    """Per-parse state: byte order, cache, nesting depth."""

    __slots__ = ("cache", "depth", "order")

    def __init__(self, order: str, cache: PdmDefinitionCache | None, depth: int) -> None:
        self.order = order
        self.cache = cache
        self.depth = depth


class PdmMessage:
    """A PDM message (UM's PDMMessage): one value per field of its definition.

    Index it by :class:`FieldInfo` (fastest), field name, or use :meth:`get`/:meth:`set`.
    Reuse one instance per thread of work, as UM advises: :meth:`parse` refills it.
    """

    __slots__ = ("byte_order", "cache", "definition", "include_definition", "try_cache", "values")

    def __init__(
        self,
        definition: PdmDefinition | None = None,
        *,
        include_definition: bool = False,
        big_endian: bool = False,
        cache: PdmDefinitionCache | None = None,
        try_cache: bool = False,
    ) -> None:
        self.definition = definition.finalize() if definition is not None else None
        self.values: list[Any] = [UNSET] * (len(definition.fields) if definition else 0)
        self.include_definition = include_definition
        self.byte_order = ">" if big_endian else "<"
        self.cache = cache
        self.try_cache = try_cache

    def __repr__(self) -> str:
        if self.definition is None:
            return "PdmMessage(<no definition>)"
        shown = ", ".join(
            f"{f.name!r}: {v!r}"
            for f, v in zip(self.definition.fields, self.values, strict=True)
            if v is not UNSET
        )
        return f"PdmMessage(id={self.definition.id}, {{{shown}}})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PdmMessage):
            return NotImplemented
        return (
            self.definition is not None
            and other.definition is not None
            and self.definition.same_layout(other.definition)
            and self.values == other.values
        )

    __hash__ = None  # type: ignore[assignment]

    def _info(self, key: FieldInfo | int | str) -> FieldInfo:
        if self.definition is None:
            raise KeyError(key)
        if isinstance(key, FieldInfo):
            if key.id >= len(self.values) or self.definition.fields[key.id] is not key:
                fields = self.definition.fields
                if not (key.id < len(fields) and fields[key.id].same_layout(key)):
                    raise KeyError(key)
            return key
        return self.definition.field(key)

    def set(self, key: FieldInfo | int | str, value: Any) -> None:
        self.values[self._info(key).id] = value

    def get(self, key: FieldInfo | int | str) -> Any:
        """The value; :class:`KeyError` if the field is not set (check :meth:`is_set`)."""
        value = self.values[self._info(key).id]
        if value is UNSET:
            raise KeyError(f"field {key!r} is not set")
        return value

    __getitem__ = get
    __setitem__ = set

    def __delitem__(self, key: FieldInfo | int | str) -> None:
        self.values[self._info(key).id] = UNSET

    def is_set(self, key: FieldInfo | int | str) -> bool:
        return self.values[self._info(key).id] is not UNSET

    def clear(self) -> None:
        self.values = [UNSET] * len(self.values)

    def __iter__(self) -> Iterator[tuple[FieldInfo, Any]]:
        """Every defined field with its value (:data:`UNSET` when not set): UM's iterator."""
        if self.definition is None:
            return iter(())
        return zip(self.definition.fields, self.values, strict=True)

    def as_dict(self) -> dict[int | str, Any]:
        """The set fields by name."""
        return {f.name: v for f, v in self if v is not UNSET}

    # -- serialise --------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        defn = self.definition
        if defn is None:
            raise PdmEncodeError("message has no definition")
        order = self.byte_order
        layout = defn._layout(order)
        values = self.values
        if not self.include_definition:
            fast = defn._pack_fixed_only(order, values)
            if fast is not None:
                return fast
        flat: list[Any] = []
        for f in defn.fixed_required:
            v = values[f.id]
            if v is UNSET:
                raise PdmEncodeError(f"required field {f.name!r} is not set")
            f._flatten(v, flat)
        try:
            fixed = layout.fixed_struct.pack(*flat)
        except struct.error as exc:
            raise PdmEncodeError(f"fixed-required fields: {exc}") from None
        parts = [fixed]
        pos = len(fixed)
        entries = []
        ofs = _OFS_ENTRY[order]
        for f in defn.others:
            v = values[f.id]
            if v is UNSET:
                if f.required:
                    raise PdmEncodeError(f"required field {f.name!r} is not set")
                continue
            raw = f._encode(v, order)
            entries.append(ofs.pack(f.id, pos))
            parts.append(raw)
            pos += len(raw)
        return _assemble(
            defn, order, layout, b"".join(entries), b"".join(parts), self.include_definition
        )

    # -- parse ------------------------------------------------------------------------------

    @classmethod
    def from_bytes(
        cls,
        data: bytes | bytearray | memoryview,
        definition: PdmDefinition | None = None,
        *,
        cache: PdmDefinitionCache | None = None,
    ) -> PdmMessage:
        """Parse ``data``: with ``definition`` (the receiver's), else the definition the
        message carries, else ``cache``; see :meth:`parse`."""
        msg = cls(definition, cache=cache, try_cache=cache is not None)
        msg.parse(data)
        return msg

    def parse(self, data: bytes | bytearray | memoryview) -> None:
        """Refill this message from ``data`` (UM's parse).

        The definition used: this message's own if it has one with the message's id (its
        version must match unless the message carries its definition), else the one the
        message carries, else the cache's (when ``try_cache``).  Raises :class:`PdmError`.
        """
        buf = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
        self._parse(buf, _Ctx("<", self.cache if self.try_cache else None, 0))

    @classmethod
    def _parse_nested(cls, raw: memoryview, ctx: _Ctx) -> PdmMessage:
        msg = cls(None, cache=ctx.cache, try_cache=ctx.cache is not None)
        msg._parse(raw, _Ctx("<", ctx.cache, ctx.depth + 1))
        return msg

    def _parse(self, buf: memoryview, ctx: _Ctx) -> None:
        size = len(buf)
        if size < MSG_HDR_LEN:
            raise PdmError(f"{size} bytes: shorter than the PDM header", offset=0)
        magic = bytes(buf[:4])
        if magic == b"\xfe\xca\x1c\xa7":
            order = "<"
        elif magic == b"\xa7\x1c\xca\xfe":
            order = ">"
        else:
            raise PdmError(f"bad magic {magic.hex()}", offset=0)
        ctx.order = order
        if self.definition is not None:
            fast = self.definition._unpack_fixed_only(buf)
            if fast is not None:
                self.values = fast
                return
        _m, ver_type, next_hdr, major, minor, did, total = _MSG_HDR[order].unpack_from(buf, 0)
        if ver_type >> 4 != PDM_VERSION:
            raise PdmError(f"PDM version {ver_type >> 4} (this library reads 1)", offset=4)
        if total != size:
            raise PdmError(f"header length {total}, {size} bytes given", offset=12)
        pos = MSG_HDR_LEN
        this = next_hdr
        carried: PdmDefinition | None = None
        table: tuple[int, int] | None = None
        data: tuple[int, int] | None = None
        while this != HDR_END:
            if pos + SEG_HDR_LEN > size:
                raise PdmError("segment header cut", offset=pos)
            nxt, flags, _res, length = _SEG_HDR[order].unpack_from(buf, pos)
            start, end = pos + SEG_HDR_LEN, pos + SEG_HDR_LEN + length
            if end > size:
                raise PdmError(f"segment of {length} bytes past the message", offset=pos)
            if this == HDR_DEFINITION:
                if carried is not None:
                    raise PdmError("two definition segments", offset=pos)
                carried = PdmDefinition._from_segment(buf, start, end, order)
            elif this == HDR_OFFSET_TABLE:
                if table is not None:
                    raise PdmError("two offset tables", offset=pos)
                if length % 8:
                    raise PdmError(f"offset table of {length} bytes", offset=pos)
                table = (start, end)
            elif this == HDR_DATA:
                if data is not None:
                    raise PdmError("two data segments", offset=pos)
                data = (start, end)
            elif not flags & SEGMENT_IGNORE_FLAG:
                raise PdmError(f"segment type {this} unknown and not ignorable", offset=pos)
            pos = end
            this = nxt
        if pos != size:
            raise PdmError(f"{size - pos} bytes after the last segment", offset=pos)
        if data is None:
            raise PdmError("no data segment", offset=pos)
        if carried is not None and carried.key[0] != did:
            raise PdmError(
                f"carried definition id {carried.id} is not the header's {did}", offset=4
            )
        defn = self._choose(did, major, minor, carried)
        self.definition = defn
        self._fill(buf, defn, data, table, ctx)

    def _choose(
        self, did: int, major: int, minor: int, carried: PdmDefinition | None
    ) -> PdmDefinition:
        """The definition to read the data with (see :data:`INFERRED` "version match")."""
        if carried is not None and carried.version != (major, minor):
            raise PdmError("carried definition's version is not the header's", offset=6)
        mine = self.definition
        if mine is not None and mine.id == did:
            if mine.version != (major, minor):
                raise PdmDefinitionError(
                    f"definition {did}: message is version {major}.{minor}, receiver holds "
                    f"{mine.version[0]}.{mine.version[1]}",
                    offset=6,
                )
            return mine  # the receiver's definition wins over a carried one (UM)
        if carried is not None:
            return carried
        if self.cache is not None and self.try_cache:
            found = self.cache.get(did, major, minor)
            if found is not None:
                return found
        raise PdmDefinitionError(
            f"definition {did} version {major}.{minor} unknown: not in the message, "
            "not the receiver's, not in the cache",
            offset=8,
        )

    def _fill(
        self,
        buf: memoryview,
        defn: PdmDefinition,
        data: tuple[int, int],
        table: tuple[int, int] | None,
        ctx: _Ctx,
    ) -> None:
        start, end = data
        order = ctx.order
        layout = defn._layouts[order]
        fixed = layout.fixed_struct
        if start + fixed.size > end:
            raise PdmError("data segment shorter than the fixed-required fields", offset=start)
        values: list[Any] = [UNSET] * len(defn.fields)
        if defn.fixed_required:
            flat = fixed.unpack_from(buf, start)
            if defn.all_plain:
                for f, v in zip(defn.fixed_required, flat, strict=True):
                    values[f.id] = v
            else:
                i = 0
                try:
                    for f in defn.fixed_required:
                        values[f.id] = f._unflatten(flat, i)
                        i += f._nflat
                except PdmError as exc:
                    raise PdmError(exc.message, offset=start) from None
        if table is not None:
            ofs = _OFS_ENTRY[order]
            for at in range(table[0], table[1], 8):
                fid, offset = ofs.unpack_from(buf, at)
                if fid >= len(defn.fields) or defn.fields[fid].fixed_required:
                    raise PdmError(f"offset table names field id {fid}", offset=at)
                if values[fid] is not UNSET:
                    raise PdmError(f"offset table names field id {fid} twice", offset=at)
                if offset < fixed.size or start + offset >= end:
                    raise PdmError(f"field offset {offset} outside the data", offset=at)
                values[fid], _stop = defn.fields[fid]._decode(buf, start + offset, end, ctx)
        for f in defn.others:
            if f.required and values[f.id] is UNSET:
                raise PdmError(f"required field {f.name!r} is missing", offset=start)
        self.values = values


def _assemble(
    defn: PdmDefinition,
    order: str,
    layout: _Layout,
    table: bytes,
    data: bytes,
    include: bool,
) -> bytes:
    seg = _SEG_HDR[order]
    segs: list[tuple[int, bytes]] = []
    if include:
        segs.append((HDR_DEFINITION, layout.defn_bytes))
    segs.append((HDR_OFFSET_TABLE, table))
    segs.append((HDR_DATA, data))
    total = MSG_HDR_LEN + sum(SEG_HDR_LEN + len(b) for _, b in segs)
    out = [
        _MSG_HDR[order].pack(
            MAGIC,
            PDM_VERSION << 4 | 1,
            segs[0][0],
            defn.version[0],
            defn.version[1],
            defn.id,
            total,
        )
    ]
    for i, (_kind, body) in enumerate(segs):
        nxt = segs[i + 1][0] if i + 1 < len(segs) else HDR_END
        out.append(seg.pack(nxt, 0, 0, len(body)))
        out.append(body)
    return b"".join(out)


# --------------------------------------------------------------------------------------------
# Dataclasses as definitions


@dataclasses.dataclass(frozen=True, slots=True)
class PdmField:
    """Put in ``typing.Annotated`` to choose a field's PDM type, name or sizes:
    ``price: Annotated[float, PdmField(FieldType.FLOAT)]``."""

    type: FieldType | None = None
    name: int | str | None = None
    fixed_str_len: int = 0
    num_arr_elem: int = 0


_DEFAULTS: dict[Any, FieldType] = {
    bool: FieldType.BOOLEAN,
    int: FieldType.INT64,
    float: FieldType.DOUBLE,
    str: FieldType.STRING,
    bytes: FieldType.BLOB,
    decimal.Decimal: FieldType.DECIMAL,
    UMDecimal: FieldType.DECIMAL,
    _dt.datetime: FieldType.TIMESTAMP,
    UMTimestamp: FieldType.TIMESTAMP,
}

T = TypeVar("T")


class _Slot:
    """How one dataclass attribute maps to one PDM field."""

    __slots__ = ("attr", "from_wire", "info", "nested", "to_wire")

    def __init__(self, attr: str, info: FieldInfo, py: Any, nested: PdmCodec[Any] | None):
        self.attr = attr
        self.info = info
        self.nested = nested
        self.to_wire: Callable[[Any], Any] | None = None
        self.from_wire: Callable[[Any], Any] | None = None
        elem = py
        if info.type.is_array:
            args = typing.get_args(py)
            elem = args[0] if args else Any
        if elem is decimal.Decimal:
            self.to_wire, self.from_wire = UMDecimal.from_decimal, UMDecimal.to_decimal
        elif elem is _dt.datetime:
            self.to_wire, self.from_wire = UMTimestamp.from_datetime, UMTimestamp.to_datetime
        if nested is not None:
            self.to_wire, self.from_wire = nested.encode, nested._from_message
        if info.type.is_array and self.to_wire is not None:
            one_in, one_out = self.to_wire, self.from_wire
            assert one_out is not None
            self.to_wire = lambda vs: [one_in(v) for v in vs]
            self.from_wire = lambda vs: [one_out(v) for v in vs]


class _DataclassPlan:
    """Reads a dataclass's annotations into a definition and per-attribute converters."""

    def __init__(self, klass: type, id: int, version: tuple[int, int]) -> None:
        if not dataclasses.is_dataclass(klass):
            raise PdmEncodeError(f"{klass.__name__} is not a dataclass")
        hints = typing.get_type_hints(klass, include_extras=True)
        fields = dataclasses.fields(klass)
        specs = []
        for fd in fields:
            specs.append((fd.name, *_spec(fd.name, hints[fd.name])))
        int_names = any(isinstance(s[2].name, int) for s in specs)
        if int_names and not all(isinstance(s[2].name, int) for s in specs):
            raise PdmEncodeError(f"{klass.__name__}: give every field an int name, or none")
        defn = PdmDefinition(id, version, int_names=int_names)
        self.slots: list[_Slot] = []
        for attr, py, spec, required, ftype, nested in specs:
            info = defn.add_field(
                spec.name if spec.name is not None else attr,
                ftype,
                required,
                fixed_str_len=spec.fixed_str_len,
                num_arr_elem=spec.num_arr_elem,
            )
            self.slots.append(_Slot(attr, info, py, nested))
        self.definition = defn.finalize()


def _spec(attr: str, hint: Any) -> tuple[Any, PdmField, bool, FieldType, PdmCodec[Any] | None]:
    spec = PdmField()
    if typing.get_origin(hint) is typing.Annotated:
        args = typing.get_args(hint)
        hint = args[0]
        for extra in args[1:]:
            if isinstance(extra, PdmField):
                spec = extra
            elif isinstance(extra, FieldType):
                spec = PdmField(extra)
    required = True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(members) != 1:
            raise PdmEncodeError(f"{attr}: only X | None unions map to PDM")
        hint, required = members[0], False
    nested = getattr(hint, "__pdm_codec__", None)
    nested_codec = nested if isinstance(nested, PdmCodec) else None
    ftype = spec.type
    if ftype is None:
        origin = typing.get_origin(hint)
        if origin in (list, tuple, Sequence):
            elem = typing.get_args(hint)[0] if typing.get_args(hint) else None
            elem_codec = getattr(elem, "__pdm_codec__", None)
            if isinstance(elem_codec, PdmCodec):
                nested_codec = elem_codec
                ftype = FieldType.MESSAGE_ARR
            elif elem in _DEFAULTS:
                ftype = FieldType(_DEFAULTS[elem] + _ARRAY_OFFSET)
        elif nested_codec is not None:
            ftype = FieldType.MESSAGE
        elif hint in _DEFAULTS:
            ftype = _DEFAULTS[hint]
        if ftype is None:
            raise PdmEncodeError(
                f"{attr}: no PDM type for {hint!r}; annotate it with PdmField(FieldType...)"
            )
    elif ftype.base is FieldType.MESSAGE:
        elem = typing.get_args(hint)[0] if ftype.is_array and typing.get_args(hint) else hint
        elem_codec = getattr(elem, "__pdm_codec__", None)
        nested_codec = elem_codec if isinstance(elem_codec, PdmCodec) else None
    return hint, spec, required, ftype, nested_codec


class PdmCodec(Generic[T]):
    """Serialises instances of one dataclass as PDM messages and back."""

    def __init__(self, klass: type[T], id: int, version: tuple[int, int] = (1, 0)) -> None:
        plan = _DataclassPlan(klass, id, version)
        self.klass = klass
        self.definition = plan.definition
        self._slots = plan.slots
        self._attrs = tuple(s.attr for s in plan.slots)
        self._simple = all(s.to_wire is None for s in plan.slots)
        self._message = PdmMessage(self.definition)
        # Every field fixed-required, no conversion, every attribute an __init__ argument in
        # field order: encode and decode without a PdmMessage in between.
        self._fast = (
            self._simple
            and len(self.definition.fixed_required) == len(plan.slots) > 0
            and all(fd.init for fd in dataclasses.fields(klass))  # type: ignore[arg-type]
        )
        self._getter = operator.attrgetter(*self._attrs) if len(self._attrs) > 1 else None
        # The definitions of nested message classes, so nested fields parse without the
        # definition in the message.
        self._cache = PdmDefinitionCache()
        for s in plan.slots:
            if s.nested is not None:
                self._cache.put(s.nested.definition)
                for nested_def in s.nested._cache._defs.values():
                    self._cache.put(nested_def)

    def encode(
        self, obj: T, *, include_definition: bool = False, big_endian: bool = False
    ) -> bytes:
        if self._fast and self._getter is not None and not include_definition:
            fast = self.definition._pack_fixed_only(">" if big_endian else "<", self._getter(obj))
            if fast is not None:
                return fast
        msg = self._message
        msg.include_definition = include_definition
        msg.byte_order = ">" if big_endian else "<"
        if self._simple:
            values = [getattr(obj, a) for a in self._attrs]
        else:
            values = []
            for s in self._slots:
                v = getattr(obj, s.attr)
                values.append(s.to_wire(v) if v is not None and s.to_wire is not None else v)
        msg.values = [UNSET if v is None else v for v in values]
        try:
            return msg.to_bytes()
        finally:
            msg.values = [UNSET] * len(self._slots)

    def decode(self, data: bytes | bytearray | memoryview) -> T:
        if self._fast:
            values = self.definition._unpack_fixed_only(data)
            if values is not None:
                return self.klass(*values)
        msg = PdmMessage(self.definition, cache=self._cache, try_cache=True)
        msg.parse(data)
        return self._from_message(msg)

    def _from_message(self, msg: PdmMessage) -> T:
        if msg.definition is not self.definition and (
            msg.definition is None or not msg.definition.same_layout(self.definition)
        ):
            raise PdmDefinitionError(
                f"message definition {msg.definition!r} is not {self.klass.__name__}'s"
            )
        kwargs = {}
        for s, v in zip(self._slots, msg.values, strict=True):
            if v is UNSET:
                v = None
            elif s.from_wire is not None:
                v = s.from_wire(v)
            kwargs[s.attr] = v
        return self.klass(**kwargs)


def message(id: int, version: tuple[int, int] = (1, 0)) -> Callable[[type[T]], type[T]]:
    """Class decorator: make a dataclass a PDM message type (see :func:`dumps`/:func:`loads`).

    Attribute types map to PDM types (bool BOOLEAN, int INT64, float DOUBLE, str STRING, bytes
    BLOB, Decimal DECIMAL, datetime TIMESTAMP, list[X] X_ARR, another @message class MESSAGE);
    ``X | None`` is an optional field; ``Annotated[x, PdmField(...)]`` picks the type, an int
    or string name, fixed string length and array size."""

    def wrap(klass: type[T]) -> type[T]:
        if not dataclasses.is_dataclass(klass):
            klass = dataclasses.dataclass(klass)
        setattr(klass, "__pdm_codec__", PdmCodec(klass, id, version))  # noqa: B010
        return klass

    return wrap


def codec(klass: type[T]) -> PdmCodec[T]:
    """The codec of a class decorated with :func:`message`."""
    found = getattr(klass, "__pdm_codec__", None)
    if not isinstance(found, PdmCodec):
        raise PdmEncodeError(f"{klass.__name__} is not decorated with pdm.message")
    return found


def dumps(obj: Any, *, include_definition: bool = False, big_endian: bool = False) -> bytes:
    """The PDM bytes of an instance of a :func:`message` class."""
    return codec(type(obj)).encode(
        obj, include_definition=include_definition, big_endian=big_endian
    )


def loads(klass: type[T], data: bytes | bytearray | memoryview) -> T:
    """An instance of a :func:`message` class from PDM bytes; raises :class:`PdmError`."""
    return codec(klass).decode(data)
