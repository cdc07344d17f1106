"""Sans-IO rate limiters of the datagram transports: one token bucket per limit per context.

Theory of operation
-------------------
UM limits what LBT-RM and LBT-RU sources put on the wire (seed 003 L1206-1240, notes 1.3): per
*rate interval* (``transport_lbtrm_rate_interval`` 10 ms, ``transport_lbtru_rate_interval``
100 ms) a context may send ``limit x interval`` bits, where the limit is
``transport_*_data_rate_limit`` (10 Mbit/s; new data **and** retransmissions) and, a sub-cap,
``transport_*_retransmit_rate_limit`` (5 Mbit/s; retransmissions only).  Both are context
options, so one :class:`RateLimiter` (two :class:`TokenBucket` objects) is shared by every
session of that transport type in a context.

A bucket is refilled to its full budget at each interval boundary (no carry-over: the budget is
"per interval").  :meth:`TokenBucket.take` spends; it refuses only when the budget is already
exhausted, so the datagram that *crosses* the budget still goes (UM: "the datagram that would
exceed the budget is queued and the send still succeeds"; we let it go at once and count the
overdraft against the next interval, which is the same average rate without a queue).  The
transport is then *blocked* until the next refill: further data waits in the session (the API
awaits, or raises :class:`~umcore.errors.WouldBlock` and sends WAKEUP later), further NAKs are
answered with NCFs (reason "shed").  A limit of 0 means unlimited.

**Retransmissions come first.**  The data limit counts new data *and* retransmissions, but the
retransmit limit is what "guarantees a minimum new-data rate under massive loss" (notes 1.3):
so a retransmission is refused only by the *retransmit* budget.  When the data budget is already
spent by new data, the retransmission still goes and its bytes are charged to the data bucket as
debt (:meth:`TokenBucket.charge`), which the next refill pays first: new data then waits instead
of the repair.  Without this a source sending at its data limit (per-message flush, say) spends
every interval's budget on new data before the NAKs arrive, and every NAK is shed with an NCF
that makes receivers wait ``nak_suppress_interval`` (1 s) -- recovery never catches up.
"""

from __future__ import annotations

from umcore.config.options import OptionReader

__all__ = ["RateLimiter", "TokenBucket"]


class TokenBucket:
    """One byte budget per interval; see the module docstring."""

    __slots__ = ("budget", "interval", "next_refill", "overdraft", "refused", "tokens")

    def __init__(self, bits_per_second: int, interval: float, now: float = 0.0) -> None:
        if interval <= 0:
            raise ValueError("a rate interval is positive")
        self.interval = interval
        #: Bytes per interval; 0 = unlimited.
        self.budget = int(bits_per_second * interval / 8)
        self.tokens = self.budget
        self.next_refill = now + interval
        #: Datagrams refused because the budget was exhausted (the caller queued or shed them).
        self.refused = 0
        #: Bytes sent beyond the budget by the crossing datagram, charged to the next interval.
        self.overdraft = 0

    @property
    def unlimited(self) -> bool:
        return self.budget == 0

    def refill(self, now: float) -> bool:
        """Refill if an interval boundary passed; True when it did."""
        if now < self.next_refill:
            return False
        steps = int((now - self.next_refill) / self.interval) + 1
        self.next_refill += steps * self.interval
        # Debt is paid by the intervals that passed: the first refill after it and any idle
        # ones; what is left (a debt above one budget) carries on.
        debt = max(self.overdraft - self.budget * (steps - 1), 0)
        tokens = self.budget - debt
        self.overdraft = -tokens if tokens < 0 else 0
        self.tokens = max(tokens, 0)
        return True

    def available(self, now: float) -> bool:
        if self.budget == 0:
            return True
        if now >= self.next_refill:
            self.refill(now)
        return self.tokens > 0

    def take(self, nbytes: int, now: float) -> bool:
        """Spend ``nbytes``; False (nothing spent) when the budget is exhausted.

        :meth:`umcore.transport.lbt.LbtSource._emit` does this method's common case inline
        (budget set, no refill due, ``tokens >= nbytes``: ``tokens -= nbytes``) and calls it
        otherwise; keep the two in step (tests/transport/test_lbt_source_window.py checks)."""
        if self.budget == 0:
            return True
        if now >= self.next_refill:
            self.refill(now)
        tokens = self.tokens
        if tokens <= 0:
            self.refused += 1
            return False
        tokens -= nbytes
        if tokens < 0:
            self.overdraft += -tokens
            tokens = 0
        self.tokens = tokens
        return True

    def charge(self, nbytes: int, now: float) -> None:
        """Spend ``nbytes`` whatever the budget says (a retransmission): beyond it, the bytes
        are debt the next refill pays first."""
        if self.budget == 0:
            return
        if now >= self.next_refill:
            self.refill(now)
        tokens = self.tokens - nbytes
        if tokens < 0:
            self.overdraft += -tokens
            tokens = 0
        self.tokens = tokens


class RateLimiter:
    """A context's data and retransmit buckets for one transport type."""

    __slots__ = ("data", "retransmit")

    def __init__(
        self, data_bps: int, retransmit_bps: int, interval: float, now: float = 0.0
    ) -> None:
        self.data = TokenBucket(data_bps, interval, now)
        self.retransmit = TokenBucket(retransmit_bps, interval, now)

    @classmethod
    def from_options(cls, kind: str, context: OptionReader, now: float) -> RateLimiter:
        """A context's limiter for ``kind`` (``lbtru`` or ``lbtrm``) from its
        ``transport_<kind>_{data,retransmit}_rate_limit`` and ``_rate_interval`` options."""
        p = f"transport_{kind}_"
        return cls(
            int(context.get(p + "data_rate_limit")),
            int(context.get(p + "retransmit_rate_limit")),
            context.seconds(p + "rate_interval"),
            now,
        )

    def take_data(self, nbytes: int, now: float) -> bool:
        return self.data.take(nbytes, now)

    def take_retransmit(self, nbytes: int, now: float) -> bool:
        """A retransmission spends both budgets (the data limit includes retransmissions); only
        the retransmit budget can refuse it (see the module docstring)."""
        if not self.retransmit.take(nbytes, now):
            return False
        self.data.charge(nbytes, now)
        return True

    def next_refill(self) -> float:
        return self.data.next_refill
