"""GapRepair: the Store asks a source again for messages it missed (its own OTR), sans-IO.

Theory of operation
-------------------
A Store is a receiver of its sources' transports (persistence-store.md trap 1), and like any
receiver it can miss messages: it was down while the source went on sending under quorum
(check 15: "B catches up"), or the transport gave up on a loss.  UM's Store repairs that through
OTR, asking the source's retention (trap 19).  A disk repository writes in sequence order, so
until a gap is repaired or declared lost nothing after it becomes stable at this Store.

:class:`GapRepair` keeps, per source registration (RegID), the next sequence number it expects
(seeded from the repository's lead when the first frame comes, so a restarted Store sees what
it missed while it was down) and the *holes*: sequence numbers skipped by a later arrival.  A
hole is asked for once it has been missing :data:`INITIAL_DELAY_S` (the transport's own NAK
repair usually fills it before; UM's ``otr_request_initial_delay``), again every
:data:`REQUEST_INTERVAL_S`, and declared lost after :data:`MESSAGE_TIMEOUT_S` (UM's
``retransmit_request_message_timeout``): the core then lets stability pass it and NAKs it.
The core sends the requests as UME_RXREQs to the source's request port (``id_2`` = the topic
index, the retransmission to the Store's own port, where it arrives as a RETRANS with the
source's OTID); the source's late-join service answers from its retention.

Sequence numbers are 32-bit; "ahead" is serial order within half the space.
"""

from __future__ import annotations

__all__ = [
    "INITIAL_DELAY_S",
    "MAX_HOLES",
    "MAX_REQUESTS_PER_ROUND",
    "MESSAGE_TIMEOUT_S",
    "REQUEST_INTERVAL_S",
    "GapRepair",
]

_M = 0xFFFFFFFF
_HALF = 0x80000000
_NO_SQN = 0xFFFFFFFF

# How long a skipped sequence number waits for the transport's own repair before the Store asks
# the source (UM's otr_request_initial_delay is 2000 ms; a Store wants its repository whole
# sooner, and the transport's NAK repair takes well under a second on a LAN).
INITIAL_DELAY_S = 1.0
# Between two requests for the same sequence number (UM's retransmit_request_interval).
REQUEST_INTERVAL_S = 0.5
# A sequence number not repaired this long after it was first missed is declared lost (UM's
# retransmit_request_message_timeout): the source no longer retains it.
MESSAGE_TIMEOUT_S = 10.0
# Holes tracked per source: a source that skipped more (a Store down for millions of messages)
# has its oldest holes declared lost at once rather than tracked (bounded memory).
MAX_HOLES = 100_000
# Requests sent per source per timer round (each is one RXREQ header; 32 ride in one message):
# a large gap is asked for in slices, as UM's retransmit_request_outstanding_maximum does.
MAX_REQUESTS_PER_ROUND = 1000


class _Hole:
    __slots__ = ("deadline", "due")

    def __init__(self, due: float, deadline: float) -> None:
        self.due = due
        self.deadline = deadline


class _Track:
    __slots__ = ("expected", "first", "holes")

    def __init__(self, expected: int, first: int | None = None) -> None:
        self.expected = expected
        # the start told by expect(): a gap from it was sent before the Store joined
        self.first = first
        self.holes: dict[int, _Hole] = {}


