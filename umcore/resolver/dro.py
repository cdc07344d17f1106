"""What a context's topic resolution does for the DROs of its TRD (sans-IO).

Theory of operation
-------------------
A DRO (tnwgd) endpoint portal is a pair of ordinary UM contexts in the TRD, so most of what an
application does for it is plain topic resolution.  Four things are DRO-specific (seed 003 7.3,
8.1; notes dro-monitoring-config A2, A4, A5, A7) and live here, owned by the context's
:class:`~umcore.resolver.core.TopicResolver`:

* **Use queries and topic resolution requests.**  A portal keeps its interest list alive with
  Topic Use Queries and Pattern Use Queries (LBMR type 4, TMRs of type TOPIC_USE without the
  RESPONSE flag; patterns carry WILDCARD_PCRE / WILDCARD_REGEX) and, after it starts, with Topic
  Resolution Requests (LBMR ext 0x04).  A context answers a use query for a topic it has a
  receiver for (or a pattern it has a wildcard receiver for) with a Use Query Response: the same
  TMR with RESPONSE set (notes A5, "by interpretation").  A request with QUERY makes every
  receiver topic answer that way, WILDCARD_QUERY every wildcard pattern, ADVERTISEMENT restarts
  the sources' sustaining phase (so TIRs go out); GW_REMOTE_INTEREST is for DROs and ignored.
  :class:`UseAnswers` queues the answers (one per topic/pattern however often it is asked) and
  paces them through a :class:`TrLimiter` each: topic answers under
  ``resolver_sustain_query_bps`` / ``resolver_sustain_queries_per_second``, pattern answers
  under ``resolver_wildcard_query_bps`` / ``resolver_wildcard_queries_per_second`` [inferred:
  UM documents no limit of their own for use-query responses; they are receiver-side TR traffic,
  which those options bound].
* **The domain id and the domain routes** (:class:`DomainTable`).  A DRO portal's datagrams carry
  the packet options SRC_TYPE (tnwgd) and LOCAL_DOMAIN (its domain id); the context learns its
  TRD id from them (``resolver_domain_id_active_propagation_timeout`` 0, the default: only
  directly from a DRO; -1: from any context's LOCAL_DOMAIN option; N > 0: also from contexts
  that heard a DRO within N seconds -- such a context puts LOCAL_DOMAIN in its own datagrams
  only while its last DRO datagram is at most N seconds old, which is what
  :meth:`DomainTable.propagate` answers).  Remote domain route records (LBMR ext 0x06) name the
  domains reachable through the portal at ``ip:port``; a route not heard again for
  :data:`ROUTE_LIFETIME` is forgotten.  The SRS relays the same facts as DIR / RTIR / RTER
  records (TCP-based TR), which feed the same table (those routes hold until their RTER).
* **Final advertisements** (:func:`is_final_advertisement`).  A deleted proxy source sends a
  burst of final advertisements so receivers see EOS at once.  [inferred] Which TIR marks that
  is not documented; pyum's is the proxy's TIR whose COST option carries cost
  :data:`FINAL_COST` (-1), the same convention as the SRS's SER (a SIR with cost -1 is a
  source end).
* **Proxy sources** (:func:`is_proxy_source`).  ``transport_*_dro_loss_recovery_timeout`` apply
  only to sessions a DRO proxy source publishes.  [inferred] A receiver knows one by its TIR:
  a COST option with a hop count of 1 or more (a DRO crossed; the proxy's TIR also carries the
  OTID and DOMAIN_ID options), or a datagram whose SRC_TYPE packet option is tnwgd.

Nothing here reads a clock: every input takes ``now`` (seconds).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from umcore.config.options import OptionReader
from umcore.wire import lbmr, lbmr_options
from umcore.wire.lbmr_ext import (
    TMR_FLAG_RESPONSE,
    TMR_FLAG_WILDCARD_PCRE,
    TMR_FLAG_WILDCARD_REGEX,
    TMR_TOPIC_USE,
)

__all__ = [
    "FINAL_COST",
    "ROUTE_LIFETIME",
    "DomainRoute",
    "DomainTable",
    "TrLimiter",
    "UseAnswers",
    "is_final_advertisement",
    "is_proxy_source",
    "packet_domain",
]

# [inferred] The COST option's cost in a final advertisement (the SRS's SER convention).
FINAL_COST = -1
# A route learned from a remote domain route record is forgotten when not heard again for this
# long.  DRO endpoints repeat their routes every <domain-route max-interval> (1 s by default,
# notes A4); 30 s rides out a DRO restarted within a transport's activity timeout without
# keeping a dead DRO's route for long.  [inferred: UM documents no client-side lifetime]
ROUTE_LIFETIME = 30.0
# Domain routes one context keeps (a route per remote domain): beyond this new domains are
# refused and counted (a hostile TRD cannot grow the table without bound).
MAX_ROUTES = 4096
# A token bucket holds at most one second of its rate (the options are per second).
BURST_SECONDS = 1.0
# Bytes of one TMR besides its topic: len u16, type u8, flags u8, the topic's NUL.
TMR_OVERHEAD = 5
_WILDCARD = TMR_FLAG_WILDCARD_PCRE | TMR_FLAG_WILDCARD_REGEX


def is_final_advertisement(options: Iterable[Any]) -> bool:
    """Is a TIR with these topic options a final advertisement (see the module docstring)?"""
    for opt in options:
        if type(opt) is lbmr_options.CostOption:
            return bool(opt.cost == FINAL_COST)
    return False


def is_proxy_source(options: Iterable[Any], *, from_dro: bool = False) -> bool:
    """Is the source of a TIR with these topic options a DRO proxy source (module docstring)?
    ``from_dro``: the datagram's SRC_TYPE packet option named a DRO."""
    if from_dro:
        return True
    for opt in options:
        if type(opt) is lbmr_options.CostOption:
            return bool(opt.hop_count >= 1)
    return False


