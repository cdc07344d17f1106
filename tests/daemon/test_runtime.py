"""The daemon runtime pieces: CoreTimer, DatagramEndpoint, logging, pid file, signals, CLI,
metrics, interface resolution."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import urllib.request
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from umcore.aio import udp
from umcore.aio.timer import CoreTimer
from umcore.aio.udp import DatagramEndpoint
from umcore.daemon import cli, interfaces, lifecycle, logs, metrics
from umcore.daemon.pidfile import PidFile
from umcore.errors import ConfigError

WAIT = 5.0

# -- CoreTimer ------------------------------------------------------------------------------------


async def test_core_timer_fires_once_and_rearms() -> None:
    loop = asyncio.get_running_loop()
    fired = asyncio.Event()
    calls: list[float] = []

    def on_fire() -> None:
        calls.append(loop.time())
        fired.set()

    timer = CoreTimer(loop, on_fire)
    start = loop.time()
    timer.arm(start + 0.05)
    timer.arm(start + 0.05)  # same deadline: no second handle
    await asyncio.wait_for(fired.wait(), WAIT)
    assert len(calls) == 1 and calls[0] >= start + 0.05
    assert timer.deadline is None
    fired.clear()
    timer.arm(loop.time() - 1)  # past deadlines fire on the next iteration
    await asyncio.wait_for(fired.wait(), WAIT)
    assert len(calls) == 2


async def test_core_timer_replace_and_cancel() -> None:
    loop = asyncio.get_running_loop()
    calls: list[str] = []
    timer = CoreTimer(loop, lambda: calls.append("fired"))
    timer.arm(loop.time() + 0.02)
    timer.arm(loop.time() + 10)  # replaces the earlier deadline
    done = loop.create_future()
    loop.call_later(0.1, done.set_result, None)
    await done
    assert calls == []
    timer.cancel()
    assert timer.deadline is None
    timer.arm(None)  # disarming twice is harmless


# -- DatagramEndpoint -----------------------------------------------------------------------------
# Every endpoint test runs on both loops: asyncio's (the Python drain loop) and uvloop's (its own
# datagram transport); see umcore.aio.udp.

LOOPS = ["asyncio", "uvloop"]


@pytest.fixture(params=LOOPS)
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, None]], None]:
    """Run a test body to completion on a fresh loop of the parametrized kind."""
    if request.param == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    else:
        factory = asyncio.new_event_loop

    def runner(body: Coroutine[Any, Any, None]) -> None:
        with asyncio.Runner(loop_factory=factory) as r:
            r.run(asyncio.wait_for(body, 4 * WAIT))

    runner.kind = request.param  # type: ignore[attr-defined]
    return runner


def on_uvloop() -> bool:
    return type(asyncio.get_running_loop()).__module__.startswith("uvloop")


async def wait_until(cond: Callable[[], bool]) -> None:
    """Poll ``cond`` once per loop iteration (bounded by WAIT)."""
    async with asyncio.timeout(WAIT):
        while not cond():
            await asyncio.sleep(0.001)


def test_endpoint_drains_a_backlog_in_bounded_batches(run: Any) -> None:
    async def body() -> None:
        loop = asyncio.get_running_loop()
        got: list[tuple[bytes, tuple[str, int]]] = []
        done = asyncio.Event()
        total = udp.MAX_DATAGRAMS_PER_WAKEUP * 3 + 7
        kind = bytes if on_uvloop() else memoryview
        bound = udp.UVLOOP_DATAGRAMS_PER_WAKEUP if on_uvloop() else udp.MAX_DATAGRAMS_PER_WAKEUP

        def on_datagram(data: bytes | memoryview, addr: tuple[str, int]) -> None:
            assert type(data) is kind
            got.append((bytes(data), addr))
            if len(got) == total:
                done.set()

        ep = await DatagramEndpoint.bind("127.0.0.1", 0, on_datagram, rcvbuf=4 * 1024 * 1024)
        # Datagrams read per loop iteration: a callback that re-schedules itself runs once per
        # iteration, and each iteration polls the socket once.
        per_iteration: list[int] = []
        last = [0]

        def tick() -> None:
            per_iteration.append(ep.datagrams_received - last[0])
            last[0] = ep.datagrams_received
            if not done.is_set():
                loop.call_soon(tick)

        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sender.bind(("127.0.0.1", 0))
            sender_address = sender.getsockname()
            # Queue the whole backlog before the loop gets a chance to read any of it.
            for i in range(total):
                sender.sendto(i.to_bytes(4, "big") * (1 + i % 50), ep.local_address)
            loop.call_soon(tick)
            await asyncio.wait_for(done.wait(), WAIT)
        finally:
            sender.close()
            ep.close()
        assert [int.from_bytes(d[:4], "big") for d, _ in got] == list(range(total))
        assert all(len(d) == 4 * (1 + i % 50) for i, (d, _) in enumerate(got))
        assert {a for _, a in got} == {sender_address}
        assert max(per_iteration) == bound  # bounded per wake-up...
        assert len([n for n in per_iteration if n]) >= total // bound  # ...so several were needed
        assert ep.datagrams_received == total
        assert ep.bytes_received == sum(len(d) for d, _ in got)

    run(body())


def test_endpoint_datagram_lifetime(run: Any) -> None:
    """The Python path hands out views of one reused buffer (valid during the call); uvloop
    hands out the transport's own bytes (kept as they are)."""

    async def body() -> None:
        seen: list[bytes | memoryview] = []
        done = asyncio.Event()

        def on_datagram(data: bytes | memoryview, addr: tuple[str, int]) -> None:
            seen.append(data)
            if len(seen) == 2:
                done.set()

        ep = await DatagramEndpoint.bind("127.0.0.1", 0, on_datagram)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"first", ep.local_address)
            s.sendto(b"SECOND", ep.local_address)
            await asyncio.wait_for(done.wait(), WAIT)
        ep.close()
        if on_uvloop():
            assert seen == [b"first", b"SECOND"]
            assert all(type(d) is bytes for d in seen)
        else:
            first, second = seen
            assert isinstance(first, memoryview) and isinstance(second, memoryview)
            assert first.obj is second.obj  # the same buffer: the first view was overwritten
            assert bytes(second) == b"SECOND"

    run(body())


