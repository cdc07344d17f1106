"""Access control lists: which topics and transports a portal lets in and out.

Theory of operation
-------------------
An ``<acl>`` under a portal has an ``<inbound>`` and/or ``<outbound>`` list of ``<ace
match="accept|reject">`` entries (notes A8).  Inbound lists test what arrives from the portal's
side before it is forwarded anywhere; outbound lists test what would leave through that portal.
The ACEs are tried in order and the first whose conditions *all* hold decides; a configured
list ends with an implicit reject-all, so a portal with a list rejects what no ACE accepts.  A
direction without a list accepts everything.

Conditions: ``<topic>`` (exact name, not a pattern), ``<pcre-pattern>`` and the deprecated
``<regex-pattern>`` (both matched with Python's ``re.search``, as our wildcard receivers do; a
POSIX pattern that Python reads differently is a documented limit), and the transport-session
conditions ``<transport>``, ``<source-ip>``, ``<multicast-group>``, ``<udp-source-port>``,
``<udp-destination-port>``, ``<tcp-source-port>``, ``<xport-id>``, which describe the TRD-local
(proxy) source the DRO receives from, not the originating one.  A transport condition is
"silently ignored" on an outbound list and where it does not apply to the source's transport
(a multicast group of a TCP source): we read that as "the ACE has no effect", so an ACE holding
such a condition never matches (notes A8 check 9: an outbound ``<transport>`` ACE changes
nothing) [inferred from the docs' wording].

:func:`compile_acl` turns the loader's :class:`umcore.config.dro.Acl` into :class:`CompiledAcl`
once (patterns compiled, numbers and addresses parsed, bad values refused with the ACE's line);
:meth:`CompiledAcl.inbound_accepts` / :meth:`CompiledAcl.outbound_accepts` decide per topic.
:meth:`CompiledAcl.inbound_may_accept` answers before any source is known (whether a proxy
receiver for the topic is worth creating): transport conditions count as "could hold".
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass

from umcore.config.dro import Ace, AceCondition, Acl
from umcore.errors import ConfigError

__all__ = ["Acl", "CompiledAce", "CompiledAcl", "SourceTransport", "compile_acl"]

# Transport names an ACE may use, by the kind our adapters report (notes A8/A10).
TRANSPORT_NAMES = {
    "tcp": "tcp",
    "lbt-rm": "lbtrm",
    "lbtrm": "lbtrm",
    "lbt-ru": "lbtru",
    "lbtru": "lbtru",
    "lbt-ipc": "lbtipc",
    "lbtipc": "lbtipc",
}
_COMPARISONS: dict[str, Callable[[int, int], bool]] = {
    "eq": lambda a, b: a == b,
    "equal": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "notequal": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "lessthan": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "lessthanequal": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "greaterthan": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "greaterthanequal": lambda a, b: a >= b,
}
# Transport-session conditions: the transports each applies to, and whether it is an address.
_SESSION_CONDITIONS: dict[str, tuple[frozenset[str], bool]] = {
    "source-ip": (frozenset({"tcp", "lbtrm", "lbtru"}), True),
    "multicast-group": (frozenset({"lbtrm"}), True),
    "udp-destination-port": (frozenset({"lbtrm"}), False),
    "udp-source-port": (frozenset({"lbtrm", "lbtru"}), False),
    "tcp-source-port": (frozenset({"tcp"}), False),
    "xport-id": (frozenset({"lbtipc"}), False),
}


@dataclass(frozen=True, slots=True)
class SourceTransport:
    """What an inbound ACE may test about the TRD-local source a proxy receiver joined.

    ``kind`` is one of tcp, lbtrm, lbtru, lbtipc, lbtsmx (or another name no ACE can name)."""

    kind: str
    source_ip: str | None = None
    multicast_group: str | None = None
    udp_source_port: int | None = None
    udp_destination_port: int | None = None
    tcp_source_port: int | None = None
    xport_id: int | None = None

    def value(self, condition: str) -> int | None:
        raw: str | int | None = getattr(self, condition.replace("-", "_"))
        if raw is None:
            return None
        if isinstance(raw, str):
            return int(ipaddress.IPv4Address(raw))
        return raw


@dataclass(frozen=True, slots=True)
class _TopicTest:
    kind: str  # topic | pattern
    exact: str
    regex: re.Pattern[str] | None

    def holds(self, topic: str) -> bool:
        if self.regex is None:
            return topic == self.exact
        return self.regex.search(topic) is not None


@dataclass(frozen=True, slots=True)
class _SessionTest:
    condition: str  # transport | source-ip | ...
    value: int | str
    compare: Callable[[int, int], bool]
    negate: bool  # transport ne

    def holds(self, transport: SourceTransport) -> bool:
        if self.condition == "transport":
            return (transport.kind == self.value) != self.negate
        applies, _ = _SESSION_CONDITIONS[self.condition]
        if transport.kind not in applies:
            return False  # inapplicable: the ACE has no effect
        actual = transport.value(self.condition)
        return actual is not None and self.compare(actual, int(self.value))


@dataclass(frozen=True, slots=True)
class CompiledAce:
    """One ACE: accept or reject when every topic test and every session test holds."""

    accept: bool
    topic_tests: tuple[_TopicTest, ...]
    session_tests: tuple[_SessionTest, ...]
    line: int | None


@dataclass(frozen=True, slots=True)
class CompiledAcl:
    """A portal's lists; ``None`` for a direction without a list (accept everything)."""

    inbound: tuple[CompiledAce, ...] | None
    outbound: tuple[CompiledAce, ...] | None

    def inbound_accepts(self, topic: str, transport: SourceTransport | None = None) -> bool:
        """First match wins, implicit reject at the end; ``transport=None`` (not known) makes
        every ACE with a session condition fail to match."""
        if self.inbound is None:
            return True
        for ace in self.inbound:
            if not all(t.holds(topic) for t in ace.topic_tests):
                continue
            if ace.session_tests and (
                transport is None or not all(s.holds(transport) for s in ace.session_tests)
            ):
                continue
            return ace.accept
        return False

    def inbound_may_accept(self, topic: str) -> bool:
        """Could some source of ``topic`` be accepted inbound (before any source is known)?"""
        if self.inbound is None:
            return True
        for ace in self.inbound:
            if not all(t.holds(topic) for t in ace.topic_tests):
                continue
            if ace.session_tests:
                if ace.accept:
                    return True
                continue  # rejects only some transports: look further
            return ace.accept
        return False

    def outbound_accepts(self, topic: str) -> bool:
        """Outbound lists test the topic only; an ACE with a session condition has no effect."""
        if self.outbound is None:
            return True
        for ace in self.outbound:
            if ace.session_tests:
                continue
            if all(t.holds(topic) for t in ace.topic_tests):
                return ace.accept
        return False


