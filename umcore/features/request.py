"""Request/response bookkeeping (seed 10.12): request indexes on the requester's side, the
response address on the responder's side.

Theory of operation
-------------------
A request is an ordinary message (sent by a source, as a UIM or as a MIM) carrying a REQUEST
header: the requester's request-port address and a *request index* (``qidx``).  Every receiver
gets it as a REQUEST message; any of them may answer any number of times.  On receipt the
responder's context at once opens (or reuses) a UIM connection to the requester's address and
*holds* it for the response object; the connection's idle-deletion timer
(``response_tcp_deletion_timeout``) starts only when the response object is released
(seed L4971; :class:`~umcore.features.immediate.UimConnections`).  Responses are UIMs marked with
the request index (:func:`~umcore.features.immediate.encode_response`).

On the requester's side :class:`RequestTable` maps request indexes to live requests.  A
response for an index that was deleted (or never existed) is dropped and counted (seed L5466).
The table is bounded by :data:`MAX_OUTSTANDING_REQUESTS`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from umcore.errors import WouldBlock

__all__ = ["MAX_OUTSTANDING_REQUESTS", "RequestTable", "ResponseAddress"]

# Live (not yet deleted) requests one context may have; UM has no documented cap, ours keeps an
# application that never deletes its requests from growing the table without bound.
MAX_OUTSTANDING_REQUESTS = 65536


class ResponseAddress:
    """Where responses to one received request go: requester ip:port and its request index."""

    __slots__ = ("ip", "port", "qidx")

    def __init__(self, ip: str, port: int, qidx: int) -> None:
        self.ip = ip
        self.port = port
        self.qidx = qidx

    @property
    def dest(self) -> tuple[str, int]:
        return (self.ip, self.port)

    def serialize(self) -> bytes:
        """A form another process can turn back into the address (seed L5484-5490)."""
        return f"{self.ip}:{self.port}:{self.qidx}".encode()

    @classmethod
    def deserialize(cls, raw: bytes) -> ResponseAddress:
        ip, port, qidx = raw.decode().split(":")
        return cls(ip, int(port), int(qidx))

    def __repr__(self) -> str:
        return f"ResponseAddress({self.ip}:{self.port}, qidx={self.qidx})"


class _Entry:
    __slots__ = ("callback", "clientd", "responses")

    def __init__(self, callback: Callable[..., Any], clientd: Any) -> None:
        self.callback = callback
        self.clientd = clientd
        self.responses = 0


class RequestStats:
    __slots__ = ("requests", "responses_delivered", "responses_dropped")

    def __init__(self) -> None:
        self.requests = 0
        self.responses_delivered = 0
        self.responses_dropped = 0  # for deleted or unknown requests


class RequestTable:
    """Live requests of one context, by request index."""

    def __init__(self) -> None:
        self._live: dict[int, _Entry] = {}
        self._next = 0
        self.stats = RequestStats()

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, qidx: object) -> bool:
        return qidx in self._live

    def open(self, callback: Callable[..., Any], clientd: Any = None) -> int:
        """A new request; returns its index."""
        if len(self._live) >= MAX_OUTSTANDING_REQUESTS:
            raise WouldBlock(f"{MAX_OUTSTANDING_REQUESTS} requests are live; delete some first")
        while True:
            qidx = self._next
            self._next = (qidx + 1) & 0xFFFFFFFF
            if qidx not in self._live:
                break
        self._live[qidx] = _Entry(callback, clientd)
        self.stats.requests += 1
        return qidx

    def close(self, qidx: int) -> bool:
        """Delete a request; later responses to it are dropped."""
        return self._live.pop(qidx, None) is not None

    def response(self, qidx: int) -> tuple[Callable[..., Any], Any] | None:
        """The (callback, clientd) a response to ``qidx`` goes to, or None (dropped)."""
        e = self._live.get(qidx)
        if e is None:
            self.stats.responses_dropped += 1
            return None
        e.responses += 1
        self.stats.responses_delivered += 1
        return e.callback, e.clientd

    def responses(self, qidx: int) -> int:
        e = self._live.get(qidx)
        return 0 if e is None else e.responses
