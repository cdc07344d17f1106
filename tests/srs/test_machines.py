"""The SRS cores' state machines: each transition table refuses what it does not list, and
every state of each machine is reachable through its table."""

from __future__ import annotations

from enum import Enum

import pytest

from umcore.errors import LocalProtocolError, RemoteProtocolError
from umcore.srs.client import SLOT_TRANSITIONS, SlotDown, SlotState, SRSClient
from umcore.srs.server import SRSServer
from umcore.srs.session import SESSION_TRANSITIONS, ClientSession, SessionInput, SessionState
from umcore.wire import srs as rs
from umcore.wire.srs_messages import (
    Batch,
    ReceiverInfo,
    RegistrationRequest,
    RegistrationResponse,
    StreamRequest,
)

SRS = ("127.0.0.1", 27000)


def _reachable(table: dict[tuple[Enum, Enum], Enum], start: Enum) -> set[Enum]:
    seen = {start}
    todo = [start]
    while todo:
        state = todo.pop()
        for (src, _input), dst in table.items():
            if src == state and dst not in seen:
                seen.add(dst)
                todo.append(dst)
    return seen


def _table(table: object) -> dict[tuple[Enum, Enum], Enum]:
    assert isinstance(table, dict)
    return table


# ------------------------------------------------------------------------ the client's slots


def test_every_slot_state_is_reachable() -> None:
    assert _reachable(_table(SLOT_TRANSITIONS), SlotState.DOWN) == set(SlotState)
    # and every state can get back to DOWN (a slot never gets stuck)
    for state in SlotState:
        assert SlotState.DOWN in _reachable(_table(SLOT_TRANSITIONS), state)


def test_slot_table_refuses_an_adapter_report_out_of_order() -> None:
    core = SRSClient([SRS])
    assert core.take_connects() == [(0, SRS)]
    core.receive_connected(0, 0.0)  # CONNECTING -> REGISTERING
    with pytest.raises(LocalProtocolError):
        core.receive_connected(0, 0.1)  # not CONNECTING any more
    with pytest.raises(LocalProtocolError):
        core.receive_connect_failed(0, 0.1)


def test_slot_table_refuses_a_registration_response_while_streaming() -> None:
    core = SRSClient([SRS])
    core.take_connects()
    core.receive_connected(0, 0.0)
    response = rs.encode(rs.Payload(1, RegistrationResponse(7), complete=True))
    core.receive_data(0, response, 0.1)
    assert core.registered_slots() == [0]
    core.take_events()
    core.receive_data(0, response, 0.2)  # a second one: the SRS broke the protocol
    assert core.registered_slots() == []
    assert core.malformed == 1
    assert core.take_closes() == [0]
    assert [type(e) for e in core.take_events()] == [SlotDown]


def test_slot_table_refuses_records_before_the_registration_response() -> None:
    core = SRSClient([SRS])
    core.take_connects()
    core.receive_connected(0, 0.0)
    core.receive_data(0, rs.encode(rs.Payload(3, Batch([ReceiverInfo("T")]))), 0.1)
    assert core.malformed == 1
    assert core.take_closes() == [0]


# --------------------------------------------------------------------- the server's sessions


def test_every_session_state_is_reachable() -> None:
    assert _reachable(_table(SESSION_TRANSITIONS), SessionState.OPEN) == set(SessionState)
    for state in SessionState:
        if state is not SessionState.CLOSED:
            assert SessionState.CLOSED in _reachable(_table(SESSION_TRANSITIONS), state)


def test_session_table_refuses_illegal_transitions() -> None:
    session = ClientSession(1, ("127.0.0.1", 1), 0.0)
    with pytest.raises(RemoteProtocolError):
        session.receive_records()  # records before the registration
    with pytest.raises(RemoteProtocolError):
        session.receive_stream_request(3, 10)  # stream before the registration
    with pytest.raises(LocalProtocolError):
        session.receive_writing_paused(True)  # back-pressure on a stream not open
    session.receive_setup(3000)
    with pytest.raises(RemoteProtocolError):
        session.receive_setup(3000)  # a second SETUP
    session.receive_registration()
    with pytest.raises(RemoteProtocolError):
        session.receive_registration()  # a second registration
    session.receive_stream_request(3, 10)
    assert session.state is SessionState.STREAMING
    session.close()
    assert session.state is SessionState.CLOSED
    with pytest.raises(LocalProtocolError):
        session.close()
    assert (SessionState.CLOSED, SessionInput.CLOSE) not in SESSION_TRANSITIONS


@pytest.mark.parametrize(
    "frames",
    [
        [rs.Setup(1000, 3000), rs.Setup(1000, 3000)],
        [rs.RequestStream(3, StreamRequest())],
        [
            rs.RequestResponse(1, RegistrationRequest("10.0.0.9", 1, 1)),
            rs.RequestResponse(1, RegistrationRequest("10.0.0.9", 1, 1)),
        ],
        [
            rs.Setup(1000, 3000),
            rs.RequestResponse(1, RegistrationRequest("10.0.0.9", 1, 1)),
            rs.RequestStream(3, StreamRequest()),
            rs.RequestStream(5, StreamRequest()),
        ],
    ],
    ids=["second SETUP", "stream first", "second registration", "second stream"],
)
def test_server_closes_a_connection_whose_frames_the_table_refuses(frames: list[rs.Frame]) -> None:
    server = SRSServer()
    server.receive_connected(1, ("127.0.0.1", 1), 0.0)
    server.receive_connected(2, ("127.0.0.1", 2), 0.0)
    server.receive_data(1, b"".join(rs.encode(f) for f in frames), 0.1)
    assert server.take_closes() == [1]
    assert server.refused.connections_malformed == 1
    assert server.connections == 1  # the other connection is untouched