def test_endpoint_sendto_counts_and_callback_errors_do_not_stop_it(
    run: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async def body() -> None:
        received = asyncio.Queue[bytes]()

        def on_datagram(data: bytes | memoryview, addr: tuple[str, int]) -> None:
            if bytes(data) == b"boom":
                raise RuntimeError("handler bug")
            received.put_nowait(bytes(data))

        a = await DatagramEndpoint.bind("127.0.0.1", 0, on_datagram)
        b = await DatagramEndpoint.bind("127.0.0.1", 0, lambda d, addr: None)
        try:
            assert b.sendto(b"boom", a.local_address)
            assert b.sendto(b"fine", a.local_address)
            assert await asyncio.wait_for(received.get(), WAIT) == b"fine"
            assert a.callback_errors == 1
            assert a.datagrams_received == 2 and a.bytes_received == 8
            assert b.datagrams_sent == 2 and b.bytes_sent == 8
            assert b.send_batch([(b"one", a.local_address), (b"two", a.local_address)]) == 2
            assert await asyncio.wait_for(received.get(), WAIT) == b"one"
            assert await asyncio.wait_for(received.get(), WAIT) == b"two"
            assert b.datagrams_sent == 4 and b.bytes_sent == 14
            assert "handler failed" in caplog.text
        finally:
            a.close()
            b.close()
        a.close()  # idempotent
        assert a.closed

    run(body())


def test_endpoint_send_never_blocks_and_counts_drops(run: Any) -> None:
    async def body() -> None:
        ep = await DatagramEndpoint.bind("127.0.0.1", 0, lambda d, a: None, sndbuf=4096)
        sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sink.bind(("127.0.0.1", 0))
        try:
            payload = b"x" * 60000
            results = [ep.sendto(payload, sink.getsockname()) for _ in range(200)]
        finally:
            sink.close()
            ep.close()
        # On loopback the receiver's full queue drops silently; what matters is that we never
        # blocked and every refusal was counted rather than raised.
        assert results.count(False) == ep.send_dropped + ep.send_errors
        assert ep.datagrams_sent == results.count(True)

    run(body())


def test_endpoint_socket_buffers_are_set(run: Any) -> None:
    async def body() -> None:
        ep = await DatagramEndpoint.bind("127.0.0.1", 0, lambda d, a: None, rcvbuf=65536)
        try:
            rcv, snd = ep.socket_buffers()
            assert rcv >= 65536 and snd > 0
            assert ep.local_address[1] != 0
        finally:
            ep.close()

    run(body())


def test_endpoint_pause_and_resume_reading(run: Any) -> None:
    """Paused, the endpoint reads nothing (datagrams wait in the kernel); resumed, it reads
    them all, once each, and nothing else."""

    async def body() -> None:
        got: list[bytes] = []
        probe = asyncio.Event()
        ep = await DatagramEndpoint.bind("127.0.0.1", 0, lambda d, a: got.append(bytes(d)))
        other = await DatagramEndpoint.bind("127.0.0.1", 0, lambda d, a: probe.set())
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            ep.pause_reading()
            ep.pause_reading()  # idempotent
            assert ep.paused
            for i in range(3):
                sender.sendto(b"%d" % i, ep.local_address)
            # Loopback delivery is synchronous: once the loop has read the later probe, it
            # has polled I/O since the three datagrams were queued.
            sender.sendto(b"probe", other.local_address)
            await asyncio.wait_for(probe.wait(), WAIT)
            assert got == [] and ep.datagrams_received == 0
            ep.resume_reading()
            ep.resume_reading()  # idempotent
            assert not ep.paused
            await ep.reading()
            await wait_until(lambda: len(got) == 3)
            # Pause and resume in quick succession (on uvloop: while a transport is being
            # opened and closed): still exactly one reader, each datagram read once.
            for _ in range(3):
                ep.pause_reading()
                ep.resume_reading()
            sender.sendto(b"3", ep.local_address)
            await wait_until(lambda: len(got) == 4)
            await ep.reading()
            if on_uvloop():
                assert ep._transport is not None and ep._opening is None
            sender.sendto(b"4", ep.local_address)
            await wait_until(lambda: len(got) == 5)
            assert got == [b"0", b"1", b"2", b"3", b"4"]
            assert ep.datagrams_received == 5
        finally:
            sender.close()
            ep.close()
            other.close()

    run(body())


def test_endpoint_close_stops_reading_at_once_and_releases_the_port(run: Any) -> None:
    """close() inside the callback stops the batch being read; the port is released (on
    uvloop once the transport's duplicate socket is closed, an iteration later)."""

    async def body() -> None:
        got: list[bytes] = []
        ep: DatagramEndpoint | None = None

        def on_datagram(data: bytes | memoryview, addr: tuple[str, int]) -> None:
            got.append(bytes(data))
            assert ep is not None
            ep.close()

        ep = await DatagramEndpoint.bind("127.0.0.1", 0, on_datagram)
        port = ep.local_address[1]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for i in range(10):
                s.sendto(b"%d" % i, ep.local_address)
            await wait_until(lambda: ep is not None and ep.closed)
        assert got == [b"0"] and ep.datagrams_received == 1
        assert ep.sock.fileno() == -1

        def port_free() -> bool:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    return False
                return True

        await wait_until(port_free)
        if on_uvloop():
            assert ep._transport is None

    run(body())


def test_endpoint_closed_or_paused_before_it_reads(run: Any) -> None:
    """Made with the synchronous constructor (on uvloop the transport opens an iteration or two
    later) and closed or paused at once: nothing is read, nothing leaks."""

    async def body() -> None:
        loop = asyncio.get_running_loop()
        got: list[bytes] = []
        for action in ("close", "pause"):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.setblocking(False)
            sock.bind(("127.0.0.1", 0))
            ep = DatagramEndpoint(loop, sock, lambda d, a: got.append(bytes(d)))
            getattr(ep, action if action == "close" else "pause_reading")()
            await ep.reading()
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                if action == "pause":
                    s.sendto(b"x", ep.local_address)
                    ep.close()
            assert got == [] and ep._opening is None and ep._transport is None

    run(body())


def test_endpoint_counts_icmp_errors(run: Any) -> None:
    """An ICMP port-unreachable reported on the socket (a connected one gets it) is a receive
    error, counted; the endpoint keeps reading."""

    async def body() -> None:
        got: list[bytes] = []
        ep = await DatagramEndpoint.bind("127.0.0.1", 0, lambda d, a: got.append(bytes(d)))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as peer:
            peer.bind(("127.0.0.1", 0))
            dead = peer.getsockname()
        try:
            ep.sock.connect(dead)
            assert ep.sendto(b"anyone?", dead)
            await wait_until(lambda: ep.receive_errors >= 1)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as peer:
                peer.bind(dead)  # the port is back: datagrams from it are read again
                peer.sendto(b"back", ep.local_address)
                await wait_until(lambda: got == [b"back"])
        finally:
            ep.close()

    run(body())


# -- logging --------------------------------------------------------------------------------------


def test_rate_limited_log_bounds_output_and_summarises(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    limited = logs.RateLimitedLog(logging.getLogger("t"), lambda: now[0], period=10.0, burst=3)
    with caplog.at_level(logging.WARNING):
        results = [limited.warning("bad", "malformed %d", i) for i in range(100)]
        assert results.count(True) == 3
        assert limited.suppressed == 97
        assert limited.warning("other", "another key has its own budget")
        now[0] = 10.0
        assert limited.warning("bad", "malformed again")
    assert "malformed again (97 similar messages suppressed)" in caplog.text
    assert caplog.text.count("malformed ") == 4


def test_log_file_reopen(tmp_path: Path) -> None:
    path = tmp_path / "d.log"
    setup = logs.configure(str(path))
    try:
        logging.getLogger("d").info("before")
        os.rename(path, tmp_path / "d.log.1")
        setup.reopen()
        logging.getLogger("d").info("after")
    finally:
        setup.close()
    assert "before" in (tmp_path / "d.log.1").read_text()
    text = path.read_text()
    assert "after" in text and "[INFO]: d: after" in text


# -- pid file -------------------------------------------------------------------------------------


def test_pid_file(tmp_path: Path) -> None:
    path = tmp_path / "x.pid"
    with PidFile(path):
        assert path.read_text() == f"{os.getpid()}\n"
    assert not path.exists()
    other = PidFile(path)
    path.write_text("1\n")
    other.remove()  # we never wrote it: untouched
    assert path.exists()


# -- signals --------------------------------------------------------------------------------------


async def test_stop_signals_graceful_then_forced() -> None:
    loop = asyncio.get_running_loop()
    reloads: list[int] = []
    forced: list[int] = []
    sig = lifecycle.StopSignals(loop, on_reload=lambda: reloads.append(1), force_exit=forced.append)
    sig.install()
    try:
        os.kill(os.getpid(), signal.SIGHUP)
        await asyncio.wait_for(_until(lambda: reloads), WAIT)
        assert not sig.stopping.is_set()
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(sig.stopping.wait(), WAIT)
        assert sig.reason == "SIGTERM"
        os.kill(os.getpid(), signal.SIGTERM)  # a second SIGTERM is not a force
        os.kill(os.getpid(), signal.SIGINT)  # a second SIGINT is
        await asyncio.wait_for(_until(lambda: forced), WAIT)
        assert forced == [lifecycle.EXIT_FORCED]
    finally:
        sig.uninstall()


async def _until(predicate: object) -> None:
    while not predicate():  # type: ignore[operator]
        await asyncio.sleep(0.01)


def test_config_error_exit_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    err = ConfigError("bad", source="f.xml", line=3, what="<port>")
    with pytest.raises(SystemExit) as exc:
        lifecycle.config_error_exit("lbmrd", err)
    assert exc.value.code == 1
    assert capsys.readouterr().err == "lbmrd: f.xml:3: <port>: bad\n"


def test_new_event_loop_prefers_uvloop() -> None:
    loop = lifecycle.new_event_loop()
    try:
        if lifecycle.uvloop_available():
            assert type(loop).__module__.startswith("uvloop")
    finally:
        loop.close()
    plain = lifecycle.new_event_loop(use_uvloop=False)
    try:
        assert not type(plain).__module__.startswith("uvloop")
    finally:
        plain.close()


# -- CLI ------------------------------------------------------------------------------------------


def test_cli_help_prints_man_page(capsys: pytest.CaptureFixture[str]) -> None:
    parser = cli.DaemonArgumentParser("d", "MAN PAGE TEXT")
    cli.add_metrics_argument(parser)
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["-h"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == "MAN PAGE TEXT\n"
    assert parser.parse_args(["--metrics", "127.0.0.1:0"]).metrics == ("127.0.0.1", 0)
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["--metrics", "nonsense"])
    assert exc.value.code == 2


# -- metrics --------------------------------------------------------------------------------------


async def test_metrics_endpoint_reads_counters_at_scrape_time() -> None:
    state = {"n": 0}
    registry = metrics.new_registry(
        [
            metrics.MetricSpec("t_things", "counter", "things", lambda: state["n"]),
            metrics.MetricSpec("t_level", "gauge", "level", lambda: 7),
        ]
    )
    server = metrics.MetricsServer(registry)
    host, port = await server.start("127.0.0.1", 0)
    try:
        state["n"] = 41
        loop = asyncio.get_running_loop()
        text = await loop.run_in_executor(
            None,
            lambda: urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5).read(),
        )
    finally:
        await server.close()
    body = text.decode()
    assert "t_things_total 41.0" in body
    assert "t_level 7.0" in body
    # A registry per daemon: nothing of ours leaks into the global one.
    from prometheus_client import REGISTRY

    assert REGISTRY.get_sample_value("t_things_total") is None


# -- interfaces -----------------------------------------------------------------------------------

LOCAL = [("lo", "127.0.0.1"), ("eth0", "10.29.3.101"), ("eth1", "192.168.7.5")]


@pytest.mark.parametrize(
    ("spec", "address", "defaulted"),
    [
        (None, "127.0.0.1", True),
        ("0.0.0.0", "127.0.0.1", True),
        ("10.29.3.101", "10.29.3.101", False),
        ("10.29.3.0/24", "10.29.3.101", False),
        ("10.29.3/24", "10.29.3.101", False),
        ("10.0.0.0/8", "10.29.3.101", False),
        ('"eth1"', "192.168.7.5", False),
        ("eth1", "192.168.7.5", False),
        ("localhost", "127.0.0.1", False),
        ("localhost/8", "127.0.0.1", False),
    ],
)
def test_interface_specs(spec: str | None, address: str, defaulted: bool) -> None:
    got = interfaces.resolve(spec, addresses=LOCAL)
    assert (got.address, got.defaulted) == (address, defaulted)


@pytest.mark.parametrize("spec", ["10.1.1.50", "172.16.0.0/12", '"eth9"', "no.such.host.invalid"])
def test_interface_specs_refused(spec: str) -> None:
    with pytest.raises(ConfigError) as exc:
        interfaces.resolve(spec, source="f.xml", line=4, what="<interface>", addresses=LOCAL)
    assert str(exc.value).startswith("f.xml:4: <interface>: ")
    assert "eth0=10.29.3.101" in str(exc.value)  # says what would have worked


def test_local_addresses_include_loopback() -> None:
    assert ("lo", "127.0.0.1") in interfaces.local_addresses() or any(
        a == "127.0.0.1" for _, a in interfaces.local_addresses()
    )


async def test_stop_signals_windows_fallback_without_add_signal_handler() -> None:
    """Where loop.add_signal_handler raises NotImplementedError (Windows), signal.signal is used
    and the handler hops onto the loop."""
    loop = asyncio.get_running_loop()

    class NoSignalLoop:
        def __getattr__(self, name: str) -> object:
            return getattr(loop, name)

        def add_signal_handler(self, *args: object) -> None:
            raise NotImplementedError

    sig = lifecycle.StopSignals(NoSignalLoop(), force_exit=lambda code: None)  # type: ignore[arg-type]
    before = signal.getsignal(signal.SIGTERM)
    sig.install()
    try:
        assert signal.getsignal(signal.SIGTERM) == sig._threadsafe
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(sig.stopping.wait(), WAIT)
    finally:
        sig.uninstall()
    assert signal.getsignal(signal.SIGTERM) == before


def test_windows_front_imports_without_pywin32() -> None:
    from umcore.daemon import winservice

    params = winservice.ServiceParameters("c.xml", "INFO")
    assert params.event_log_level == "INFO"
    with pytest.raises(ValueError):
        winservice.ServiceParameters(event_log_level="LOUD")
    if not winservice.HAVE_PYWIN32:
        with pytest.raises(SystemExit) as exc:
            winservice.require_pywin32("lbmrds")
        assert "pywin32" in str(exc.value.code)
