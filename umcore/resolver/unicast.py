"""The client side of unicast topic resolution: which lbmrd to talk to, and when to keepalive.

Theory of operation
-------------------
With ``resolver_unicast_daemon`` set, a context sends its TIRs and TQRs to an lbmrd (the unicast
topic resolution daemon) instead of the multicast group; lbmrd forwards every TIR/TQR to all the
clients it knows, which is how other contexts hear them (seed 003 7.2, notes 2.7).

:class:`UnicastDaemons` holds the configured lbmrd addresses and decides, given ``now``:

- **where topic resolution traffic goes**: to *one* active lbmrd at a time.  The current one
  changes every ``resolver_unicast_change_interval`` (200 ms) randomised to 1/2..3/2 of it,
  round robin among the *active* lbmrds; when none is active it rotates among all of them with
  the quicker 1/4..3/4 randomisation (UM's quick-change mode).  Decision: we follow the
  Configuration Guide here; the seed's "every 250-750 ms" describes the same mechanism with an
  older default (notes 5.2).
- **which lbmrds are active**: one from which nothing arrived for
  ``resolver_unicast_activity_timeout`` (1000 ms; 0 = always active) is inactive; the check runs
  every ``resolver_unicast_check_interval`` (200 ms).  lbmrd answers keepalives with its own
  (LBMR type 0, no records), so a live lbmrd stays active even when no one else talks.
- **when to keepalive**: an lbmrd to which we sent nothing for
  ``resolver_unicast_keepalive_interval`` (500 ms, CG; the seed's "5 s hard coded" is older, see
  notes 5.1) gets a keepalive: LBMR type 3 "Source Alive" when the context has sources, else
  type 2 "Receiver Alive".  Keepalives go to *every* configured lbmrd, active or not, so each
  keeps us in its client table and a restarted one is noticed.

Randomness comes from a ``random.Random`` handed in, so tests are deterministic.
"""

from __future__ import annotations

import random

__all__ = ["UnicastDaemons", "UnicastTimings"]

Address = tuple[str, int]


class UnicastTimings:
    """``resolver_unicast_*`` intervals, in seconds."""

    __slots__ = ("activity_timeout", "change_interval", "check_interval", "keepalive_interval")

    def __init__(
        self,
        keepalive_interval: float = 0.5,
        activity_timeout: float = 1.0,
        check_interval: float = 0.2,
        change_interval: float = 0.2,
    ) -> None:
        self.keepalive_interval = keepalive_interval
        self.activity_timeout = activity_timeout
        self.check_interval = check_interval
        self.change_interval = change_interval


class UnicastDaemons:
    """The lbmrd list of one context, with activity, rotation and keepalive bookkeeping."""

    __slots__ = (
        "_last_heard",
        "_last_sent",
        "_next_change",
        "_next_check",
        "_rng",
        "active",
        "current",
        "daemons",
        "timings",
    )

    def __init__(
        self,
        daemons: list[Address],
        now: float,
        *,
        timings: UnicastTimings | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if not daemons:
            raise ValueError("unicast topic resolution needs at least one lbmrd address")
        self.daemons = list(daemons)
        self.timings = timings or UnicastTimings()
        self._rng = rng or random.Random()
        n = len(self.daemons)
        # Every lbmrd starts active: it has had no chance to answer yet.
        self._last_heard = [now] * n
        self._last_sent = [float("-inf")] * n
        self.active = [True] * n
        self.current = 0
        self._next_check = now + self.timings.check_interval
        self._next_change = now + self._change_delay(quick=False) if n > 1 else None

    def _change_delay(self, *, quick: bool) -> float:
        base = self.timings.change_interval
        if quick:
            return base * self._rng.uniform(0.25, 0.75)
        return base * self._rng.uniform(0.5, 1.5)

    def index_of(self, addr: Address) -> int | None:
        try:
            return self.daemons.index(addr)
        except ValueError:
            return None

    def heard_from(self, index: int, now: float) -> None:
        """A datagram arrived from lbmrd ``index``: it is active again."""
        self._last_heard[index] = now
        if not self.active[index]:
            self.active[index] = True

    def sent_to(self, index: int, now: float) -> None:
        self._last_sent[index] = now

    def destination(self) -> Address:
        """Where topic resolution traffic goes now."""
        return self.daemons[self.current]

    def advance(self, now: float) -> None:
        """Run the activity check and the rotation if their times have come."""
        t = self.timings
        while now >= self._next_check:
            if t.activity_timeout > 0:
                for i, heard in enumerate(self._last_heard):
                    self.active[i] = now - heard <= t.activity_timeout
            self._next_check += t.check_interval
            if self._next_check <= now - t.check_interval:  # far behind: skip, no catch-up
                self._next_check = now + t.check_interval
        if not self.active[self.current]:
            self._rotate(now)
        if self._next_change is not None and now >= self._next_change:
            self._rotate(now)

    def _rotate(self, now: float) -> None:
        n = len(self.daemons)
        any_active = any(self.active)
        for step in range(1, n + 1):
            cand = (self.current + step) % n
            if not any_active or self.active[cand]:
                self.current = cand
                break
        if n > 1:
            self._next_change = now + self._change_delay(quick=not any_active)

    def keepalives_due(self, now: float) -> list[int]:
        """Indexes of the lbmrds that need a keepalive now (marks them as sent)."""
        due = []
        ka = self.timings.keepalive_interval
        for i, last in enumerate(self._last_sent):
            if now - last >= ka:
                due.append(i)
                self._last_sent[i] = now
        return due

    def next_timer(self, keepalives: bool) -> float:
        deadline = self._next_check
        if self._next_change is not None:
            deadline = min(deadline, self._next_change)
        if keepalives:
            ka = self.timings.keepalive_interval
            deadline = min(deadline, min(self._last_sent) + ka)
        return deadline
