"""The SRS core's per-client record queue (``<clientactor>``): service interval, batch frame
limits, stream credit (REQUEST_STREAM / REQUEST_N, request-stream-max-msg-count), TCP
back-pressure and the queue bound.  Sans-IO, explicit ``now``."""

from __future__ import annotations

from tests.srs.harness import sir
from umcore.srs.server import UNBOUNDED_CREDIT, ServerConfig, SRSServer
from umcore.wire import srs as rs
from umcore.wire.srs_messages import (
    Batch,
    ReceiverInfo,
    RegistrationRequest,
    SourceInfo,
    StreamRequest,
)

SRC, RCV = 1, 2  # connection ids: the advertising context and the receiving one


def register(server: SRSServer, cid: int, now: float, request_n: int = UNBOUNDED_CREDIT) -> None:
    server.receive_connected(cid, ("127.0.0.1", 5000 + cid), now)
    server.receive_data(
        cid,
        rs.encode(rs.Setup(1000, 30000))
        + rs.encode(rs.RequestResponse(1, RegistrationRequest("10.0.0.9", 1, cid)))
        + rs.encode(rs.RequestStream(3, StreamRequest(), request_n)),
        now,
    )


def setup(
    topics: list[str], now: float = 1.0, request_n: int = UNBOUNDED_CREDIT, **cfg
) -> SRSServer:  # type: ignore[no-untyped-def]
    """A source context and a receiver context interested in ``topics``; writes drained."""
    server = SRSServer(ServerConfig(**cfg), now=now)
    register(server, SRC, now)
    register(server, RCV, now, request_n)
    interest = Batch([ReceiverInfo(t) for t in topics])
    server.receive_data(RCV, rs.encode(rs.Payload(3, interest)), now)
    server.take_writes()
    return server


def advertise(server: SRSServer, sources: list[SourceInfo], now: float) -> None:
    server.receive_data(SRC, rs.encode(rs.Payload(3, Batch(sources))), now)


def frames_to(server: SRSServer, cid: int = RCV) -> list[rs.Payload]:
    data = dict(server.take_writes()).get(cid, b"")
    frames = rs.SRSStreamDecoder().feed(data)
    assert all(isinstance(f, rs.Payload) for f in frames)
    return frames  # type: ignore[return-value]


def records(frames: list[rs.Payload]) -> list[str]:
    return [r.topic for f in frames for r in f.message.records]  # type: ignore[union-attr]


def receiver(server: SRSServer):  # type: ignore[no-untyped-def]
    return next(c for c in server.connected_clients() if c.conn.conn_id == RCV)  # type: ignore[union-attr]


def test_a_lone_record_waits_for_the_service_interval_and_no_longer() -> None:
    server = setup(["T"], record_queue_service_interval_ms=10)
    advertise(server, [sir("T", 1)], 1.5)
    assert frames_to(server) == []  # queued, not sent
    assert receiver(server).stats.record_queue_depth == 1
    assert server.service_deadline == 1.5 + 0.010
    assert server.next_timer() == 1.5 + 0.010  # the connection sweep is due later
    server.handle_timer(1.509)
    assert frames_to(server) == []
    server.handle_timer(1.510)
    assert records(frames_to(server)) == ["T"]
    assert receiver(server).stats.record_queue_depth == 0
    assert server.service_deadline is None  # nothing queued: no service armed


def test_service_interval_is_configurable() -> None:
    server = setup(["T"], record_queue_service_interval_ms=250)
    advertise(server, [sir("T", 1)], 2.0)
    assert server.service_deadline == 2.25
    server.handle_timer(2.2)
    assert frames_to(server) == []
    server.handle_timer(2.25)
    assert records(frames_to(server)) == ["T"]


def test_full_frames_leave_at_once_the_rest_at_the_service() -> None:
    topics = [f"T{i:03d}" for i in range(120)]
    server = setup(topics, batch_frame_max_record_count=50)
    advertise(server, [sir(t, i) for i, t in enumerate(topics)], 2.0)
    now_frames = frames_to(server)
    assert [len(f.message.records) for f in now_frames] == [50, 50]  # type: ignore[union-attr]
    assert receiver(server).stats.record_queue_depth == 20
    server.handle_timer(2.01)
    later = frames_to(server)
    assert [len(f.message.records) for f in later] == [20]  # type: ignore[union-attr]
    assert records(now_frames + later) == topics  # in order


