"""The SRS core's bounds against hostile or broken clients (issue 22, items 3 and 4), with raw
RSocket frames and explicit time: bytes buffered for incomplete frames (all connections
together), the frame timeout, the registration timeout, the cap on a SETUP's max lifetime, the
per-client and per-host source quotas with early expiry of inactive clients to make room, the
refusals the core reports for the log (one tally entry per kind and peer, with a count), and the
``<pyum-limits>`` configuration that sets them."""

from __future__ import annotations

import logging

import pytest

from daemons.srs.app import log_refusals, release_memory_if_freed, server_config
from tests.srs.harness import sir
from umcore.config import srs as srs_config
from umcore.daemon.refusals import RefusalLog
from umcore.srs import common
from umcore.srs.server import (
    MALFORMED,
    REFUSED_BUFFER,
    REFUSED_CLIENT,
    REFUSED_CONNECTION,
    REFUSED_SOURCE_CLIENT,
    REFUSED_SOURCE_HOST,
    REFUSED_SOURCE_TABLE,
    TIMED_OUT_FRAME,
    TIMED_OUT_REGISTRATION,
    ServerConfig,
    SRSServer,
)
from umcore.wire import srs as rs
from umcore.wire.srs_messages import Batch, RegistrationRequest, StreamRequest


def hello(session: int, *, lifetime_ms: int = 60_000) -> bytes:
    return (
        rs.encode(rs.Setup(1000, lifetime_ms))
        + rs.encode(rs.RequestResponse(1, RegistrationRequest("10.0.0.1", session, session)))
        + rs.encode(rs.RequestStream(3, StreamRequest()))
    )


def sirs(first: int, count: int) -> bytes:
    batch = Batch([sir(f"t/{n}", n) for n in range(first, first + count)])
    return rs.encode(rs.Payload(3, batch))


_METADATA_PUSH = bytes(4) + ((0x0C << 10) | rs.FLAG_METADATA).to_bytes(2, "big")


def partial(claim: int, have: int) -> bytes:
    """The length and first ``have`` bytes of a valid frame of ``claim`` bytes (a METADATA_PUSH,
    which the SRS ignores): completed by ``claim - have`` more bytes."""
    return claim.to_bytes(3, "big") + (_METADATA_PUSH + bytes(claim))[:have]


def connect(core: SRSServer, cid: int, now: float = 0.0, host: str = "192.0.2.1") -> None:
    core.receive_connected(cid, (host, 40000 + cid), now)


def errors_sent(core: SRSServer) -> dict[int, list[int]]:
    """The ERROR frames' codes per connection in what the core wrote."""
    out: dict[int, list[int]] = {}
    for cid, data in core.take_writes():
        for frame in rs.SRSStreamDecoder().feed(data):
            if isinstance(frame, rs.Error):
                out.setdefault(cid, []).append(frame.code)
    return out


def kinds(core: SRSServer) -> dict[tuple[str, str], int]:
    return {(r.kind, r.who): r.count for r in core.take_refusals()}


# -- item 3: bytes held for incomplete frames ------------------------------------------------


def test_buffered_bytes_are_bounded_across_connections_oldest_frame_shed_first() -> None:
    core = SRSServer(ServerConfig(max_buffered_bytes=10_000))
    for cid in (1, 2, 3):
        connect(core, cid, now=float(cid))
        core.receive_data(cid, partial(5_000, 3_997), now=float(cid))  # 4,000 bytes held each
    # the third pushed the total to 12,000: the oldest frame (connection 1's) was shed
    assert core.take_closes() == [1]
    assert errors_sent(core) == {1: [rs.ERROR_CONNECTION_ERROR]}
    assert core.buffered_bytes == 8_000 and core.connections == 2
    assert core.refused.buffer_evicted == 1
    assert kinds(core) == {(REFUSED_BUFFER, "192.0.2.1:40001"): 1}
    # connection 2 completes its frame and starts another: it becomes the youngest
    core.receive_data(2, bytes(1_003) + partial(5_000, 500), now=4.0)
    connect(core, 4, now=5.0)
    core.receive_data(4, partial(8_000, 6_000), now=5.0)  # 503 + 4,000 + 6,003 > 10,000
    assert core.take_closes() == [3]  # older than connection 2's new frame
    assert core.buffered_bytes == 503 + 6_003
    assert core.buffered_peak == 12_000


