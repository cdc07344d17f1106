"""Expose statistics objects to Prometheus, with names that follow its conventions and bounded series.

Theory of operation
-------------------
pyum keeps its statistics in the shapes of UM's protobuf messages (``SRSMonMsg.Stats.SRS``, one
``UMClient`` per connected client, ...).  :class:`StatsCollector` is a prometheus-client collector
that, at each scrape, calls a ``read`` function returning ``(message, labels)`` pairs and turns
every numeric field of the message into a sample:

- **names**: ``<namespace>_<subsystem>_<field>``, snake_case, only ``[a-zA-Z0-9_:]``; counters
  end in ``_total`` and other metrics never do, nor in ``_count``/``_sum``/``_bucket`` (those are
  reserved for histograms and summaries), so ``active_clients_count`` becomes
  ``pyum_srs_active_clients`` and ``clients_connects_count`` ``pyum_srs_clients_connects_total``.
  :func:`metric_name` does this; ``promtool check metrics`` passes on the output (tested).
- **kinds**: a field is a gauge when its name says it is a level (``active``, ``inactive``,
  ``next``, ``max``, ``min``, ``mean``, ``depth``, ``enqueued``, ...; see :data:`GAUGE_PHRASES`)
  or when listed in ``gauges``; every other field is a counter (UM's counters are cumulative since
  start).
- **units**: ``*_usec``/``*_us``, ``*_msec``/``*_ms`` and ``*_sec`` fields are converted to
  seconds (Prometheus' base unit) and renamed; durations whose unit is only known from the
  documentation can be given in ``scales``.
- **"no sample yet"**: UM starts minimum statistics at the largest unsigned long (B2); a ``*_min``
  field holding 2^64-1 or 2^32-1 is left out rather than exported as a huge number.
- **bounded series** (issue 7): per-client and per-topic label sets could grow with the number of
  clients.  Each collector admits at most ``max_series`` label sets per metric (default
  :data:`DEFAULT_MAX_SERIES`).  Label sets are admitted first come, first served and keep their
  place while they exist (no churn between scrapes); once the cap is reached the remaining label
  sets are summed into one series whose label values are all :data:`OVERFLOW_LABEL`, so totals
  stay right.  ``<namespace>_<subsystem>_series_overflow`` reports how many label sets were folded
  at the last scrape.

Daemons (``umcore.daemon``'s ``--metrics HOST:PORT``) pass their own ``CollectorRegistry`` to
:func:`register` or call ``registry.register(StatsCollector(...))``; nothing here touches the
global default registry.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

DEFAULT_MAX_SERIES = 100
"""Most label sets exported per metric of one collector.  Each series costs the Prometheus server
memory and every scrape bandwidth; 100 clients' worth keeps an SRS's exposition around 100 KB
(about 40 metrics per client) while still showing every client of a typical deployment
individually.  Larger fleets are summed into the overflow series."""

OVERFLOW_LABEL = "_other"
"""Label value of the series that sums the label sets beyond the cap."""

GAUGE_PHRASES: tuple[str, ...] = (
    "active",
    "inactive",
    "next",
    "max",
    "min",
    "mean",
    "depth",
    "enqueued",
    "buffered",
    "num_clients",
    "limit",
    "txw_msgs",
    "txw_bytes",
    "topics",
    "patterns",
    "proxy_receivers",
    "proxy_sources",
    "cost",
    "version",
    "signature",
    "duration",
    "last",
    "timestamp",
    "gateway_count",
    "trd_count",
    "domain_id",
    "idx",
)
"""``_``-delimited phrases that make a field a gauge (a level) rather than a counter."""

_UINT_NO_SAMPLE = (2**64 - 1, 2**32 - 1)
_UNIT_SUFFIXES: tuple[tuple[str, float], ...] = (
    ("_usec", 1e-6),
    ("_us", 1e-6),
    ("_msec", 1e-3),
    ("_ms", 1e-3),
    ("_sec", 1.0),
)
_NUMERIC_TYPES = frozenset(
    {
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_UINT32,
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_FIXED32,
        FieldDescriptor.TYPE_DOUBLE,
        FieldDescriptor.TYPE_FLOAT,
    }
)
_BAD_CHARS = re.compile(r"[^a-zA-Z0-9_:]")
_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")
_RESERVED_SUFFIXES = ("_total", "_count", "_sum", "_bucket")


def metric_name(*parts: str, counter: bool = False) -> str:
    """A Prometheus-conventional name from ``parts``: snake_case, legal characters only,
    ``_total`` on counters and no reserved suffix on anything else."""
    raw = "_".join(p for p in parts if p)
    name = _BAD_CHARS.sub("_", _CAMEL.sub(r"_\1", raw)).lower()
    name = re.sub(r"_+", "_", name).strip("_") or "unnamed"
    if name[0].isdigit():
        name = "_" + name
    stripped = True
    while stripped:
        stripped = False
        for suffix in _RESERVED_SUFFIXES:
            if name.endswith(suffix) and len(name) > len(suffix):
                name = name[: -len(suffix)]
                stripped = True
    return name + "_total" if counter else name


def is_gauge(field: str, gauges: Collection[str] = ()) -> bool:
    """True when ``field`` reads as a level rather than a cumulative count."""
    if field in gauges:
        return True
    padded = f"_{field}_"
    return any(f"_{phrase}_" in padded for phrase in GAUGE_PHRASES)


class FieldSpec:
    """How one metric is computed: the sum of ``parts`` (field, scale), e.g. a ``*_sec`` field
    plus its ``*_usec`` companion, both exported as one ``*_seconds`` metric."""

    __slots__ = ("help", "kind", "name", "parts", "skip_no_sample")

    def __init__(
        self,
        name: str,
        kind: str,
        help: str,
        parts: list[tuple[str, float]],
        skip_no_sample: bool,
    ) -> None:
        self.name = name
        self.kind = kind
        self.help = help
        self.parts = parts
        self.skip_no_sample = skip_no_sample

    def __repr__(self) -> str:
        return f"FieldSpec({self.name} {self.kind} <- {self.parts})"

    def value(self, message: Any) -> float | None:
        """This metric's value in ``message`` (None: no sample yet)."""
        total = 0.0
        for field, scale in self.parts:
            raw = getattr(message, field)
            if self.skip_no_sample and raw in _UINT_NO_SAMPLE:
                return None
            total += raw * scale
        return total


