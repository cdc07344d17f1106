"""Shared pieces of the LBMR codec: the error class, limits, the record base class, helpers.

Theory of operation
-------------------
The LBMR codec (:mod:`umcore.wire.lbmr`) is split over a few modules to keep each readable; this
one holds what all of them use:

- :class:`LBMRError`, the only exception the LBMR decoders raise, whatever the input.
- The limits, each a named constant with the reason for its value.
- :class:`Record`, the base of every record class (defined in :mod:`umcore.wire._shared`, shared
  with the other codecs and re-exported here): plain slotted classes with value equality, a hash
  and a readable ``repr`` derived from ``__slots__``.  Treat records as immutable once built.
- Conversions used everywhere: dotted-quad IPv4 strings <-> 4 raw bytes (``ip_str`` /
  ``ip_bytes``, the shared ones of :mod:`umcore.wire._shared` under their LBMR names), names
  <-> bytes (UTF-8 with ``surrogateescape``, so any byte string a peer sends decodes and encodes
  back to the same bytes), and bounds-checked readers that raise :class:`LBMRError` with the
  record name and offset.

Every integer on the LBMR wire is big-endian (Wireshark's packet-lbmr.c reads them all with
ENC_BIG_ENDIAN; see shared/spec/wire-lbmr-transports-srs.md section 3).
"""

from __future__ import annotations

import struct

from umcore.errors import LocalProtocolError, RemoteProtocolError
from umcore.wire._shared import Record
from umcore.wire._shared import ip4_bytes as ip_bytes
from umcore.wire._shared import ip4_str as ip_str

__all__ = [
    "MAX_DATAGRAM_SIZE",
    "MAX_NAME_LEN",
    "MAX_TOPIC_LEN",
    "RESOLVER_DATAGRAM_MAX_SIZE_DEFAULT",
    "LBMRError",
    "Record",
    # the shared IPv4 conversions under their LBMR names (the LBMR modules and umcore.api use them)
    "ip_bytes",
    "ip_str",
]

# --- limits -----------------------------------------------------------------------------------

# Longest topic name UM accepts, in bytes without the NUL: the UM API allocates 256 bytes
# (LBM_MSG_MAX_TOPIC_LEN) but documents 246 as the legal maximum (spec/seed-core-features.md,
# "legal topic length is 246 bytes").  Applies to TQR, TIR, TMR, QIR and PSER topic names, both
# when encoding and when decoding (a longer name is not something UM sends).
MAX_TOPIC_LEN = 246

# Longest other NUL-terminated name (wildcard patterns, queue names, context names, TNWG symbols):
# the dissector's name buffer is LBMR_MAX_NAMELEN = 256 bytes including the NUL.  [I] UM's own
# limits for these are not published in our sources.
MAX_NAME_LEN = 255

# Largest LBMR datagram: resolver_datagram_max_size may be set up to 65535 (UM Configuration
# Guide; spec/seed-transports-tr.md 2.3).  Neither encode nor decode handles more.
MAX_DATAGRAM_SIZE = 65535

# UM's default resolver_datagram_max_size; senders batch TQRs/TIRs up to this size.
RESOLVER_DATAGRAM_MAX_SIZE_DEFAULT = 8192


class LBMRError(RemoteProtocolError):
    """A peer sent an LBMR datagram we cannot decode (the datagram is dropped, nothing else)."""


# --- conversions --------------------------------------------------------------------------------


def name_bytes(name: str, limit: int, what: str) -> bytes:
    """Encode a name for the wire (no NUL added); refuse NULs and names over ``limit`` bytes."""
    try:
        raw = name.encode("utf-8", "surrogateescape")
    except (UnicodeError, AttributeError) as exc:
        raise LocalProtocolError(f"{what} cannot be encoded: {name!r}") from exc
    if b"\0" in raw:
        raise LocalProtocolError(f"{what} contains a NUL byte: {name!r}")
    if len(raw) > limit:
        raise LocalProtocolError(f"{what} is {len(raw)} bytes, more than the limit {limit}")
    return raw


def name_str(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def fixed_bytes(value: bytes, size: int, what: str) -> bytes:
    if not isinstance(value, (bytes, bytearray)) or len(value) != size:
        raise LocalProtocolError(f"{what} must be {size} bytes, got {value!r}")
    return bytes(value)


def read_cstring(data: bytes, pos: int, end: int, limit: int, record: str) -> tuple[str, int]:
    """Read a NUL-terminated name at ``pos`` (NUL before ``end``); return it and the next offset."""
    nul = data.find(b"\0", pos, end)
    if nul < 0:
        raise LBMRError("name not NUL-terminated", record=record, offset=pos)
    if nul - pos > limit:
        raise LBMRError(f"name longer than {limit} bytes", record=record, offset=pos)
    return data[pos:nul].decode("utf-8", "surrogateescape"), nul + 1


def trailing_name(raw: bytes, limit: int, record: str, offset: int) -> str:
    """A name stored in a length-delimited field: one trailing NUL is dropped if present.

    [I] Our encoders always NUL-terminate these names (as UM does for every other LBMR string);
    the dissector only shows the bytes, so a peer that omits the NUL is accepted too."""
    if raw.endswith(b"\0"):
        raw = raw[:-1]
    if b"\0" in raw:
        raise LBMRError("NUL byte inside a name", record=record, offset=offset)
    if len(raw) > limit:
        raise LBMRError(f"name longer than {limit} bytes", record=record, offset=offset)
    return raw.decode("utf-8", "surrogateescape")


def need(pos: int, size: int, end: int, record: str) -> None:
    """Raise unless ``size`` bytes are available at ``pos`` before ``end``."""
    if pos + size > end:
        raise LBMRError(
            f"truncated: need {size} bytes, {max(end - pos, 0)} left", record=record, offset=pos
        )


U8 = struct.Struct(">B")
U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
OPT_HDR = struct.Struct(">BB")  # type, len: the head of every LBMR option
