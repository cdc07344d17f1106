"""Protobuf's canonical JSON for the statistics messages, fast: one generated function per type.

Theory of operation
-------------------
UM's MCS stores each statistics message as protobuf's canonical JSON (proto3 JSON mapping:
lowerCamelCase names, 64-bit integers as strings, enums by name, bytes in base64, every field
without presence emitted at its default, a singular message or a ``oneof`` member only when
set).  ``google.protobuf.json_format`` does this by walking descriptors for every message, in
pure Python: about a millisecond for a full context-statistics message, which would make the
collector 15 times slower than decoding.  :func:`encoder` instead generates, once per message
type, a Python function that reads each field by name and writes its JSON directly (the walk
over the descriptors happens when the function is made, not per message: one ``%`` format per
type, filled in C), and caches it.  :func:`rower` does the same for the plain-values form the Parquet
connector hands to pyarrow.

Output: fields in declaration order (the order of UM's own, Java, printer), compact
(``","``/``":"``), non-ASCII kept.  The mapping is json_format's; the tests check the two parse
to equal objects for every message type, with every field set and with none.
"""

from __future__ import annotations

import base64
import json
import keyword
import math
import operator
from collections.abc import Callable
from typing import Any

from google.protobuf.descriptor import FieldDescriptor as F
from google.protobuf.message import Message

__all__ = ["encoder", "rower", "to_json", "to_row"]

_INT64 = {F.TYPE_INT64, F.TYPE_SINT64, F.TYPE_SFIXED64, F.TYPE_UINT64, F.TYPE_FIXED64}
_INT32 = {F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_SFIXED32, F.TYPE_UINT32, F.TYPE_FIXED32}

# A string's JSON (quotes, escapes, non-ASCII kept): the C function behind
# ``json.JSONEncoder(ensure_ascii=False).encode`` of a str, called without the Python method that
# dispatches on the value's type (one Python call less per string field).
_dumps = json.encoder.encode_basestring
_cache: dict[str, Callable[[Message], str]] = {}


# A 64-bit integer's JSON (a string, as proto3 JSON writes them), as a C-level callable.
_q64 = '"%d"'.__mod__


def _b64(data: bytes) -> str:
    return '"' + base64.b64encode(data).decode("ascii") + '"'


def _float(value: float, single: bool) -> str:
    if math.isnan(value):
        return '"NaN"'
    if math.isinf(value):
        return '"Infinity"' if value > 0 else '"-Infinity"'
    if single:
        from google.protobuf.internal import type_checkers

        value = type_checkers.ToShortestFloat(value)
    return repr(float(value))


def _bool(value: bool) -> str:
    return "true" if value else "false"


def encoder(descriptor: Any) -> Callable[[Message], str]:
    """The JSON function of a message type (generated once, then cached)."""
    fn = _cache.get(descriptor.full_name)
    if fn is None:
        fn = _generate(descriptor, _json_code, _cache)
    return fn


def rower(descriptor: Any) -> Callable[[Message], dict[str, Any]]:
    """The row function of a message type: the message as plain Python values keyed by the
    proto field names (a message a dict, a repeated field a list, an enum its name, a oneof
    member not set None) -- what pyarrow builds a struct from.  Generated once, cached."""
    fn = _rows.get(descriptor.full_name)
    if fn is None:
        fn = _generate(descriptor, _row_code, _rows)
    return fn


def to_json(message: Message) -> str:
    """``message`` as canonical JSON (see the module docstring)."""
    return encoder(message.DESCRIPTOR)(message)


def to_row(message: Message) -> dict[str, Any]:
    """``message`` as the plain values of :func:`rower`."""
    return rower(message.DESCRIPTOR)(message)


_rows: dict[str, Callable[[Message], dict[str, Any]]] = {}


class _Lazy:
    """A nested type's function, made on first use (for a type that contains itself)."""

    __slots__ = ("descriptor", "fn", "make")

    def __init__(self, descriptor: Any, make: Callable[[Any], Callable[[Message], Any]]) -> None:
        self.descriptor = descriptor
        self.make = make
        self.fn: Callable[[Message], Any] | None = None

    def __call__(self, message: Message) -> Any:
        fn = self.fn
        if fn is None:
            fn = self.fn = self.make(self.descriptor)
        return fn(message)


_making: set[str] = set()


def _nested(f: Any, env: dict[str, Any], make: Callable[[Any], Callable[[Message], Any]]) -> str:
    """A name in ``env`` for the function of field ``f``'s message type."""
    key = f"_m{len(env)}"
    sub = f.message_type
    env[key] = _Lazy(sub, make) if sub.full_name in _making else make(sub)
    return key


def _attr(f: Any) -> str:
    return f"getattr(m, {f.name!r})" if keyword.iskeyword(f.name) else f"m.{f.name}"


