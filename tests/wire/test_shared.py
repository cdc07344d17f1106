"""The shared record base of the wire codecs (umcore.wire._shared)."""

from __future__ import annotations

from umcore.wire import lbmr, lbtrm, lbtru, srs, srs_messages
from umcore.wire._shared import Record


class _Base(Record):
    __slots__ = ("b", "a")  # noqa: RUF023  (declaration order is the field order under test)

    def __init__(self, b: int, a: int) -> None:
        self.b = b
        self.a = a


class _Child(_Base):
    __slots__ = ("c",)

    def __init__(self, b: int, a: int, c: int) -> None:
        super().__init__(b, a)
        self.c = c


class _Sorted(_Child):
    __slots__ = ()

    @classmethod
    def _order_fields(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(sorted(names))


def test_fields_follow_the_hierarchy_base_first() -> None:
    assert _Base._fields == ("b", "a")
    assert _Child._fields == ("b", "a", "c")
    assert _Sorted._fields == ("a", "b", "c")


def test_equality_hash_and_repr_by_value() -> None:
    assert _Child(1, 2, 3) == _Child(1, 2, 3)
    assert _Child(1, 2, 3) != _Child(1, 2, 4)
    assert hash(_Child(1, 2, 3)) == hash(_Child(1, 2, 3))
    assert repr(_Child(1, 2, 3)) == "_Child(b=1, a=2, c=3)"
    assert repr(_Sorted(1, 2, 3)) == "_Sorted(a=2, b=1, c=3)"


def test_records_of_different_classes_never_compare_equal() -> None:
    assert _Child(1, 2, 3) != _Sorted(1, 2, 3)
    assert _Base(1, 2) != (1, 2)


def test_every_codec_uses_the_shared_base() -> None:
    for cls in (
        lbmr.TIR,
        lbtrm.LBTRMData,
        lbtru.LBTRUData,
        srs.Setup,
        srs_messages.SourceInfo,
    ):
        assert issubclass(cls, Record), cls


def test_subclass_with_empty_slots_compares_inherited_fields() -> None:
    # RequestFnf adds no slot of its own; its stream id, message and metadata still count.
    a = srs.RequestFnf(5, None, metadata=b"m")
    assert a == srs.RequestFnf(5, None, metadata=b"m")
    assert a != srs.RequestFnf(7, None, metadata=b"m")
    assert a != srs.RequestFnf(5, None, metadata=b"n")
    assert repr(a) == "RequestFnf(message=None, metadata=b'm', stream_id=5)"
    assert a != srs.RequestResponse(5, None, metadata=b"m")


def test_srs_messages_repr_in_sorted_field_order() -> None:
    rec = srs_messages.ReceiverInfo("t", domain_id=3)
    assert repr(rec).startswith("ReceiverInfo(context_instance=")
    names = [part.split("=")[0] for part in repr(rec)[len("ReceiverInfo(") : -1].split(", ")]
    assert names == sorted(names)
    assert "topic='t'" in repr(rec)