def field_specs(
    descriptor: Descriptor,
    namespace: str,
    subsystem: str,
    *,
    gauges: Collection[str] = (),
    exclude: Collection[str] = (),
    scales: Mapping[str, float] | None = None,
    help: Mapping[str, str] | None = None,
) -> list[FieldSpec]:
    """Export specs for every singular numeric field of ``descriptor`` (messages, strings,
    enums and repeated fields are skipped); fields that map to one name are summed."""
    by_name: dict[str, FieldSpec] = {}
    for fd in descriptor.fields:
        if fd.name in exclude or fd.type not in _NUMERIC_TYPES:
            continue
        if _repeated(fd):
            continue
        base = fd.name
        scale = 1.0
        if scales and fd.name in scales:
            scale = scales[fd.name]
            base = f"{base}_seconds"
        else:
            for suffix, factor in _UNIT_SUFFIXES:
                if base.endswith(suffix):
                    base = base[: -len(suffix)] + "_seconds"
                    scale = factor
                    break
        gauge = is_gauge(fd.name, gauges)
        name = metric_name(namespace, subsystem, base, counter=not gauge)
        spec = by_name.get(name)
        if spec is not None:
            spec.parts.append((fd.name, scale))
            continue
        text = (help or {}).get(fd.name) or f"UM statistic {fd.full_name}"
        by_name[name] = FieldSpec(
            name,
            "gauge" if gauge else "counter",
            text,
            [(fd.name, scale)],
            "min" in fd.name.split("_"),
        )
    return list(by_name.values())


def _repeated(fd: FieldDescriptor) -> bool:
    # protobuf >= 5 spells it ``is_repeated``; older releases only have ``label``.
    flag = getattr(fd, "is_repeated", None)
    if flag is None:
        flag = getattr(fd, "label", 1) == 3  # LABEL_REPEATED
    return bool(flag)