def packet_domain(options: Iterable[Any]) -> tuple[bool, int | None]:
    """(sent by a DRO, LOCAL_DOMAIN id or None) from a datagram's packet options."""
    from_dro = False
    domain: int | None = None
    for opt in options:
        t = type(opt)
        if t is lbmr_options.SrcTypeOption:
            from_dro = opt.src_type == lbmr_options.SRC_TYPE_TNWGD
        elif t is lbmr_options.LocalDomainOption:
            domain = opt.local_domain_id
    return from_dro, domain


# ------------------------------------------------------------------------------ rate limits
class TrLimiter:
    """Bits-per-second and messages-per-second budget of one class of TR traffic (0 = no
    limit); each bucket holds at most :data:`BURST_SECONDS` of its rate."""

    __slots__ = ("bps", "bytes", "last", "objects", "ops", "refused")

    def __init__(self, bps: int, per_second: int, now: float) -> None:
        self.bps = max(0, int(bps))
        self.ops = max(0, int(per_second))
        self.bytes = self.bps / 8 * BURST_SECONDS
        self.objects = self.ops * BURST_SECONDS
        self.last = now
        #: Times an answer had to wait for budget (it was sent later, not lost).
        self.refused = 0

    def _refill(self, now: float) -> None:
        dt = now - self.last
        if dt <= 0:
            return
        self.last = now
        if self.bps:
            self.bytes = min(self.bps / 8 * BURST_SECONDS, self.bytes + dt * self.bps / 8)
        if self.ops:
            self.objects = min(self.ops * BURST_SECONDS, self.objects + dt * self.ops)

    def try_take(self, now: float, nbytes: int) -> bool:
        """Spend one object of ``nbytes`` if both budgets allow (an object larger than the
        whole byte bucket passes once the bucket is full)."""
        self._refill(now)
        need = min(nbytes, self.bps / 8 * BURST_SECONDS)
        if (self.bps and self.bytes < need) or (self.ops and self.objects < 1):
            self.refused += 1
            return False
        if self.bps:
            self.bytes -= nbytes
        if self.ops:
            self.objects -= 1
        return True

    def ready_at(self, nbytes: int) -> float:
        """When one object of ``nbytes`` fits (at or after :attr:`last`)."""
        t = self.last
        if self.bps:
            need = min(nbytes, self.bps / 8 * BURST_SECONDS) - self.bytes
            if need > 0:
                t = max(t, self.last + need * 8 / self.bps)
        if self.ops and self.objects < 1:
            t = max(t, self.last + (1 - self.objects) / self.ops)
        return t