def _json_value(f: Any, v: str, env: dict[str, Any]) -> tuple[str, str]:
    """A ``%``-format piece and the Python expression it formats: the JSON of one value ``v``
    of field ``f``."""
    t = f.type
    if t in _INT64:
        return '"%d"', v
    if t in _INT32:
        return "%d", v
    if t == F.TYPE_STRING:
        return "%s", f"_dumps({v})"
    if t == F.TYPE_BYTES:
        return "%s", f"_b64({v})"
    if t == F.TYPE_BOOL:
        return "%s", f"_bool({v})"
    if t in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        return "%s", f"_float({v}, {t == F.TYPE_FLOAT})"
    if t == F.TYPE_ENUM:
        key = f"_e{len(env)}"
        env[key] = {n: '"' + ev.name + '"' for n, ev in f.enum_type.values_by_number.items()}
        return "%s", f"({key}.get({v}) or str({v}))"
    if t == F.TYPE_MESSAGE:
        return "%s", f"{_nested(f, env, encoder)}({v})"
    raise TypeError(f"{f.full_name}: field type {t} has no JSON mapping here")


def _repeated_json(f: Any, attr: str, env: dict[str, Any]) -> str:
    """The expression of a repeated field's JSON elements, comma-separated: ``map`` over the
    container with a C-level function where one exists (no comprehension frame per field)."""
    t = f.type
    if t == F.TYPE_MESSAGE:
        return f"','.join(map({_nested(f, env, encoder)}, {attr}))"
    if t in _INT32:
        return f"','.join(map(str, {attr}))"
    if t in _INT64:
        return f"','.join(map(_q64, {attr}))"
    if t == F.TYPE_STRING:
        return f"','.join(map(_dumps, {attr}))"
    piece, expr = _json_value(f, "x", env)
    item = f"({piece!r} % {expr})" if piece != "%s" else expr
    return f"','.join([{item} for x in {attr}])"


def _json_code(descriptor: Any, env: dict[str, Any]) -> list[str]:
    """One ``%`` format for the whole message: C-level formatting of every field at once.  The
    plain scalar fields (not repeated, not in a ``oneof``) are read in one ``attrgetter`` call
    (one C loop instead of a Python attribute read each), every ``oneof`` is asked once."""
    fields = list(descriptor.fields)
    plain = [
        f
        for f in fields
        if not f.is_repeated and f.containing_oneof is None and f.type != F.TYPE_MESSAGE
    ]
    body: list[str] = []
    reads: dict[str, str] = {}
    if len(plain) > 1:
        key = f"_g{len(env)}"
        env[key] = operator.attrgetter(*(f.name for f in plain))
        body.append(f"    v = {key}(m)")
        reads = {f.name: f"v[{i}]" for i, f in enumerate(plain)}
    which: dict[str, str] = {}
    fmt: list[str] = []
    args: list[str] = []
    for f in fields:
        name = f',"{f.json_name}":'.replace("%", "%%")
        attr = reads.get(f.name) or _attr(f)
        if f.is_repeated:
            fmt.append(name + "[%s]")
            args.append(_repeated_json(f, attr, env))
            continue
        piece, expr = _json_value(f, attr, env)
        oneof = f.containing_oneof
        if oneof is not None:
            if oneof.name not in which:
                which[oneof.name] = f"w{len(which)}"
                body.append(f"    {which[oneof.name]} = m.WhichOneof({oneof.name!r})")
            cond = f"{which[oneof.name]} == {f.name!r}"
        elif f.type == F.TYPE_MESSAGE:
            cond = f"m.HasField({f.name!r})"
        else:
            fmt.append(name + piece)
            args.append(expr)
            continue
        fmt.append("%s")
        args.append(f"(({name + piece!r} % {expr}) if {cond} else '')")
    if not fmt:
        return ["def fn(m):", "    return '{}'"]
    values = "v" if reads and args == list(reads.values()) else "(" + ", ".join(args) + ",)"
    return [
        "def fn(m):",
        *body,
        f"    s = {''.join(fmt)!r} % {values}",
        "    return '{' + s[1:] + '}'",
    ]


def _row_value(f: Any, v: str, env: dict[str, Any]) -> str:
    if f.type == F.TYPE_ENUM:
        key = f"_e{len(env)}"
        env[key] = {n: ev.name for n, ev in f.enum_type.values_by_number.items()}
        return f"{key}.get({v}) or str({v})"
    if f.type == F.TYPE_MESSAGE:
        return f"{_nested(f, env, rower)}({v})"
    return v


def _row_code(descriptor: Any, env: dict[str, Any]) -> list[str]:
    items: list[str] = []
    for f in descriptor.fields:
        attr = _attr(f)
        if f.is_repeated:
            value = f"[{_row_value(f, 'x', env)} for x in {attr}]"
        else:
            value = _row_value(f, attr, env)
            oneof = f.containing_oneof
            if oneof is not None:
                value = f"({value}) if m.WhichOneof({oneof.name!r}) == {f.name!r} else None"
        items.append(f"{f.name!r}: {value}")
    return ["def fn(m):", "    return {" + ", ".join(items) + "}"]


def _generate(
    descriptor: Any,
    code: Callable[[Any, dict[str, Any]], list[str]],
    cache: dict[str, Any],
) -> Any:
    env: dict[str, Any] = {
        "_dumps": _dumps, "_b64": _b64, "_float": _float, "_bool": _bool, "_q64": _q64,
    }  # fmt: skip
    _making.add(descriptor.full_name)
    try:
        lines = code(descriptor, env)
    finally:
        _making.discard(descriptor.full_name)
    exec("\n".join(lines), env)  # the generated code reads fields by their proto names only
    fn = env["fn"]
    cache[descriptor.full_name] = fn
    return fn
