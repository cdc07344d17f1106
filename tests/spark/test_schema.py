"""The Spark types generated from the ``.proto`` descriptors: pruned to the fields a job reads
(``spark_type(keep=...)``), in both spellings, in declaration order."""

from __future__ import annotations

from pyspark.sql import types as T

from umcore.monitor.pb import ums_mon_pb2
from umcore.spark.schema import U64, spark_type

DESC = ums_mon_pb2.UMSMonMsg.DESCRIPTOR


def _leaves(t: T.DataType, prefix: str = "") -> list[str]:
    if isinstance(t, T.ArrayType):
        return _leaves(t.elementType, prefix)
    if isinstance(t, T.StructType):
        return [leaf for f in t.fields for leaf in _leaves(f.dataType, prefix + f.name + ".")]
    return [prefix[:-1]]


def test_keep_prunes_to_the_paths_asked_for() -> None:
    st = "stats.source_transports"
    t = spark_type(DESC, keep={"attributes.timestamp", f"{st}.lbtrm.msgs_sent", f"{st}.tcp"})
    tcp = DESC.fields_by_name["stats"].message_type.fields_by_name["source_transports"]
    tcp_fields = [f.name for f in tcp.message_type.fields_by_name["tcp"].message_type.fields]
    assert _leaves(t) == [
        "attributes.timestamp",
        *[f"{st}.tcp.{n}" for n in tcp_fields],  # a struct kept whole: every field
        f"{st}.lbtrm.msgs_sent",  # declaration order: tcp is declared before lbtrm
    ]
    src = t["stats"].dataType["source_transports"].dataType
    assert isinstance(src, T.ArrayType)  # a repeated field stays a list of its pruned element
    assert src.elementType["lbtrm"].dataType["msgs_sent"].dataType == U64


def test_keep_spells_json_names_alike_and_none_keeps_all() -> None:
    keep = {"attributes", "stats.source_transports.lbtrm.bytes_sent"}
    snake = spark_type(DESC, keep=keep)
    camel = spark_type(DESC, json_names=True, keep=keep)
    # the same shape field for field (a JSON row is cast to the snake_case type by position)
    assert [_leaves(f.dataType) != [] for f in snake.fields] == [True, True]
    assert len(_leaves(snake)) == len(_leaves(camel))
    assert "stats.sourceTransports.lbtrm.bytesSent" in _leaves(camel)
    assert spark_type(DESC, keep=None) == spark_type(DESC)
    assert len(_leaves(spark_type(DESC))) > len(_leaves(snake))
