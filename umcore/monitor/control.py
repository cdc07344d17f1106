"""SRS daemon control requests: parse, check, and answer them (seed-srs-lbmrd.md 1.8).

Theory of operation
-------------------
Tools such as UM's ``srs_cmd`` send a *topicless unicast immediate request* (UIM request) to the
request port of the SRS's monitoring context.  The request payload is ASCII JSON naming a
``commandMessageType``; the SRS answers with a UM response whose payload is plain ASCII text (no
NUL), and when the answer is OK it then carries the request out:

=========================  ===========================================  ===========================
request                    other keys                                   success reply
=========================  ===========================================  ===========================
REPORT_SRS_VERSION         none                                         ``SRS Version <version>``
REPORT_MONITOR_INFO        ``monitorInfoCategory`` (optional: all)      ``snap <CATEGORY> - OK!``
SET_PUBLISHING_INTERVAL    ``monitorInfoCategory`` (optional: all),     ``<CATEGORY> <ms> - OK!``
                           ``publishingInterval`` (ms: 0, or 200 ..
                           7,776,000,000)
=========================  ===========================================  ===========================

REPORT_MONITOR_INFO is honoured only with ``<remote-snapshot-request allow="true">`` and
SET_PUBLISHING_INTERVAL only with ``<remote-config-changes-request allow="true">``; a changed
interval lasts until the daemon restarts.

Not documented, our choices (marked INF, not promised compatible): the reply to a refused,
malformed or out-of-range request (real srs_cmd just times out after 5 s; we always answer, with
text starting ``ERROR:``), and the reply text when the category is omitted (``snap ALL - OK!``,
``ALL <ms> - OK!``).

This module is sans-IO: :class:`ControlHandler` turns request bytes into a :class:`ControlReply`
(the response text plus the action for the daemon to perform) and counts what it refused.
:func:`parse_request` raises only :class:`ControlRequestError`.
"""

from __future__ import annotations

import enum
import json
from typing import Any

from umcore.errors import LocalProtocolError, RemoteProtocolError
from umcore.monitor.categories import ALL_CATEGORIES, Category

MAX_REQUEST_SIZE = 4096
"""Largest request payload we parse.  A real request is under 120 bytes (the longest names a
command, a category and a 10-digit interval); anything far bigger is not a control request, and
refusing it early bounds the JSON parser's work."""

MIN_INTERVAL_MS = 200
"""Smallest non-zero publishing interval (the XSD's ``pubInterval``: 0 or 200..7776000000 ms)."""
MAX_INTERVAL_MS = 7_776_000_000
"""Largest publishing interval: 90 days in milliseconds (XSD ``pubInterval``)."""


class Command(enum.StrEnum):
    """``commandMessageType`` values the SRS understands."""

    REPORT_SRS_VERSION = "REPORT_SRS_VERSION"
    REPORT_MONITOR_INFO = "REPORT_MONITOR_INFO"
    SET_PUBLISHING_INTERVAL = "SET_PUBLISHING_INTERVAL"


class ControlRequestError(RemoteProtocolError):
    """A control request that cannot be parsed or is out of range."""


class ControlRequest:
    """A parsed control request; ``category`` None means every category."""

    __slots__ = ("category", "command", "interval_ms")

    def __init__(
        self, command: Command, category: Category | None = None, interval_ms: int | None = None
    ) -> None:
        self.command = command
        self.category = category
        self.interval_ms = interval_ms

    def __repr__(self) -> str:
        return f"ControlRequest({self.command}, {self.category}, {self.interval_ms})"

    def categories(self) -> tuple[Category, ...]:
        """The categories the request applies to."""
        return ALL_CATEGORIES if self.category is None else (self.category,)


def valid_interval(ms: int) -> bool:
    """True for a publishing interval the SRS accepts: 0 (off) or 200 .. 7,776,000,000 ms."""
    return ms == 0 or MIN_INTERVAL_MS <= ms <= MAX_INTERVAL_MS


