"""One exception hierarchy for all of pyum.

Theory of operation
-------------------
Every error pyum raises on purpose derives from :class:`UMError`, so an application or a daemon
can catch "anything pyum refused" in one place.  Below it the split follows h11's:

- :class:`ConfigError` — a configuration value, file or command line is wrong.  It carries where
  the value came from (file and line, environment variable, API call) so the message a user sees
  names the place, the thing and the allowed values.  Daemons turn it into one line on stderr and
  exit status 1 before binding anything.
- :class:`ProtocolError` — bytes on the wire do not follow UM's layouts.

  * :class:`LocalProtocolError`: *we* were asked to encode something that cannot be encoded
    (a topic name too long for its length field, say).  A programming error on our side.
  * :class:`RemoteProtocolError`: a *peer* sent bytes we cannot decode.  It carries the record
    type being decoded and the byte offset where decoding failed.  The rule everywhere: a peer's
    bad bytes cost that peer its datagram or its connection, never the daemon or the context.
    Each codec has its own subclass (``LBMRError``, ``LBMCError``, …) and a decoder raises only
    its own subclass, whatever the input.
- :class:`TransportError` — a transport session failed (connection lost, peer timed out).
- :class:`WouldBlock` — a non-blocking send could not be queued; UM's ``LBM_EWOULDBLOCK``.
- :class:`UMENoReg` — a persistent source is not registered with enough Stores to send; UM's
  ``LBM_EUMENOREG``.
"""

from __future__ import annotations


class UMError(Exception):
    """Base of every error pyum raises on purpose."""


class ConfigError(UMError):
    """A configuration value, file or command line is wrong.

    ``source`` names where the value came from: a file path, ``"environment variable X"``,
    ``"command line"`` or ``"API"``.  ``line`` is 1-based when known.  ``what`` is the element,
    attribute or option concerned; ``allowed`` describes the values that would have been accepted.
    """

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        what: str | None = None,
        allowed: str | None = None,
    ) -> None:
        self.message = message
        self.source = source
        self.line = line
        self.what = what
        self.allowed = allowed
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.source is not None:
            where = self.source if self.line is None else f"{self.source}:{self.line}"
            where += ": "
        what = f"{self.what}: " if self.what else ""
        allowed = f" (allowed: {self.allowed})" if self.allowed else ""
        return f"{where}{what}{self.message}{allowed}"


class ProtocolError(UMError):
    """Bytes that do not follow UM's wire layouts."""


class LocalProtocolError(ProtocolError):
    """We were asked to encode something the wire format cannot carry."""


class RemoteProtocolError(ProtocolError):
    """A peer sent bytes we cannot decode.

    ``record`` names the record or header being decoded (``"TIR"``, ``"LBMC FRAG"``, …) and
    ``offset`` is the byte offset, from the start of the buffer handed to the decoder, where
    decoding failed.
    """

    def __init__(self, message: str, *, record: str | None = None, offset: int | None = None):
        self.message = message
        self.record = record
        self.offset = offset
        parts = [message]
        if record is not None:
            parts.append(f"record={record}")
        if offset is not None:
            parts.append(f"offset={offset}")
        super().__init__(
            " ".join(parts) if len(parts) == 1 else f"{message} ({', '.join(parts[1:])})"
        )


class TransportError(UMError):
    """A transport session failed: connection lost, peer timed out, peer sent garbage."""


class WouldBlock(UMError):
    """A non-blocking operation could not proceed now (UM's LBM_EWOULDBLOCK)."""


class UMENoReg(UMError):
    """A persistent source may not send now: not registered with enough Stores (before
    Registration Complete, after quorum was lost, or deregistered) -- UM's LBM_EUMENOREG."""