def test_batch_frames_respect_record_count_and_datagram_size() -> None:
    topics = [f"topic/{i:04d}" for i in range(97)]
    sources = [sir(t, i) for i, t in enumerate(topics)]
    sizes = [len(s.encode()) for s in sources]
    for max_records, max_bytes in ((7, 8192), (50, 3 + 6 + 3 * max(sizes)), (50, 3 + 6 + 1)):
        server = setup(
            topics,
            batch_frame_max_record_count=max_records,
            batch_frame_max_datagram_size=max_bytes,
        )
        advertise(server, sources, 2.0)
        server.handle_timer(2.01)
        raw = b"".join(d for c, d in server.take_writes() if c == RCV)
        got = rs.SRSStreamDecoder().feed(raw)
        assert records(got) == topics  # type: ignore[arg-type]
        # each frame: at most max_records records, at most max_bytes bytes with its length,
        # unless one record alone is bigger (the last case: every record travels alone); and
        # full: the next record did not fit
        pos = done = 0
        for frame in got:
            n = int.from_bytes(raw[pos : pos + 3], "big") + 3
            count = len(frame.message.records)  # type: ignore[union-attr]
            assert count <= max_records
            assert n <= max_bytes or count == 1
            assert n == 9 + sum(sizes[done : done + count])
            done += count
            if done < len(sizes):
                assert count == max_records or n + sizes[done] > max_bytes
            pos += n
        assert pos == len(raw) and done == 97


def test_stream_credit_bounds_payloads_and_request_n_releases_them() -> None:
    topics = [f"T{i:03d}" for i in range(100)]
    server = setup(topics, request_n=2, batch_frame_max_record_count=10)
    rcv = receiver(server)
    assert rcv.credit == 2
    advertise(server, [sir(t, i) for i, t in enumerate(topics)], 2.0)
    assert len(frames_to(server)) == 2  # the two full frames the credit allows, at once
    server.handle_timer(2.01)
    assert frames_to(server) == []  # no credit left: held back, counted
    assert rcv.credit == 0
    assert rcv.held_back == 80 and server.refused.records_held_back == 80
    assert server.service_deadline is None  # nothing to do until the client grants more
    server.receive_data(RCV, rs.encode(rs.RequestN(3, 3)), 3.0)
    assert server.service_deadline == 3.0  # what waited is due at once
    server.handle_timer(3.0)
    assert len(frames_to(server)) == 3
    assert receiver(server).stats.record_queue_depth == 50
    server.receive_data(RCV, rs.encode(rs.RequestN(3, UNBOUNDED_CREDIT)), 4.0)
    assert rcv.credit == UNBOUNDED_CREDIT  # saturates: unbounded from now on
    server.handle_timer(4.0)
    got = frames_to(server)
    assert len(got) == 5 and len(rcv.queue) == 0
    server.receive_data(RCV, rs.encode(rs.RequestN(3, 0)), 5.0)
    assert rcv.err.client_invalid_srs_message_received_count == 1  # request_n must be > 0


def test_request_stream_max_msg_count_bounds_each_service() -> None:
    topics = [f"T{i:03d}" for i in range(100)]
    server = setup(topics, request_stream_max_msg_count=3, batch_frame_max_record_count=10)
    advertise(server, [sir(t, i) for i, t in enumerate(topics)], 2.0)
    sent = [len(frames_to(server))]  # eager full frames, within this window's 3
    now = 2.0
    while server.service_deadline is not None:
        assert abs(server.service_deadline - (now + 0.01)) < 1e-9
        now = server.service_deadline
        server.handle_timer(now)
        sent.append(len(frames_to(server)))
    assert sent[0] == 3 and max(sent) == 3 and sum(sent) == 10
    # every service after the first window sends 3 frames until the queue is empty
    assert sent[1] == 0 and sent[2:] == [3, 3, 1]
    # held back: 70 at the first service (window spent), then 40, then 10
    assert receiver(server).held_back == 70 + 40 + 10
    assert abs(now - 2.04) < 1e-9  # one service per interval


def test_paused_writing_keeps_records_in_the_core_until_resumed() -> None:
    server = setup(["T"])
    server.receive_writing_paused(RCV, True, 2.0)
    advertise(server, [sir("T", 1)], 2.0)
    server.handle_timer(2.01)
    assert frames_to(server) == []
    assert len(receiver(server).queue) == 1
    server.receive_writing_paused(RCV, False, 2.5)
    assert server.service_deadline == 2.5
    server.handle_timer(2.5)
    assert records(frames_to(server)) == ["T"]


def test_a_queue_past_its_bound_costs_the_client_its_connection() -> None:
    topics = [f"T{i}" for i in range(10)]
    server = setup(topics, max_queued_records=5)
    server.receive_writing_paused(RCV, True, 2.0)  # the client stopped reading
    advertise(server, [sir(t, i) for i, t in enumerate(topics)], 2.0)
    assert server.take_closes() == [RCV]
    assert server.refused.queue_overflow == 1
    assert server.snapshot_stats().active_clients_count == 1
    assert server.snapshot_stats().clients_inactive_rir_count == 10  # state kept: inactive