def test_memory_accounting_returns_to_zero_when_connections_leave() -> None:
    core = SRSServer(ServerConfig())
    for cid in range(1, 21):
        connect(core, cid)
        core.receive_data(cid, hello(cid) + partial(100_000, 50_000), now=0.0)
    assert core.buffered_bytes == 20 * 50_003
    for cid in range(1, 21):
        core.receive_disconnected(cid, now=1.0)
    assert core.buffered_bytes == 0 and core.connections == 0
    assert core.buffered_peak == 20 * 50_003
    core.reset_buffered_peak()
    assert core.buffered_peak == 0


def test_a_frame_that_does_not_complete_in_time_costs_the_connection() -> None:
    core = SRSServer(ServerConfig(frame_timeout=5.0))
    connect(core, 1)
    connect(core, 2)
    core.receive_data(1, hello(1), now=0.0)
    core.receive_data(2, hello(2), now=0.0)
    core.receive_data(1, partial(1_000, 10), now=1.0)
    for t in range(2, 9):  # a trickle: one byte a second keeps the silence check happy
        core.receive_data(1, b"\x00", now=float(t))
        core.receive_data(2, rs.encode(rs.Keepalive(True, 0)), now=float(t))  # complete frames
        core.handle_timer(float(t))
        if 1 not in core.sessions:
            break
    assert 1 not in core.sessions and 2 in core.sessions
    assert t == 7  # begun at 1.0, swept at 7.0 (> 5 s); the sweep runs every second
    assert core.refused.frames_timed_out == 1
    assert list(kinds(core)) == [
        (TIMED_OUT_FRAME, "client[10.0.0.1:1] sessionID[0x00000001] from 192.0.2.1")
    ]
    assert core.buffered_bytes == 0


def test_an_unregistered_connection_is_closed_after_the_registration_timeout() -> None:
    core = SRSServer(ServerConfig(registration_timeout=10.0))
    connect(core, 1)  # says nothing
    connect(core, 2)
    core.receive_data(2, rs.encode(rs.Setup(1000, 60_000)), now=0.0)  # SETUP only
    connect(core, 3)
    core.receive_data(3, hello(3), now=0.0)
    core.handle_timer(10.0)
    assert core.connections == 3
    core.handle_timer(11.0)
    assert sorted(core.take_closes()) == [1, 2]
    assert core.refused.registrations_timed_out == 2
    assert {k for k, _ in kinds(core)} == {TIMED_OUT_REGISTRATION}


def test_the_setup_max_lifetime_is_capped_by_max_silence() -> None:
    core = SRSServer(ServerConfig(max_silence=30.0))
    connect(core, 1)
    core.receive_data(1, hello(1, lifetime_ms=0xFFFFFFFF), now=0.0)  # asks 49 days
    assert core.sessions[1].max_lifetime == 30.0
    core.handle_timer(30.0)
    assert 1 in core.sessions
    core.handle_timer(31.0)
    assert 1 not in core.sessions and core.refused.connections_timed_out == 1
    connect(core, 2, now=31.0)  # no SETUP: the default 60 s, capped too
    assert core.sessions[2].max_lifetime == 30.0


# -- item 4: source quotas ---------------------------------------------------------------------


def test_per_client_quota_refuses_the_excess_and_tallies_it_once() -> None:
    core = SRSServer(ServerConfig(max_sources_per_client=3))
    connect(core, 1)
    core.receive_data(1, hello(1) + sirs(0, 5), now=0.0)
    assert core.source_count() == 3
    assert core.refused.sources == 2 and core.refused.sources_client_quota == 2
    [r] = core.take_refusals()
    assert (r.kind, r.count) == (REFUSED_SOURCE_CLIENT, 2)
    assert r.who == "client[10.0.0.1:1] sessionID[0x00000001] from 192.0.2.1"
    assert "<max-sources-per-client> 3" in r.detail and "'t/4'" in r.detail
    assert 1 in core.sessions  # refusing a record does not cost the connection


def test_per_host_quota_counts_every_client_of_the_host() -> None:
    core = SRSServer(ServerConfig(max_sources_per_client=3, max_sources_per_host=4))
    connect(core, 1, host="192.0.2.1")
    connect(core, 2, host="192.0.2.1")
    connect(core, 3, host="192.0.2.99")
    core.receive_data(1, hello(1) + sirs(0, 3), now=0.0)
    core.receive_data(2, hello(2) + sirs(10, 3), now=0.0)  # one fits
    core.receive_data(3, hello(3) + sirs(20, 3), now=0.0)  # another host: all fit
    assert core.source_count() == 7
    assert core.registry.host_sources == {"192.0.2.1": 4, "192.0.2.99": 3}
    assert core.refused.sources_host_quota == 2
    assert kinds(core) == {
        (REFUSED_SOURCE_HOST, "client[10.0.0.1:2] sessionID[0x00000002] from 192.0.2.1"): 2
    }


