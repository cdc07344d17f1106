"""Shared pieces of the persistence integration tests (test_persist.py, test_persist_checks.py).

Real umestored subprocesses on loopback (:class:`Topology`, :class:`Store`), topic resolution
through the ``lbmrd`` fixture, and recorders of a source's events (:class:`SourceEvents`) and a
receiver's deliveries (:class:`Received`).  A Store's XML is written from keyword arguments of
:meth:`Topology.add_store`: its Store-level options, its ``<topic>`` patterns with their options,
its ``context-name``, and optionally a ``<daemon-monitor>`` taking daemon control requests and a
``--metrics`` endpoint.  Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

from tests.integration.daemon_proc import DaemonProcess
from tests.integration.helpers import lbmrd_client_lines, load_configuration, until
from umcore.api import Context
from umcore.engine import message as m
from umcore.persist import events as ev

__all__ = [
    "MONITOR_TOPIC",
    "TCP_LINES",
    "TOPIC",
    "WAIT",
    "WEB",
    "Received",
    "SourceEvents",
    "Store",
    "Topology",
    "control_request",
    "free_port",
    "send_all",
    "source_attrs",
    "topology",
]

TOPIC = "persisted"
MONITOR_TOPIC = "pyum.persist.monitor"  # the Stores' <daemon-monitor topic>
WAIT = 30.0  # cold Store subprocesses on a busy 2-core machine
TCP_LINES = (
    "context transport_tcp_port_low 0\n"
    "context transport_tcp_port_high 0\n"
    "context request_tcp_port_low 0\n"
    "context request_tcp_port_high 0\n"
    "context request_tcp_interface 127.0.0.1\n"
    "source transport_tcp_interface 127.0.0.1\n"
)
# The Store daemon's control-request address, logged once its <daemon-monitor> runs.
CONTROL = re.compile(r"control requests on (TCP:[\d.]+:\d+)")
# The Store web monitor's address, logged once it serves (and the process serving it).
WEB = re.compile(r"store web monitor on (http://[\d.]+:\d+)/(?: \(served by process (\d+)\))?")
WEB_XML = """
    <web-monitor>127.0.0.1:0</web-monitor>"""
# Topic options every test Store has unless a test says otherwise: keepalives often enough that
# shortened activity timeouts (>= 2 x keepalive-interval, persistence-store.md 1.12) work.
TOPIC_DEFAULTS = {"keepalive-interval": "500"}

STORE_XML = """<?xml version="1.0"?>
<ume-store version="1.3">
  <daemon>
    <log type="console"/>
    <lbm-config>{dir}/store.cfg</lbm-config>{monitor}
  </daemon>
  <stores>
    <store name="{name}" interface="127.0.0.1" port="{port}">
      <ume-attributes>
{store_options}
      </ume-attributes>
      <topics>
{topics}
      </topics>
    </store>
  </stores>
