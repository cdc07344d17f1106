"""Off-transport recovery (OTR, seed 10.3): the receiver's request timing.

Theory of operation
-------------------
When a delivery controller finds a gap the transport could not repair, an OTR-enabled receiver
(``use_otr`` 1; 2 = only persistent receivers, i.e. off for a streaming receiver) waits
``otr_request_initial_delay`` (2 s), then sends retransmission requests (UME_RXREQ, like late
join [inferred: the seed only says OTR works "like late join"]) to the source's request port.
The interval between requests for a still-missing message starts at
``otr_request_minimum_interval`` (1 s) and doubles up to ``otr_request_maximum_interval`` (10 s);
after ``otr_request_message_timeout`` (60 s) from detection the message is declared
unrecoverable.  At most ``otr_request_outstanding_maximum`` (200) messages are requested at once.
While recovering, live messages behind the gap are cached up to ``otr_message_caching_threshold``
(10000); beyond it new live messages are dropped and requested later.  A gap wider than
``delivery_control_maximum_burst_loss`` is not recovered (burst loss wins, trap 18).  The source
answers from the same retention buffer as late join; recovered messages carry the OTR flag
(0x2000), late-join ones RETRANSMIT (0x8).

This module holds the configuration and the interval rule; the per-message state machine is
:class:`umcore.features.recovery.TopicRecovery`.
"""

from __future__ import annotations

from umcore.config.options import OptionReader

__all__ = ["OtrConfig", "next_interval", "otr_enabled"]


class OtrConfig:
    """OTR receiver options, times in seconds (UM's are milliseconds)."""

    __slots__ = (
        "caching_threshold",
        "initial_delay",
        "maximum_interval",
        "message_timeout",
        "minimum_interval",
        "outstanding_maximum",
    )

    def __init__(
        self,
        *,
        initial_delay: float = 2.0,
        minimum_interval: float = 1.0,
        maximum_interval: float = 10.0,
        message_timeout: float = 60.0,
        outstanding_maximum: int = 200,
        caching_threshold: int = 10000,
    ) -> None:
        self.initial_delay = initial_delay
        self.minimum_interval = minimum_interval
        self.maximum_interval = max(maximum_interval, minimum_interval)
        self.message_timeout = message_timeout
        # 0 means "unlimited" in UM; we keep a bound anyway (see recovery.MAX_HOLES).
        self.outstanding_maximum = outstanding_maximum
        self.caching_threshold = caching_threshold

    @classmethod
    def from_options(cls, o: OptionReader) -> OtrConfig:
        """From a receiver's options (the registry's defaults and units)."""
        return cls(
            initial_delay=o.seconds("otr_request_initial_delay"),
            minimum_interval=o.seconds("otr_request_minimum_interval"),
            maximum_interval=o.seconds("otr_request_maximum_interval"),
            message_timeout=o.seconds("otr_request_message_timeout"),
            outstanding_maximum=int(o.get("otr_request_outstanding_maximum")),
            caching_threshold=int(o.get("otr_message_caching_threshold")),
        )


def next_interval(current: float, cfg: OtrConfig) -> float:
    """The interval after ``current``: doubled, capped at the maximum."""
    return min(current * 2, cfg.maximum_interval)


def otr_enabled(use_otr: int, persistent: bool = False) -> bool:
    """``use_otr``: 0 off, 1 on, 2 on only for persistent receivers."""
    return use_otr == 1 or (use_otr == 2 and persistent)