class GapRepair:
    """The holes of every source of one Store instance (module docstring)."""

    def __init__(self) -> None:
        self._tracks: dict[int, _Track] = {}
        self._next: float | None = None
        #: Sequence numbers asked for, repaired, declared lost, and holes not tracked.
        self.requested = 0
        self.repaired = 0
        self.lost = 0
        self.untracked = 0

    def in_order(self, reg_id: int, sqn: int) -> bool:
        """:meth:`seen`'s common case: source ``reg_id``'s message ``sqn`` is the one expected
        next (True: taken, as :meth:`seen` would); False: call :meth:`seen`."""
        t = self._tracks.get(reg_id)
        if t is None or sqn != t.expected:
            return False
        t.expected = (sqn + 1) & _M
        return True

    def in_order_run(self, reg_id: int, sqn: int, count: int) -> bool:
        """:meth:`in_order` of ``count`` consecutive messages from ``sqn`` at once (True: all
        taken); False: nothing taken, call :meth:`seen` for each."""
        t = self._tracks.get(reg_id)
        if t is None or sqn != t.expected:
            return False
        t.expected = (sqn + count) & _M
        return True

    def seen(self, reg_id: int, sqn: int, lead: int, now: float) -> None:
        """Source ``reg_id``'s message ``sqn`` arrived (before it is appended; ``lead`` is the
        newest sequence number the repository holds, 0xFFFFFFFF none)."""
        t = self._tracks.get(reg_id)
        if t is None:
            t = self._tracks[reg_id] = _Track(sqn if lead == _NO_SQN else (lead + 1) & _M)
        exp = t.expected
        start, t.first = t.first, None
        if sqn == exp:
            t.expected = (sqn + 1) & _M
            return
        ahead = (sqn - exp) & _M
        if ahead < _HALF:  # a jump: exp .. sqn-1 are missing
            t.expected = (sqn + 1) & _M
            holes = t.holes
            room = MAX_HOLES - len(holes)
            if ahead > room:
                skip = ahead - max(room, 0)
                self.untracked += skip
                exp = (exp + skip) & _M
                ahead -= skip
            # a gap from the told start went out before the Store joined: no transport repairs it
            due = now if start == exp else now + INITIAL_DELAY_S
            deadline = now + MESSAGE_TIMEOUT_S
            for k in range(ahead):
                holes[(exp + k) & _M] = _Hole(due, deadline)
            if ahead and (self._next is None or due < self._next):
                self._next = due
        elif t.holes.pop(sqn, None) is not None:
            self.repaired += 1

    def expect(self, reg_id: int, sqn: int) -> None:
        """Source ``reg_id``'s first message will be ``sqn`` (its repository is empty and was
        told so, by the source's late-join information): whatever arrives later than that
        leaves holes to ask for -- at once, without :data:`INITIAL_DELAY_S`, when the first
        arrival jumps from ``sqn``, since those were sent before the Store joined."""
        if reg_id not in self._tracks:
            self._tracks[reg_id] = _Track(sqn & _M, sqn & _M)

    def give_up(self, reg_id: int, first: int, last: int) -> list[int]:
        """Stop asking for the holes ``first..last`` of source ``reg_id`` (its source no longer
        retains them); returns them, counted as lost."""
        t = self._tracks.get(reg_id)
        if t is None or not t.holes:
            return []
        span = (last - first) & _M
        if span >= _HALF:
            return []
        gone = [sqn for sqn in t.holes if (sqn - first) & _M <= span]
        for sqn in gone:
            del t.holes[sqn]
        gone.sort(key=lambda q: (q - first) & _M)
        self.lost += len(gone)
        return gone

    def skip_to(self, reg_id: int, sqn: int) -> tuple[int, int] | None:
        """Source ``reg_id``'s messages before ``sqn`` not seen yet will never come (its source
        no longer retains them): expect ``sqn`` next; returns the range skipped, or None."""
        t = self._tracks.get(reg_id)
        if t is None:
            return None
        exp = t.expected
        ahead = (sqn - exp) & _M
        if not ahead or ahead >= _HALF:
            return None
        t.expected = sqn & _M
        t.first = None
        return exp, (sqn - 1) & _M

    def expect_through(self, reg_id: int, high: int, now: float) -> int:
        """Source ``reg_id`` has sent up to ``high`` (its late-join information, taken after the
        Store joined): what was not seen up to there is a hole -- asked for at once when
        nothing arrived since the start :meth:`expect` told (all of it went out before the
        join), else after :data:`INITIAL_DELAY_S` (what went out after the join is still
        arriving on the transport).  Returns how many holes it made."""
        t = self._tracks.get(reg_id)
        if t is None:
            return 0
        nxt = (high + 1) & _M
        ahead = (nxt - t.expected) & _M
        if not ahead or ahead >= _HALF:
            return 0
        before = len(t.holes)
        self.seen(reg_id, nxt, 0, now)  # holes expected..high, as an arrival of high + 1 makes
        t.expected = nxt  # ... without taking high + 1 as seen
        return len(t.holes) - before

    def forget(self, reg_id: int) -> None:
        """The registration is gone (deleted, deregistered)."""
        self._tracks.pop(reg_id, None)

    def next_timer(self) -> float | None:
        return self._next

    def handle_timer(self, now: float) -> tuple[list[tuple[int, list[int]]], list[tuple[int, int]]]:
        """(requests: (RegID, sequence numbers to ask its source for), lost: (RegID, sqn))."""
        requests: list[tuple[int, list[int]]] = []
        lost: list[tuple[int, int]] = []
        nxt: float | None = None
        for reg_id, t in self._tracks.items():
            if not t.holes:
                continue
            ask: list[int] = []
            for sqn, h in list(t.holes.items()):
                if h.deadline <= now:
                    del t.holes[sqn]
                    lost.append((reg_id, sqn))
                    continue
                if h.due <= now and len(ask) < MAX_REQUESTS_PER_ROUND:
                    ask.append(sqn)
                    h.due = now + REQUEST_INTERVAL_S
                when = min(h.due, h.deadline)
                if nxt is None or when < nxt:
                    nxt = when
            if ask:
                requests.append((reg_id, ask))
                self.requested += len(ask)
        self.lost += len(lost)
        self._next = nxt
        return requests, lost

    def holes(self, reg_id: int) -> int:
        t = self._tracks.get(reg_id)
        return 0 if t is None else len(t.holes)