# ------------------------------------------------------------------------------ use answers
class UseAnswers:
    """Use Query Responses waiting for their rate budget (module docstring)."""

    __slots__ = ("answered", "limiters", "pending", "queued")

    def __init__(self, topic_limiter: TrLimiter, pattern_limiter: TrLimiter) -> None:
        #: [topic answers, pattern answers]
        self.limiters = (topic_limiter, pattern_limiter)
        self.pending: tuple[deque[lbmr.TMR], deque[lbmr.TMR]] = (deque(), deque())
        # (symbol, flags) already waiting: asked again, answered once.  Bounded by the
        # context's receivers and wildcard receivers (nothing else is answered).
        self.queued: set[tuple[str, int]] = set()
        #: Use Query Responses sent.
        self.answered = 0

    @classmethod
    def from_options(cls, o: OptionReader, now: float) -> UseAnswers:
        return cls(
            TrLimiter(
                int(o.get("resolver_sustain_query_bps")),
                int(o.get("resolver_sustain_queries_per_second")),
                now,
            ),
            TrLimiter(
                int(o.get("resolver_wildcard_query_bps")),
                int(o.get("resolver_wildcard_queries_per_second")),
                now,
            ),
        )

    def add(self, symbol: str, pattern_flag: int = 0) -> None:
        """Answer ``symbol`` (a topic, or a pattern with its WILDCARD_* flag)."""
        flags = TMR_FLAG_RESPONSE | (pattern_flag & _WILDCARD)
        key = (symbol, flags)
        if key in self.queued:
            return
        self.queued.add(key)
        self.pending[1 if flags & _WILDCARD else 0].append(lbmr.TMR(symbol, TMR_TOPIC_USE, flags))

    def take(self, now: float) -> list[lbmr.TMR]:
        """The answers the budgets allow now, in arrival order per class."""
        out: list[lbmr.TMR] = []
        for pending, limiter in zip(self.pending, self.limiters, strict=True):
            while pending:
                tmr = pending[0]
                if not limiter.try_take(now, TMR_OVERHEAD + len(tmr.topic.encode())):
                    break
                pending.popleft()
                self.queued.discard((tmr.topic, tmr.flags))
                out.append(tmr)
        self.answered += len(out)
        return out

    def next_timer(self) -> float | None:
        t: float | None = None
        for pending, limiter in zip(self.pending, self.limiters, strict=True):
            if pending:
                r = limiter.ready_at(TMR_OVERHEAD + len(pending[0].topic.encode()))
                t = r if t is None else min(t, r)
        return t


def use_queries(body: lbmr.TopicManagement) -> list[tuple[str, int]]:
    """(symbol, WILDCARD_* flag or 0) of the use *queries* in a topic management block."""
    return [
        (tmr.topic, tmr.flags & _WILDCARD)
        for tmr in body.tmrs
        if tmr.tmr_type == TMR_TOPIC_USE and not tmr.flags & TMR_FLAG_RESPONSE
    ]


