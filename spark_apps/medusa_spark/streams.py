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
from pyspark.sql.avro.functions import to_avro

from medusa.envelope import ID_HEADER, STIME_HEADER, TRACEPARENT_HEADER, TYPE_HEADER
from medusa_spark.wire import decode_avro, header, schema_id

TYPE, ID, STIME = "_type", "_id", "_stime"
TRACE = "_trace"
"""The W3C traceparent of a sampled tuple (null for the rest); boxes that keep their input
rows (filter, union) pass it on, so the tuple's trace reaches the sink."""
ENVELOPE = (TYPE, ID, STIME)
RAW, RAW_HEADERS, REASON, SOURCE = "_raw", "_raw_headers", "_reason", "_source"
"""Set on INVALID rows only: the original value and headers, why it is unusable, its topic."""
CONTROL_EXTRAS = (RAW, RAW_HEADERS, REASON, SOURCE)
CONTROL_EXTRA_TYPES = ("binary", "array<struct<key:string,value:binary>>", "string", "string")
BOUNDARY = "BOUNDARY"
TENTATIVE = "TENTATIVE"
STABLE = "STABLE"
INVALID = "INVALID"


@dataclass(frozen=True)
class KafkaStream:
    """Where a stream lives and which registered schema its records are written with."""

    topic: str
    bootstrap: str
    schema_id: int
    schema: str
    """The writer schema (Avro JSON) registered under ``schema_id``."""


def is_data() -> Column:
    return F.col(TYPE).isin(STABLE, TENTATIVE)


def read_stream(spark: SparkSession, stream: KafkaStream, max_offsets_per_trigger: int | None
                = None, starting_offsets: str = "earliest") -> DataFrame:
    """The stream as envelope columns plus the record's fields (see ``decode``)."""
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", stream.bootstrap)
              .option("subscribe", stream.topic)
              .option("startingOffsets", starting_offsets)
              .option("includeHeaders", "true")
              # Box outputs are written in transactions: never read an aborted one.
              .option("kafka.isolation.level", "read_committed")
              .option("failOnDataLoss", "true"))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return decode(reader.load(), stream)


def decode(raw: DataFrame, stream: KafkaStream) -> DataFrame:
    """Envelope columns, the record's fields, and for records that cannot be used
    (``_type`` INVALID) the raw value and the reason, for the dead-letter topic."""
    value = F.col("value")
    writer_id = schema_id(value)
    decoded = F.when(value.isNotNull() & (writer_id == stream.schema_id),
                     decode_avro(value, stream.schema))
    declared = header(TYPE_HEADER)
    stime = header(STIME_HEADER)
    reason = (
        F.when(declared.isNull() | header(ID_HEADER).isNull() | stime.isNull(),
               F.lit("record lacks envelope headers"))
        .when(~declared.isin(STABLE, TENTATIVE, BOUNDARY),
              F.concat(F.lit("tuple type "), declared, F.lit(" is not processed by boxes")))
        .when(declared == BOUNDARY, F.lit(None))
        .when(value.isNull(), F.lit("data record has no value"))
        .when(writer_id != stream.schema_id,
              F.concat(F.lit("written with schema id "), writer_id.cast("string"),
                       F.lit(f", expected {stream.schema_id}")))
        .when(decoded.isNull(), F.lit("value is not valid Avro for the stream's schema"))
    )
    rows = raw.select(
        declared.alias("_declared"), header(ID_HEADER).alias(ID),
        F.timestamp_millis(stime.cast("long")).alias(STIME),
        decoded.alias("_value"), reason.alias(REASON), value.alias("_bytes"),
        F.col("headers").alias("_headers"), header(TRACEPARENT_HEADER).alias("_traceparent"))
    return rows.select(
        F.when(F.col(REASON).isNull(), F.col("_declared")).otherwise(F.lit(INVALID)).alias(TYPE),
        ID, STIME, "_value.*",
        F.when(F.col(REASON).isNotNull(), F.col("_bytes")).alias(RAW),
        F.when(F.col(REASON).isNotNull(), F.col("_headers")).alias(RAW_HEADERS),
        F.col(REASON),
        F.lit(stream.topic).alias(SOURCE),
        F.col("_traceparent").alias(TRACE),
    )


INPUT = "_input"
"""On the SUnion's records: the fragment input (stream or upstream box) a tuple came from."""
INPUT_HEADER = "medusa.input"


def envelope_of(raw: DataFrame) -> DataFrame:
    """The envelope of Kafka rows, read from their headers once: ``_type`` as declared,
    ``_id``, ``_stime``, the SUnion's ``_input``, the raw value and headers, the trace."""
    return raw.select(
        header(TYPE_HEADER).alias(TYPE), header(ID_HEADER).alias(ID),
        F.timestamp_millis(header(STIME_HEADER).cast("long")).alias(STIME),
        header(INPUT_HEADER).alias(INPUT), F.col("value").alias("_bytes"),
        F.col("headers").alias("_headers"), header(TRACEPARENT_HEADER).alias(TRACE))


def decode_input(source: DataFrame, name: str, stream: KafkaStream) -> DataFrame:
    """One input's tuples out of the SUnion's records (see ``envelope_of``): envelope
    columns and the record's fields; records that cannot be used become INVALID rows with
    the raw record, the reason and the stream's own topic, for its dead-letter topic."""
    rows = source.where(F.col(INPUT) == name)
    value = F.col("_bytes")
    writer_id = schema_id(value)
    decoded = F.when(value.isNotNull() & (writer_id == stream.schema_id),
                     decode_avro(value, stream.schema))
    declared = F.col(TYPE)
    reason = (
        F.when(F.col(ID).isNull() | F.col(STIME).isNull(),
               F.lit("record lacks envelope headers"))
        .when(~declared.isin(STABLE, TENTATIVE),
              F.concat(F.lit("tuple type "), declared, F.lit(" is not processed by boxes")))
        .when(value.isNull(), F.lit("data record has no value"))
        .when(writer_id != stream.schema_id,
              F.concat(F.lit("written with schema id "), writer_id.cast("string"),
                       F.lit(f", expected {stream.schema_id}")))
        .when(decoded.isNull(), F.lit("value is not valid Avro for the stream's schema"))
    )
    checked = rows.select(TYPE, ID, STIME, TRACE, decoded.alias("_value"),
                          reason.alias(REASON), "_bytes", "_headers")
    return checked.select(
        F.when(F.col(REASON).isNull(), F.col(TYPE)).otherwise(F.lit(INVALID)).alias(TYPE),
        ID, STIME, "_value.*",
        F.when(F.col(REASON).isNotNull(), F.col("_bytes")).alias(RAW),
        F.when(F.col(REASON).isNotNull(), F.col("_headers")).alias(RAW_HEADERS),
        F.col(REASON),
        F.lit(stream.topic).alias(SOURCE),
        F.col(TRACE),
    )


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
    trace = [F.col(TRACE)] if TRACE in frame.columns else []
    return frame.select(key.alias("key"), value.alias("value"), headers.alias("headers"), *trace)
