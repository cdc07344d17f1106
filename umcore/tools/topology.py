"""The local demo topology of ``make run``: lbmrd, then an lbmrcv and an lbmsrc resolving through it.

Theory of operation
-------------------
Everything runs on loopback with embedded settings, so no file has to exist beforehand:

1. lbmrd (``python -m daemons.lbmrd -i 127.0.0.1 -p 0``) starts on a free UDP port; the port is
   read from its "listening on" log line.
2. A flat UM configuration naming that lbmrd (``context resolver_unicast_daemon
   127.0.0.1:PORT``, interfaces on 127.0.0.1) is written to a temporary directory and handed to
   both tools with ``-c``: unicast topic resolution through lbmrd, multicast TR off.
3. ``lbmrcv -E -V -s`` (exit when the source stops, verify every message, statistics each
   second) and, a moment later, ``lbmsrc -V`` start.  Their output is streamed here, each line
   prefixed with the process name.

The run ends when the receiver has seen the source finish (its summary line is the last thing
printed), or on Ctrl-C / SIGTERM: every child then gets SIGINT, a bounded wait, then SIGKILL.
``--messages``/``--rate`` shape the source (default: 10 minutes of 1000 messages/s, a "long run").

``--transport lbtrm`` (or ``lbtru``, default ``tcp``) adds ``source transport ...`` to the written
configuration (LBT-RM: multicast on 127.0.0.1, and a 3 s receiver activity timeout so the
receiver sees EOS soon after the source is deleted: RM has no disconnect); ``--config FILE``
(repeatable) hands further flat configuration files to both tools, after the written one, so
any option (``source transport lbtrm``, ``context pyum_fault_drop_receive 0.05``...) can be
switched by configuration alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import sys
import tempfile
from pathlib import Path

__all__ = ["main"]

# Bound on each child's start-up and on its exit after SIGINT.
START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0
TOPIC = "pyum.demo"
_LISTENING = re.compile(rb"listening on ([0-9.]+):(\d+)")


class Child:
    def __init__(self, name: str, proc: asyncio.subprocess.Process) -> None:
        self.name = name
        self.proc = proc
        self.pump: asyncio.Task[None] | None = None


async def _spawn(name: str, *args: str) -> Child:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
    )
    return Child(name, proc)


async def _pump(child: Child, watch: asyncio.Queue[bytes] | None = None) -> None:
    assert child.proc.stdout is not None
    while True:
        line = await child.proc.stdout.readline()
        if not line:
            return
        sys.stdout.write(f"[{child.name:6}] {line.decode(errors='replace').rstrip()}\n")
        sys.stdout.flush()
        if watch is not None:
            watch.put_nowait(line)


async def _stop(child: Child) -> None:
    if child.proc.returncode is None:
        # os.kill, not Popen.send_signal: the latter reaps an exited child behind asyncio's
        # child watcher, which then reports a bogus status 255.
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.proc.pid, signal.SIGINT)
        try:
            await asyncio.wait_for(child.proc.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.proc.pid, signal.SIGKILL)
            await child.proc.wait()
    if child.pump is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(child.pump, STOP_TIMEOUT_S)


def _transport_lines(transport: str) -> str:
    if transport == "tcp":
        return ""
    lines = f"source transport {transport}\n"
    if transport == "lbtrm":
        lines += "receiver transport_lbtrm_activity_timeout 3000\n"
    return lines


async def _run(args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    children: list[Child] = []
    try:
        with tempfile.TemporaryDirectory(prefix="pyum-topology-") as tmp:
            lbmrd = await _spawn("lbmrd", "-m", "daemons.lbmrd", "-i", "127.0.0.1", "-p", "0")
            children.append(lbmrd)
            lines: asyncio.Queue[bytes] = asyncio.Queue()
            lbmrd.pump = asyncio.create_task(_pump(lbmrd, lines))
            port = None
            async with asyncio.timeout(START_TIMEOUT_S):
                while port is None:
                    found = _LISTENING.search(await lines.get())
                    if found:
                        port = int(found.group(2))
            cfg = Path(tmp) / "demo.cfg"
            cfg.write_text(
                "# written by umcore.tools.topology: topic resolution through the demo lbmrd\n"
                f"context resolver_unicast_daemon 127.0.0.1:{port}\n"
                "context resolver_unicast_interface 127.0.0.1\n"
                "source transport_tcp_interface 127.0.0.1\n"
                "receiver transport_tcp_interface 127.0.0.1\n"
                "source transport_lbtru_interface 127.0.0.1\n"
                "receiver transport_lbtru_interface 127.0.0.1\n" + _transport_lines(args.transport)
            )
            extra = [a for f in args.config for a in ("-c", str(Path(f).resolve()))]
            pause_ms = 1000.0 / args.rate if args.rate > 0 else 0.0
            print(f"[topo  ] lbmrd    udp 127.0.0.1:{port} (pid {lbmrd.proc.pid})")
            rcv = await _spawn(
                "lbmrcv",
                "-m",
                "umcore.tools.lbmrcv",
                "-c",
                str(cfg),
                *extra,
                "-E",
                "-V",
                "-s",
                TOPIC,
            )
            children.append(rcv)
            rcv.pump = asyncio.create_task(_pump(rcv))
            print(f"[topo  ] lbmrcv   topic {TOPIC!r} (pid {rcv.proc.pid})")
            src = await _spawn(
                "lbmsrc",
                "-m",
                "umcore.tools.lbmsrc",
                "-c",
                str(cfg),
                *extra,
                "-V",
                "-v",
                "-M",
                str(args.messages),
                "-l",
                str(args.length),
                "-P",
                f"{pause_ms:g}",
                "-d",
                "1",
                "-L",
                "1",
                TOPIC,
            )
            children.append(src)
            src.pump = asyncio.create_task(_pump(src))
            print(
                f"[topo  ] lbmsrc   topic {TOPIC!r}, {args.messages} messages of {args.length} "
                f"bytes (pid {src.proc.pid}); transport {args.transport} (and --config files)"
            )
            print(f"[topo  ] config   {cfg}  (Ctrl-C stops everything)")
            waiter = asyncio.create_task(stop.wait())
            rcv_done = asyncio.create_task(rcv.proc.wait())
            await asyncio.wait({waiter, rcv_done}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            reason = "Ctrl-C" if stop.is_set() else "the receiver saw the source finish"
            print(f"[topo  ] stopping ({reason})")
            # Receiver first: stopping the source first would race lbmrcv's own exit on EOS.
            for child in (rcv, src, lbmrd):
                await _stop(child)
            rc = rcv.proc.returncode
            print(f"[topo  ] done; lbmrcv exit status {rc}")
            return 0 if stop.is_set() or rc == 0 else 1
    finally:
        for child in reversed(children):
            if child.proc.returncode is None:
                await _stop(child)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m umcore.tools.topology",
        description="Run lbmrd, lbmrcv and lbmsrc on loopback (make run).",
    )
    p.add_argument("--messages", type=int, default=600_000, help="messages to send (600000)")
    p.add_argument("--rate", type=float, default=1000.0, help="messages per second (1000)")
    p.add_argument("--length", type=int, default=64, help="message length (64)")
    p.add_argument(
        "--transport",
        choices=("tcp", "lbtru", "lbtrm"),
        default="tcp",
        help="source transport: tcp (default), lbtru or lbtrm (LBT-RM over loopback multicast)",
    )
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="FILE",
        help="extra flat UM configuration file for both tools (repeatable), e.g. one with "
        "'source transport lbtrm'; pyum_fault_drop_send/_receive (pyum-only, not UM options) "
        "inject loss",
    )
    args = p.parse_args(argv)
    try:
        return asyncio.run(_run(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
