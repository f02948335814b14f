"""Medusa streams in a fragment's query: wire-format Avro values, envelope headers.

Inside a fragment a tuple is a row with the envelope columns ``_type`` (STABLE or
TENTATIVE), ``_id`` and ``_stime`` (a timestamp, for windows and
watermarks) followed by the record's own fields.
"""

from __future__ import annotations

import struct as binary
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from medusa.envelope import (
    ID_HEADER,
    REDO_HEADER,
    STIME_HEADER,
    TENTATIVE_HEADER,
    TRACEPARENT_HEADER,
    TYPE_HEADER,
)
from medusa_spark.wire import decode_avro, header, schema_id

TYPE, ID, STIME = "_type", "_id", "_stime"
TRACE = "_trace"
"""The W3C traceparent of a sampled tuple (null for the rest); boxes that keep their input
rows (filter, union) pass it on, so the tuple's trace reaches the sink."""
EPOCH = "_epoch"
"""The UP_FAILURE period a SUnion record belongs to (``medusa.tentative``), else null."""
REDO = "_redo"
"""On the BOUNDARY records of a SUnion's REDO: the period it corrects, else null (their
``_trace`` is the SUnion's trace of that period)."""
RAW, RAW_HEADERS, REASON, SOURCE = "_raw", "_raw_headers", "_reason", "_source"
"""Set on INVALID rows only: the original value and headers, why it is unusable, its topic."""
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


SOURCE_OFFSET = "_source_offset"
"""A real-time fragment's source records' offsets, kept on its control rows (``realtime``)."""
CARRIED = "_carried"
"""In a real-time fragment's boxes: on a source BOUNDARY that one reader of the source
carries through them (a struct: its envelope, source offset and ``READER``), null on
tuples. Filters keep such rows and maps pass the column on, so that the BOUNDARY is staged
after every result of that reader below it (see ``realtime``)."""
READER = "_reader"
"""Which reader of the source carried a BOUNDARY (see ``CARRIED``)."""
REALTIME_COLUMNS = (EPOCH, REDO, CARRIED)
"""What a real-time reader's rows keep beside their fields, through its boxes: each
tuple's DPC marks (its writer reconciles in the stream, see ``fragment_writer``) and the
BOUNDARY it carries."""
INPUT = "_input"
"""On the SUnion's records: the fragment input (stream or upstream box) a tuple came from."""
INPUT_HEADER = "medusa.input"


UNUSABLE = "_unusable"
"""Why a tuple of an input cannot be used by boxes (null when it can, and on records of
no input: the BOUNDARY records)."""


def value_of(name: str) -> str:
    """The column holding input ``name``'s decoded fields (a struct; null on other rows)."""
    return f"_value_{name}"


def envelope_of(raw: DataFrame, inputs: dict[str, KafkaStream]) -> DataFrame:
    """The envelope of Kafka rows, read from their headers once: ``_type`` as declared,
    ``_id``, ``_stime``, the SUnion's ``_input``, the raw value and headers, the trace,
    and DPC's marks (``_epoch``, ``_redo``); the source offset too where ``raw`` has it.
    Each of ``inputs``' tuples is decoded here, once (``value_of``), and ``_unusable``
    says why a tuple cannot be used.

    Spark's optimizer pushes a filter through a projection by copying the projection's
    expressions into it: each filter over these columns (the redone records', an
    input's, the control rows') decoded the value and read the headers again, six Avro
    decodes and 17 header lookups in the sensor fragment's plan, planned and compiled
    anew in every batch. It pushes none through a projection with a nondeterministic
    column, so ``_type``, which every filter reads, is made one (``_pinned``): the
    filters stay above the decoding."""
    offset = [F.col(SOURCE_OFFSET)] if SOURCE_OFFSET in raw.columns else []
    read = raw.select(*offset,
        header(TYPE_HEADER).alias(TYPE), header(ID_HEADER).alias(ID),
        F.timestamp_millis(header(STIME_HEADER).cast("long")).alias(STIME),
        header(INPUT_HEADER).alias(INPUT), F.col("value").alias("_bytes"),
        F.col("headers").alias("_headers"), header(TRACEPARENT_HEADER).alias(TRACE),
        header(TENTATIVE_HEADER).cast("int").alias(EPOCH),
        header(REDO_HEADER).cast("int").alias(REDO))
    decoded = read.select(*(_pinned(TYPE) if c == TYPE else c for c in read.columns), *(
        F.when(F.col(INPUT) == name, _decoded(stream)).alias(value_of(name))
        for name, stream in sorted(inputs.items())))
    reason: Column = F.lit(None).cast("string")
    for name, stream in sorted(inputs.items(), reverse=True):
        reason = F.when(F.col(INPUT) == name, _unusable_reason(stream, F.col(value_of(name)))
                        ).otherwise(reason)
    return decoded.select("*", reason.alias(UNUSABLE))


