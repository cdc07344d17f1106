"""A Store instance with known sources and receivers (driven through StoreCore with the wire
compositions, as tests/store does) and its web monitor on an ephemeral loopback port.

The Store holds: topic ``orders`` (a disk repository) with two sources, the first with Session
ID 4242 and 20 messages stored, two receivers of it that ACKed 9 and 14; topic ``prices`` (a
memory repository) with one source; a topic whose name needs escaping (``a<b>&"c"``) with one
source.  A receiver asked for a retransmission, so the rate figures are not all zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from daemons.umestored.webmon import MonitoredStore, StoreWebMonitor
from tests.store.corekit import Receiver, Rig, Source, make_rig, topic_config

NASTY = 'a<b>&"c"'


@dataclass
class Held:
    """What the Store should show."""

    rig: Rig
    sources: list[Source] = field(default_factory=list)
    receivers: list[Receiver] = field(default_factory=list)


class Clock:
    """A fake monotonic clock the tests move."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def build_store(tmp: Path) -> Held:
    rig = make_rig(
        tmp,
        [
            topic_config("orders", repository_type="disk"),
            topic_config("prices", repository_type="memory"),
            topic_config(NASTY, repository_type="memory"),
        ],
    )
    held = Held(rig)
    s1 = Source(rig, "orders", session_id=4242, transport_idx=11, topic_idx=3)
    s2 = Source(rig, "orders", ip="10.0.0.5", port=14501, transport_idx=12, ctxinst=b"SRCCTX02")
    s3 = Source(rig, "prices", ip="10.0.0.6", port=14502, transport_idx=13, ctxinst=b"SRCCTX03")
    s4 = Source(rig, NASTY, ip="10.0.0.7", port=14503, transport_idx=14, ctxinst=b"SRCCTX04")
    for s in (s1, s2, s3, s4):
        resp = s.register()
        assert resp is not None and resp.error is None
        held.sources.append(s)
    s1.send(*range(20))
    s3.send(*range(5))
    r1 = Receiver(rig, s1, session_id=777)
    r2 = Receiver(rig, s1, ip="10.0.0.3", port=14393)
    for r in (r1, r2):
        resp = r.register()
        assert resp is not None and resp.error is None
        held.receivers.append(r)
    r1.ack(9)
    r2.ack(14)
    r1.request(3)
    rig.pump()
    return held


def monitor(
    held: Held, clock: Clock, *, name: str = "store1", **options: object
) -> StoreWebMonitor:
    rig = held.rig

    def sessions(topic: str) -> list[str]:
        return [s.session.source_string for s in held.sources if s.topic == topic]

    ms = MonitoredStore(name, rig.core.instance, lambda: rig.core, sessions)
    return StoreWebMonitor([ms], monotonic=clock, **options)  # type: ignore[arg-type]