# ------------------------------------------------------------------------------ domains
@dataclass(frozen=True, slots=True)
class DomainRoute:
    """Domain ``domain`` is reached through the DRO portal whose UIM (request) port is
    ``ip:port``; ``expires`` is None for a route the SRS vouches for (until its RTER)."""

    domain: int
    ip: str
    port: int
    expires: float | None


class DomainTable:
    """This context's TRD id and the routes to other domains (module docstring).

    ``propagation_timeout``: ``resolver_domain_id_active_propagation_timeout`` in seconds."""

    __slots__ = ("domain_id", "heard_dro", "learned_from", "propagation_timeout", "refused",
                 "routes")  # fmt: skip

    def __init__(self, propagation_timeout: int = 0) -> None:
        self.propagation_timeout = int(propagation_timeout)
        #: The TRD id, None until learned.
        self.domain_id: int | None = None
        #: How it was learned: "dro" (a DRO's datagram), "srs" (a DIR), "peer" (a context).
        self.learned_from: str | None = None
        #: When a DRO was last heard (its datagram or the SRS's DIR), or None.
        self.heard_dro: float | None = None
        self.routes: dict[int, DomainRoute] = {}
        #: Routes refused beyond :data:`MAX_ROUTES`.
        self.refused = 0

    # -------------------------------------------------------------- input
    def receive_packet(self, options: Iterable[Any], now: float) -> bool:
        """A datagram's packet options; True if the domain id changed."""
        from_dro, domain = packet_domain(options)
        if from_dro:
            self.heard_dro = now
        if domain is None:
            return False
        if from_dro:
            return self._set(domain, "dro")
        n = self.propagation_timeout
        if n == 0 or self.learned_from in ("dro", "srs"):
            return False  # 0: only from a DRO; a DRO's word outranks a peer's
        return self._set(domain, "peer")

    def receive_dro_domain(self, domain: int, now: float) -> bool:
        """The SRS relayed a DRO endpoint's DIR: this TRD's id."""
        self.heard_dro = now
        return self._set(domain, "srs")

    def _set(self, domain: int, how: str) -> bool:
        changed = domain != self.domain_id
        self.domain_id = domain
        self.learned_from = how
        return changed

    def receive_route(
        self, ip: str, port: int, domains: Iterable[int], now: float, *, lifetime: bool = True
    ) -> None:
        """A remote domain route record (``lifetime``) or an RTIR (held until its RTER)."""
        expires = now + ROUTE_LIFETIME if lifetime else None
        for d in domains:
            if d == self.domain_id:
                continue
            old = self.routes.get(d)
            if old is None and len(self.routes) >= MAX_ROUTES:
                self.refused += 1
                continue
            if (
                old is not None
                and old.expires is None
                and expires is not None
                and (old.ip, old.port) != (ip, port)
            ):
                continue  # the SRS's route holds until its RTER
            self.routes[d] = DomainRoute(d, ip, port, expires)

    def end_route(self, ip: str, port: int, domains: Iterable[int]) -> None:
        """An RTER: the routes through ``ip:port`` to ``domains`` ended."""
        for d in domains:
            r = self.routes.get(d)
            if r is not None and (r.ip, r.port) == (ip, port):
                del self.routes[d]

    # -------------------------------------------------------------- output
    def route(self, domain: int, now: float) -> DomainRoute | None:
        r = self.routes.get(domain)
        if r is not None and r.expires is not None and r.expires <= now:
            del self.routes[domain]
            return None
        return r

    def live_routes(self, now: float) -> dict[int, DomainRoute]:
        for d in [d for d, r in self.routes.items() if r.expires is not None and r.expires <= now]:
            del self.routes[d]
        return dict(self.routes)

    def propagate(self, now: float) -> int | None:
        """The domain id to put in this context's own datagrams (LOCAL_DOMAIN), or None."""
        n = self.propagation_timeout
        if self.domain_id is None or n == 0:
            return None
        if n > 0 and (self.heard_dro is None or now - self.heard_dro > n):
            return None
        return self.domain_id
