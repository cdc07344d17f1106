"""Hand-built monitoring history for the Spark jobs, written by MCS's own connectors.

Theory of operation
-------------------
:func:`write_dataset` makes statistics messages of every kind the jobs read, frames them for the
statistics topic, passes them through the collector's core (:class:`Collector`) and writes the
records with ``MCS``'s SQLite and Parquet connectors: the same bytes a running MCS would store.
The values hold what the counter handling must get right: a restart (a counter going down), UM's
"no sample" sentinels (ULONG_MAX of 64 and 32 bits), two samples in one second, a 32-bit
sequence number wrap for the store lag, objects with the same source string in two processes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemons.mcs.connectors import ParquetConnector, SqliteConnector, init_db
from umcore.monitor.attributes import MonAttributes, encode_stats
from umcore.monitor.collector import Collector
from umcore.monitor.framing import PacketType
from umcore.monitor.pb import dro_mon_pb2, ump_mon_pb2, ums_mon_pb2

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z
U64_MAX = 18446744073709551615
U32_MAX = 4294967295

# (seconds after T0, msgs_sent) of source A (LBT-RM): a sentinel sample, a restart at 70 s
SOURCE_A = [(0, 100), (10, 250), (20, U64_MAX), (30, 400), (30, 410), (70, 5), (80, 55), (130, 95)]
# source B (LBT-RU, another host) and the same source string in a second process of host 1
SOURCE_B = [(5, 0), (65, 600), (125, 1200)]
RECEIVER = [(0, 0, 0), (60, 3, 1), (120, 1, 0), (3600, 9, 2)]  # (t, lost, unrecovered_txw): restart
CONTEXT = [(0, 10, 2), (60, 30, 3), (120, 31, 1), (180, 4, 5)]  # (t, tr_dgrams_sent, tr_src_topics)
# (t, lead_sqn, [(rcv_regid, high_ack_sqn)]): no ACK yet, a 32-bit wrap
STORE = [
    (0, 100, [(7, U32_MAX), (8, 90)]),
    (60, 5, [(7, 0xFFFFFFF0), (8, 4)]),
    (120, U32_MAX, [(7, 1), (8, 2)]),
]
# (t, endpoint sent, endpoint dropped would-block, peer rcvd)
DRO = [(0, 10, 0, 5), (60, 70, 2, 25), (120, U64_MAX, 3, 45), (180, 20, 4, 50)]


def _ums_source(t: int, msgs: int, kind: str, string: str) -> ums_mon_pb2.UMSMonMsg:
    m = ums_mon_pb2.UMSMonMsg()
    st = m.stats.source_transports.add()
    st.source_string = string
    sub = getattr(st, kind)
    sub.msgs_sent = msgs
    sub.bytes_sent = msgs if msgs == U64_MAX else msgs * 100
    sub.naks_rcved = msgs // 50 if msgs != U64_MAX else U64_MAX
    sub.rxs_sent = msgs // 100 if msgs != U64_MAX else 0
    return m


def messages() -> list[tuple[int, Any, MonAttributes]]:
    """``(packet type, message, attributes)`` of the whole dataset."""

    def attrs(t: int, app: str, host: str, pid: int, obj: int) -> MonAttributes:
        return MonAttributes(
            timestamp=T0 + t, application_id=app, sender_ipv4=host, process_id=pid, object_id=obj
        )

    out: list[tuple[int, Any, MonAttributes]] = []
    src_a = "LBTRM:10.0.0.1:14390:6f80ecc8:239.101.3.2:14400"
    for t, n in SOURCE_A:
        out.append(
            (
                PacketType.SOURCE,
                _ums_source(t, n, "lbtrm", src_a),
                attrs(t, "app-a", "10.0.0.1", 11, 1),
            )
        )
    for t, n in SOURCE_A[:3]:  # the same source string, another process on host 1
        out.append(
            (
                PacketType.SOURCE,
                _ums_source(t, n if n == U64_MAX else n * 2, "lbtrm", src_a),
                attrs(t, "app-a", "10.0.0.1", 12, 1),
            )
        )
    for t, n in SOURCE_B:
        out.append(
            (
                PacketType.SOURCE,
                _ums_source(t, n, "lbtru", "LBTRU:10.0.0.2:14380:1"),
                attrs(t, "app-b", "10.0.0.2", 21, 2),
            )
        )
    tcp = ums_mon_pb2.UMSMonMsg()
    tcp.stats.source_transports.add(source_string="TCP:10.0.0.2:14371").tcp.num_clients = 3
    out.append((PacketType.SOURCE, tcp, attrs(5, "app-b", "10.0.0.2", 21, 2)))
    for t, lost, txw in RECEIVER:
        m = ums_mon_pb2.UMSMonMsg()
        rt = m.stats.receiver_transports.add(source_string=src_a)
        rt.lbtrm.lost = lost
        rt.lbtrm.unrecovered_txw = txw
        rt.lbtrm.unrecovered_tmo = U64_MAX if t == 60 else 0
        rt.lbtrm.naks_sent = lost * 2
        rt.lbtrm.nak_stm_min = U64_MAX
        out.append((PacketType.RECEIVER, m, attrs(t, "app-r", "10.0.0.3", 31, 3)))
    for t, dgrams, topics in CONTEXT:
        m = ums_mon_pb2.UMSMonMsg()
        c = m.stats.context
        c.tr_dgrams_sent = dgrams
        c.tr_dgrams_rcved = dgrams * 3
        c.tr_bytes_sent = dgrams * 40
        c.tr_bytes_rcved = U64_MAX if t == 60 else dgrams * 120
        c.tr_src_topics = topics
        c.tr_rcv_topics = 2 * topics
        c.rcv_cb_svc_time_min = U64_MAX
        out.append((PacketType.CONTEXT, m, attrs(t, "app-a", "10.0.0.1", 11, 1)))
    for t, lead, rcvs in STORE:
        p = ump_mon_pb2.UMPMonMsg()
        r = p.stats.src_repo_stats.add(src_regid=1001, topic_name="orders", lead_sqn=lead)
        for rid, ack in rcvs:
            r.rcv_stats.add(rcv_regid=rid, high_ack_sqn=ack)
        out.append((PacketType.UMESTORE, p, attrs(t, "store-1", "10.0.0.4", 41, 4)))
    for t, sent, drop, prcvd in DRO:
        d = dro_mon_pb2.DROMonMsg()
        ep = d.stats.portals.add(portal_name="to-trd2", portal_index=0).endpoint
        ep.send.transport_topic_fragments_sent = sent
        ep.send.transport_topic_fragment_bytes_sent = sent * 10 if sent != U64_MAX else U64_MAX
        ep.send.transport_topic_fragments_dropped_would_block = drop
        ep.receive.transport_topic_fragments_rcvd = sent + 1 if sent != U64_MAX else U64_MAX
        pe = d.stats.portals.add(portal_name="peer-1", portal_index=1).peer
        pe.receive.data_msgs_rcvd = prcvd
        pe.send.data_fragments_sent = prcvd
        out.append((PacketType.GATEWAY, d, attrs(t, "dro-1", "10.0.0.5", 51, 5)))
    return out


def write_dataset(
    root: Path, gen: Callable[[], list[tuple[int, Any, MonAttributes]]] = messages
) -> tuple[Path, Path]:
    """Write the dataset as MCS would: ``(SQLite database, Parquet directory)`` under ``root``."""
    db = root / "ummon.db"
    init_db(str(db))
    pq = root / "pq"
    pq.mkdir()
    col = Collector()
    for ptype, msg, att in gen():
        assert col.receive(encode_stats(ptype, msg, att), "test", float(att.timestamp)) is not None
    batch = col.take_batch(col.pending)
    for conn in (SqliteConnector(str(db)), ParquetConnector(str(pq))):
        conn.write(batch)
        conn.close()
    return db, pq
