"""Spark types generated from the statistics ``.proto`` descriptors.

Theory of operation
-------------------
The collector keeps a message two ways: protobuf's canonical JSON in UM's SQLite rows
(lowerCamelCase names, 64-bit integers as strings) and a struct in Parquet (the ``.proto``'s
snake_case names, :func:`umcore.monitor.collector.arrow_type`).  :func:`spark_type` gives the
Spark struct of a message type with either spelling, field for field in declaration order, so a
JSON row parsed with the camelCase type is *cast* to the snake_case type (a struct cast goes by
position) and both inputs reach the jobs in one shape.

Unsigned 64-bit counters become ``decimal(20,0)``: a ``long`` cannot hold UM's ``ULONG_MAX``
"no sample" value, and Spark reads Parquet's ``uint64`` as that decimal too.  Unsigned 32-bit
values become ``long`` (Spark's reading of Parquet ``uint32``), enums their names.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from pyspark.sql import types as T

from umcore.monitor.pb import dro_mon_pb2, srs_mon_pb2, ump_mon_pb2, ums_mon_pb2

__all__ = ["MESSAGES", "U64", "spark_type"]

# UM's four kinds (the MCS tables <kind>monmsg, the Parquet partitions kind=<kind>).
MESSAGES: dict[str, Any] = {
    "ums": ums_mon_pb2.UMSMonMsg,
    "ump": ump_mon_pb2.UMPMonMsg,
    "dro": dro_mon_pb2.DROMonMsg,
    "srs": srs_mon_pb2.SRSMonMsg,
}
U64 = T.DecimalType(20, 0)

_SCALARS: dict[int, T.DataType] = {
    FieldDescriptor.TYPE_DOUBLE: T.DoubleType(),
    FieldDescriptor.TYPE_FLOAT: T.FloatType(),
    FieldDescriptor.TYPE_INT64: T.LongType(),
    FieldDescriptor.TYPE_SINT64: T.LongType(),
    FieldDescriptor.TYPE_SFIXED64: T.LongType(),
    FieldDescriptor.TYPE_UINT64: U64,
    FieldDescriptor.TYPE_FIXED64: U64,
    FieldDescriptor.TYPE_INT32: T.IntegerType(),
    FieldDescriptor.TYPE_SINT32: T.IntegerType(),
    FieldDescriptor.TYPE_SFIXED32: T.IntegerType(),
    FieldDescriptor.TYPE_UINT32: T.LongType(),
    FieldDescriptor.TYPE_FIXED32: T.LongType(),
    FieldDescriptor.TYPE_BOOL: T.BooleanType(),
    FieldDescriptor.TYPE_STRING: T.StringType(),
    FieldDescriptor.TYPE_BYTES: T.BinaryType(),
    FieldDescriptor.TYPE_ENUM: T.StringType(),
}


def spark_type(
    descriptor: Any,
    *,
    json_names: bool = False,
    keep: Collection[str] | None = None,
    _prefix: str = "",
) -> T.StructType:
    """The Spark struct of a protobuf message type; ``json_names``: canonical JSON's names.

    ``keep``: only these fields, as dotted snake_case paths from the message (an element of a
    repeated field has its field's path; ``"stats.source_transports.lbtrm"`` keeps that struct
    whole).  Parquet then reads only those columns, and ``from_json`` parses only those keys:
    a struct keeps its null-ness (a ``oneof`` member absent is still null) with fewer fields.
    """
    fields = []
    for f in descriptor.fields:
        t: T.DataType
        path = _prefix + f.name
        sub: Collection[str] | None = None
        if keep is not None:
            if any(k == path or path.startswith(k + ".") for k in keep):
                sub = None  # the whole field
            elif any(k.startswith(path + ".") for k in keep):
                sub = keep
            else:
                continue
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            t = spark_type(f.message_type, json_names=json_names, keep=sub, _prefix=path + ".")
        else:
            t = _SCALARS[f.type]
        if f.is_repeated:
            t = T.ArrayType(t, True)
        fields.append(T.StructField(f.json_name if json_names else f.name, t, True))
    return T.StructType(fields)
