"""Property: the proxies a DRO ends with depend on the interest it ends with, not on the order
in which interest came and went."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.dro.kit import config, otid
from umcore.dro import DroCore, InterestKey, SourceAdvert, SourceKey, SourceState

PORTALS = ("E1", "E2", "E3")
DOMAIN = {"E1": 1, "E2": 2, "E3": 3}
KEYS = (InterestKey("A"), InterestKey("B"), InterestKey("C"), InterestKey("^A|^C", 1))
SOURCES = {
    "E1": [SourceKey(otid(1), "A"), SourceKey(otid(2), "C")],
    "E2": [SourceKey(otid(3), "B")],
}

Op = tuple[str, int, int, bool]  # portal, key index, domain, add (False: cancel)

ops = st.lists(
    st.tuples(
        st.sampled_from(PORTALS),
        st.integers(0, len(KEYS) - 1),
        st.sampled_from((1, 2, 3, 7, 8)),
        st.booleans(),
    ),
    max_size=40,
)


def fresh() -> DroCore:
    core = DroCore(config([(p, DOMAIN[p], 1) for p in PORTALS]), 1)
    for i, p in enumerate(PORTALS):
        core.receive_portal_up(p, 0.0, address=(f"10.0.0.{i}", 1))
    for portal, keys in SOURCES.items():
        for sk in keys:
            core.receive_source(portal, SourceAdvert(sk), 0.0)
    return core


def apply(core: DroCore, sequence: list[Op]) -> None:
    for portal, k, dom, add in sequence:
        core.receive_interest(portal, KEYS[k], dom, 1.0, cancel=not add)


def settle(core: DroCore) -> tuple[object, ...]:
    """Let deletion delays and final advertisements run out, then read the proxy set."""
    t = 1.0
    while (nxt := core.next_timer()) is not None and nxt < 20.0:
        t = max(t, nxt)
        core.handle_timer(t)
    core.take_commands()
    sources = {k for k, state in core.proxy_sources().items() if state is SourceState.ACTIVE}
    assert all(s is SourceState.ACTIVE for s in core.proxy_sources().values())
    advertised = {p: sorted(core.advertised_interest(p)) for p in PORTALS}
    return core.proxy_receivers(), sources, advertised


@settings(max_examples=60, deadline=None)
@given(sequence=ops, data=st.data())
def test_proxy_set_depends_only_on_the_final_interest(
    sequence: list[Op], data: st.DataObject
) -> None:
    a = fresh()
    apply(a, sequence)
    final: dict[tuple[str, int, int], bool] = {}
    for portal, k, dom, add in sequence:
        if dom != DOMAIN[portal]:  # a portal's own domain is ignored as remote interest
            final[(portal, k, dom)] = add
    wanted = [(p, k, d, True) for (p, k, d), add in final.items() if add]
    b = fresh()
    apply(b, data.draw(st.permutations(wanted)))
    # and a third order: everything twice, shuffled, cancels of what is not wanted at the end
    c = fresh()
    noise = data.draw(st.permutations(sequence))
    apply(c, noise)
    apply(c, [(p, k, d, False) for (p, k, d) in final if not final[(p, k, d)]])
    apply(c, data.draw(st.permutations(wanted)))
    assert settle(a) == settle(b) == settle(c)


def test_the_compared_sets_are_not_trivially_empty() -> None:
    core = fresh()
    apply(core, [("E3", 0, 7, True), ("E2", 3, 8, True), ("E2", 3, 8, False), ("E3", 2, 3, True)])
    receivers, sources, advertised = settle(core)
    assert receivers == {("E1", InterestKey("A")), ("E2", InterestKey("A"))}
    assert sources == {("E3", SourceKey(otid(1), "A"))}
    # (C, 3) on E3 is E3's own domain: ignored; A for domain 7 is advertised into E1 and E2
    assert advertised == {"E1": [(InterestKey("A"), 7)], "E2": [(InterestKey("A"), 7)], "E3": []}


Event = tuple[str, int, int]  # kind, portal index, key index

events = st.lists(
    st.tuples(
        st.sampled_from(("tqr", "wc", "interest", "cancel", "source", "gone", "down", "up")),
        st.integers(0, 2),
        st.integers(0, len(KEYS) - 1),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(evs=events, gaps=st.lists(st.floats(0.0, 400.0), min_size=30, max_size=30))
def test_timers_always_move_forward(evs: list[Event], gaps: list[float]) -> None:
    """Whatever happens, handling the timer at next_timer() moves next_timer() later (no
    busy loop for an adapter), and every portal's queue and proxies stay consistent."""
    core = fresh()
    now = 0.0
    for (kind, pi, ki), gap in zip(evs, gaps, strict=False):
        portal, key = PORTALS[pi], KEYS[ki]
        if kind == "tqr":
            core.receive_tqr(portal, key.symbol, now)
        elif kind == "wc":
            core.receive_wildcard_tqr(portal, key.symbol, 1, now)
        elif kind in ("interest", "cancel"):
            core.receive_interest(portal, key, 7, now, cancel=kind == "cancel")
        elif kind == "source":
            core.receive_source(portal, SourceAdvert(SourceKey(otid(ki), key.symbol)), now)
        elif kind == "gone":
            core.receive_source_gone(portal, SourceKey(otid(ki), key.symbol), now)
        elif kind == "down":
            core.receive_portal_down(portal, now)
        else:
            core.receive_portal_up(portal, now, address=("10.0.0.9", 1))
        end = now + gap
        steps = 0
        while (nxt := core.next_timer()) is not None and nxt <= end:
            now = max(now, nxt)  # a time already past means "now" (the adapter's clock)
            core.handle_timer(now)
            after = core.next_timer()
            assert after is None or after > now, "handle_timer made no progress"
            steps += 1
            assert steps < 100_000
        now = end
        core.take_commands()
        core.take_lbmr()
        for (portal_name, _), state in core.proxy_sources().items():
            assert state is not SourceState.ABSENT
            assert core.portals[portal_name].up
