"""Run a pyum daemon as a subprocess on loopback and talk to it over UDP, every wait bounded.

:class:`DaemonProcess` starts ``python -m daemons.<name> ...``, collects its stdout lines and
learns its port from the "listening on HOST:PORT" line (daemons accept ``-p 0``), so tests never
guess a free port.  :class:`UdpClient` is a client socket with bounded receives.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 20.0  # a cold interpreter + lxml + uvloop import on a busy 2-core machine
STOP_TIMEOUT = 10.0
LISTENING = re.compile(r"listening on (\d+\.\d+\.\d+\.\d+):(\d+)")
METRICS = re.compile(r"metrics on http://([\d.]+):(\d+)/metrics")


class DaemonProcess:
    def __init__(self, proc: asyncio.subprocess.Process, logfile: Path | None) -> None:
        self.proc = proc
        self.logfile = logfile
        self.lines: list[str] = []
        self.changed = asyncio.Event()
        self._reader = asyncio.create_task(self._read())
        self.address: tuple[str, int] = ("", 0)
        self._metrics: tuple[str, int] | None = None

    @classmethod
    async def start(
        cls,
        name: str,
        *args: str,
        logfile: Path | None = None,
        wait_listening: bool = True,
        env: dict[str, str] | None = None,
    ) -> DaemonProcess:
        """``env``: variables added to the test's own environment for the daemon."""
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            f"daemons.{name}",
            *args,
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        self = cls(proc, logfile)
        if wait_listening:
            match = await self.wait_for_line(LISTENING, START_TIMEOUT)
            self.address = (match.group(1), int(match.group(2)))
        return self

    @property
    def metrics(self) -> tuple[str, int] | None:
        """The ``--metrics`` address from its "metrics on" line, None while not logged (yet):
        read it after the daemon's readiness line -- lbmrd and srs log it before "listening
        on", umestored after its Stores' "listening on" lines, before "ready to accept
        registrations"."""
        if self._metrics is None:
            found = self.find(METRICS)
            if found:
                self._metrics = (found.group(1), int(found.group(2)))
        return self._metrics

    @metrics.setter
    def metrics(self, address: tuple[str, int]) -> None:
        self._metrics = address

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line.decode(errors="replace").rstrip("\n"))
            self.changed.set()
        self.changed.set()

    def all_lines(self) -> list[str]:
        lines = list(self.lines)
        if self.logfile is not None:
            with contextlib.suppress(OSError):
                lines += self.logfile.read_text(errors="replace").splitlines()
        return lines

    def find(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        for line in self.all_lines():
            m = pattern.search(line)
            if m:
                return m
        return None

    async def wait_for_line(self, pattern: re.Pattern[str] | str, timeout: float) -> re.Match[str]:
        """The first output line matching ``pattern`` (stdout, and the log file if any)."""
        rx = re.compile(pattern) if isinstance(pattern, str) else pattern

        def found() -> re.Match[str] | None:
            return self.find(rx)

        result = await wait_for(found, timeout, what=f"a line matching {rx.pattern!r}", proc=self)
        return result

    async def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        try:
            return await asyncio.wait_for(self.proc.wait(), STOP_TIMEOUT)
        finally:
            await self.kill()

    async def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(self._reader, STOP_TIMEOUT)


async def wait_for(
    predicate: Callable[[], object],
    timeout: float,
    *,
    what: str,
    proc: DaemonProcess | None = None,
    poll: float = 0.02,
) -> object:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if proc is not None and proc.proc.returncode is not None:
            await asyncio.sleep(0.05)  # let the reader collect the last lines
            raise AssertionError(
                f"daemon exited ({proc.proc.returncode}) waiting for {what}:\n"
                + "\n".join(proc.all_lines()[-20:])
            )
        if loop.time() >= deadline:
            tail = "\n".join(proc.all_lines()[-20:]) if proc else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{tail}")
        await asyncio.sleep(poll)


def lines_until(proc: subprocess.Popen[str], text: str, timeout: float) -> list[str]:
    """``proc``'s output lines up to the first containing ``text``; fails after ``timeout``
    seconds, or as soon as the output ends without it."""
    lines: list[str] = []
    finished = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                lines.append(line)
                if text in line:
                    return
        finally:
            finished.set()

    threading.Thread(target=read, daemon=True).start()
    finished.wait(timeout)
    assert lines and text in lines[-1], f"no line with {text!r} (within {timeout} s): {lines}"
    return lines


class UdpClient:
    """A loopback UDP socket with bounded receives (a stand-in for a UM context)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        self.sock.bind((host, 0))
        self.sock.setblocking(False)
        self.address: tuple[str, int] = self.sock.getsockname()

    def send(self, data: bytes, to: tuple[str, int]) -> None:
        self.sock.sendto(data, to)

    async def recv(self, timeout: float = 5.0) -> tuple[bytes, tuple[str, int]]:
        loop = asyncio.get_running_loop()
        data, addr = await asyncio.wait_for(loop.sock_recvfrom(self.sock, 65535), timeout)
        return data, addr

    async def recv_skipping_keepalives(self, timeout: float = 5.0) -> tuple[bytes, tuple[str, int]]:
        """The next datagram that is not a 4-byte resolver keepalive."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            data, addr = await self.recv(max(0.001, deadline - loop.time()))
            if data != b"\x00\x00\x00\x00":
                return data, addr

    def pending(self) -> list[bytes]:
        """Everything already queued on the socket, without waiting."""
        out = []
        while True:
            try:
                out.append(self.sock.recv(65535))
            except BlockingIOError:
                return out

    def close(self) -> None:
        self.sock.close()
