"""The store protocol's compositions: hypothesis round trips for every row of the table, the
golden vectors of wire-lbmc-ump.md, the splice, and the refusals of bad messages."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.errors import LocalProtocolError
from umcore.store import compose
from umcore.store.compose import StoreProtocolError
from umcore.wire import lbmc
from umcore.wire.lbmc_props import CfgOpt, encode_cfgopts, extopt_headers

u32 = st.integers(0, 0xFFFFFFFF)
u16 = st.integers(0, 0xFFFF)
marker = st.integers(0, 0x7F)
store_id = st.integers(0, 0x7FFF)
sid = st.integers(0, 0xFFFFFFFFFFFFFFFE)
ctx = st.binary(min_size=8, max_size=8)
ip = st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t)))
addr = st.tuples(ip, u16)
topic = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=120)
rpp_opts = st.dictionaries(st.sampled_from(sorted(compose.RPP_OPTIONS)), st.integers(0, 2**63)).map(
    lambda d: tuple(sorted(d.items()))
)


def ranged(first: int, span: int) -> tuple[int, int]:
    return first, (first + span) & 0xFFFFFFFF


STRATEGIES: dict[type, Any] = {
    compose.SourceRegistration: st.builds(
        compose.SourceRegistration, topic, u32, u32, addr, reg_id=u32, marker=marker,
        store_index=store_id, session_id=sid, ctxinst=ctx, capabilities=u16,
        activity_timeout_ms=u32, state_lifetime_ms=u32, proxy=st.booleans(), rpp=st.booleans(),
        rpp_options=rpp_opts, forward_acks=st.booleans(),
    ),
    compose.ReceiverRegistration: st.builds(
        compose.ReceiverRegistration, u32, u32, u32, addr, reg_id=u32, marker=marker,
        store_index=store_id, topic=st.one_of(st.just(""), topic), session_id=sid, ctxinst=ctx,
        capabilities=u16, activity_timeout_ms=u32, state_lifetime_ms=u32,
        rpp_mode=st.sampled_from([0, 1, 2]),
    ),
    compose.Deregistration: st.builds(
        compose.Deregistration, st.booleans(), u32, u32, u32, addr, src_reg_id=u32,
        marker=marker, store_index=store_id, session_id=sid,
    ),
    compose.RegistrationResponse: st.one_of(
        st.builds(
            compose.RegistrationResponse, st.booleans(), u32, u32, u32, u32, u32, marker,
            store_index=store_id, old=st.booleans(), no_acks=st.booleans(), rpp=st.booleans(),
            deregistered=st.booleans(), ctxinst=st.one_of(st.none(), ctx), session_id=sid,
        ),
        st.builds(
            compose.RegistrationResponse, st.booleans(), u32, u32, u32, u32, u32, marker,
            store_index=store_id, old=st.booleans(),
            error=st.sampled_from(sorted(compose.ERROR_TEXTS)), ctxinst=st.one_of(st.none(), ctx),
        ),
    ),
    compose.StabilityAck: st.builds(
        lambda t, i, r, s, n: compose.StabilityAck(t, i, *r, store_index=s, nak=n),
        u32, u32, st.builds(ranged, u32, st.integers(0, 0x7FFFFFFF)), store_id, st.booleans(),
    ),
    compose.ConsumptionAck: st.builds(
        compose.ConsumptionAck, u32, u32, u32, u32,
        st.sampled_from([0, lbmc.ACK_FLAG_E, lbmc.ACK_FLAG_O | lbmc.ACK_FLAG_U]),
    ),
    compose.Keepalive: st.builds(
        compose.Keepalive, st.sampled_from([0, 1, 2]), u32, u32, u32, st.booleans(),
        st.booleans(), st.one_of(st.none(), store_id),
    ),
    compose.ReceiverKeepalive: st.builds(compose.ReceiverKeepalive, u32, sid, ctx),
    compose.RetransmissionRequest: st.lists(
        st.builds(compose.RxReq, u32, u32, u32, addr, u32, st.booleans(), st.integers(0, 255)),
        min_size=1, max_size=compose.MAX_RXREQ_PER_MESSAGE,
    ).map(lambda reqs: compose.RetransmissionRequest(tuple(reqs))),
    compose.SriRequest: st.builds(compose.SriRequest, u32, u32),
    compose.Sri: st.builds(
        compose.Sri, u32, u32, u32,
        st.lists(
            st.builds(compose.SriStore, addr, u16, u32, st.integers(0, 255), u32, u32),
            min_size=1, max_size=compose.MAX_STORES,
        ).map(tuple),
        st.lists(st.builds(compose.SriGroup, st.integers(0, 255), u16), max_size=5).map(tuple),
        st.one_of(st.none(), u32), st.booleans(), st.booleans(),
    ),
    compose.Retransmission: st.builds(
        lambda tidx, sqn, payload, otid, name: compose.Retransmission(
            lbmc.encode_data(tidx, sqn, payload), otid, name
        ),
        u32, u32, st.binary(max_size=300), st.binary(min_size=32, max_size=32), topic,
    ),
}  # fmt: skip


def test_every_row_has_a_strategy() -> None:
    assert {row.cls for row in compose.TABLE} == set(STRATEGIES)


@pytest.mark.parametrize("cls", list(STRATEGIES), ids=lambda c: c.__name__)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_round_trip(cls: type, data: st.DataObject) -> None:
    comp = data.draw(STRATEGIES[cls])
    wire = comp.encode()
    back = compose.decode(lbmc.decode(wire))
    assert back == comp
    assert back.encode() == wire


def test_source_registration_golden_prefix() -> None:
    """The PREG of wire-lbmc-ump.md section 6 (S=1, marker 1, transport 5, topic 1, port 14391,
    10.0.0.1) leads our source registration byte for byte."""
    reg = compose.SourceRegistration(
        "persist.topic", 5, 1, ("10.0.0.1", 14391), marker=1, ctxinst=bytes(range(1, 9))
    )
    wire = reg.encode()
    golden = bytes.fromhex(
        "051c0081000000000000000500000001000000003837"
        "00000a000001"
        "4212000070657273697374"
        "2e746f70696300"
        "170c00000102030405060708"
    )
    assert wire[4 : 4 + len(golden)] == golden


def test_stability_ack_golden() -> None:
    ack = compose.StabilityAck(5, 1, 0x2A, 0x2A)
    assert ack.encode() == bytes.fromhex("0814001c171400010000000500000001000000000000002aff040000")


def test_error_response_golden_and_text() -> None:
    resp = compose.RegistrationResponse(
        True, 0x12345678, 5, 1, 0, 0, 1, error=lbmc.PREG_RESP_EACTIVE
    )
    wire = resp.encode()
    assert wire[4:28] == bytes.fromhex("171825811234567800000005000000010000000000000000")
    back = compose.decode(lbmc.decode(wire))
    assert isinstance(back, compose.RegistrationResponse)
    assert back.error_text == "RegID is in use by a different source"


def test_retransmission_splice_equals_the_late_join_encoding() -> None:
    """The splice gives the bytes the source's late-join service builds by encoding."""
    otid = bytes(range(32))
    frame = lbmc.encode_data(1, 0x11, b"msg17")
    spliced = compose.splice_retransmission(frame, compose.retransmission_prefix(otid, "t"))
    built = lbmc.encode(
        lbmc.LBMCMessage(
            lbmc.MSG_RETRANS, 1, 0x11, [lbmc.Otid(0, otid), lbmc.TopicName(b"t\0")], b"msg17"
        )
    )
    assert spliced == built


