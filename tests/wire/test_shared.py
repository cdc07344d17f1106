"""The shared record base and IPv4 conversions of the wire codecs (umcore.wire._shared)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from umcore.errors import LocalProtocolError
from umcore.wire import lbmc, lbmr, lbmr_base, lbtrm, lbtru, srs, srs_messages
from umcore.wire._shared import Record, ip4_bytes, ip4_int, ip4_int_str, ip4_str


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


# --- IPv4 -----------------------------------------------------------------------------------

NOT_CANONICAL = [
    "10.0.0",
    "10.0.0.0.1",
    "10.0.0.256",
    "a.b.c.d",
    "010.0.0.1",  # leading zero: octal to inet_aton, refused here
    "10.0.0.1 ",
    " 10.0.0.1",
    "10.0.0.+1",
    "10.0.0.\u00b2",  # a Unicode digit that int() refuses
    "10.0.0.\u0661",  # an Arabic-Indic digit that int() accepts
    "",
    "...",
]


@given(st.binary(min_size=4, max_size=4))
def test_bytes_round_trip(raw: bytes) -> None:
    text = ip4_str(raw)
    assert ip4_bytes(text) == raw
    assert ip4_str(memoryview(raw)) == text
    assert ip4_int(text) == int.from_bytes(raw, "big")
    assert ip4_int_str(int.from_bytes(raw, "big")) == text


def test_known_values() -> None:
    assert ip4_bytes("10.0.1.2") == b"\x0a\x00\x01\x02"
    assert ip4_str(b"\xc0\xa8\x00\xff") == "192.168.0.255"
    assert ip4_int("255.255.255.255") == 0xFFFFFFFF
    assert ip4_int_str(0x0A000102) == "10.0.1.2"


@pytest.mark.parametrize("bad", NOT_CANONICAL)
def test_only_the_canonical_dotted_quad_is_accepted(bad: str) -> None:
    with pytest.raises(LocalProtocolError):
        ip4_bytes(bad)
    with pytest.raises(ValueError):  # the public LBMC helper keeps its ValueError
        lbmc.ip4_from_str(bad)


def test_not_a_string_is_refused() -> None:
    with pytest.raises(LocalProtocolError):
        ip4_bytes(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        lbmc.ip4_from_str(167772161)  # type: ignore[arg-type]


def test_codecs_share_one_parser() -> None:
    assert lbmr_base.ip_bytes is ip4_bytes
    assert lbmr_base.ip_str is ip4_str
    route = srs_messages.RouteInfo([1], "10.0.0.1", 5)
    batch = srs_messages.Batch([route])
    assert srs_messages.decode_message(batch.encode()) == batch
    with pytest.raises(LocalProtocolError):
        srs_messages.RouteInfo([1], "010.0.0.1", 5).encode()
