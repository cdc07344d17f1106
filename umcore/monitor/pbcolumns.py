"""Statistics messages to Arrow column-wise: many messages of one type in, one struct array out.

Theory of operation
-------------------
The Parquet connector stores each message as a nested struct whose Arrow type is generated from
the ``.proto`` descriptors (:func:`umcore.monitor.collector.arrow_type`).  Building that struct
from one Python dict per message (:func:`umcore.monitor.pbjson.to_row`) costs a dict per message
and per nested message, and pyarrow then looks every value up by key again.  A
:class:`Columns` instead keeps, per message type, the values of its fields column by column:

- the plain scalar fields (not repeated, not in a ``oneof``) are read in one
  ``operator.attrgetter`` call per message and kept as that tuple; the tuples are turned into
  columns once per batch (``zip(*rows)``, in C);
- a singular message field is a nested :class:`Columns`, appended to for every message (as in the
  row form, an unset message reads as its defaults);
- a ``oneof`` keeps the chosen member's name per message; a member's values are kept only for
  the messages that chose it and spread out to every row when the batch is built
  (``take`` with null indices: the member is null where another was chosen, as in the row form);
- a repeated field keeps each message's element count (the list offsets) and its elements:
  scalars in one flat list, messages in a nested :class:`Columns`.

The appending itself is generated code, once per type (:meth:`Columns.extend`): one loop over the
messages in which every singular nested message is read once and its values appended in place
(inlined, no Python call per nested message), its plain fields in one ``attrgetter`` call, every
append a bound ``list`` method; a repeated or ``oneof`` message field goes to its own type's loop.

:meth:`Columns.build` returns the ``pyarrow.StructArray`` of everything appended and starts
afresh.  Enums are stored by name (an unknown number as its decimal string), 64-bit integers as
``int64``/``uint64``: the same values :func:`~umcore.monitor.pbjson.to_row` gives, which the tests
check for every message type.  pyarrow is imported only when a batch is built.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from google.protobuf.descriptor import FieldDescriptor as F
from google.protobuf.message import Message

__all__ = ["Columns"]


class Columns:
    """The column builders of one message type (module docstring)."""

    def __init__(self, descriptor: Any) -> None:
        from umcore.monitor.collector import arrow_type

        self.descriptor = descriptor
        self.type = arrow_type(descriptor)
        self.count = 0
        self._fields = list(descriptor.fields)
        self._plain = [
            f
            for f in self._fields
            if not f.is_repeated and f.containing_oneof is None and f.type != F.TYPE_MESSAGE
        ]
        self._get: Callable[[Message], Any] | None = None
        if len(self._plain) == 1:  # a tuple as for several (build() uses its first element)
            self._get = operator.attrgetter(self._plain[0].name, self._plain[0].name)
        elif self._plain:
            self._get = operator.attrgetter(*(f.name for f in self._plain))
        self._rows: list[Any] = []
        self._nested = {
            f.name: Columns(f.message_type) for f in self._fields if f.type == F.TYPE_MESSAGE
        }
        # a oneof's scalar member: its values where chosen; a repeated scalar: every element
        self._values: dict[str, list[Any]] = {
            f.name: []
            for f in self._fields
            if f.type != F.TYPE_MESSAGE and (f.is_repeated or f.containing_oneof is not None)
        }
        self._lengths: dict[str, list[int]] = {f.name: [] for f in self._fields if f.is_repeated}
        self._chosen: dict[str, list[str | None]] = {
            f.containing_oneof.name: [] for f in self._fields if f.containing_oneof is not None
        }
        self._fill: Callable[[Iterable[Message]], None] | None = None  # made on first use

    def append(self, m: Message) -> None:
        """Add one message of this type."""
        self.extend((m,))

    def extend(self, messages: Sequence[Message]) -> None:
        """Add messages of this type, in order (one generated loop over them all)."""
        self._fill_function()(messages)
        self.count += len(messages)

    def _fill_function(self) -> Callable[[Iterable[Message]], None]:
        """The generated loop that adds messages of this type: each singular nested message's
        values read in the same loop (inlined, no call), a repeated or ``oneof`` message field
        handed to its own type's loop; every read and append a C-level callable."""
        if self._fill is not None:
            return self._fill
        env: dict[str, Any] = {}
        body: list[str] = []

        def name(value: Any) -> str:
            key = f"_g{len(env)}"
            env[key] = value
            return key

        def walk(cols: Columns, obj: str) -> None:
            if cols._get is not None:
                body.append(f"{name(cols._rows.append)}({name(cols._get)}({obj}))")
            for f in cols._fields:
                attr = f"getattr({obj}, {f.name!r})"
                if f.is_repeated:
                    x = f"x{len(body)}"
                    body.append(f"{x} = {attr}")
                    body.append(f"{name(cols._lengths[f.name].append)}(len({x}))")
                    if f.type == F.TYPE_MESSAGE:
                        body.append(f"{name(cols._nested[f.name]._fill_function())}({x})")
                    else:
                        body.append(f"{name(cols._values[f.name].extend)}({x})")
                elif f.containing_oneof is None and f.type == F.TYPE_MESSAGE:
                    o = f"o{len(body)}"
                    body.append(f"{o} = {attr}")
                    walk(cols._nested[f.name], o)
            for oneof, chosen in cols._chosen.items():
                w = f"w{len(body)}"
                members = {
                    f.name: (
                        _one(cols._nested[f.name]._fill_function())
                        if f.type == F.TYPE_MESSAGE
                        else cols._values[f.name].append
                    )
                    for f in cols._fields
                    if f.containing_oneof is not None and f.containing_oneof.name == oneof
                }
                body.append(f"{w} = {obj}.WhichOneof({oneof!r})")
                body.append(f"{name(chosen.append)}({w})")
                body.append(f"if {w} is not None: {name(members)}[{w}](getattr({obj}, {w}))")

        walk(self, "m")
        code = ["def fill(ms):", "    for m in ms:", *(f"        {line}" for line in body)]
        if not body:
            code.append("        pass")
        exec("\n".join(code), env)  # the generated code reads fields by their proto names only
        fill: Callable[[Iterable[Message]], None] = env["fill"]
        self._fill = fill
        return fill

    def build(self, n: int | None = None) -> Any:
        """The ``StructArray`` (:attr:`type`) of every message added (``n`` of them: a nested
        type's count comes from its parent); starts afresh."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if n is None:
            n = self.count
        columns = list(zip(*self._rows, strict=True)) if self._rows else [()] * len(self._plain)
        plain = {f.name: col for f, col in zip(self._plain, columns, strict=False)}
        children = []
        for i, f in enumerate(self._fields):
            t = self.type.field(i).type
            name = f.name
            if f.is_repeated:
                ends = list(itertools.accumulate(self._lengths[name]))
                offsets = pa.array([0, *ends], pa.int32())
                inner = (
                    self._nested[name].build(ends[-1] if ends else 0)
                    if f.type == F.TYPE_MESSAGE
                    else pa.array(_enum_names(f, self._values[name]), t.value_type)
                )
                children.append(pa.ListArray.from_arrays(offsets, inner, type=t))
            elif f.containing_oneof is not None:
                chosen = pa.array(self._chosen[f.containing_oneof.name], pa.string())
                here = pc.fill_null(pc.equal(chosen, name), False)
                if f.type == F.TYPE_MESSAGE:
                    values = self._nested[name].build(
                        self._chosen[f.containing_oneof.name].count(name)
                    )
                else:
                    values = pa.array(_enum_names(f, self._values[name]), t)
                # the k-th message that chose this member holds its k-th value; others null
                index = pc.subtract(pc.cumulative_sum(pc.cast(here, pa.int64())), 1)
                children.append(values.take(pc.if_else(here, index, None)))
            elif f.type == F.TYPE_MESSAGE:
                children.append(self._nested[name].build(n))
            else:
                children.append(pa.array(_enum_names(f, plain[name]), t))
        self.count = 0
        self._rows.clear()
        for lst in (*self._values.values(), *self._lengths.values(), *self._chosen.values()):
            lst.clear()
        if not children:
            return pa.array([{}] * n, self.type)
        return pa.StructArray.from_arrays(children, fields=list(self.type))


def _one(fill: Callable[[Iterable[Message]], None]) -> Callable[[Message], None]:
    """A fill loop for a single message (a ``oneof``'s message member)."""
    return lambda m: fill((m,))


def _enum_names(f: Any, values: Any) -> Any:
    """``values`` of field ``f``; an enum's numbers by name (an unknown number as its string)."""
    if f.type != F.TYPE_ENUM:
        return values
    names = {n: v.name for n, v in f.enum_type.values_by_number.items()}
    return [names.get(x) or str(x) for x in values]
