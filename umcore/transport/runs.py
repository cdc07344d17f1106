"""Runs of same-length plain LBMC data messages, parsed in one C-level pass (every receiver).

Theory of operation
-------------------
A busy source batches many messages of one topic and one length into a TCP write or an LBT
datagram: ``[ver/type 0][next 0][msglen][tidx][sqn][payload]`` repeated, the sequence numbers
consecutive.  Parsing that message by message costs a Python loop iteration and several objects
each; here the receiver checks the whole run at once and unpacks it with one
:meth:`struct.Struct.iter_unpack`:

- :func:`uniform_prefix` counts the records whose bytes 0-7 (type, next header, msglen, tidx)
  repeat the first record's, by comparing strided slices (one column of the run per byte offset,
  binary search on a mismatch): every comparison runs in C.
- :func:`run_records` unpacks ``k`` such records into ``(sqn, payload bytes)`` pairs and checks
  that the sequence numbers are consecutive from the first (a peer that reorders or repeats gets
  ``None`` and the caller takes the messages one by one, which handles every case).
- :func:`run_struct` is the record struct of one message length, cached for every receiver.

The TCP receiver (:mod:`umcore.transport.tcp`) and the LBT-RU/LBT-RM receivers
(:mod:`umcore.transport.lbt`) use these and hand a run to a delivery controller's
``deliver_many`` when it is in sequence.
"""

from __future__ import annotations

import struct
from operator import eq, itemgetter

__all__ = ["DATA_HEADER", "RUN_MIN", "run_records", "run_struct", "uniform_prefix"]

# LBMC data message header: ver/type, next header, msglen, tidx, sqn.
DATA_HEADER = 12
# Shortest run of same-length plain data messages parsed in one pass (below it, the per-message
# loop is as cheap).
RUN_MIN = 8
# Structs cached per message length (bounded: a peer choosing lengths cannot grow the cache),
# shared by every receiver: the TCP one (run_records) and the LBT DCs (PackedRun, on_packed).
_MAX_RUN_STRUCTS = 64
_RUN_STRUCTS: dict[int, struct.Struct] = {}
_SQN_OF = itemgetter(0)


def uniform_prefix(buf: bytes, pos: int, stop: int, step: int, k: int) -> int:
    """How many of the ``k`` records of ``step`` bytes at ``buf[pos:stop]`` repeat the first
    record's bytes 0-7 (type, next header, msglen, tidx).  Binary search over strided slices:
    every comparison runs in C."""
    good = k
    for off in range(8):
        col = buf[pos + off : stop : step]
        ref = col[:1] * good
        if col[:good] == ref:
            continue
        lo, hi = 1, good  # col[:lo] matches, col[:hi] does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if col[:mid] == ref[:mid]:
                lo = mid
            else:
                hi = mid
        good = lo
    return good


def run_struct(msglen: int) -> struct.Struct:
    """The struct of one record of a run of plain data messages of ``msglen`` bytes: the LBMC
    data header's first 8 bytes skipped (checked by whoever built the run), ``(sqn, payload)``."""
    fmt = _RUN_STRUCTS.get(msglen)
    if fmt is None:
        if len(_RUN_STRUCTS) >= _MAX_RUN_STRUCTS:
            _RUN_STRUCTS.clear()
        fmt = _RUN_STRUCTS[msglen] = struct.Struct(f"!8xI{msglen - DATA_HEADER}s")
    return fmt


def run_records(
    buf: bytes, pos: int, msglen: int, k: int, sqn: int
) -> list[tuple[int, bytes]] | None:
    """The ``k`` records of ``msglen`` bytes at ``buf[pos:]`` (bytes 0-7 already checked by
    :func:`uniform_prefix`) as ``(sqn, payload)``; None unless their sequence numbers are
    ``sqn, sqn + 1, ...`` without wrapping past 2**32 - 1."""
    last = sqn + k
    if last > 0xFFFFFFFF:
        return None  # sequence numbers wrap inside the run: message by message
    records = list(run_struct(msglen).iter_unpack(memoryview(buf)[pos : pos + k * msglen]))
    if not all(map(eq, map(_SQN_OF, records), range(sqn, last))):
        return None  # not consecutive (a peer that reorders): message by message
    return records