Reader = Callable[[], Iterable[tuple[Any, Mapping[str, str]]]]


class StatsCollector:
    """A prometheus-client collector over protobuf statistics messages (see module docstring).

    ``read`` returns ``(message, labels)`` pairs at each scrape; every message must be of
    ``descriptor``'s type and every ``labels`` mapping must have exactly ``labelnames``.
    """

    def __init__(
        self,
        namespace: str,
        subsystem: str,
        descriptor: Descriptor,
        read: Reader,
        *,
        labelnames: tuple[str, ...] = (),
        max_series: int = DEFAULT_MAX_SERIES,
        gauges: Collection[str] = (),
        exclude: Collection[str] = (),
        scales: Mapping[str, float] | None = None,
        help: Mapping[str, str] | None = None,
    ) -> None:
        if max_series < 1:
            raise ValueError("max_series must be at least 1")
        self.read = read
        self.labelnames = labelnames
        self.max_series = max_series
        self.specs = field_specs(
            descriptor,
            namespace,
            subsystem,
            gauges=gauges,
            exclude=exclude,
            scales=scales,
            help=help,
        )
        self.overflow_name = metric_name(namespace, subsystem, "series_overflow")
        self._admitted: dict[tuple[str, ...], None] = {}
        self.last_overflow = 0

    def describe(self) -> Iterator[Metric]:
        """Metric names without reading statistics (lets registration check for clashes)."""
        for spec in self.specs:
            yield _family(spec, self.labelnames)
        if self.labelnames:
            yield GaugeMetricFamily(self.overflow_name, "label sets folded into the overflow")

    def _place(self, key: tuple[str, ...]) -> tuple[str, ...]:
        if key in self._admitted:
            return key
        # One of the max_series slots is kept for the overflow series itself.
        if len(self._admitted) < self.max_series - 1:
            self._admitted[key] = None
            return key
        return tuple(OVERFLOW_LABEL for _ in self.labelnames)

    def collect(self) -> Iterator[Metric]:
        """One scrape: read the statistics and yield the metric families."""
        rows = [
            (message, tuple(str(labels[n]) for n in self.labelnames))
            for message, labels in self.read()
        ]
        # Label sets that vanished (clients gone) give their slot back before placing new ones.
        seen = {key for _, key in rows}
        for gone in [k for k in self._admitted if k not in seen]:
            del self._admitted[gone]
        folded: set[tuple[str, ...]] = set()
        values: dict[tuple[str, ...], list[float | None]] = {}
        for message, key in rows:
            place = self._place(key) if self.labelnames else key
            if place != key:
                folded.add(key)
            slot = values.setdefault(place, [None] * len(self.specs))
            for i, spec in enumerate(self.specs):
                value = spec.value(message)
                if value is None:
                    continue
                prev = slot[i]
                slot[i] = value if prev is None else prev + value
        self.last_overflow = len(folded)
        for i, spec in enumerate(self.specs):
            family = _family(spec, self.labelnames)
            for key, slot in values.items():
                value = slot[i]
                if value is not None:
                    family.add_metric(list(key), value)
            yield family
        if self.labelnames:
            yield GaugeMetricFamily(
                self.overflow_name,
                f"label sets beyond the cap of {self.max_series} summed into {OVERFLOW_LABEL!r}",
                value=len(folded),
            )


def _family(
    spec: FieldSpec, labelnames: tuple[str, ...]
) -> CounterMetricFamily | GaugeMetricFamily:
    if spec.kind == "counter":
        # prometheus-client appends "_total" itself to counter families.
        return CounterMetricFamily(spec.name[: -len("_total")], spec.help, labels=labelnames)
    return GaugeMetricFamily(spec.name, spec.help, labels=labelnames)


def register(registry: CollectorRegistry, *collectors: StatsCollector) -> None:
    """Register ``collectors`` with a daemon's own registry."""
    for collector in collectors:
        registry.register(collector)
