"""CatchUp: a Store new to a source gets what the source sent before the Store joined, sans-IO.

Theory of operation
-------------------
A source may send as soon as its registration is complete, and the Store's answer does not wait
for the Store to join the source's transport (persistence-store.md 1.3: "join the source's
transport as a receiver, reply"): the first messages can go out before the Store has joined and
would never reach it.  The source retains every message until it is stable (its retention
buffer holds what a Store has not ACKed), so the Store does what any late-joining receiver does
(S003 L4410-4412): it asks the source's late-join service where its retained stream stands and
repairs the rest from the source's retention.  The mechanism (LJI_REQ, UME_LJ_INFO, UME_RXREQ to
the source, RETRANS back) is inferred from UM's late join, as for the Store's own repair of what
it missed (:mod:`umcore.store.repair`, trap 19); the docs only say that retained messages
"provide a method for Stores to be brought up to date".

One :class:`CatchUp` per source registration whose repository is empty, in phases
(:class:`Phase`, one transition table, :data:`TRANSITIONS`):

``ASKING``
    An LJI_REQ (request index = the source's RegID) went to the source.  For a source *new* to
    this Store it goes out **before** the registration answer, on the same connection, so the
    source's LJ_INFO describes it before it knew of this Store: its next sequence number then,
    ``high + 1`` (:attr:`Start.NEXT`), is the first message sent since its registration here --
    nothing sent after is missed, nothing from before is taken (a memory Store restarted does
    not recover what the source sent before, check 14).  A source that *re-registers* with an
    empty repository (the Store kept its state but never saw a message) is asked after its
    answer and the Store starts at the oldest message the source retains, ``low``
    (:attr:`Start.RETAINED`); so is a source asked again, since the answer may then come after
    the source went on sending.  While asking, the frames of the source's sessions that offer
    late join (the UME topic option's LATEJOIN flag or the late-join option: a source without
    it could never answer) are *held* here, bounded (:data:`MAX_HELD_FRAMES`,
    :data:`MAX_HELD_BYTES`; beyond, dropped and counted: the source retains them and the
    Store's repair asks for them again), instead of starting the repository where the Store
    joined.  The request is repeated every :data:`LJI_INTERVAL_S`; after
    :data:`LJI_MAX_REQUESTS` unanswered ones the Store gives up and starts where it joined
    (today's behaviour for a source that cannot answer).
``BASE_SET``
    The LJ_INFO fixed the repository's first sequence number (``Repository.expect_first``); the
    held frames were stored.  Whatever lies between that first number and the first message that
    arrived is a hole the transport can never repair (it was sent before the join), so the
    repair asks the source at once (``GapRepair.expect``).  Once the Store has joined the
    source's session (its BOS; at the latest :data:`PROBE_AFTER_S` after the start was set,
    for a session that began before this registration), it asks the source once more
    (``PROBING``): messages sent before the join and none after would otherwise never show
    as missing.
``PROBING``
    The answer, taken after the join: up to ``high`` the source has sent, so every message
    from the first one to ``high`` not held is asked for (``GapRepair.expect_through``: after
    the repair's initial delay, since those sent after the join are still arriving on the
    transport); below ``low`` the source no longer retains anything (a restarted source resumes
    after the other Stores' consensus; the other Stores' quorum may have let the source release
    them), so those are declared lost at once (stability NAKs) instead of after the repair's
    message timeout, and stability goes on.

The core (:class:`umcore.store.core.StoreCore`) sends the requests, stores the held frames and
declares the losses; this module keeps the phase, the schedule and the held frames.
"""

from __future__ import annotations

from enum import Enum

__all__ = [
    "LJI_INTERVAL_S",
    "LJI_MAX_REQUESTS",
    "MAX_HELD_BYTES",
    "MAX_HELD_FRAMES",
    "PROBE_AFTER_S",
    "TRANSITIONS",
    "CatchUp",
    "Input",
    "Phase",
    "Start",
]