def test_splice_keeps_the_stored_chain() -> None:
    frag = lbmc.Frag(0x11, 0, 100, 0)
    frame = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_PRORX, 1, 0x11, [frag], b"part"))
    out = lbmc.decode(
        compose.splice_retransmission(frame, compose.retransmission_prefix(bytes(32), "t"))
    )
    assert out.msg_type == lbmc.MSG_RETRANS and (out.tidx, out.sqn) == (1, 0x11)
    assert [type(h) for h in out.headers] == [lbmc.Otid, lbmc.TopicName, lbmc.Frag]
    assert out.payload == b"part"


def _control(*headers: lbmc.Header) -> lbmc.LBMCMessage:
    return lbmc.decode(lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=list(headers))))


PREG_S = lbmc.UmePreg(0, True, 0, 0, 1, 2, 0, 14391, 0, 0x0A000001)
PREG_R = lbmc.UmePreg(0, False, 0, 0, 1, 2, 9, 14391, 0, 0x0A000001)


@pytest.mark.parametrize(
    "msg",
    [
        _control(PREG_S),  # no TOPICNAME
        _control(lbmc.UmeAck(0, 1, 1, 2, 0, 5)),  # stability ACK without STOREID
        _control(lbmc.UmeAck(0, 1, 1, 2, 0, 5), lbmc.UmeRangedAck(0, 10, 2**31 + 20), lbmc.UmeStoreId(0)),
        _control(lbmc.UmeKeepalive(0, 3, 1, 2, 3)),  # keepalive type out of range
        _control(lbmc.UmePregResp(lbmc.PREG_RESP_E | 9, True, 0, 1, 1, 2, 0, 0)),  # unknown code
        _control(lbmc.Sri(0, 1, 0, 0)),  # SRI without a Store
        _control(lbmc.Sri(0, 1, 0, 0), *[lbmc.UmeStoreInfoExt()] * 26),  # too many Stores
        _control(PREG_S, lbmc.TopicName(b"\xff\xfe\0")),  # topic not UTF-8
        _control(PREG_S, lbmc.TopicName(b"t\0"), lbmc.UmeSid(0, 2**64 - 1)),  # Session ID
        _control(PREG_S, lbmc.TopicName(b"t\0"),
                 *extopt_headers(encode_cfgopts([CfgOpt(1, "ume_flight_size_bytes", "-5")]))),
        _control(PREG_R, *extopt_headers(
            encode_cfgopts([CfgOpt(2, "ume_receiver_paced_persistence", "2")]))),  # 2 without W
        _control(lbmc.ExtOpt(lbmc.EXTOPT_MORE, 1, lbmc.EXTOPT_CFGOPT, 0, b"\x01\x00x"), PREG_S,
                 lbmc.TopicName(b"t\0")),  # EXTOPT never finished
    ],
)  # fmt: skip
def test_bad_messages_raise_store_protocol_error(msg: lbmc.LBMCMessage) -> None:
    with pytest.raises(StoreProtocolError):
        compose.decode(msg)