def parse_request(payload: bytes | bytearray | memoryview) -> ControlRequest:
    """Parse one request payload (ASCII JSON, trailing NULs allowed).

    Raises only :class:`ControlRequestError`.
    """
    raw = bytes(payload)
    if len(raw) > MAX_REQUEST_SIZE:
        raise ControlRequestError(
            f"request of {len(raw)} bytes exceeds {MAX_REQUEST_SIZE}", record="CONTROL"
        )
    raw = raw.rstrip(b"\0")
    try:
        doc: Any = json.loads(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ControlRequestError(f"not ASCII JSON: {exc}", record="CONTROL") from exc
    if not isinstance(doc, dict):
        raise ControlRequestError("request is not a JSON object", record="CONTROL")
    name = doc.get("commandMessageType")
    if not isinstance(name, str):
        raise ControlRequestError("commandMessageType missing or not a string", record="CONTROL")
    try:
        command = Command(name.upper())
    except ValueError:
        raise ControlRequestError(
            f"unknown commandMessageType {name[:64]!r}", record="CONTROL"
        ) from None
    if command is Command.REPORT_SRS_VERSION:
        return ControlRequest(command)
    category = _category(doc.get("monitorInfoCategory"))
    if command is Command.REPORT_MONITOR_INFO:
        return ControlRequest(command, category)
    return ControlRequest(command, category, _interval(doc.get("publishingInterval")))


def _category(value: Any) -> Category | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ControlRequestError("monitorInfoCategory is not a string", record="CONTROL")
    try:
        return Category(value.upper())
    except ValueError:
        raise ControlRequestError(
            f"unknown monitorInfoCategory {value[:64]!r}", record="CONTROL"
        ) from None


def _interval(value: Any) -> int:
    if value is None:
        raise ControlRequestError("publishingInterval missing", record="CONTROL")
    if isinstance(value, bool):
        raise ControlRequestError("publishingInterval is not a number", record="CONTROL")
    if isinstance(value, str) and value.isdigit() and len(value) <= 12:
        value = int(value)  # be liberal: a number sent as text
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        raise ControlRequestError("publishingInterval is not an integer", record="CONTROL")
    if not valid_interval(value):
        raise ControlRequestError(
            f"publishingInterval {value} out of range (0, or {MIN_INTERVAL_MS}..{MAX_INTERVAL_MS} ms)",
            record="CONTROL",
        )
    return value


def build_request(
    command: Command, category: Category | None = None, interval_ms: int | None = None
) -> bytes:
    """A request payload as srs_cmd sends it: compact JSON, keys in the documented order."""
    doc: dict[str, Any] = {"commandMessageType": command.value}
    if command is Command.REPORT_SRS_VERSION and (category is not None or interval_ms is not None):
        raise LocalProtocolError("REPORT_SRS_VERSION takes no category or interval")
    if category is not None:
        doc["monitorInfoCategory"] = category.value
    if command is Command.SET_PUBLISHING_INTERVAL:
        if interval_ms is None or not valid_interval(interval_ms):
            raise LocalProtocolError(f"bad publishing interval {interval_ms!r}")
        doc["publishingInterval"] = interval_ms
    elif interval_ms is not None:
        raise LocalProtocolError(f"{command} takes no interval")
    return json.dumps(doc, separators=(",", ":")).encode("ascii")


class ControlReply:
    """What to answer, and what to do afterwards.

    ``text`` is the response payload; ``ok`` tells success from refusal; ``request`` is the parsed
    request when there was one; ``snapshot`` lists categories to publish now (REPORT_MONITOR_INFO)
    and ``interval`` is ``(categories, ms)`` to apply (SET_PUBLISHING_INTERVAL).
    """

    __slots__ = ("interval", "ok", "request", "snapshot", "text")

    def __init__(
        self,
        text: str,
        ok: bool,
        request: ControlRequest | None = None,
        snapshot: tuple[Category, ...] = (),
        interval: tuple[tuple[Category, ...], int] | None = None,
    ) -> None:
        self.text = text
        self.ok = ok
        self.request = request
        self.snapshot = snapshot
        self.interval = interval

    def payload(self) -> bytes:
        """The response payload: ASCII, not NUL-terminated."""
        return self.text.encode("ascii", "replace")

    def __repr__(self) -> str:
        return f"ControlReply({self.text!r}, ok={self.ok})"


class ControlHandler:
    """Answers control requests for one SRS, counting what it refused."""

    __slots__ = (
        "allow_config",
        "allow_snapshot",
        "malformed",
        "ok",
        "refused",
        "requests",
        "version",
    )

    def __init__(self, version: str, *, allow_snapshot: bool, allow_config: bool) -> None:
        self.version = version
        self.allow_snapshot = allow_snapshot
        self.allow_config = allow_config
        self.requests = 0
        """Requests received."""
        self.ok = 0
        """Requests answered OK."""
        self.refused = 0
        """Well-formed requests refused because the configuration does not allow them."""
        self.malformed = 0
        """Requests that did not parse or were out of range."""

    def handle(self, payload: bytes | bytearray | memoryview) -> ControlReply:
        """Answer one request payload; never raises for a peer's bytes."""
        self.requests += 1
        try:
            request = parse_request(payload)
        except ControlRequestError as exc:
            self.malformed += 1
            return ControlReply(f"ERROR: malformed request: {exc.message}", False)
        if request.command is Command.REPORT_SRS_VERSION:
            self.ok += 1
            return ControlReply(f"SRS Version {self.version}", True, request)
        name = request.category.value if request.category is not None else "ALL"
        if request.command is Command.REPORT_MONITOR_INFO:
            if not self.allow_snapshot:
                self.refused += 1
                return ControlReply(
                    "ERROR: REPORT_MONITOR_INFO not allowed (remote-snapshot-request)",
                    False,
                    request,
                )
            self.ok += 1
            return ControlReply(f"snap {name} - OK!", True, request, snapshot=request.categories())
        if not self.allow_config:
            self.refused += 1
            return ControlReply(
                "ERROR: SET_PUBLISHING_INTERVAL not allowed (remote-config-changes-request)",
                False,
                request,
            )
        assert request.interval_ms is not None
        self.ok += 1
        return ControlReply(
            f"{name} {request.interval_ms} - OK!",
            True,
            request,
            interval=(request.categories(), request.interval_ms),
        )