# Between two LJI requests to the same source: UM's late_join_info_request_interval default.
LJI_INTERVAL_S = 1.0
# Requests before the Store gives up asking and stores from where it joined.  A source that
# answers at all answers the first (one round trip on its request port); the Store holds the
# source's frames meanwhile, so it asks a few times (a lost connection), not UM's receiver
# maximum of 60.
LJI_MAX_REQUESTS = 3
# Frames (and their bytes) held per source while asking: a source sending at full rate for the
# whole wait would otherwise grow the Store's memory without bound.  Frames beyond are dropped
# and counted; the source retains them and the repair asks for them once the start is known.
MAX_HELD_FRAMES = 65536
MAX_HELD_BYTES = 32 * 1024 * 1024
# The second question (the probe) waits for the Store's join of the source's session (its BOS);
# a session that began before this registration has no BOS to wait for, so at the latest this
# long after the start was set (a join takes one topic resolution and one connection).
PROBE_AFTER_S = 1.0


class Phase(Enum):
    ASKING = "asking"  # LJI_REQ sent, waiting for the LJ_INFO; frames held
    BASE_SET = "base-set"  # the first sequence number is known; waiting for the join to probe
    PROBING = "probing"  # asked the source again, after the join: what it sent and retains
    DONE = "done"


class Input(Enum):
    INFO = "info"  # an LJ_INFO for this source
    GIVE_UP = "give-up"  # no answer after LJI_MAX_REQUESTS requests
    PROBE = "probe"  # joined (or PROBE_AFTER_S passed): the second LJI_REQ goes out


class Start(Enum):
    """Which end of the source's LJ_INFO is the repository's first sequence number."""

    NEXT = "next"  # high + 1: what the source sends from its registration here on
    RETAINED = "retained"  # low: everything the source still retains


TRANSITIONS: dict[tuple[Phase, Input], Phase] = {
    (Phase.ASKING, Input.INFO): Phase.BASE_SET,
    (Phase.ASKING, Input.GIVE_UP): Phase.DONE,
    (Phase.BASE_SET, Input.PROBE): Phase.PROBING,
    (Phase.PROBING, Input.INFO): Phase.DONE,
}


class CatchUp:
    """One source's catch-up (module docstring)."""

    __slots__ = (
        "answers", "base", "due", "frames", "joined", "nbytes", "phase", "requests", "start",
    )  # fmt: skip

    def __init__(self, start: Start, now: float) -> None:
        self.phase = Phase.ASKING
        self.start = start
        self.requests = 1  # the caller sends the first LJI_REQ
        self.answers = 0  # LJ_INFOs taken for those requests (the probe's is not counted)
        self.due = now + LJI_INTERVAL_S
        self.base = 0
        self.frames: list[tuple[int, bytes]] = []
        self.nbytes = 0
        self.joined = False  # the source's session began (BOS) since the registration

    def step(self, event: Input, now: float) -> Phase:
        """Take ``event``; raises KeyError for a transition the table does not have."""
        self.phase = TRANSITIONS[(self.phase, event)]
        self.due = now + PROBE_AFTER_S if self.phase is Phase.BASE_SET else float("inf")
        return self.phase

    @property
    def asking(self) -> bool:
        return self.phase is Phase.ASKING

    def stale_answer(self) -> bool:
        """An LJ_INFO while probing: True when it answers one of the requests sent while asking
        (repeated because the answers were slow) rather than the probe -- answers come back in
        the order asked, so the first ``requests - answers`` are stale.  Taking one of those for
        the probe's would under-count what the source sent before the join."""
        if self.answers >= self.requests:
            return False
        self.answers += 1
        return True

    def first_of(self, low: int, high: int) -> int:
        """The repository's first sequence number from an LJ_INFO's ``low``/``high``."""
        return low if self.start is Start.RETAINED else (high + 1) & 0xFFFFFFFF

    def hold(self, sqn: int, frame: bytes) -> bool:
        """Keep one frame until the start is known; False (not kept) beyond the bounds."""
        n = len(frame)
        if len(self.frames) >= MAX_HELD_FRAMES or self.nbytes + n > MAX_HELD_BYTES:
            return False
        self.frames.append((sqn, frame))
        self.nbytes += n
        return True

    def take_held(self) -> list[tuple[int, bytes]]:
        out, self.frames, self.nbytes = self.frames, [], 0
        return out

    def asked_again(self, now: float) -> bool:
        """The retry timer fired: True when another LJI_REQ is due (one more is counted), False
        when the requests are used up (the caller gives up)."""
        if self.requests >= LJI_MAX_REQUESTS:
            return False
        self.requests += 1
        self.start = Start.RETAINED  # an answer may now come after the source sent on
        self.due = now + LJI_INTERVAL_S
        return True
