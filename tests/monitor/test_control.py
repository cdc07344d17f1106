"""SRS control requests: each request, the gates, and malformed input."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.errors import LocalProtocolError
from umcore.monitor.categories import ALL_CATEGORIES, Category
from umcore.monitor.control import (
    MAX_REQUEST_SIZE,
    Command,
    ControlHandler,
    ControlRequestError,
    build_request,
    parse_request,
)


def handler(snap: bool = True, config: bool = True) -> ControlHandler:
    return ControlHandler("6.16.1", allow_snapshot=snap, allow_config=config)


def test_version() -> None:
    h = handler(snap=False, config=False)
    reply = h.handle(b'{"commandMessageType":"REPORT_SRS_VERSION"}')
    assert reply.ok and reply.payload() == b"SRS Version 6.16.1"
    assert not reply.payload().endswith(b"\0")
    assert (h.requests, h.ok) == (1, 1)


def test_snapshot_one_and_all() -> None:
    h = handler()
    reply = h.handle(
        b'{"commandMessageType":"REPORT_MONITOR_INFO","monitorInfoCategory":"SRS_STATS"}\0'
    )
    assert reply.text == "snap SRS_STATS - OK!" and reply.snapshot == (Category.SRS_STATS,)
    reply = h.handle(build_request(Command.REPORT_MONITOR_INFO))
    assert reply.text == "snap ALL - OK!" and reply.snapshot == ALL_CATEGORIES


def test_set_interval() -> None:
    h = handler()
    reply = h.handle(build_request(Command.SET_PUBLISHING_INTERVAL, Category.SRS_STATS, 60000))
    assert reply.text == "SRS_STATS 60000 - OK!"
    assert reply.interval == ((Category.SRS_STATS,), 60000)
    reply = h.handle(b'{"commandMessageType":"SET_PUBLISHING_INTERVAL","publishingInterval":0}')
    assert reply.ok and reply.text == "ALL 0 - OK!" and reply.interval == (ALL_CATEGORIES, 0)


def test_gates_refuse_and_count() -> None:
    h = handler(snap=False, config=False)
    r1 = h.handle(build_request(Command.REPORT_MONITOR_INFO, Category.SRS_STATS))
    r2 = h.handle(build_request(Command.SET_PUBLISHING_INTERVAL, Category.SRS_STATS, 1000))
    for r in (r1, r2):
        assert not r.ok and r.text.startswith("ERROR:")
        assert r.snapshot == () and r.interval is None
    assert (h.refused, h.ok, h.malformed) == (2, 0, 0)


MALFORMED = [
    b"",
    b"version",
    b"[1,2]",
    b'{"commandMessageType":1}',
    b'{"commandMessageType":"REBOOT"}',
    b'{"commandMessageType":"REPORT_MONITOR_INFO","monitorInfoCategory":"NOPE"}',
    b'{"commandMessageType":"REPORT_MONITOR_INFO","monitorInfoCategory":7}',
    b'{"commandMessageType":"SET_PUBLISHING_INTERVAL","monitorInfoCategory":"SRS_STATS"}',
    b'{"commandMessageType":"SET_PUBLISHING_INTERVAL","publishingInterval":150}',
    b'{"commandMessageType":"SET_PUBLISHING_INTERVAL","publishingInterval":7776000001}',
    b'{"commandMessageType":"SET_PUBLISHING_INTERVAL","publishingInterval":-5}',
    b'{"commandMessageType":"SET_PUBLISHING_INTERVAL","publishingInterval":true}',
    b'{"commandMessageType":"SET_PUBLISHING_INTERVAL","publishingInterval":1000.5}',
    b'{"commandMessageType":"SET_PUBLISHING_INTERVAL","publishingInterval":1e999}',
    b'{"commandMessageType":"REPORT_SRS_VERSION"}\xff',
    b"[" * 5000,
    b'{"commandMessageType":"REPORT_SRS_VERSION","pad":"' + b"x" * MAX_REQUEST_SIZE + b'"}',
]


@pytest.mark.parametrize("payload", MALFORMED)
def test_malformed_requests(payload: bytes) -> None:
    with pytest.raises(ControlRequestError):
        parse_request(payload)
    h = handler()
    reply = h.handle(payload)
    assert not reply.ok and reply.text.startswith("ERROR: malformed request")
    assert h.malformed == 1


def test_liberal_forms_we_accept() -> None:
    req = parse_request(
        b'{"commandMessageType":"set_publishing_interval","monitorInfoCategory":"srs_stats",'
        b'"publishingInterval":"5000","extra":1}'
    )
    assert (req.command, req.category, req.interval_ms) == (
        Command.SET_PUBLISHING_INTERVAL,
        Category.SRS_STATS,
        5000,
    )


def test_build_request_matches_srs_cmd_shape() -> None:
    assert (
        build_request(Command.REPORT_SRS_VERSION) == b'{"commandMessageType":"REPORT_SRS_VERSION"}'
    )
    doc = json.loads(build_request(Command.SET_PUBLISHING_INTERVAL, Category.CONFIG_OPTS, 200))
    assert list(doc) == ["commandMessageType", "monitorInfoCategory", "publishingInterval"]
    with pytest.raises(LocalProtocolError):
        build_request(Command.SET_PUBLISHING_INTERVAL, None, 100)
    with pytest.raises(LocalProtocolError):
        build_request(Command.REPORT_SRS_VERSION, Category.SRS_STATS)


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=200),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=20),
            lambda c: (
                st.lists(c, max_size=4)
                | st.dictionaries(
                    st.sampled_from(
                        ["commandMessageType", "monitorInfoCategory", "publishingInterval", "x"]
                    ),
                    c,
                    max_size=4,
                )
            ),
            max_leaves=10,
        ).map(lambda v: json.dumps(v).encode()),
    )
)
def test_fuzz_parse_only_raises_its_error(payload: bytes) -> None:
    with contextlib.suppress(ControlRequestError):
        parse_request(payload)
    reply = handler().handle(payload)  # never raises
    assert reply.text
