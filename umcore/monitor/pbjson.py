"""Protobuf's canonical JSON for the statistics messages, fast: one generated function per type.

Theory of operation
-------------------
UM's MCS stores each statistics message as protobuf's canonical JSON (proto3 JSON mapping:
lowerCamelCase names, 64-bit integers as strings, enums by name, bytes in base64, every field
without presence emitted at its default, a singular message or a ``oneof`` member only when
set).  ``google.protobuf.json_format`` does this by walking descriptors for every message, in
pure Python: about a millisecond for a full context-statistics message, which would make the
collector 15 times slower than decoding.  :func:`encoder` instead generates Python code once
and caches it (the walk over the descriptors happens when the code is made, not per message):

- A message's *shape* is what decides which keys its JSON has: which singular message fields
  are set (at any depth) and which member each ``oneof`` chose.  The encoder of a type asks
  those questions (a ``HasField``/``WhichOneof`` each) and looks the answer up in a table of
  functions, one per shape seen (a publisher sends the same few shapes over and over), made on
  first sight.
- A shape's function has every set singular message *inlined*: each nested message is read
  once, its plain scalar fields in one ``operator.attrgetter`` call, and the whole message is
  one ``%`` format filled in C -- no Python call, no string concatenation per nested message.
  Repeated fields are mapped element by element (the element type's encoder for messages, a
  C-level function for scalars), a ``oneof``'s message member calls its type's encoder.

:func:`rower` generates, the same way but per field, the plain-values form the Parquet
connector's tests compare against.

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
# A 64-bit integer's JSON (a string, as proto3 JSON writes them), as a C-level callable.
_q64 = '"%d"'.__mod__
# A bool's JSON, as a C-level callable.
_bool = {False: "false", True: "true"}.__getitem__


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


def _f32(value: float) -> str:
    return _float(value, True)


def _f64(value: float) -> str:
    return _float(value, False)


class _EnumJson(dict[int, str]):
    """An enum's JSON by number (its quoted name); a number the ``.proto`` does not name is
    written as the number, as json_format does."""

    def __missing__(self, number: int) -> str:
        return str(number)


def _enum_json(f: Any) -> _EnumJson:
    return _EnumJson({n: '"' + v.name + '"' for n, v in f.enum_type.values_by_number.items()})


_cache: dict[str, Callable[[Message], str]] = {}


def encoder(descriptor: Any) -> Callable[[Message], str]:
    """The JSON function of a message type (generated once, then cached)."""
    fn = _cache.get(descriptor.full_name)
    if fn is None:
        fn = _cache[descriptor.full_name] = _Shapes(descriptor).function()
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


class _Shapes:
    """The JSON code of one message type: the shape questions, and one function per shape
    (module docstring)."""

    def __init__(self, descriptor: Any) -> None:
        self.descriptor = descriptor
        # (path of the message asked, "has" or "which", field or oneof name), depth first
        self.questions: list[tuple[str, str, str]] = []
        # singular message fields of a type within itself: encoded by a call, not inlined
        self.called: set[str] = set()
        self._collect(descriptor, "", ())

    def _collect(self, d: Any, path: str, stack: tuple[str, ...]) -> None:
        stack = (*stack, d.full_name)
        for o in d.oneofs:
            self.questions.append((path, "which", o.name))
        for f in d.fields:
            if f.type == F.TYPE_MESSAGE and not f.is_repeated and f.containing_oneof is None:
                self.questions.append((path, "has", f.name))
                if f.message_type.full_name in stack:
                    self.called.add(path + f.name)
                else:
                    self._collect(f.message_type, f"{path}{f.name}.", stack)

    def function(self) -> Callable[[Message], str]:
        """The type's encoder: a type without shape questions has one function; others look
        the shape up (and make its function on first sight)."""
        if not self.questions:
            return self.shape(())
        env: dict[str, Any] = {"_shapes": {}, "_make": self.shape}
        asks = []
        for i, (path, what, name) in enumerate(self.questions):
            obj = "m"
            if path:
                obj = f"_p{i}(m)"
                env[f"_p{i}"] = operator.attrgetter(path[:-1])
            asks.append(f"{obj}.{'HasField' if what == 'has' else 'WhichOneof'}({name!r})")
        code = [
            "def fn(m):",
            f"    k = ({', '.join(asks)},)",
            "    f = _shapes.get(k)",
            "    if f is None:",
            "        f = _shapes[k] = _make(k)",
            "    return f(m)",
        ]
        exec("\n".join(code), env)  # the generated code reads fields by their proto names only
        fn: Callable[[Message], str] = env["fn"]
        return fn

    def shape(self, key: tuple[Any, ...]) -> Callable[[Message], str]:
        """The function of one shape: set singular messages inlined, one ``%`` format."""
        answers = dict(zip(self.questions, key, strict=True))
        env: dict[str, Any] = {
            "_dumps": _dumps, "_q64": _q64, "_bool": _bool, "_b64": _b64, "_f32": _f32,
            "_f64": _f64,
        }  # fmt: skip
        body: list[str] = []  # reads, before the format
        fmt: list[str] = []  # the format, literal text escaped
        args: list[str] = []  # its values' expressions

        def emitted(f: Any, path: str) -> bool:
            o = f.containing_oneof
            if o is not None:
                return bool(answers[(path, "which", o.name)] == f.name)
            if f.type == F.TYPE_MESSAGE and not f.is_repeated:
                return bool(answers[(path, "has", f.name)])
            return True

        def walk(d: Any, obj: str, path: str) -> None:
            fields = [f for f in d.fields if emitted(f, path)]
            plain = [f for f in fields if f.type != F.TYPE_MESSAGE and not f.is_repeated]
            reads: dict[str, str] = {}
            if len(plain) > 1:  # one C call reads them all
                v = f"v{len(body)}"
                get = _name(env, operator.attrgetter(*(f.name for f in plain)))
                body.append(f"    {v} = {get}({obj})")
                if all(f.type in _INT32 or f.type in _INT64 for f in plain):
                    # formatted as they are: the tuple goes in whole, at the first field
                    reads = dict.fromkeys((f.name for f in plain), "")
                    reads[plain[0].name] = f"*{v}"
                else:
                    reads = {f.name: f"{v}[{i}]" for i, f in enumerate(plain)}
            fmt.append("{")
            for i, f in enumerate(fields):
                fmt.append((',"' if i else '"') + f.json_name.replace("%", "%%") + '":')
                attr = (
                    f"getattr({obj}, {f.name!r})"
                    if keyword.iskeyword(f.name)
                    else f"{obj}.{f.name}"
                )
                if f.is_repeated:
                    fmt.append("[%s]")
                    args.append(_repeated(f, attr, env))
                elif f.type != F.TYPE_MESSAGE:
                    piece, expr = _value(f, reads.get(f.name, attr), env)
                    fmt.append(piece)
                    if expr:
                        args.append(expr)
                elif f.containing_oneof is None and path + f.name not in self.called:
                    sub = f"o{len(body)}"
                    body.append(f"    {sub} = {attr}")
                    walk(f.message_type, sub, f"{path}{f.name}.")
                else:  # a oneof's message member; a type within itself
                    fmt.append("%s")
                    args.append(f"{_name(env, encoder(f.message_type))}({attr})")
            fmt.append("}")

        walk(self.descriptor, "m", "")
        text = "".join(fmt)
        if not args:
            const = text % ()
            return lambda m: const
        body.append(f"    return {text!r} % ({', '.join(args)},)")
        exec("def fn(m):\n" + "\n".join(body), env)
        fn: Callable[[Message], str] = env["fn"]
        return fn


def _name(env: dict[str, Any], value: Any) -> str:
    """A fresh global name for ``value`` in the generated code's namespace."""
    key = f"_g{len(env)}"
    env[key] = value
    return key


