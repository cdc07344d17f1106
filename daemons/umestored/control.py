"""umestored's daemon control requests (umedcmd's): parse, check, answer, count (sans-IO).

Theory of operation
-------------------
UM's ``umedcmd`` sends a *topicless unicast immediate request* to the request port of the
Store daemon's monitoring context (``<daemon-monitor>``'s context; its address is set with
``request_tcp_interface`` / ``request_tcp_port`` in ``<daemon-monitor><lbm-config>``).  The
request is an ASCII command (a trailing NUL allowed); the answer is a UM response carrying status
text (no NUL), and the action is carried out only when the status is OK
(persistence-store.md 4.4):

=======================================  ==============================  =========================
request                                  allowed by                      effect
=======================================  ==============================  =========================
``version``                              remote-snapshot-request         answer the daemon-stats
                                                                         version (1) and pyum's
``["STORE"] snap X`` (X: memory, src,    remote-snapshot-request         publish X now (every
rcv, disk, store, config)                                                Store, or the quoted one)
``memory N``                             remote-config-changes-request   memory interval N s
``["STORE"] X N`` (X: src, rcv, disk,    remote-config-changes-request   X's interval N s (0 off)
store, config)
``mark INTFC PORT SRC_REGID SQN``        remote-config-changes-request   SQN of that source never
                                                                         retransmitted (until the
                                                                         Store restarts)
``deregister INTFC PORT SRC_REGID        remote-config-changes-request   that receiver's state
RCV_REGID``                                                              deleted
=======================================  ==============================  =========================

``INTFC PORT`` name the Store instance: its port, and its interface address (a Store bound to
every interface, 0.0.0.0, matches any address).  Request words are case-insensitive.

Not documented by Informatica, our choices (marked INF, not promised compatible): the reply
texts.  An accepted request is answered with text ending ``- OK``; a refused, malformed or
unresolvable one with text starting ``ERROR:`` naming why.  Every request is counted by
outcome (:attr:`StoreControl.counts`): ``ok``, ``refused`` (configuration does not allow it),
``malformed`` (does not parse, out of range), ``failed`` (no such Store, source or receiver).

:class:`StoreControl` answers; what it acts on is a :class:`ControlTarget` per Store (the daemon
supplies them: the Store's statistics publisher and its core).
"""

from __future__ import annotations

import enum
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "DMON_VERSION",
    "GROUP_WORDS",
    "ControlTarget",
    "Request",
    "RequestError",
    "StoreControl",
    "Verb",
    "parse",
]

DMON_VERSION = 1
"""``LBM_UMESTORE_DMON_VERSION``: the daemon-statistics version the Store reports."""

MAX_REQUEST_SIZE = 512
"""Largest request we parse: the longest real one (``deregister`` with an address, a port and
two RegIDs, or a quoted 128-character store name and an interval) is under 200 bytes."""

MAX_INTERVAL_S = 7_776_000
"""Largest publishing interval accepted, in seconds (90 days, as for the SRS)."""

GROUP_WORDS = {
    "src": "source",
    "rcv": "receiver",
    "disk": "disk",
    "store": "store",
    "config": "config",
    "memory": "memory",
}
"""Request word -> ``<publishing-interval>`` group name (the publisher's category)."""


class Verb(enum.Enum):
    VERSION = "version"
    SNAP = "snap"
    INTERVAL = "interval"
    MARK = "mark"
    DEREGISTER = "deregister"


class RequestError(ValueError):
    """A request that does not parse or is out of range (answered ``ERROR: malformed``)."""


@dataclass(frozen=True, slots=True)
class Request:
    """One parsed request.  ``store`` None = every Store; ``group`` a category name."""

    verb: Verb
    store: str | None = None
    group: str | None = None
    seconds: int = 0
    address: tuple[str, int] | None = None
    src_reg_id: int = 0
    value: int = 0  # mark: the sqn; deregister: the receiver's RegID

    @property
    def needs_config_permission(self) -> bool:
        return self.verb not in (Verb.VERSION, Verb.SNAP)


def _u32(word: str, what: str) -> int:
    if not word.isdigit() or len(word) > 10 or int(word) > 0xFFFFFFFF:
        raise RequestError(f"{what} {word[:20]!r} is not a number 0..4294967295")
    return int(word)


def _port(word: str) -> int:
    if not word.isdigit() or not 0 < int(word) < 65536:
        raise RequestError(f"port {word[:20]!r} is not 1..65535")
    return int(word)


def _ipv4(word: str) -> str:
    parts = word.split(".")
    if len(parts) != 4 or not all(p.isdigit() and int(p) < 256 and len(p) <= 3 for p in parts):
        raise RequestError(f"interface {word[:40]!r} is not a dotted IPv4 address")
    return ".".join(str(int(p)) for p in parts)