def test_unknown_cfgopts_are_skipped() -> None:
    opts = [CfgOpt(1, "ume_not_an_option", "x"), CfgOpt(3, "ume_flight_size_bytes", "5"),
            CfgOpt(1, "ume_flight_size_bytes", "100")]  # fmt: skip
    msg = _control(PREG_S, lbmc.TopicName(b"t\0"), *extopt_headers(encode_cfgopts(opts)))
    reg = compose.decode(msg)
    assert isinstance(reg, compose.SourceRegistration)
    assert reg.rpp_options == (("ume_flight_size_bytes", 100),)


def test_non_store_messages_decode_to_none() -> None:
    assert compose.decode(_control(lbmc.Tsni(((1, 2),)))) is None
    assert compose.decode(lbmc.decode(lbmc.encode_data(1, 2, b"x"))) is None


def test_encoders_refuse_what_the_wire_cannot_carry() -> None:
    with pytest.raises(LocalProtocolError):
        compose.StabilityAck(1, 1, 10, 10 + 2**31).encode()
    with pytest.raises(LocalProtocolError):
        compose.RetransmissionRequest(()).encode()
    with pytest.raises(LocalProtocolError):
        compose.Sri(1, 0, 0, ()).encode()
    with pytest.raises(LocalProtocolError):
        compose.ReceiverRegistration(1, 1, 1, ("10.0.0.1", 1), rpp_mode=3).encode()
    with pytest.raises(LocalProtocolError):
        compose.SourceRegistration("t", 1, 1, ("10.0.0.1", 1), rpp_options=(("x", 1),)).encode()
    with pytest.raises(LocalProtocolError):
        compose.RegistrationResponse(True, 1, 1, 1, error=15).encode()


def test_rxreq_messages_split_at_the_limit() -> None:
    reqs = [compose.RxReq(1, 2, q, ("10.0.0.2", 1)) for q in range(70)]
    msgs = compose.rxreq_messages(reqs)
    assert [len(m.requests) for m in msgs] == [32, 32, 6]
    assert [r.seqnum for m in msgs for r in m.requests] == list(range(70))


def test_table_names_what_is_inferred() -> None:
    """Every row says which part of its header combination is inferred, or that none is."""
    assert {r.cls for r in compose.TABLE if r.inferred} >= {
        compose.SourceRegistration, compose.StabilityAck, compose.Sri, compose.Retransmission,
    }  # fmt: skip