def test_a_hosts_inactive_clients_make_room_for_its_new_ones() -> None:
    """A restarted application (a new session) is not refused because of its previous
    incarnation's inactive sources: those are expired early, and their receivers told."""
    core = SRSServer(ServerConfig(max_sources_per_host=4, source_leave_backoff_ms=0))
    connect(core, 1)
    core.receive_data(1, hello(1) + sirs(0, 4), now=0.0)
    core.receive_disconnected(1, now=1.0)  # inactive for the state lifetime (a day)
    assert core.source_count() == 4
    connect(core, 2, now=2.0)
    core.receive_data(2, hello(2) + sirs(10, 4), now=2.0)
    assert core.source_count() == 4 and core.refused.sources == 0
    assert core.refused.clients_evicted == 1
    assert core.stats.clients_expired_sir_count == 4
    assert core.registry.host_sources == {"192.0.2.1": 4}


def test_the_table_full_of_connected_clients_refuses_and_says_so() -> None:
    core = SRSServer(ServerConfig(max_sources=5))
    connect(core, 1, host="192.0.2.1")
    connect(core, 2, host="192.0.2.2")
    core.receive_data(1, hello(1) + sirs(0, 5), now=0.0)
    core.receive_data(2, hello(2) + sirs(10, 1), now=0.0)
    assert core.source_count() == 5 and core.refused.sources == 1
    [r] = core.take_refusals()
    assert r.kind == REFUSED_SOURCE_TABLE and "<max-sources> 5" in r.detail
    # the first client leaves: its inactive sources make room for the second's
    core.receive_disconnected(1, now=1.0)
    core.receive_data(2, sirs(10, 1), now=2.0)
    assert core.source_count() == 1 and core.refused.sources == 1


def test_quotas_do_not_rescan_the_client_table_per_refused_record() -> None:
    """A flood of refused SIRs remembers that the host has no inactive client."""
    core = SRSServer(ServerConfig(max_sources_per_host=2))
    connect(core, 1)
    core.receive_data(1, hello(1) + sirs(0, 2), now=0.0)
    core.receive_data(1, sirs(10, 500), now=0.0)
    assert core.refused.sources_host_quota == 500
    assert kinds(core) == {
        (REFUSED_SOURCE_HOST, "client[10.0.0.1:1] sessionID[0x00000001] from 192.0.2.1"): 500
    }


# -- refusals the client is told of, and malformed input -----------------------------------------


def test_full_tables_answer_with_an_rsocket_error_before_closing() -> None:
    core = SRSServer(ServerConfig(max_connections=1, max_clients=1))
    connect(core, 1)
    core.receive_data(1, hello(1), now=0.0)
    connect(core, 2)
    assert core.take_closes() == [2]
    assert errors_sent(core)[2] == [rs.ERROR_REJECTED_SETUP]
    core.receive_disconnected(1, 0.5)
    core.config.max_connections = 2
    connect(core, 3)
    connect(core, 4)
    core.receive_data(3, hello(3), now=1.0)  # evicts the inactive client 1: fits
    core.receive_data(4, hello(4), now=1.0)  # client table full of connected clients
    assert 4 not in core.sessions and core.refused.clients == 1
    assert errors_sent(core)[4] == [rs.ERROR_REJECTED_SETUP]
    assert core.refused.connections_malformed == 0  # a refusal, not bad input
    got = kinds(core)
    assert got[(REFUSED_CONNECTION, "192.0.2.1:40002")] == 1
    assert got[(REFUSED_CLIENT, "client[10.0.0.1:4] sessionID[0x00000004] from 192.0.2.1")] == 1


def test_malformed_connections_are_reported_with_the_peer() -> None:
    core = SRSServer(ServerConfig())
    connect(core, 1)
    core.receive_data(1, b"GET / HTTP/1.1\r\n\r\n", now=0.0)
    assert 1 not in core.sessions and core.refused.connections_malformed == 1
    [r] = core.take_refusals()
    assert (r.kind, r.who) == (MALFORMED, "192.0.2.1:40001")
    assert r.detail.startswith("not valid SRS protocol: ")


