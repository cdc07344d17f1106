"""The data path's event builders give the very events the dataclasses' constructors give."""

from __future__ import annotations

import dataclasses

import pytest

from umcore.persist.events import MessageStable, message_stable, message_stables


@pytest.mark.parametrize(
    "args", [(7, 0, 0, "", None), (3, 0xFFFFFFFF, 4, "store 4 [10.0.0.1:14567]", object())]
)
def test_message_stable_builder_equals_the_constructor(args: tuple[object, ...]) -> None:
    fast, slow = message_stable(*args), MessageStable(*args)  # type: ignore[arg-type]
    assert type(fast) is MessageStable
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert tuple(getattr(fast, f.name) for f in dataclasses.fields(fast)) == args
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.flags = 0  # type: ignore[misc]


def test_message_stables_builder_equals_the_constructor() -> None:
    cds = [None, object(), ("cd", 3)]
    sqns = [0xFFFFFFFE, 0xFFFFFFFF, 0]
    fast = message_stables(15, iter(sqns), 3, 2, "10.0.0.1:14567", iter(cds))
    slow = [
        MessageStable(15, sqn, 2, "10.0.0.1:14567", cd) for sqn, cd in zip(sqns, cds, strict=True)
    ]
    assert fast == slow and [type(e) for e in fast] == [MessageStable] * 3
    assert [repr(e) for e in fast] == [repr(e) for e in slow]
    assert message_stables(1, (), 0, 0, "", ()) == []