def _pinned(column: str) -> Column:
    """``column`` as it is, through an expression Spark's optimizer takes for
    nondeterministic (a partition's id is never negative)."""
    return F.when(F.spark_partition_id() >= 0, F.col(column)).alias(column)


def without_redone(source: DataFrame, skip_epoch: int) -> DataFrame:
    """The SUnion's records less those of the UP_FAILURE periods up to ``skip_epoch``,
    which its REDO releases replaced, and less the tuples of the REDOs of later periods:
    the query read those periods' tentative tuples and goes on from them until a query
    that redoes the period takes over (see ``reconcile``)."""
    redone = F.col(REDO).isNull() | (F.col(TYPE) == F.lit(BOUNDARY)) | \
        (F.col(REDO) <= F.lit(skip_epoch))
    if skip_epoch <= 0:
        return source.where(redone)
    return source.where((F.col(EPOCH).isNull() | (F.col(EPOCH) > F.lit(skip_epoch))) & redone)


def _decoded(stream: KafkaStream) -> Column:
    """The record's fields (a struct) when its value is in the stream's schema, else null."""
    value = F.col("_bytes")
    return F.when(value.isNotNull() & (schema_id(value) == stream.schema_id),
                  decode_avro(value, stream.schema))


def _unusable_reason(stream: KafkaStream, decoded: Column) -> Column:
    """Why a tuple of ``stream`` (envelope columns, ``decoded`` its fields) cannot be used
    by boxes; null when it can."""
    value = F.col("_bytes")
    writer_id = schema_id(value)
    declared = F.col(TYPE)
    return (
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


def decode_input(source: DataFrame, name: str, stream: KafkaStream,
                 reader: int | None = None) -> DataFrame:
    """One input's usable tuples out of the SUnion's records (see ``envelope_of``):
    envelope columns and the record's fields. The unusable ones are left to
    ``control_rows``. With ``reader`` (a real-time fragment's reader of its source, whose
    records keep their ``SOURCE_OFFSET``), the tuples keep their DPC marks and the
    BOUNDARY records come along as ``CARRIED`` rows (``REALTIME_COLUMNS``)."""
    wanted = (F.col(INPUT) == name) & F.col(UNUSABLE).isNull()
    carried: list[Column] = []
    if reader is not None:
        is_boundary = F.col(TYPE) == BOUNDARY
        wanted = wanted | is_boundary
        carried = [F.col(EPOCH), F.col(REDO),
                   F.when(is_boundary, F.struct(SOURCE_OFFSET, F.lit(reader).alias(READER),
                                                ID, STIME, TRACE)).alias(CARRIED)]
    decoded = source.where(wanted).select(TYPE, ID, STIME, F.col(value_of(name)).alias("_value"),
                                          TRACE, *carried)
    return decoded.select(TYPE, ID, STIME, "_value.*", TRACE,
                          *(REALTIME_COLUMNS if carried else ()))


def kept(frame: DataFrame, condition: Column) -> Column:
    """A box's condition for keeping a row: also true on the BOUNDARY rows a real-time
    reader carries (see ``CARRIED``)."""
    return condition | F.col(CARRIED).isNotNull() if CARRIED in frame.columns else condition


def control_rows(source: DataFrame, inputs: dict[str, KafkaStream],
                 boundaries: bool = True) -> DataFrame:
    """The SUnion's records that are not tuples for boxes, in one pass over them: its
    BOUNDARY records (with their DPC marks, and a REDO's traceparent; unless
    ``boundaries`` is false, where the readers carry them), and the tuples of ``inputs``
    (name -> stream) that cannot be used, as INVALID rows with the raw record, the reason
    and the stream's own topic, for its dead-letter topic."""
    topic: Column = F.lit(None).cast("string")
    for name, stream in sorted(inputs.items(), reverse=True):
        topic = F.when(F.col(INPUT) == name, F.lit(stream.topic)).otherwise(topic)
    reason = F.col(UNUSABLE)
    is_boundary = F.col(TYPE) == BOUNDARY if boundaries else F.lit(False)
    rows = source.where(is_boundary | reason.isNotNull())
    unusable = ~is_boundary
    offset = [F.col(SOURCE_OFFSET)] if SOURCE_OFFSET in source.columns else []
    return rows.select(*offset,
        F.when(is_boundary, F.lit(BOUNDARY)).otherwise(F.lit(INVALID)).alias(TYPE),
        ID, STIME,
        F.when(is_boundary, F.col(EPOCH)).alias(EPOCH),
        F.when(is_boundary, F.col(REDO)).alias(REDO),
        F.when(is_boundary & F.col(REDO).isNotNull(), F.col(TRACE)).alias(TRACE),
        F.when(unusable, F.col("_bytes")).alias(RAW),
        F.when(unusable, F.col("_headers")).alias(RAW_HEADERS),
        F.when(unusable, reason).alias(REASON),
        F.when(unusable, topic).alias(SOURCE),
    )


def wire_prefix(schema_id_: int) -> bytes:
    return b"\x00" + binary.pack(">I", schema_id_)