@settings(max_examples=50, deadline=None)
@given(ack=STRATEGIES[compose.StabilityAck])
def test_stability_ack_fast_encoding_equals_the_general_encoder(ack: compose.StabilityAck) -> None:
    headers: list[lbmc.Header] = [
        lbmc.UmeAck(compose.ACK_FLAG_NAK if ack.nak else 0, lbmc.ACK_TYPE_STABLE,
                    ack.transport_idx, ack.topic_idx, 0, ack.first)
    ]  # fmt: skip
    if ack.last != ack.first:
        headers.append(lbmc.UmeRangedAck(0, ack.first, ack.last))
    headers.append(lbmc.UmeStoreId(ack.store_index))
    assert ack.encode() == lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=headers))


# ------------------------------------------------------------------------------------------------
# parse_stability: the request port's fast path must read what the general decoder reads


def general_fields(frame: bytes) -> tuple[int, int, int, int, int, bool] | None:
    """What lbmc.decode + compose.decode make of ``frame`` as parse_stability's tuple; None when
    it is no stability ACK or they refuse it."""
    try:
        comp = compose.decode(lbmc.decode(frame))
    except lbmc.LBMCError:
        return None
    except StoreProtocolError:
        return None
    if not isinstance(comp, compose.StabilityAck):
        return None
    return (comp.transport_idx, comp.topic_idx, comp.first, comp.last, comp.store_index,
            comp.nak)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(ack=STRATEGIES[compose.StabilityAck])
def test_parse_stability_equals_the_general_decoder(ack: compose.StabilityAck) -> None:
    frame = ack.encode()
    fields = compose.parse_stability(frame)
    assert fields is not None
    assert fields == general_fields(frame)
    assert fields == (ack.transport_idx, ack.topic_idx, ack.first, ack.last, ack.store_index,
                      ack.nak)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(ack=STRATEGIES[compose.StabilityAck], data=st.data())
def test_parse_stability_of_a_changed_byte_agrees_or_declines(
    ack: compose.StabilityAck, data: st.DataObject
) -> None:
    """Any one byte changed: the fast path reads what the general decoder reads (flag bits,
    the receiver RegID field, STOREID's ignore bit, indexes) or declines (None: the general
    path decides, error included)."""
    frame = bytearray(ack.encode())
    pos = data.draw(st.integers(0, len(frame) - 1))
    frame[pos] = data.draw(st.integers(0, 255))
    fields = compose.parse_stability(bytes(frame))
    if fields is not None:
        assert fields == general_fields(bytes(frame))


def test_parse_stability_declines_every_other_shape() -> None:
    one = compose.StabilityAck(1, 2, 7, 7, store_index=3).encode()
    ranged = compose.StabilityAck(1, 2, 7, 9, store_index=3).encode()
    out_of_order = bytearray(ranged)
    out_of_order[28:36] = (9).to_bytes(4, "big") + (7).to_bytes(4, "big")  # first 9, last 7
    assert compose.parse_stability(bytes(out_of_order)) is None
    with pytest.raises(StoreProtocolError, match="out of order"):
        compose.decode(lbmc.decode(bytes(out_of_order)))
    longer_header = lbmc.encode(
        lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[
            lbmc.UmeAck(0, lbmc.ACK_TYPE_STABLE, 1, 2, 0, 7), lbmc.UmeStoreId(3),
            lbmc.UmeAckId(0, 5),
        ])
    )  # fmt: skip
    assert general_fields(longer_header) == (1, 2, 7, 7, 3, False)
    assert compose.parse_stability(longer_header) is None  # the general path reads it
    consumption = compose.ConsumptionAck(1, 2, 3, 4).encode()
    assert compose.parse_stability(consumption) is None
    assert compose.parse_stability(one[:-1]) is None and compose.parse_stability(b"") is None
    assert compose.parse_stability(one + b"\0") is None
    assert compose.parse_stability(ranged) == (1, 2, 7, 9, 3, False)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_parse_stability_declines_every_other_composition(data: st.DataObject) -> None:
    cls = data.draw(st.sampled_from(sorted(
        (c for c in STRATEGIES if c is not compose.StabilityAck), key=lambda c: c.__name__
    )))  # fmt: skip
    assert compose.parse_stability(data.draw(STRATEGIES[cls]).encode()) is None