def _value(f: Any, v: str, env: dict[str, Any]) -> tuple[str, str]:
    """A ``%``-format piece and the expression it formats: the JSON of the value ``v`` of
    scalar field ``f`` (an empty expression: ``v`` is part of a tuple passed whole)."""
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
    if t == F.TYPE_FLOAT:
        return "%s", f"_f32({v})"
    if t == F.TYPE_DOUBLE:
        return "%s", f"_f64({v})"
    if t == F.TYPE_ENUM:
        return "%s", f"{_name(env, _enum_json(f))}[{v}]"
    raise TypeError(f"{f.full_name}: field type {t} has no JSON mapping here")


def _repeated(f: Any, attr: str, env: dict[str, Any]) -> str:
    """The expression of a repeated field's JSON elements, comma-separated: ``map`` over the
    container with a C-level function where one exists (no Python frame per element)."""
    t = f.type
    if t == F.TYPE_MESSAGE:
        fn = _name(env, encoder(f.message_type))
    elif t in _INT32:
        fn = _name(env, str)
    elif t in _INT64:
        fn = "_q64"
    elif t == F.TYPE_STRING:
        fn = "_dumps"
    elif t == F.TYPE_ENUM:
        fn = _name(env, _enum_json(f).__getitem__)
    elif t == F.TYPE_BOOL:
        fn = "_bool"
    elif t == F.TYPE_BYTES:
        fn = "_b64"
    elif t == F.TYPE_FLOAT:
        fn = "_f32"
    else:
        fn = "_f64"
    return f"','.join(map({fn}, {attr}))"


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