# -- configuration and the daemon's handling -----------------------------------------------------


def test_pyum_limits_are_read_dumped_and_reach_the_core() -> None:
    text = """<?xml version="1.0" encoding="UTF-8" ?>
<um-srs version="1.0"><srs><pyum-limits>
  <max-sources-per-client>7</max-sources-per-client><max-sources-per-host>9</max-sources-per-host>
  <max-buffered-bytes>4096</max-buffered-bytes><frame-timeout>2500</frame-timeout>
  <registration-timeout>3000</registration-timeout><max-silence>45000</max-silence>
  <max-connections>11</max-connections><max-clients>12</max-clients><max-sources>13</max-sources>
</pyum-limits></srs></um-srs>"""
    cfg = srs_config.load_text(text)
    core_cfg = server_config(cfg)
    assert (core_cfg.max_sources_per_client, core_cfg.max_sources_per_host) == (7, 9)
    assert (core_cfg.max_connections, core_cfg.max_clients, core_cfg.max_sources) == (11, 12, 13)
    assert core_cfg.max_buffered_bytes == 4096
    assert (core_cfg.frame_timeout, core_cfg.registration_timeout) == (2.5, 3.0)
    assert core_cfg.max_silence == 45.0
    again = srs_config.load_text(srs_config.dump(cfg))  # -d output validates and round-trips
    assert again.limits == cfg.limits


def test_pyum_limits_defaults_are_the_cores_constants() -> None:
    core_cfg = server_config(srs_config.SRSConfig())
    assert core_cfg.max_connections == common.MAX_CONNECTIONS
    assert core_cfg.max_clients == common.MAX_CLIENTS
    assert core_cfg.max_sources == common.MAX_SOURCES
    assert core_cfg.max_sources_per_client == common.MAX_SOURCES_PER_CLIENT
    assert core_cfg.max_sources_per_host == common.MAX_SOURCES_PER_HOST
    assert core_cfg.max_buffered_bytes == common.MAX_BUFFERED_BYTES
    assert core_cfg.frame_timeout == common.FRAME_TIMEOUT
    assert core_cfg.registration_timeout == common.REGISTRATION_TIMEOUT
    assert core_cfg.max_silence == common.MAX_SILENCE


@pytest.mark.parametrize(
    "bad", ["<max-sources>0</max-sources>", "<frame-timeout>86400001</frame-timeout>", "<foo/>"]
)
def test_bad_pyum_limits_are_refused(bad: str) -> None:
    text = f'<?xml version="1.0" encoding="UTF-8" ?><um-srs><srs><pyum-limits>{bad}</pyum-limits></srs></um-srs>'
    with pytest.raises(srs_config.xmlfile.ConfigError):
        srs_config.load_text(text)


def test_the_daemon_logs_each_kind_in_its_own_line(caplog: pytest.LogCaptureFixture) -> None:
    core = SRSServer(ServerConfig(max_sources_per_client=1))
    clock = [0.0]
    log = logging.getLogger("test.srs.refusals")
    on_refusals = log_refusals(RefusalLog(log, lambda: clock[0]))
    connect(core, 1)
    connect(core, 2, host="192.0.2.7")
    with caplog.at_level(logging.WARNING, logger="test.srs.refusals"):
        core.receive_data(1, hello(1) + sirs(0, 4), now=0.0)
        core.receive_data(2, b"\xff" * 10, now=0.0)
        on_refusals(core.take_refusals())
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert lines[0].startswith(
        "refused source quota per client: client[10.0.0.1:1] sessionID[0x00000001] from "
        "192.0.2.1 (x3): SIR for topic 't/3' refused"
    )
    assert lines[0].endswith("; 3 since start")
    assert lines[1].startswith("refused malformed input: 192.0.2.7:40002: not valid SRS protocol")


def test_memory_is_released_after_a_large_peak_of_incomplete_frames() -> None:
    core = SRSServer(ServerConfig())
    for cid in range(1, 41):
        connect(core, cid)
        core.receive_data(cid, partial(1 << 20, 500_000), now=0.0)
    assert not release_memory_if_freed(core)  # still held: nothing to release
    for cid in range(1, 41):
        core.receive_disconnected(cid, now=1.0)
    import ctypes.util

    expected = ctypes.util.find_library("c") is not None
    assert release_memory_if_freed(core) is expected
    assert core.buffered_peak == 0
    assert not release_memory_if_freed(core)  # once per peak
