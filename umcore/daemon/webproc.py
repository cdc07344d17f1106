"""A daemon's web pages served from a child process, so that a scraper cannot slow its data path.

Theory of operation
-------------------
:class:`~umcore.daemon.web.WebPages` serves pages inside the daemon's loop: every request costs
that loop its HTTP parsing, rendering and writing (about a third of a millisecond for a small
page, tens for a Store page listing a thousand sources).  A scraper that polls every page of a
busy store once a second (UM users run such scrapers) then takes a third of the loop and delays
stability ACKs behind it.  :class:`WebProcess` moves all of that into a child process:

- the daemon starts ``python -m umcore.daemon.webproc CONFIG`` (its own interpreter) with a pipe
  each way.  CONFIG (JSON) names a *factory* (``module:function`` and keyword arguments) that
  builds, in the child, the same :class:`WebPages` registrations the daemon has (paths, titles,
  render functions; a page's ``data`` callable is never called there), the address to bind,
  the daemon's uptime and the child's niceness (:data:`WEB_NICE`: when the daemon and the
  child both want a CPU, the daemon gets it);
- the child binds, says ``{"listening": [host, port]}`` (or ``{"error": why}``) on its stdout,
  and serves every HTTP request itself.  When a page's sample is missing or older than
  :data:`~umcore.daemon.web.MIN_SAMPLE_INTERVAL` it asks the daemon, one JSON line
  ``{"id", "method", "path"}``; the daemon answers one line from
  :meth:`WebPages.answer <umcore.daemon.web.WebPages.answer>` (the sample, taken at most once
  per page per second there too; an action run).  The daemon's cost per page is a sample and its
  JSON, both in slices with the loop's turns between them (a stepped page's chunks,
  :func:`~umcore.daemon.web.json_steps`), one answer per turn; the HTTP is the child's;
- requests for one path while its question is out share the answer; at most
  :data:`MAX_PENDING` questions are out at once (the rest wait in the child);
- the child exits when its stdin closes (the daemon stopped or died: no orphan keeps the port);
  when the child dies, the daemon logs it and starts another on the same address, after
  :data:`RESTART_DELAYS`.

On Windows the daemons serve in-process (:func:`supported`): the child's pipes need the
selector loop's ``connect_read_pipe`` on standard input, which Windows' proactor does not give.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from umcore.daemon.lifecycle import new_event_loop
from umcore.daemon.web import WebPages, json_text_async, json_text_if_small

__all__ = [
    "MAX_LINE",
    "MAX_PENDING",
    "RESTART_DELAYS",
    "START_TIMEOUT_S",
    "WEB_NICE",
    "WebProcess",
    "main",
    "supported",
]

# The child's niceness: on a two-core host running a store, its feeder and a scraper, the
# scheduler gives the daemon's data path the CPU first.
WEB_NICE = 10
# One JSON line of page data: a Store page with 2,000 sources is about 200 KiB; a generous
# bound so that a line never outgrows the stream buffer, small enough to be memory we can spare.
MAX_LINE = 16 * 1024 * 1024
# Questions the child has out at the daemon at once; the daemon answers each in microseconds,
# so more in flight would only queue in the pipe.
MAX_PENDING = 64
# Seconds before restarting a child that died, one after another (then the last, repeated).
RESTART_DELAYS = (1.0, 2.0, 5.0, 10.0, 30.0)
# Seconds for a child to import aiohttp and the factory and bind (a loaded host is slow).
START_TIMEOUT_S = 30.0
# Seconds a stopping child has to close its listener before it is killed.
STOP_TIMEOUT_S = 5.0


def supported() -> bool:
    """Whether pages can be served from a child process here (not on Windows)."""
    return sys.platform != "win32"


class WebProcess:
    """Serve ``pages`` (the daemon's registrations, with their data) from a child process
    whose own registrations the ``factory`` (``"module:function"``, called with ``args``)
    builds.  See the module docstring."""

    def __init__(
        self,
        pages: WebPages,
        factory: str,
        args: Mapping[str, Any] | None = None,
        *,
        nice: int = WEB_NICE,
        log: logging.Logger | None = None,
    ) -> None:
        self.pages = pages
        self.factory = factory
        self.args = dict(args or {})
        self.nice = nice
        self.log = log or pages.log
        #: The bound (host, port) once started.
        self.address: tuple[str, int] | None = None
        #: Questions answered, children restarted.
        self.answered = 0
        self.restarts = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs."""
        return self._proc.pid if self._proc is not None else None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Start the child on host:port (0 = ephemeral); log and return the bound address.
        OSError when the child cannot bind (or does not start)."""
        self.pages.ensure_index()
        self.address = await self._spawn(host, port)
        self.pages.address = self.address
        self.log.info(
            "%s on http://%s:%d/ (served by process %s)", self.pages.label, *self.address, self.pid
        )
        self._task = asyncio.create_task(self._run(), name=f"{self.pages.label} process")
        return self.address

    async def _spawn(self, host: str, port: int) -> tuple[str, int]:
        config = {
            "factory": self.factory,
            "args": self.args,
            "host": host,
            "port": port,
            "uptime": self.pages.monotonic() - self.pages.started,
            "nice": self.nice,
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "umcore.daemon.webproc", json.dumps(config),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=MAX_LINE,
        )  # fmt: skip
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT_S)
            hello = json.loads(line) if line else {"error": "the web process exited at start"}
        except (TimeoutError, ValueError) as exc:
            hello = {"error": f"the web process did not start: {exc or 'timed out'}"}
        if "listening" not in hello:
            await _stop(proc)
            raise OSError(str(hello.get("error", "the web process did not start")))
        self._proc = proc
        bound = hello["listening"]
        return str(bound[0]), int(bound[1])

    async def _run(self) -> None:
        """Answer the child; start another when it dies."""
        failures = 0
        while not self._closing:
            proc = self._proc
            if proc is not None:
                await self._serve(proc)
                await _stop(proc)
                self._proc = None
                if self._closing:
                    return
                self.log.warning(
                    "%s: the web process %d exited (status %s); starting another",
                    self.pages.label, proc.pid, proc.returncode,
                )  # fmt: skip
            await asyncio.sleep(RESTART_DELAYS[min(failures, len(RESTART_DELAYS) - 1)])
            failures += 1
            assert self.address is not None
            try:
                await self._spawn(*self.address)
            except OSError as exc:
                self.log.warning("%s: the web process did not start: %s", self.pages.label, exc)
                continue
            self.restarts += 1
            failures = 0

    async def _serve(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None and proc.stdin is not None
        while True:
            try:
                line = await proc.stdout.readline()
            except (ValueError, asyncio.LimitOverrunError):
                self.log.error("%s: the web process sent a line too long", self.pages.label)
                return
            if not line:
                return
            try:
                question = json.loads(line)
                qid, method, path = question["id"], str(question["method"]), question["path"]
            except (ValueError, KeyError, TypeError):
                self.log.error("%s: the web process sent %r", self.pages.label, line[:80])
                return
            reply = await self.pages.answer_async(method, str(path))
            reply["id"] = qid
            self.answered += 1
            text = json_text_if_small(reply)
            if text is None:
                text = await json_text_async(reply)
            try:
                proc.stdin.write(text.encode() + b"\n")
                await proc.stdin.drain()
            except (ConnectionError, BrokenPipeError):
                return
            # One answer per turn of the loop: questions already buffered would otherwise be
            # answered back to back (readline returns them without giving the loop a turn).
            await asyncio.sleep(0)

    async def close(self) -> None:
        """Stop the child (idempotent)."""
        self._closing = True
        proc, self._proc = self._proc, None
        if proc is not None:
            await _stop(proc)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """Close the child's stdin (it exits on its own), then terminate, then kill."""
    if proc.stdin is not None and not proc.stdin.is_closing():
        proc.stdin.close()
    try:
        await asyncio.wait_for(proc.wait(), STOP_TIMEOUT_S)
        return
    except TimeoutError:
        pass
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    await proc.wait()


# ============================================================================== the child


class _Daemon:
    """The child's side of the pipe: questions out, answers matched back by id."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.next_id = 0
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.by_path: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.slots = asyncio.Semaphore(MAX_PENDING)

    async def fetch(self, method: str, path: str) -> dict[str, Any]:
        if method == "GET" and path in self.by_path:
            return await asyncio.shield(self.by_path[path])
        async with self.slots:
            self.next_id += 1
            qid = self.next_id
            fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
            self.waiting[qid] = fut
            if method == "GET":
                self.by_path[path] = fut
            try:
                line = json.dumps({"id": qid, "method": method, "path": path})
                self.writer.write(line.encode() + b"\n")
                await self.writer.drain()
                return await asyncio.shield(fut)
            finally:
                self.waiting.pop(qid, None)
                if self.by_path.get(path) is fut:
                    del self.by_path[path]

    def answered(self, reply: dict[str, Any]) -> None:
        fut = self.waiting.get(reply.get("id", -1))
        if fut is not None and not fut.done():
            fut.set_result(reply)

    def gone(self) -> None:
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_result({"status": 500})


async def _child(pages: WebPages, config: Mapping[str, Any]) -> int:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(
        lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()), sys.stdout
    )
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    daemon = _Daemon(writer)
    pages.serve_remote(daemon.fetch, float(config.get("uptime", 0.0)))
    try:
        host, port = await pages.start(str(config["host"]), int(config["port"]))
    except OSError as exc:
        writer.write(json.dumps({"error": exc.strerror or str(exc)}).encode() + b"\n")
        await writer.drain()
        return 1
    writer.write(json.dumps({"listening": [host, port]}).encode() + b"\n")
    await writer.drain()
    try:
        while line := await reader.readline():
            daemon.answered(json.loads(line))
    finally:  # the daemon closed the pipe: it stopped or died
        daemon.gone()
        await pages.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The child: ``python -m umcore.daemon.webproc CONFIG``."""
    args = list(sys.argv[1:] if argv is None else argv)
    config = json.loads(args[0])
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="%(asctime)s web process: %(message)s"
    )
    with contextlib.suppress(OSError, AttributeError):
        os.nice(int(config.get("nice", WEB_NICE)))
    module, _, name = str(config["factory"]).partition(":")
    pages = getattr(importlib.import_module(module), name)(**config.get("args", {}))
    if not isinstance(pages, WebPages):
        raise TypeError(f"{config['factory']} returned {type(pages).__name__}, not WebPages")
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(_child(pages, config))


if __name__ == "__main__":
    sys.exit(main())