def parse(payload: bytes | bytearray | memoryview) -> Request:
    """One request payload -> :class:`Request`; raises only :class:`RequestError`."""
    raw = bytes(payload)
    if len(raw) > MAX_REQUEST_SIZE:
        raise RequestError(f"request of {len(raw)} bytes exceeds {MAX_REQUEST_SIZE}")
    try:
        text = raw.rstrip(b"\0").decode("ascii")
    except UnicodeDecodeError:
        raise RequestError("not ASCII text") from None
    try:
        words = shlex.split(text)
    except ValueError as exc:  # an unbalanced quote
        raise RequestError(str(exc)) from None
    store: str | None = None
    if text.lstrip().startswith('"') and words:
        store, words = words[0], words[1:]
    if not words:
        raise RequestError("empty request")
    head, args = words[0].lower(), words[1:]
    if head == "version" and store is None and not args:
        return Request(Verb.VERSION)
    if head == "snap" and len(args) == 1:
        group = GROUP_WORDS.get(args[0].lower())
        if group is None:
            raise RequestError(f"snap {args[0][:20]!r}: not one of {', '.join(GROUP_WORDS)}")
        return Request(Verb.SNAP, store, group)
    if head in GROUP_WORDS and len(args) == 1:
        if head == "memory" and store is not None:
            raise RequestError("memory is process-wide: no store name")
        seconds = _u32(args[0], "interval")
        if seconds > MAX_INTERVAL_S:
            raise RequestError(f"interval {seconds} s above {MAX_INTERVAL_S} s")
        return Request(Verb.INTERVAL, store, GROUP_WORDS[head], seconds)
    if head in ("mark", "deregister") and store is None and len(args) == 4:
        address = (_ipv4(args[0]), _port(args[1]))
        src = _u32(args[2], "source RegID")
        value = _u32(args[3], "sequence number" if head == "mark" else "receiver RegID")
        return Request(Verb(head), address=address, src_reg_id=src, value=value)
    raise RequestError(f"unknown request {text[:60]!r}")


class ControlTarget(Protocol):
    """One Store instance as daemon control sees it."""

    @property
    def name(self) -> str: ...

    def listens_on(self, address: tuple[str, int]) -> bool:
        """True when ``address`` (INTFC PORT of a mark/deregister) names this Store."""
        ...

    def snapshot(self, group: str) -> None: ...

    def set_interval(self, group: str, ms: int) -> None: ...

    def mark(self, src_reg_id: int, sqn: int) -> bool: ...

    def deregister(self, src_reg_id: int, rcv_reg_id: int) -> bool: ...


class StoreControl:
    """Answers umestored's control requests for its Stores (module docstring).

    ``targets`` is called for the current Stores at each request; ``on_done`` after an accepted
    request (the daemon re-arms its publishing timers, flushes the cores)."""

    def __init__(
        self,
        version: str,
        targets: Callable[[], Sequence[ControlTarget]],
        *,
        allow_snapshot: bool,
        allow_config: bool,
        on_done: Callable[[], None] = lambda: None,
    ) -> None:
        self.version = version
        self.targets = targets
        self.allow_snapshot = allow_snapshot
        self.allow_config = allow_config
        self.on_done = on_done
        #: Requests by outcome: ok, refused, malformed, failed.
        self.counts = {"ok": 0, "refused": 0, "malformed": 0, "failed": 0}
        #: Accepted requests by verb.
        self.accepted = {v.value: 0 for v in Verb}

    @property
    def requests(self) -> int:
        return sum(self.counts.values())

    def receive_control(self, payload: bytes | bytearray | memoryview, now: float) -> bytes:
        """Answer one request and carry it out when OK; the response payload."""
        return self.handle(payload).encode("ascii", "replace")

    def handle(self, payload: bytes | bytearray | memoryview) -> str:
        try:
            req = parse(payload)
        except RequestError as exc:
            self.counts["malformed"] += 1
            return f"ERROR: malformed request: {exc}"
        allowed = self.allow_config if req.needs_config_permission else self.allow_snapshot
        if not allowed:
            self.counts["refused"] += 1
            switch = (
                "remote-config-changes-request"
                if req.needs_config_permission
                else "remote-snapshot-request"
            )
            return f'ERROR: {req.verb.value} not allowed (<{switch} allow="1"> is not set)'
        text = self._act(req)
        if text.startswith("ERROR:"):
            self.counts["failed"] += 1
            return text
        self.counts["ok"] += 1
        self.accepted[req.verb.value] += 1
        self.on_done()
        return text

    def _act(self, req: Request) -> str:
        if req.verb is Verb.VERSION:
            return f"version {DMON_VERSION} (pyum umestored {self.version}) - OK"
        if req.verb in (Verb.SNAP, Verb.INTERVAL):
            targets = [t for t in self.targets() if req.store is None or t.name == req.store]
            if not targets:
                return f"ERROR: no store named {req.store!r}"
            assert req.group is not None
            for t in targets:
                if req.verb is Verb.SNAP:
                    t.snapshot(req.group)
                else:
                    t.set_interval(req.group, req.seconds * 1000)
            where = "every store" if req.store is None else f"store {req.store!r}"
            if req.verb is Verb.SNAP:
                return f"snap {req.group} ({where}) - OK"
            return f"{req.group} interval {req.seconds} s ({where}) - OK"
        assert req.address is not None
        target = next((t for t in self.targets() if t.listens_on(req.address)), None)
        ip, port = req.address
        if target is None:
            return f"ERROR: no store on {ip}:{port}"
        if req.verb is Verb.MARK:
            if not target.mark(req.src_reg_id, req.value):
                return (
                    f"ERROR: store {target.name!r} has no source RegID {req.src_reg_id} "
                    "(or its marks are full)"
                )
            return f"mark {req.src_reg_id} {req.value} (store {target.name!r}) - OK"
        if not target.deregister(req.src_reg_id, req.value):
            return (
                f"ERROR: store {target.name!r} has no receiver RegID {req.value} "
                f"of source RegID {req.src_reg_id}"
            )
        return f"deregister {req.src_reg_id} {req.value} (store {target.name!r}) - OK"
