"""Child processes of the demo topologies (``make run`` and its ``--dro`` variant).

Theory of operation
-------------------
Each program runs as ``python -m ...`` with unbuffered output; :func:`pump_lines` streams its
lines to our standard output, each prefixed with its name, and optionally into a queue that
:func:`wait_line` watches for a readiness line (bounded by :data:`START_TIMEOUT_S`).
:func:`stop` sends the child's :attr:`Child.stop_signal`, waits :data:`STOP_TIMEOUT_S`, then
SIGKILLs: no process is left behind.  A child that exits before its readiness line, or does not
print it in time, raises :class:`ChildFailed` at once (its output is already on our output).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from pathlib import Path

__all__ = [
    "START_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "Child",
    "ChildFailed",
    "pump_lines",
    "spawn",
    "started",
    "stop",
    "wait_line",
]

# Bound on each child's start-up and on its exit after SIGINT.
START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0


class ChildFailed(RuntimeError):
    """A child exited before it was ready, or was not ready within START_TIMEOUT_S."""


class Child:
    def __init__(self, name: str, proc: asyncio.subprocess.Process) -> None:
        self.name = name
        self.proc = proc
        self.pump: asyncio.Task[None] | None = None
        # What stop sends.  The Store gets SIGTERM: after a terminal's Ctrl-C it already has
        # the SIGINT, and a second SIGINT makes it exit at once without finishing its writes.
        self.stop_signal: int = signal.SIGINT


async def spawn(name: str, *args: str, cwd: Path | None = None) -> Child:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if cwd is not None:  # the child must still import pyum from where we run
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (os.getcwd(), env.get("PYTHONPATH"))))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
        cwd=cwd,
    )
    return Child(name, proc)


async def pump_lines(child: Child, watch: asyncio.Queue[bytes] | None = None) -> None:
    assert child.proc.stdout is not None
    while True:
        line = await child.proc.stdout.readline()
        if not line:
            return
        sys.stdout.write(f"[{child.name:6}] {line.decode(errors='replace').rstrip()}\n")
        sys.stdout.flush()
        if watch is not None:
            watch.put_nowait(line)


async def stop(child: Child) -> None:
    if child.proc.returncode is None:
        # os.kill, not Popen.send_signal: the latter reaps an exited child behind asyncio's
        # child watcher, which then reports a bogus status 255.
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.proc.pid, child.stop_signal)
        try:
            await asyncio.wait_for(child.proc.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.proc.pid, signal.SIGKILL)
            await child.proc.wait()
    if child.pump is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(child.pump, STOP_TIMEOUT_S)


async def wait_line(
    child: Child, lines: asyncio.Queue[bytes], rx: re.Pattern[bytes]
) -> re.Match[bytes]:
    """The first line of ``child`` matching ``rx`` (bounded by START_TIMEOUT_S); ChildFailed
    when the child exits first or the time runs out."""
    exited = asyncio.ensure_future(child.proc.wait())
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            while True:
                get = asyncio.ensure_future(lines.get())
                await asyncio.wait({get, exited}, return_when=asyncio.FIRST_COMPLETED)
                if not get.done():
                    get.cancel()
                    if child.pump is not None:  # every line it printed is out (and queued)
                        with contextlib.suppress(Exception):
                            await child.pump
                    while not lines.empty():
                        found = rx.search(lines.get_nowait())
                        if found:
                            return found
                    raise ChildFailed(
                        f"{child.name} exited (status {child.proc.returncode}) before it was "
                        "ready; its output is above"
                    )
                found = rx.search(get.result())
                if found:
                    return found
    except TimeoutError:
        raise ChildFailed(
            f"{child.name} printed no readiness line within {START_TIMEOUT_S:g} s"
        ) from None
    finally:
        exited.cancel()


async def started(
    name: str, *args: str, ready: re.Pattern[bytes] | None = None
) -> tuple[Child, re.Match[bytes] | None]:
    child = await spawn(name, *args)
    if ready is None:
        child.pump = asyncio.create_task(pump_lines(child))
        return child, None
    lines: asyncio.Queue[bytes] = asyncio.Queue()
    child.pump = asyncio.create_task(pump_lines(child, lines))
    return child, await wait_line(child, lines, ready)
