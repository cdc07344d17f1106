"""The column-wise Arrow builder (umcore.monitor.pbcolumns) against the row form: for every
statistics message type, a batch of messages with random values (oneof members chosen or not,
0-2 elements per repeated field, unknown enum numbers) gives the same struct array as pyarrow
building it from one ``to_row`` dict per message; a builder is reusable after ``build``."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.mcs.test_pbjson import fill
from umcore.monitor.collector import arrow_type, message_row
from umcore.monitor.pb import dro_mon_pb2, srs_mon_pb2, ump_mon_pb2, ums_mon_pb2

pa = pytest.importorskip("pyarrow")
from umcore.monitor.pbcolumns import Columns  # noqa: E402 - needs pyarrow

TYPES = [ums_mon_pb2.UMSMonMsg, ump_mon_pb2.UMPMonMsg, dro_mon_pb2.DROMonMsg, srs_mon_pb2.SRSMonMsg]


def rows_array(cls: Any, msgs: list[Any]) -> Any:
    return pa.array([message_row(m) for m in msgs], type=arrow_type(cls.DESCRIPTOR))


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(TYPES), st.integers(1, 4), st.data())
def test_same_array_as_the_row_form(cls: Any, count: int, data: st.DataObject) -> None:
    msgs: list[Any] = []
    for i in range(count):
        m = cls()
        if i:  # the first stays empty: every field at its default, no oneof member chosen
            fill(m, data.draw)
        msgs.append(m)
    cols = Columns(cls.DESCRIPTOR)
    cols.extend(msgs[:2])
    for m in msgs[2:]:
        cols.append(m)
    got = cols.build()
    want = rows_array(cls, msgs)
    assert got.type == want.type
    assert got.to_pylist() == want.to_pylist()
    # the builder starts afresh: the next batch holds only its own messages
    cols.append(msgs[-1])
    assert cols.build().to_pylist() == want.to_pylist()[-1:]


def test_oneof_members_spread_to_their_rows() -> None:
    msgs: list[Any] = []
    for kind in ("lbtrm", None, "tcp", "lbtrm"):
        m = ums_mon_pb2.UMSMonMsg()
        st_ = m.stats.source_transports.add(source_string=f"src-{kind}")
        if kind == "lbtrm":
            st_.lbtrm.msgs_sent = len(msgs) + 1
        elif kind == "tcp":
            st_.tcp.num_clients = 7
        msgs.append(m)
    cols = Columns(ums_mon_pb2.UMSMonMsg.DESCRIPTOR)
    for m in msgs:
        cols.append(m)
    got = cols.build().to_pylist()
    sts = [r["stats"]["source_transports"][0] for r in got]
    assert [s["lbtrm"]["msgs_sent"] if s["lbtrm"] else None for s in sts] == [1, None, None, 4]
    assert [s["tcp"]["num_clients"] if s["tcp"] else None for s in sts] == [None, None, 7, None]
    assert got == rows_array(ums_mon_pb2.UMSMonMsg, msgs).to_pylist()
