"""Run a pyum tool (``python -m umcore.tools.NAME``) as a subprocess whose output lines are
collected as they come (:class:`~tests.integration.daemon_proc.DaemonProcess`: bounded waits for
a line, SIGINT/SIGTERM then SIGKILL), and flat configurations that keep a test's tools on
loopback and to themselves."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

from tests.integration.daemon_proc import ROOT, DaemonProcess

TIMEOUT = 60.0  # cold interpreters and Stores on a busy 2-core machine

# Ephemeral ports and loopback interfaces for every transport and request port.
LOOPBACK_LINES = (
    "context transport_tcp_port_low 0\n"
    "context transport_tcp_port_high 0\n"
    "context request_tcp_port_low 0\n"
    "context request_tcp_port_high 0\n"
    "context request_tcp_interface 127.0.0.1\n"
    "source transport_tcp_interface 127.0.0.1\n"
)


def free_udp_port() -> int:
    """A UDP port nothing listens on just now."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_tcp_port() -> int:
    """A TCP port nothing listens on just now (a Store address nobody answers at)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def resolver_lines(lbmrd: tuple[str, int]) -> str:
    """Unicast topic resolution through one lbmrd, from loopback, ephemeral resolver ports."""
    ip, port = lbmrd
    return (
        f"context resolver_unicast_daemon {ip}:{port}\n"
        "context resolver_unicast_interface 127.0.0.1\n"
        "context resolver_unicast_port_low 0\n"
        "context resolver_unicast_port_high 0\n"
    )


def quiet_config(path: Path) -> Path:
    """A configuration whose topic resolution goes to an lbmrd that does not exist: the tool
    runs, resolves nothing and sends no multicast."""
    path.write_text(resolver_lines(("127.0.0.1", free_udp_port())) + LOOPBACK_LINES)
    return path


async def start_tool(name: str, *args: str) -> DaemonProcess:
    """``python -m umcore.tools.NAME ARGS`` with stdout and stderr collected as lines."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        f"umcore.tools.{name}",
        *args,
        cwd=ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    return DaemonProcess(proc, None)


async def run_tool(name: str, *args: str) -> tuple[int, list[str]]:
    """Run a tool to its end (bounded): (exit status, output lines)."""
    tool = await start_tool(name, *args)
    try:
        rc = await asyncio.wait_for(tool.proc.wait(), TIMEOUT)
    except TimeoutError:
        await tool.stop(signal.SIGINT)  # its summary line, for the report
        tail = "\n".join(tool.all_lines()[-40:])
        raise AssertionError(f"{name} did not end within {TIMEOUT} s:\n{tail}") from None
    finally:
        await tool.kill()
    return rc, tool.all_lines()
