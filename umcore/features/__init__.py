"""UM features above the transports (seed 003 chapter 10), as sans-IO cores.

- :mod:`~umcore.features.retention` — the source's retention buffer (by size and by age).
- :mod:`~umcore.features.latejoin` — late join: the source serving LJI requests and
  retransmission requests from its retention buffer, the receiver's LJI request schedule.
- :mod:`~umcore.features.otr` — off-transport recovery timers (initial delay, doubling interval,
  give-up).
- :mod:`~umcore.features.recovery` — the receiver's per-topic-source recovery core that both
  late join and OTR feed: ordered delivery across holes, retransmission requests, caching limits.
- :mod:`~umcore.features.request` — request/response: request indexes, response framing,
  deletion of requests.
- :mod:`~umcore.features.immediate` — UIM framing and the outgoing-connection table with its
  deletion timers; MIM framing over LBT-RM datagrams.
- :mod:`~umcore.features.properties` — message properties and application headers over the LBMC
  codecs.

None of these modules import asyncio, socket or time: ``now`` comes in, bytes and events go out,
the next deadline is ``next_timer()``.  :mod:`umcore.aio.request_port` and
:mod:`umcore.api.context` are the adapters.
"""