ACCEPT_ALL = CompiledAcl(None, None)


def _error(ace: Ace, message: str, allowed: str, source: str | None) -> ConfigError:
    return ConfigError(message, source=source, line=ace.line, what="<ace>", allowed=allowed)


def _compile_condition(
    ace: Ace, cond: AceCondition, source: str | None
) -> _TopicTest | _SessionTest:
    kind = cond.kind
    if kind == "topic":
        return _TopicTest("topic", cond.value, None)
    if kind in ("pcre-pattern", "regex-pattern"):
        try:
            return _TopicTest("pattern", cond.value, re.compile(cond.value))
        except re.error as exc:
            raise _error(
                ace, f"<{kind}> {cond.value!r}: {exc}", "a valid pattern", source
            ) from None
    comparison = cond.comparison
    if kind == "transport":
        name = TRANSPORT_NAMES.get(cond.value.strip().lower())
        if name is None:
            raise _error(
                ace, f"<transport value={cond.value!r}>", ", ".join(TRANSPORT_NAMES), source
            )
        if comparison not in ("eq", "equal", "ne", "notequal"):
            raise _error(ace, f"<transport comparison={comparison!r}>", "eq, ne", source)
        return _SessionTest("transport", name, _COMPARISONS["eq"], comparison in ("ne", "notequal"))
    if kind not in _SESSION_CONDITIONS:
        raise _error(ace, f"unknown condition <{kind}>", "the ACE conditions of A8", source)
    compare = _COMPARISONS.get(comparison)
    if compare is None:
        raise _error(ace, f"<{kind} comparison={comparison!r}>", ", ".join(_COMPARISONS), source)
    _, is_address = _SESSION_CONDITIONS[kind]
    try:
        value = (
            int(ipaddress.IPv4Address(cond.value.strip()))
            if is_address
            else int(cond.value.strip(), 0)
        )
    except ValueError:
        what = "an IPv4 address" if is_address else "an integer"
        raise _error(ace, f"<{kind} value={cond.value!r}>", what, source) from None
    return _SessionTest(kind, value, compare, False)


def _compile_list(aces: list[Ace], source: str | None) -> tuple[CompiledAce, ...] | None:
    if not aces:
        return None
    out = []
    for ace in aces:
        if ace.match not in ("accept", "reject"):
            raise _error(ace, f"match={ace.match!r}", "accept, reject", source)
        topic_tests: list[_TopicTest] = []
        session_tests: list[_SessionTest] = []
        for cond in ace.conditions:
            test = _compile_condition(ace, cond, source)
            if isinstance(test, _TopicTest):
                topic_tests.append(test)
            else:
                session_tests.append(test)
        out.append(
            CompiledAce(ace.match == "accept", tuple(topic_tests), tuple(session_tests), ace.line)
        )
    return tuple(out)


def compile_acl(acl: Acl | None, source: str | None = None) -> CompiledAcl:
    """Compile a portal's ``<acl>`` (``None``: no ACL, everything passes)."""
    if acl is None:
        return ACCEPT_ALL
    return CompiledAcl(_compile_list(acl.inbound, source), _compile_list(acl.outbound, source))