</ume-store>
"""

TOPIC_XML = """        <topic pattern={pattern} type="direct">
          <ume-attributes>
{options}
          </ume-attributes>
        </topic>"""

MONITOR_XML = """
    <daemon-monitor topic="{topic}">
      <lbm-config>{dir}/store.cfg</lbm-config>
      <remote-snapshot-request allow="1"/>
      <remote-config-changes-request allow="1"/>{publish}
    </daemon-monitor>"""
# UMP statistics events published every second (the ``store`` group's ticks carry them).
PUBLISH_XML = """
      <publishing-interval>
        <group name="store" ivl="1"/>
      </publishing-interval>"""


def _options(opts: Mapping[str, str], indent: int) -> str:
    pad = " " * indent
    return "\n".join(
        f'{pad}<option type="store" name={quoteattr(k)} value={quoteattr(v)}/>'
        for k, v in opts.items()
    )


def free_port() -> int:
    """A TCP port free on loopback now (a Store restarted must come back on the same one)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Store:
    name: str
    dir: Path
    port: int
    kind: str
    metrics: bool = False
    proc: DaemonProcess | None = None
    #: the daemon-control request address (``TCP:ip:port``) when it has a <daemon-monitor>
    control: str | None = None
    #: the web monitor's base URL (``http://ip:port``) when it has a <web-monitor>
    web: str | None = None

    @property
    def spec(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        args = ["--metrics", "127.0.0.1:0"] if self.metrics else []
        self.proc = await DaemonProcess.start("umestored", *args, str(self.dir / "store.xml"))
        await self.proc.wait_for_line(rf"Store {self.name} ready to accept registrations", WAIT)
        if self.control is not None:
            self.control = (await self.proc.wait_for_line(CONTROL, WAIT)).group(1)
        if self.web is not None:
            self.web = (await self.proc.wait_for_line(WEB, WAIT)).group(1)

    async def kill(self) -> None:
        if self.proc is not None:
            await self.proc.kill()
            self.proc = None

    def lines(self) -> list[str]:
        return self.proc.all_lines() if self.proc is not None else []


@dataclass
class Topology:
    tmp: Path
    resolver: str
    stores: list[Store] = field(default_factory=list)

    async def add_store(
        self,
        kind: str = "disk",
        *,
        topics: Mapping[str, Mapping[str, str]] | None = None,
        store_options: Mapping[str, str] | None = None,
        context_name: str | None = None,
        metrics: bool = False,
        control: bool = False,
        web: bool = False,
        publish: bool = False,
        start: bool = True,
    ) -> Store:
        """A Store ``storeN`` on a free port.  ``topics``: pattern -> topic options (default:
        :data:`TOPIC` alone); ``repository-type`` is ``kind`` unless a topic's options say
        otherwise, and :data:`TOPIC_DEFAULTS` apply.  ``context_name`` defaults to the Store's
        name.  ``control``: a <daemon-monitor> taking daemon control requests.  ``web``: a
        ``<web-monitor>`` on an ephemeral loopback port (its address in :attr:`Store.web`).
        ``publish``: with ``control``, UMP events published every second on
        :data:`MONITOR_TOPIC`."""
        name = f"store{len(self.stores)}"
        d = self.tmp / name
        for sub in ("cache", "state"):
            (d / sub).mkdir(parents=True)
        (d / "store.cfg").write_text(self.resolver)
        st = Store(
            name, d, free_port(), kind, metrics=metrics, control="" if control else None,
            web="" if web else None,
        )  # fmt: skip
        sopts = {
            "disk-cache-directory": f"{d}/cache",
            "disk-state-directory": f"{d}/state",
            "context-name": context_name or name,
            **(store_options or {}),
        }
        topic_xml = [
            TOPIC_XML.format(
                pattern=quoteattr(pattern),
                options=_options({"repository-type": kind, **TOPIC_DEFAULTS, **opts}, 12),
            )
            for pattern, opts in (topics if topics is not None else {TOPIC: {}}).items()
        ]
        (d / "store.xml").write_text(
            STORE_XML.format(
                dir=d,
                name=name,
                port=st.port,
                store_options=_options(sopts, 8),
                topics="\n".join(topic_xml),
                monitor=(
                    MONITOR_XML.format(
                        dir=d, topic=MONITOR_TOPIC, publish=PUBLISH_XML if publish else ""
                    )
                    if control
                    else ""
                )
                + (WEB_XML if web else ""),
            )
        )
        self.stores.append(st)
        if start:
            await st.start()
        return st


@contextlib.asynccontextmanager
async def topology(tmp_path: Path, lbmrd: DaemonProcess) -> AsyncIterator[Topology]:
    """A test's Stores, resolving topics through ``lbmrd``; every Store killed at the end.
    (Each test module wraps it in its own ``topo`` fixture.)"""
    resolver = lbmrd_client_lines(lbmrd.address) + TCP_LINES
    load_configuration(resolver)
    t = Topology(tmp_path, resolver)
    try:
        yield t
    finally:
        for st in t.stores:
            await st.kill()


class SourceEvents:
    """A source's events, kept in order; waits on them."""

    def __init__(self) -> None:
        self.got: list[tuple[int, Any]] = []
        self.changed = asyncio.Event()
        # Kept as the events come: tests poll stable() every few ms, and rebuilding it from
        # tens of thousands of events each time starved the source sharing this event loop.
        self._stable: set[int] = set()

    def __call__(self, code: int, info: Any) -> None:
        self.got.append((code, info))
        if code == ev.SRC_EVENT_UME_MESSAGE_STABLE_EX and info.flags & ev.STABLE_FLAG_STABLE:
            self._stable.add(info.sequence_number)
        self.changed.set()

    def of(self, code: int, pred: Callable[[Any], bool] = lambda _i: True) -> list[Any]:
        return [i for c, i in self.got if c == code and pred(i)]

    def stable(self) -> set[int]:
        """The sequence numbers reported stable so far (a copy: a snapshot stays one)."""
        return set(self._stable)

    def stable_count(self) -> int:
        return len(self._stable)

    def all_stable(self, sqns: Iterable[int]) -> bool:
        """Whether every one of ``sqns`` was reported stable (no copy made)."""
        return self._stable.issuperset(sqns)


class Received:
    """A receiver's deliveries, kept in order."""

    def __init__(self) -> None:
        self.msgs: list[m.Message] = []

    def __call__(self, msg: m.Message) -> None:
        self.msgs.append(msg)

    def data(self) -> list[m.Message]:
        return [x for x in self.msgs if x.type == m.MSG_DATA]

    def sqns(self) -> list[int]:
        return [x.sequence_number for x in self.data()]

    def of(self, type_: int) -> list[Any]:
        return [x.info for x in self.msgs if x.type == type_]


def source_attrs(stores: list[Store], **extra: str) -> dict[str, str]:
    attrs = {"ume_store": ",".join(s.spec for s in stores)}
    attrs.update(extra)
    return attrs


async def send_all(src: Any, payloads: list[bytes]) -> None:
    for i, p in enumerate(payloads):
        await src.send(p, flush=i == len(payloads) - 1)


async def control_request(ctx: Context, store: Store, text: str) -> str:
    """One daemon control request (umedcmd's: a topicless UIM request) to ``store``; its
    answer."""
    assert store.control, f"{store.name} has no <daemon-monitor>"
    replies: list[bytes] = []
    req = ctx.send_uim_request(
        store.control, text.encode("ascii"), lambda msg: replies.append(msg.data)
    )
    try:
        await until(lambda: replies, f"the answer to {text!r}", timeout=WAIT)
    finally:
        req.close()
    return replies[0].decode("ascii")
