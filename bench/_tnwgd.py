"""A tnwgd subprocess for the DRO benchmarks (bench/dro, bench/dropeerd): its output kept,
``started`` set at its "has started" line, stopped with SIGTERM (SIGKILL after 10 s)."""

from __future__ import annotations

import asyncio

__all__ = ["Tnwgd"]


class Tnwgd:
    """A tnwgd subprocess, its output kept."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.started = asyncio.Event()
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            self.lines.append(line)
            if "has started" in line:
                self.started.set()

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 10)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        await asyncio.wait_for(self.reader, 10)
