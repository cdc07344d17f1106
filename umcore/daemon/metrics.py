"""The ``--metrics HOST:PORT`` Prometheus endpoint every pyum daemon offers (off by default).

Theory of operation
-------------------
UM's daemons have no Prometheus endpoint; this is ours.  Each daemon owns one
:class:`prometheus_client.CollectorRegistry` (never the process-global one, so two daemons or a
test suite in one process do not collide) holding a :class:`CallbackCollector`: the daemon's hot
path keeps plain integer counters and nothing Prometheus-specific; the collector reads them when
scraped.  :class:`MetricsServer` serves ``GET /metrics`` from aiohttp inside the daemon's own event
loop, so a scrape reads the counters between two datagrams, never concurrently with them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from umcore.daemon.web import serve_app

__all__ = ["CallbackCollector", "MetricSpec", "MetricsServer", "new_registry"]

log = logging.getLogger("umcore.daemon.metrics")

Kind = Literal["counter", "gauge"]


class MetricSpec:
    """One metric: ``name`` (counters without the ``_total`` suffix, Prometheus adds it)."""

    __slots__ = ("getter", "help", "kind", "name")

    def __init__(self, name: str, kind: Kind, help: str, getter: Callable[[], float]) -> None:
        self.name = name
        self.kind = kind
        self.help = help
        self.getter = getter


class CallbackCollector(Collector):
    """Reads each metric's value from its getter at scrape time."""

    def __init__(self, specs: Iterable[MetricSpec]) -> None:
        self.specs = list(specs)

    def collect(self) -> Iterator[Metric]:
        for spec in self.specs:
            value = float(spec.getter())
            if spec.kind == "counter":
                yield CounterMetricFamily(spec.name, spec.help, value=value)
            else:
                yield GaugeMetricFamily(spec.name, spec.help, value=value)


def new_registry(specs: Iterable[MetricSpec]) -> CollectorRegistry:
    """A fresh registry (not the global one) holding a CallbackCollector of ``specs``."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(CallbackCollector(specs))
    return registry


class MetricsServer:
    """HTTP ``GET /metrics`` for one registry, on the running loop (aiohttp)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.address: tuple[str, int] | None = None
        self._runner: Any = None  # the aiohttp runner (serve_app) while serving

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on host:port (0 = ephemeral); returns the bound address."""
        from aiohttp import web  # imported only when --metrics is used: it costs start-up time

        async def metrics(request: web.Request) -> web.Response:
            body = generate_latest(self.registry)
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        self._runner, self.address = await serve_app(app, host, port)
        return self.address

    async def close(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
