"""Hot Failover (seed 003 10.17): HF sequence numbers on the wire and the HF receiver's filter.

Theory of operation
-------------------
Several HF sources (any contexts, hosts or transports) send the same messages, each tagged by
the application with the same *HF sequence number*, 32- or 64-bit.  An HF receiver delivers
the first copy of each HF sequence number and drops the later ones, so a source may lose
messages or die without the application losing anything, as long as one copy arrives.

**Wire.**  The HF sequence number is an APPHDR_CHAIN element (LBMC header 0x07) of type 2
(HF_SQN, wire-lbmc-ump.md 5): ``next(1) len(1) res(2) sqn``, the sequence number big-endian in
4 bytes (``len`` 8: LBM_MSG_FLAG_HF_32) or 8 bytes (``len`` 12: HF_64).  The element's 16-bit
reserved word carries the send-ex flags the receiver needs: 0x0001 OPTIONAL
(LBM_SRC_SEND_EX_FLAG_HF_OPTIONAL) and 0x0002 RESET (``lbm_hf_src_send_rcv_reset``)
[inferred: tshark 4.0.17 shows this element's data undecoded and our notes give no layout
beyond the element type; the widths are UM's API types].

**The filter** (:class:`HfFilter`, one per topic of an HF receiver: a wildcard HF receiver keeps
one per matched topic).  It remembers the highest HF sequence number delivered (``high``) and,
for arrival-order receivers, the HF numbers skipped below it (bounded ranges):

- the first message, or one ahead of ``high`` by at most :data:`MAX_INTENTIONAL_GAP`
  (serial arithmetic, so 32-bit numbers wrap as UM allows), is delivered and becomes ``high``.
  The numbers skipped are an *intentional gap* (seed 10.17.6): each source's transport delivers
  its own stream in order after its own loss recovery, so a number the sources never sent is
  never waited for;
- one at or below ``high`` is a duplicate: dropped, or delivered flagged HF_DUPLICATE with
  ``hf_duplicate_delivery`` 1 (needed with persistence).  Exception (``ordered_delivery`` 0 or
  -1, arrival order): a number inside a skipped range is the first copy of a message another
  source delivered late, and is delivered (arrival order only holds when every source uses the
  same transport type, seed 10.17.8);
- optional messages (sent with HF_OPTIONAL) are dropped when ``hf_optional_messages`` is 0,
  after they counted for duplicate detection;
- a RESET element starts the filter afresh (LBM_MSG_HF_RESET is delivered);
- a message without HF element passes through, flagged HF_PASS_THROUGH, as do EOS, requests
  and plain sends from HF sources (seed 10.17.2).

Sans-IO: no sockets, no time.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

from umcore.errors import ConfigError
from umcore.wire import lbmc

__all__ = [
    "HF_ELEM_OPTIONAL",
    "HF_ELEM_RESET",
    "MAX_INTENTIONAL_GAP",
    "MAX_SKIPPED_RANGES",
    "HfFilter",
    "HfInfo",
    "hf_element",
    "hf_info",
]

HF_ELEM_OPTIONAL = 0x0001
HF_ELEM_RESET = 0x0002

# seed 10.17.6: "HF sources can supply message sequence numbers with number gaps up to
# 1073741824"; a number further ahead than that reads as behind (serial arithmetic).
MAX_INTENTIONAL_GAP = 1 << 30
# Skipped ranges an arrival-order filter remembers below ``high`` (oldest forgotten first):
# each costs two ints; late copies older than the oldest kept range are dropped as duplicates.
MAX_SKIPPED_RANGES = 1024

# Filter verdicts.
DELIVER = 0
DELIVER_DUPLICATE = 1
DROP = 2
RESET = 3

_U32 = struct.Struct("!I")
_U64 = struct.Struct("!Q")
_MASK = {32: 0xFFFFFFFF, 64: 0xFFFFFFFFFFFFFFFF}


class HfInfo:
    """The HF fields of one received message."""

    __slots__ = ("bits", "optional", "reset", "sqn")

    def __init__(self, sqn: int, bits: int, optional: bool, reset: bool) -> None:
        self.sqn = sqn
        self.bits = bits
        self.optional = optional
        self.reset = reset


def hf_element(sqn: int, bits: int = 32, *, optional: bool = False, reset: bool = False) -> Any:
    """The APPHDR_CHAIN element carrying HF sequence number ``sqn`` (``bits`` 32 or 64)."""
    if bits not in _MASK:
        raise ConfigError("HF sequence number size must be 32 or 64", source="API", what=str(bits))
    if type(sqn) is not int or not 0 <= sqn <= _MASK[bits]:
        raise ConfigError(
            f"HF sequence number out of range for {bits} bits", source="API", what=repr(sqn)
        )
    data = _U32.pack(sqn) if bits == 32 else _U64.pack(sqn)
    res = (HF_ELEM_OPTIONAL if optional else 0) | (HF_ELEM_RESET if reset else 0)
    return lbmc.ApphdrElement(lbmc.APPHDR_ELEM_HF_SQN, data, res)


def hf_info(headers: Iterable[Any]) -> HfInfo | None:
    """The HF element of a received message, or None (no element, or one of a length that is
    neither 4 nor 8 data bytes: a peer's bad element makes the message pass through)."""
    for h in headers:
        if type(h) is lbmc.ApphdrChain:
            for e in h.elements:
                if e.elem_type != lbmc.APPHDR_ELEM_HF_SQN:
                    continue
                n = len(e.data)
                if n == 4:
                    sqn, bits = _U32.unpack(e.data)[0], 32
                elif n == 8:
                    sqn, bits = _U64.unpack(e.data)[0], 64
                else:
                    return None
                return HfInfo(
                    sqn, bits, bool(e.res & HF_ELEM_OPTIONAL), bool(e.res & HF_ELEM_RESET)
                )
            return None
    return None


class HfFilter:
    """The duplicate filter of one HF topic (see the module docstring)."""

    __slots__ = (
        "arrival",
        "delivered",
        "dropped_duplicates",
        "dropped_optional",
        "duplicate_delivery",
        "high",
        "optional",
        "skipped",
    )

    def __init__(
        self, *, ordered: bool = True, duplicate_delivery: bool = False, optional: bool = True
    ) -> None:
        self.arrival = not ordered
        self.duplicate_delivery = duplicate_delivery
        self.optional = optional
        #: Highest HF sequence number delivered (None: nothing yet, or after a reset).
        self.high: int | None = None
        #: Arrival order: skipped ranges [first, last] below ``high``, oldest first.
        self.skipped: list[list[int]] = []
        self.delivered = 0
        self.dropped_duplicates = 0
        self.dropped_optional = 0

    def reset(self) -> None:
        self.high = None
        self.skipped.clear()

    def receive(self, info: HfInfo) -> int:
        """The verdict for a message with HF fields ``info``: DELIVER, DELIVER_DUPLICATE,
        DROP or RESET (deliver LBM_MSG_HF_RESET: the filter was started afresh)."""
        if info.reset:
            self.reset()
            return RESET
        sqn = info.sqn
        mask = _MASK[info.bits]
        high = self.high
        first = high is None
        if not first:
            assert high is not None
            ahead = (sqn - high) & mask
            if ahead == 0 or ahead > MAX_INTENTIONAL_GAP:
                if not (self.arrival and self._fill(sqn, mask)):
                    self.dropped_duplicates += 1
                    return DELIVER_DUPLICATE if self.duplicate_delivery else DROP
            else:
                if self.arrival and ahead > 1:
                    self._skip((high + 1) & mask, (sqn - 1) & mask)
                self.high = sqn
        else:
            self.high = sqn
        if info.optional and not self.optional:
            self.dropped_optional += 1
            return DROP
        self.delivered += 1
        return DELIVER

    def _skip(self, first: int, last: int) -> None:
        self.skipped.append([first, last])
        if len(self.skipped) > MAX_SKIPPED_RANGES:
            del self.skipped[0]

    def _fill(self, sqn: int, mask: int) -> bool:
        """An arrival-order late copy: True (and the range split) when ``sqn`` was skipped."""
        for i, (first, last) in enumerate(self.skipped):
            if (sqn - first) & mask <= (last - first) & mask:
                pieces = []
                if sqn != first:
                    pieces.append([first, (sqn - 1) & mask])
                if sqn != last:
                    pieces.append([(sqn + 1) & mask, last])
                self.skipped[i : i + 1] = pieces
                return True
        return False
