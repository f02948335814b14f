"""Reading and writing Medusa streams in Spark: wire-format Avro values, envelope headers.

Inside a box a stream is a DataFrame with the envelope columns ``_type`` (STABLE,
TENTATIVE or BOUNDARY), ``_id`` and ``_stime`` (a timestamp, for windows and
watermarks) followed by the record's own fields. BOUNDARY rows have null fields.
"""

from __future__ import annotations

import struct as binary
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro, to_avro

from medusa.envelope import ID_HEADER, STIME_HEADER, TYPE_HEADER
from medusa_spark.wire import WIRE_HEADER_BYTES, header, schema_id

TYPE, ID, STIME = "_type", "_id", "_stime"
ENVELOPE = (TYPE, ID, STIME)
BOUNDARY = "BOUNDARY"
TENTATIVE = "TENTATIVE"
STABLE = "STABLE"


@dataclass(frozen=True)
class KafkaStream:
    """Where a stream lives and which registered schema its records are written with."""

    topic: str
    bootstrap: str
    schema_id: int
    schema: str
    """The writer schema (Avro JSON) registered under ``schema_id``."""


def is_data() -> Column:
    return F.col(TYPE) != F.lit(BOUNDARY)


def read_stream(spark: SparkSession, stream: KafkaStream, max_offsets_per_trigger: int | None
                = None, starting_offsets: str = "earliest") -> DataFrame:
    """The stream as envelope columns plus the record's fields.

    Records written with another schema id are dropped here and counted by the
    caller's dead-letter query (see ``undecodable``).
    """
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", stream.bootstrap)
              .option("subscribe", stream.topic)
              .option("startingOffsets", starting_offsets)
              .option("includeHeaders", "true")
              .option("failOnDataLoss", "true"))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return decode(reader.load(), stream)


def decode(raw: DataFrame, stream: KafkaStream) -> DataFrame:
    body = F.substring(F.col("value"), WIRE_HEADER_BYTES + 1, 2**31 - 1)
    decoded = raw.select(
        header(TYPE_HEADER).alias(TYPE),
        header(ID_HEADER).alias(ID),
        F.timestamp_millis(header(STIME_HEADER).cast("long")).alias(STIME),
        F.when(F.col("value").isNotNull(), schema_id(F.col("value"))).alias("_schema_id"),
        F.when(F.col("value").isNotNull() & (schema_id(F.col("value")) == stream.schema_id),
               from_avro(body, stream.schema, {"mode": "FAILFAST"})).alias("_value"),
    )
    known = decoded.where((F.col(TYPE) == BOUNDARY)
                          | (F.col("_schema_id") == stream.schema_id))
    return known.select(TYPE, ID, STIME, "_value.*")


def wire_prefix(schema_id_: int) -> bytes:
    return b"\x00" + binary.pack(">I", schema_id_)


def encode(frame: DataFrame, value_fields: list[str], schema_id_: int, avro_schema: str,
           key_fields: list[str] | None = None) -> DataFrame:
    """Rows -> Kafka sink columns (key, value, headers); BOUNDARY rows get no value."""
    value = F.when(
        is_data(),
        F.concat(F.lit(wire_prefix(schema_id_)),
                 to_avro(F.struct(*[F.col(f) for f in value_fields]), avro_schema)),
    )
    headers = F.array(
        F.struct(F.lit(TYPE_HEADER).alias("key"), F.col(TYPE).cast("binary").alias("value")),
        F.struct(F.lit(ID_HEADER).alias("key"), F.col(ID).cast("binary").alias("value")),
        F.struct(F.lit(STIME_HEADER).alias("key"),
                 F.unix_millis(F.col(STIME)).cast("string").cast("binary").alias("value")),
    )
    key = (F.when(is_data(), F.concat_ws("/", *[F.col(k).cast("string") for k in key_fields]))
           if key_fields else F.lit(None).cast("string"))
    return frame.select(key.alias("key"), value.alias("value"), headers.alias("headers"))
