"""A deterministic in-memory network for the sans-IO LBT-RU / LBT-RM cores (explicit ``now``).

Datagrams travel with a random latency (so retransmissions and late datagrams reorder) and may
be dropped by a predicate; time jumps from one deadline to the next, so a 20-second scenario
costs only the work it contains.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from typing import Any

from umcore.transport.lbt import LbtReceiver, LbtSource
from umcore.transport.lbtru import LbtruReceiver, LbtruSource

Drop = Callable[[str, bytes, float], bool]  # (direction "down"/"up", datagram, now) -> drop?


class Sink:
    def __init__(self) -> None:
        self.data: list[tuple[int, bytes, float]] = []
        self.loss: list[tuple[str, int, int, float]] = []
        self.now = 0.0

    def deliver(self, sqn: int, payload: bytes) -> None:
        self.data.append((sqn, bytes(payload), self.now))

    def lose(self, kind: str, sqn: int, count: int) -> None:
        self.loss.append((kind, sqn, count, self.now))


class Net:
    """One source core, several receiver cores, a lossy, reordering network between them."""

    def __init__(
        self,
        source: LbtSource,
        receivers: list[LbtReceiver],
        *,
        drop: Drop | None = None,
        seed: int = 1,
        max_latency: float = 0.002,
        fifo: bool = False,
    ) -> None:
        self.source = source
        self.receivers = receivers
        self.drop = drop or (lambda d, b, t: False)
        self.rng = random.Random(seed)
        self.max_latency = max_latency
        # fifo: each (sender, target) path keeps its order (a real link); else datagrams
        # sent together may overtake each other (random latency each).
        self.fifo = fifo
        self._last_arrival: dict[tuple[int, int], float] = {}
        self.now = 0.0
        self._heap: list[tuple[float, int, Any, bytes, Any]] = []
        self._n = 0
        self.sinks: list[Sink] = []
        self.addr = {id(r): (f"10.0.0.{i + 2}", 14360 + i) for i, r in enumerate(receivers)}
        self.by_addr = {self.addr[id(r)]: r for r in receivers}
        self.sent_down = 0
        self.sent_up = 0
        self.dropped = 0

    def subscribe(self, tidx: int, topic: str = "t", **kw: Any) -> list[Sink]:
        sinks = []
        for r in self.receivers:
            s = Sink()
            r.subscribe(r.new_dc(tidx, topic, s.deliver, s.lose, **kw))
            sinks.append(s)
        self.sinks.extend(sinks)
        return sinks

    # ------------------------------------------------------------------ plumbing
    def _push(self, target: Any, data: bytes, frm: Any, direction: str) -> None:
        if self.drop(direction, data, self.now):
            self.dropped += 1
            return
        self._n += 1
        t = self.now + self.rng.random() * self.max_latency
        if self.fifo:
            path = (id(frm), id(target))
            t = max(t, self._last_arrival.get(path, 0.0))
            self._last_arrival[path] = t
        heapq.heappush(self._heap, (t, self._n, target, data, frm))

    def pump(self) -> None:
        """Move every core's output into the network."""
        src = self.source
        ru = isinstance(src, LbtruSource)
        for d in src.ready:
            targets = (
                [self.by_addr[a] for a in src.clients if a in self.by_addr]
                if ru
                else self.receivers
            )
            for r in targets:
                self.sent_down += 1
                self._push(r, d, None, "down")
        for d, addr in src.outbox:
            if ru and addr is not None:
                targets = [self.by_addr[addr]] if addr in self.by_addr else []
            elif ru:
                targets = [self.by_addr[a] for a in src.clients if a in self.by_addr]
            else:
                targets = self.receivers
            for r in targets:
                self.sent_down += 1
                self._push(r, d, None, "down")
        src.ready.clear()
        src.outbox.clear()
        if isinstance(src, LbtruSource):
            src.events.clear()
        for r in self.receivers:
            for d in r.outbox:
                self.sent_up += 1
                self._push(src, d, self.addr[id(r)], "up")
            r.outbox.clear()

    def _set_now(self, now: float) -> None:
        self.now = now
        for s in self.sinks:
            s.now = now

    def step_until(
        self, t_end: float, sends: list[tuple[float, Callable[[float], None]]] = ()
    ) -> None:  # type: ignore[assignment]
        """Advance to ``t_end``, running ``sends`` (time, action) on the way."""
        sends = sorted(sends, key=lambda x: x[0])
        i = 0
        while True:
            cands = [t_end]
            if i < len(sends):
                cands.append(sends[i][0])
            if self._heap:
                cands.append(self._heap[0][0])
            for core in (self.source, *self.receivers):
                t = core.next_timer()
                if t is not None:
                    cands.append(t)
            t = max(min(cands), self.now)
            if t >= t_end and not (i < len(sends) and sends[i][0] <= t_end):
                self._set_now(t_end)
                self._timers(t_end)
                return
            self._set_now(t)
            while i < len(sends) and sends[i][0] <= t:
                sends[i][1](t)
                i += 1
                self.pump()
            while self._heap and self._heap[0][0] <= t:
                _, _, target, data, frm = heapq.heappop(self._heap)
                if target is self.source:
                    self.source.receive_datagram(data, frm, t)  # type: ignore[attr-defined]
                else:
                    target.receive_datagram(data, t)
                self.pump()
            self._timers(t)

    def _timers(self, t: float) -> None:
        for core in (self.source, *self.receivers):
            nt = core.next_timer()
            if nt is not None and nt <= t:
                core.handle_timer(t)
        self.pump()


def connect_ru(net: Net) -> None:
    """LBT-RU: receivers send CREQs; run until every one is connected."""
    for r in net.receivers:
        assert isinstance(r, LbtruReceiver)
        r.connect(net.now)
    net.pump()
    net.step_until(net.now + 0.05)
