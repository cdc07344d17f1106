"""Hot Failover across contexts (HFX, seed 003 10.17.9): the HFX object's delivery controller.

Theory of operation
-------------------
An HFX object (UM's ``lbm_hfx_t``, deprecated in UM) receives the messages of one HF topic
through one HF receiver per context (one context per NIC in UM) and delivers each HF sequence
number once, to one callback.  Within a context an HF receiver already drops the copies of its
own sources; the HFX drops the copies that arrive through the other contexts, and orders.

:class:`HfxCore` is that object's sans-IO part: a delivery controller, the one the datagram
transports use (:class:`~umcore.transport.delivery.LbtDeliveryController`), run over *HF*
sequence numbers instead of topic sequence numbers, with the ``hfx`` options of UM's
Configuration Guide ("Hot Failover Operation Options"; defaults in the registry):

- ``ordered_delivery`` 1 (default): a message after an HF gap waits in the order map until the
  gap is filled by any leg; -1: delivered as it arrives, a late first copy of a missing number
  still delivered once;
- ``delivery_control_max_delay`` (10 s): how long a missing HF number is waited for.  When it
  has expired, the next *receive event* (a message, or the periodic check every
  ``delivery_control_loss_check_interval`` when that is not 0) declares it lost: one
  unrecoverable-loss event per number (:class:`HfxLoss`, ``count`` 1), then what it held back;
- ``delivery_control_maximum_burst_loss`` (512, where receivers have 1024): a larger gap is
  declared at once as one burst-loss event and the order map is cleared (what it held is
  discarded, as UM's burst loss does);
- ``delivery_control_maximum_total_map_entries`` (200000, 0 = unbounded): beyond it the oldest
  gap is declared lost at once and what it held is delivered;
- ``duplicate_delivery``: read by the adapter, which decides what to do with the duplicates the
  core reports.

What UM's HFX lacks and this core therefore does not do (seed 10.17.9: "HFX receivers do not
support hf_sequence, 64-bit sequence numbers, the lbm_hf_src_send_rcv_reset() function, or HF
wildcard receivers"): the numbers are 32-bit (serial arithmetic, they wrap at 2**32); no reset;
and no *intentional gaps* (seed 10.17.6): an HF number no source sent is a gap like any other,
waited for ``delivery_control_max_delay`` and then reported lost, or burst loss when wider than
the burst limit [inferred: the hfx options describe an HFX that declares missing HF numbers
lost, and intentional gaps are an HF receiver feature the HFX section never grants].  No loss
is reported before the first delivered number (leading loss), as for every UM delivery
controller.

Output: :meth:`HfxCore.take_events` hands out, in delivery order, the items given to
:meth:`HfxCore.receive_message` (whatever the adapter passes: a message and its leg) and
:class:`HfxLoss` events.  Items held in the order map are kept by the core until delivered or
discarded by a burst.  Time is a parameter; :meth:`next_timer` / :meth:`handle_timer` drive the
periodic loss check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from umcore.events import CoreEvent
from umcore.transport.delivery import LOSS_BURST, LbtDeliveryController

__all__ = ["HfxCore", "HfxLoss", "HfxSettings"]

_M = 0xFFFFFFFF
# The HF numbers must fit the 32 bits of an HF_32 element (the only kind an HFX takes).
MAX_HF_SQN = _M


@dataclass(frozen=True, slots=True)
class HfxLoss(CoreEvent):
    """HF sequence numbers ``sqn`` .. ``sqn + count - 1`` declared lost: ``burst`` False is one
    LBM_MSG_UNRECOVERABLE_LOSS (``count`` 1), True one LBM_MSG_UNRECOVERABLE_LOSS_BURST."""

    sqn: int
    count: int
    burst: bool


@dataclass(frozen=True, slots=True)
class HfxSettings:
    """The hfx-scope options the core runs with (built from the registry: :meth:`from_options`)."""

    ordered: bool = True
    max_delay: float = 10.0
    loss_check_interval: float = 0.0
    max_burst_loss: int = 512
    max_map_entries: int = 200_000
    duplicate_delivery: bool = False

    @classmethod
    def from_options(cls, options: Any) -> HfxSettings:
        """From an hfx-scope :class:`~umcore.engine.options.Options`-like object (``get`` and
        ``seconds``)."""
        return cls(
            ordered=int(options.get("ordered_delivery")) == 1,
            max_delay=options.seconds("delivery_control_max_delay"),
            loss_check_interval=options.seconds("delivery_control_loss_check_interval"),
            max_burst_loss=int(options.get("delivery_control_maximum_burst_loss")),
            max_map_entries=int(options.get("delivery_control_maximum_total_map_entries")),
            duplicate_delivery=bool(options.get("duplicate_delivery")),
        )


class HfxCore:
    """The HFX object's delivery controller over HF sequence numbers (module docstring)."""

    __slots__ = (
        "_cur",
        "_cur_sqn",
        "_held",
        "_next_check",
        "_out",
        "dc",
        "duplicates",
        "settings",
    )

    def __init__(self, settings: HfxSettings, topic: str = "") -> None:
        self.settings = settings
        self.dc = LbtDeliveryController(
            0,
            topic,
            self._deliver,
            self._loss,
            max_burst_loss=settings.max_burst_loss,
            loss_timeout=settings.max_delay,
            ordered=settings.ordered,
            max_map_entries=settings.max_map_entries,
        )
        #: Items waiting in the order map, by HF sequence number.
        self._held: dict[int, Any] = {}
        self._out: list[Any] = []
        self._cur: Any = None
        self._cur_sqn = -1
        self._next_check: float | None = None
        #: Copies reported as duplicates (already delivered, held, or declared lost).
        self.duplicates = 0

    # ------------------------------------------------------------------ input
    def receive_message(self, sqn: int, item: Any, now: float) -> bool:
        """A message with 32-bit HF sequence number ``sqn`` arrived through some leg.  True:
        the core took it (delivered now, or held); False: a duplicate (the caller may
        deliver it flagged, or drop it)."""
        if not 0 <= sqn <= MAX_HF_SQN:
            raise ValueError(f"HF sequence number {sqn} is not 32-bit")
        dc = self.dc
        before = dc.duplicates
        self._cur = item
        self._cur_sqn = sqn
        # The controller raises only for fragments, which it is never given here.
        dc.on_message(sqn, b"", None, now)
        pending = self._cur
        if pending is None:  # delivered at once (the usual case)
            if dc.missing or self._next_check is not None:
                self._arm(now)
            return True
        self._cur = None
        if dc.duplicates != before:
            self.duplicates += 1
            return False
        held = self._held
        held[sqn] = pending  # not delivered: waiting in the order map
        if len(held) != len(dc.order_map):  # a burst cleared the order map
            for s in [s for s in held if s not in dc.order_map]:
                del held[s]
        self._arm(now)
        return True

    def next_timer(self) -> float | None:
        """When :meth:`handle_timer` should run next (periodic loss check), or None."""
        return self._next_check

    def handle_timer(self, now: float) -> None:
        """The periodic loss check (``delivery_control_loss_check_interval``)."""
        self._next_check = None
        self.dc.check(now)
        self._arm(now)

    def take_events(self) -> list[Any]:
        """What to deliver, in order: the items given to :meth:`receive_message` and
        :class:`HfxLoss` events."""
        out = self._out
        if not out:
            return out
        self._out = []
        return out

    # ------------------------------------------------------------------ state
    @property
    def held(self) -> int:
        """Messages waiting in the order map for a gap to fill."""
        return len(self._held)

    @property
    def missing(self) -> int:
        """HF sequence numbers currently waited for."""
        return len(self.dc.missing)

    @property
    def delivered(self) -> int:
        return self.dc.delivered

    @property
    def lost(self) -> int:
        """Loss events reported (one per number, one per burst)."""
        return self.dc.unrecoverable

    # ------------------------------------------------------------------ internals
    def _arm(self, now: float) -> None:
        interval = self.settings.loss_check_interval
        if interval <= 0 or not self.dc.missing:
            self._next_check = None
        elif self._next_check is None:
            self._next_check = now + interval

    def _deliver(self, sqn: int, _payload: bytes) -> None:
        if sqn == self._cur_sqn and self._cur is not None:
            item = self._cur
            self._cur = None
        else:
            item = self._held.pop(sqn)
        self._out.append(item)

    def _loss(self, kind: str, sqn: int, count: int) -> None:
        burst = kind == LOSS_BURST
        if burst:
            self._held.clear()  # the order map was cleared: what it held is discarded
        self._out.append(HfxLoss(sqn, count, burst))
