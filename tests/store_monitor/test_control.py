"""umestored's daemon control requests (umedcmd's ASCII commands): parsed, allowed by
configuration or refused with a reason, carried out, counted."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from daemons.umestored.control import (
    DMON_VERSION,
    MAX_REQUEST_SIZE,
    Request,
    RequestError,
    StoreControl,
    Verb,
    parse,
)


@dataclass
class FakeStore:
    name: str
    address: tuple[str, int]
    snaps: list[str] = field(default_factory=list)
    intervals: list[tuple[str, int]] = field(default_factory=list)
    marks: set[tuple[int, int]] = field(default_factory=set)
    receivers: set[tuple[int, int]] = field(default_factory=lambda: {(7, 9)})

    def listens_on(self, address: tuple[str, int]) -> bool:
        return address == self.address

    def snapshot(self, group: str) -> None:
        self.snaps.append(group)

    def set_interval(self, group: str, ms: int) -> None:
        self.intervals.append((group, ms))

    def mark(self, src_reg_id: int, sqn: int) -> bool:
        if src_reg_id != 7:
            return False
        self.marks.add((src_reg_id, sqn))
        return True

    def deregister(self, src_reg_id: int, rcv_reg_id: int) -> bool:
        if (src_reg_id, rcv_reg_id) not in self.receivers:
            return False
        self.receivers.discard((src_reg_id, rcv_reg_id))
        return True


def control(*, snap: bool = True, config: bool = True) -> tuple[StoreControl, list[FakeStore]]:
    stores = [FakeStore("a", ("10.0.0.1", 14567)), FakeStore("b", ("10.0.0.1", 14568))]
    done: list[int] = []
    ctl = StoreControl(
        "9.9",
        lambda: stores,
        allow_snapshot=snap,
        allow_config=config,
        on_done=lambda: done.append(1),
    )
    return ctl, stores


def ask(ctl: StoreControl, text: str) -> str:
    return ctl.receive_control(text.encode() + b"\0", 0.0).decode()


def test_parse_every_form() -> None:
    assert parse(b"version") == Request(Verb.VERSION)
    assert parse(b"snap src") == Request(Verb.SNAP, None, "source")
    assert parse(b'"a" snap rcv') == Request(Verb.SNAP, "a", "receiver")
    assert parse(b"memory 10") == Request(Verb.INTERVAL, None, "memory", 10)
    assert parse(b'"b" disk 0\0') == Request(Verb.INTERVAL, "b", "disk", 0)
    assert parse(b"MARK 10.0.0.1 14567 7 500") == Request(
        Verb.MARK, address=("10.0.0.1", 14567), src_reg_id=7, value=500
    )
    assert parse(b"deregister 10.0.0.1 14567 7 9").verb is Verb.DEREGISTER
    for bad in (
        b"",
        b"snap everything",
        b'"a" memory 5',
        b"store -1",
        b"store 99999999999",
        b"mark 10.0.0.1 0 7 500",
        b"mark host 14567 7 500",
        b"mark 10.0.0.1 14567 7",
        b"\xff\xfe",
        b'"unbalanced snap src',
        b"x" * (MAX_REQUEST_SIZE + 1),
    ):
        with pytest.raises(RequestError):
            parse(bad)


def test_answered_carried_out_and_counted() -> None:
    ctl, (a, b) = control()
    assert ask(ctl, "version") == f"version {DMON_VERSION} (pyum umestored 9.9) - OK"
    assert ask(ctl, "snap config").endswith("- OK")
    assert a.snaps == b.snaps == ["config"]
    assert ask(ctl, '"b" src 5').endswith("- OK")
    assert (a.intervals, b.intervals) == ([], [("source", 5000)])
    assert ask(ctl, "mark 10.0.0.1 14567 7 500").endswith("- OK")
    assert a.marks == {(7, 500)} and not b.marks
    assert ask(ctl, "deregister 10.0.0.1 14567 7 9").endswith("- OK")
    assert a.receivers == set()
    # allowed, but nothing to act on: answered with the reason, counted as failed
    assert ask(ctl, "deregister 10.0.0.1 14567 7 9").startswith("ERROR: store 'a' has no receiver")
    assert ask(ctl, "mark 10.0.0.1 14567 8 1").startswith("ERROR: store 'a' has no source")
    assert ask(ctl, "mark 10.0.0.2 14567 7 1") == "ERROR: no store on 10.0.0.2:14567"
    assert ask(ctl, '"zz" snap src') == "ERROR: no store named 'zz'"
    assert ask(ctl, "fly me to the moon").startswith("ERROR: malformed request")
    assert ctl.counts == {"ok": 5, "refused": 0, "malformed": 1, "failed": 4}
    assert ctl.accepted["mark"] == 1 and ctl.accepted["deregister"] == 1
    assert ctl.requests == 10


def test_refused_by_configuration_with_the_switch_named() -> None:
    ctl, (a, _) = control(snap=False, config=False)
    assert "remote-snapshot-request" in ask(ctl, "snap src")
    assert "remote-snapshot-request" in ask(ctl, "version")
    for req in ("store 5", "mark 10.0.0.1 14567 7 500", "deregister 10.0.0.1 14567 7 9"):
        reply = ask(ctl, req)
        assert reply.startswith("ERROR:") and "remote-config-changes-request" in reply
    assert not a.snaps and not a.marks and a.receivers == {(7, 9)}
    assert ctl.counts["refused"] == 5 and ctl.counts["ok"] == 0
    # snapshot allowed, configuration changes not
    ctl, (a, _) = control(snap=True, config=False)
    assert ask(ctl, "snap store").endswith("- OK")
    assert "not allowed" in ask(ctl, "mark 10.0.0.1 14567 7 500")
    assert ctl.counts == {"ok": 1, "refused": 1, "malformed": 0, "failed": 0}
