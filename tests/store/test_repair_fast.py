"""GapRepair.in_order (the Store's per-message shortcut) decides as GapRepair.seen would."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.store.repair import GapRepair

_M = 0xFFFFFFFF


def _public(g: GapRepair, now: float) -> tuple[object, ...]:
    return (g.requested, g.repaired, g.lost, g.untracked, g.next_timer(), g.handle_timer(now))


@settings(max_examples=200, deadline=None)
@given(
    start=st.sampled_from([0, 1000, _M - 3]),
    steps=st.lists(st.tuples(st.integers(0, 1), st.integers(-3, 6)), max_size=50),
)
def test_in_order_agrees_with_seen(start: int, steps: list[tuple[int, int]]) -> None:
    fast, slow = GapRepair(), GapRepair()
    lead = [_M, _M]  # per RegID: the newest sqn held (none yet)
    nxt = [start, start]
    shortcuts = 0
    for now, (reg, jump) in enumerate(steps):
        sqn = (nxt[reg] + jump) & _M  # in order (0), a jump ahead, or an older one again
        if fast.in_order(reg, sqn):
            shortcuts += 1
        else:
            fast.seen(reg, sqn, lead[reg], float(now))
        slow.seen(reg, sqn, lead[reg], float(now))
        if jump >= 0:
            lead[reg] = sqn
            nxt[reg] = (sqn + 1) & _M
    assert _public(fast, 100.0) == _public(slow, 100.0)
    assert _public(fast, 1e6) == _public(slow, 1e6)
    assert shortcuts <= len(steps)


def test_in_order_takes_only_the_expected_sqn() -> None:
    g = GapRepair()
    assert not g.in_order(7, 5)  # nothing tracked yet: seen's
    g.seen(7, 5, _M, 0.0)
    assert g.in_order(7, 6) and not g.in_order(7, 6) and not g.in_order(7, 9)
    g.seen(7, 9, 6, 0.0)  # 7 and 8 missing
    assert g.in_order(7, 10) and g.next_timer() is not None
