"""A fragment as one Spark query: its SUnion's topic in, its boxes chained, its outputs out.

The fragment reads ONE topic, the one its SUnion writes on the node's cluster:
the tuples of all its inputs, bucket by bucket in stime order, each tuple tagged
with the input it came from (``medusa.input``) and each bucket closed by a
BOUNDARY. So the watermark is set once, at the source, one millisecond behind
the newest BOUNDARY: no tuple of an older bucket comes after a newer one, and a
window closes as soon as the inputs' boundaries say so, whatever the replay
speed. Arrows inside the fragment are DataFrame edges; only the outputs that
leave it (declared streams, or inputs of other fragments) are written, all in
one transaction per micro-batch (see ``fragment_writer``).

The query's rows, handed to the writer per micro-batch: one row per result of an
output box (``_output`` names the box; its fields packed in ``_v_<box>``), the
source's BOUNDARY rows (``_output`` null), and records that cannot be decoded
(``_type`` INVALID, with the raw record and the reason).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from medusa.settings import spark_kafka_options
from medusa.sunion.config import SUnionConfig, SUnionInput
from medusa_spark.boxes.port import PortBox
from medusa_spark.boxes.process import PORT
from medusa_spark.network.fragments import Fragment
from medusa_spark.network.validate import Plan
from medusa_spark.streams import (
    BOUNDARY,
    CARRIED,
    EPOCH,
    ID,
    READER,
    REDO,
    SOURCE_OFFSET,
    STIME,
    TRACE,
    TYPE,
    KafkaStream,
    control_rows,
    decode_input,
    envelope_of,
    without_redone,
)
from medusa_spark.sunion_source import SUNION_SOURCE

OUTPUT = "_output"
KEY = "_key"
EMIT_TIME = "emit_time"
"""A field the writer stamps with the wall clock when it writes the result."""
SOURCE_DELAY = "1 millisecond"
"""The watermark's delay behind the newest BOUNDARY: the SUnion's boundary at the end of
bucket k has the stime where bucket k+1 begins, and a tuple at the watermark is late."""


def packed(box: str) -> str:
    """The column holding an output box's fields."""
    return f"_v_{box}"


@dataclass(frozen=True)
class FragmentOutput:
    box: str
    stream: KafkaStream
    fields: StructType
    """The output schema's fields in order, with their Spark types."""
    key: tuple[str, ...]
    partitions: int
    owned: tuple[int, ...] | None = None
    """One of several instances' own partitions of an output another fragment reads (see
    ``scaling``): its results and promises go to these alone, so that each partition has
    one writer and the reader's SUnion sees its BOUNDARY promises in order. None: every
    partition, each result where its key puts it."""


@dataclass(frozen=True)
class Instance:
    """One instance of a scaled-out fragment (see ``scaling``): it keeps the input rows
    whose key hashes to ``index`` of ``count``, and writes the results from
    ``emit_from_ms`` on."""

    index: int
    count: int
    generation: int
    key: tuple[str, ...]
    emit_from_ms: int
    start_positions: dict[str, dict[int, int]]
    by_partition: bool = False
    """Its input is keyed by the fragment's key: its SUnion reads only the partitions p
    with p % count == index, which hold its keys and no other (no filter in the query)."""

    @property
    def suffix(self) -> str:
        """What tells its catalog entry, topic and checkpoint from the fragment's."""
        return f"--g{self.generation}-{self.index}"


@dataclass(frozen=True)
class FragmentWiring:
    """Everything a fragment's query needs to know about where its data lives."""

    network: str
    """The network's catalog name, ``participant/network``."""
    fragment: Fragment
    source: KafkaStream
    """The SUnion's topic on the node's cluster (no schema of its own: ``schema_id`` 0)."""
    inputs: dict[str, KafkaStream]
    """Input name (a stream, or a box of another fragment) -> the stream it is."""
    outputs: dict[str, FragmentOutput]
    bucket_ms: int
    fingerprint: str
    topic_prefix: str
    max_delay_ms: int | None = None
    """DPC's delay D for this fragment's SUnion; None: no tentative releases."""
    instance: Instance | None = None
    """Set when this is one instance of a scaled-out fragment."""
    sunion_in_query: bool = False
    """Its SUnion is its query's source (``medusa.spark.sunion``): no SUnion process, and
    ``source`` is not written; see ``read_fragment_input``."""

    @property
    def name(self) -> str:
        """The fragment's name in its network, with the instance's suffix if any."""
        return self.fragment.name + (self.instance.suffix if self.instance else "")

    @property
    def global_name(self) -> str:
        return f"{self.network}/{self.name}"

    def sunion_config(self, resume_from: dict[str, Any] | None = None,
                      otlp_endpoint: str | None = None) -> SUnionConfig:
        """The fragment's SUnion: its inputs, wherever they live, into its source topic;
        its traces to ``otlp_endpoint``, if given."""
        return SUnionConfig(
            fragment=self.global_name,
            inputs=[SUnionInput(name=name, topic=stream.topic, bootstrap=stream.bootstrap)
                    for name, stream in sorted(self.inputs.items())],
            output_topic=self.source.topic, output_bootstrap=self.source.bootstrap,
            bucket_ms=self.bucket_ms, max_delay_ms=self.max_delay_ms, resume_from=resume_from,
            start_positions=self.instance.start_positions if self.instance else None,
            partition_share=(self.instance.index, self.instance.count)
            if self.instance and self.instance.by_partition else None,
            otlp_endpoint=otlp_endpoint)


SOURCE_FETCH_WAIT_MS = 10
"""How long a fetch of the SUnion's topic waits for more records at the end of the log."""


def read_source(spark: SparkSession, source: KafkaStream, max_per_batch: int | None = None
                ) -> DataFrame:
    """The SUnion's topic, committed buckets only, from the start; ``max_per_batch``
    records at most in a batch (all there is by default)."""
    reader = spark.readStream.format("kafka")
    for key, value in spark_kafka_options(source.bootstrap).items():
        reader = reader.option(key, value)
    if max_per_batch is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_per_batch))
    return (reader.option("subscribe", source.topic)
            .option("startingOffsets", "earliest")
            .option("includeHeaders", "true")
            # A bucket is one transaction: never a part of one, never an aborted one.
            .option("kafka.isolation.level", "read_committed")
            # A batch that reaches the end of the topic (every batch of a quiet input)
            # would wait the Java consumer's default 500 ms for more to come.
            .option("kafka.fetch.max.wait.ms", str(SOURCE_FETCH_WAIT_MS))
            .option("failOnDataLoss", "true")
            .load())


def read_fragment_input(spark: SparkSession, wiring: FragmentWiring,
                        rehearsal_records: int | None = None) -> DataFrame:
    """The fragment's merged input: its SUnion's topic, or, with the SUnion in the query,
    its inputs read and released bucket by bucket by the SUnion source. Both give the
    rows of Spark's Kafka source, each tuple tagged with its input and each release closed
    by a BOUNDARY, so the query is built alike from either. ``rehearsal_records``: a
    rehearsal's (``node.rehearsals``) few records per batch or input partition, and no
    dead letters (the running query sends them)."""
    if not wiring.sunion_in_query:
        return read_source(spark, wiring.source, max_per_batch=rehearsal_records)
    reader = (spark.readStream.format(SUNION_SOURCE)
              .option("config", wiring.sunion_config().model_dump_json(exclude_none=True))
              # A release is read in as many tasks as the session has cores (at most one
              # per input partition).
              .option("parallelism", str(spark.sparkContext.defaultParallelism)))
    if rehearsal_records is not None:
        reader = reader.option("read_limit", str(rehearsal_records)).option("dead_letters",
                                                                            "false")
    for key, value in spark_kafka_options(wiring.source.bootstrap).items():
        if key != "kafka.bootstrap.servers":  # each input names its own cluster
            reader = reader.option(key, value)
    return reader.load()


def build_fragment(plan: Plan, wiring: FragmentWiring, raw: DataFrame | Callable[[], DataFrame],
                   skip_epoch: int = 0) -> DataFrame:
    """The fragment's rows for its writer, from the SUnion's records ``raw`` (Kafka rows:
    value, headers), less the records of the UP_FAILURE periods up to ``skip_epoch``
    (redone, see ``reconcile``); in Real-time Mode every record, each tuple with its DPC
    marks (its writer reconciles in the stream, see ``fragment_writer``).

    ``raw`` may be a function that loads the source: for Real-time Mode (see
    ``realtime``), which unions only distinct sources, so that every input a box reads
    and the control rows get a reader of their own; with no watermark nor observed
    metrics (its boxes are stateless)."""
    fragment = wiring.fragment
    realtime = callable(raw)

    inputs = {name: wiring.inputs[name] for name in fragment.inputs}

    def source() -> DataFrame:
        if callable(raw):  # a real-time query reads every record: it reconciles in the stream
            return envelope_of(raw(), inputs)
        return without_redone(envelope_of(raw, inputs), skip_epoch)

    shared = None if realtime else source().withWatermark(STIME, SOURCE_DELAY)
    readers = itertools.count()

    def input_frame(name: str) -> DataFrame:
        frame = decode_input(shared if shared is not None else source(), name,
                             wiring.inputs[name], next(readers) if realtime else None)
        if wiring.instance is not None and not wiring.instance.by_partition:
            frame = frame.where(owned_keys(wiring.instance))
        return frame

    frames: dict[str, DataFrame] = {}

    def frame_of(name: str) -> DataFrame:
        """A box's or an input's rows; built once, but in Real-time Mode anew for every
        reader (each then reads the source apart)."""
        if name in frames:
            return frames[name]
        if name in fragment.inputs:
            frame = input_frame(name)
        else:
            frame = plan.boxes[name].apply(
                {port: frame_of(src) for port, src in plan.inputs[name].items()})
        if not realtime:
            frames[name] = frame
        return frame

    rows: list[DataFrame] = []
    ports: dict[str, dict[str, FragmentOutput]] = {}
    for box, output in wiring.outputs.items():
        if isinstance(plan.boxes[box], PortBox):
            ports.setdefault(plan.inputs[box]["in"], {})[box] = output
        else:
            rows.append(_output_rows(box, frame_of(box), output, observed=not realtime))
    for process, outputs in ports.items():
        rows.append(_port_rows(plan, frame_of(process), outputs))
    # BOUNDARY and INVALID records in one reader of the source, not one each; in Real-time
    # Mode every reader carries the BOUNDARY records through its boxes instead.
    control = control_rows(shared if shared is not None else source(), inputs,
                           boundaries=not realtime)
    rows.append(control.withColumn(OUTPUT, F.lit(None).cast("string")))
    result = rows[0]
    for frame in rows[1:]:
        result = result.unionByName(frame, allowMissingColumns=True)
    return result


def owned_keys(instance: Instance) -> Column:
    """Whether a row's key falls to this instance (Spark's xxhash64 of the key fields)."""
    key = F.xxhash64(*[F.col(field) for field in instance.key])
    return F.pmod(key, F.lit(instance.count)) == F.lit(instance.index)


def _packed_value(output: FragmentOutput, column_of: Callable[[str], str | None]) -> Column:
    """An output's fields as a struct in its schema's order, each from the column
    ``column_of`` names; null where there is none (emit_time: stamped by the writer)."""
    values = []
    for field in output.fields.fields:
        column = column_of(field.name)
        value = F.col(column) if column is not None else F.lit(None)
        values.append(value.cast(field.dataType).alias(field.name))
    return F.struct(*values)


def _kafka_key(output: FragmentOutput, column_of: Callable[[str], str | None]) -> Column:
    """The output's key fields joined by '/'; null when it declares none."""
    if not output.key:
        return F.lit(None).cast("string")
    return F.concat_ws("/", *[F.col(column_of(k) or k).cast("string") for k in output.key])


def _output_rows(box: str, results: DataFrame, output: FragmentOutput,
                 observed: bool = True) -> DataFrame:
    def column_of(field: str) -> str | None:
        return field if field in results.columns else None

    trace = F.col(TRACE) if TRACE in results.columns else F.lit(None).cast("string")
    counted = results.observe(f"box.{box}", F.count(F.lit(1)).alias("rows")) if observed \
        else results
    if CARRIED not in results.columns:
        return counted.select(F.lit(box).alias(OUTPUT), TYPE, ID, STIME,
                              _kafka_key(output, column_of).alias(KEY), trace.alias(TRACE),
                              _packed_value(output, column_of).alias(packed(box)))
    # A real-time reader's results, and the BOUNDARY rows it carried as control rows.
    carried = F.col(CARRIED)
    result = carried.isNull()

    def either(data: Column, name: str) -> Column:
        return F.when(result, data).otherwise(carried[name]).alias(name)

    return counted.select(
        F.when(result, F.lit(box)).alias(OUTPUT),
        F.when(result, F.col(TYPE)).otherwise(F.lit(BOUNDARY)).alias(TYPE),
        either(F.col(ID), ID), either(F.col(STIME), STIME),
        F.when(result, _kafka_key(output, column_of)).alias(KEY), either(trace, TRACE),
        F.when(result, _packed_value(output, column_of)).alias(packed(box)),
        F.col(EPOCH), F.col(REDO),  # a tuple's or its carried BOUNDARY's, alike
        *(carried[name].alias(name) for name in (SOURCE_OFFSET, READER)))


def _port_rows(plan: Plan, results: DataFrame, outputs: dict[str, FragmentOutput]
               ) -> DataFrame:
    """The rows of a process box's port boxes from one pass over its results: Spark runs a
    stateful operator once per plan that reads it, so each port box reading it apart would
    run it (and keep its state) once per port."""
    output: Column = F.lit(None).cast("string")
    key: Column = F.lit(None).cast("string")
    packs = []
    counts = []
    for box, fragment_output in outputs.items():
        port_box = plan.boxes[box]
        assert isinstance(port_box, PortBox)
        here = F.col(PORT) == port_box.params.port
        column_of = {f: port_box.column_of(f) for f in port_box.field_names(results)}.get
        packs.append(F.when(here, _packed_value(fragment_output, column_of)).alias(packed(box)))
        output = F.when(here, F.lit(box)).otherwise(output)
        if fragment_output.key:
            key = F.when(here, _kafka_key(fragment_output, column_of)).otherwise(key)
        counts.append(F.count(F.when(here, 1)).alias(box))
    written = [plan.boxes[box].params.port for box in outputs]  # type: ignore[attr-defined]
    counted = results.where(F.col(PORT).isin(written)).observe(  # ports nobody reads: dropped
        f"boxes.{next(iter(outputs))}", *counts)
    return counted.select(output.alias(OUTPUT), TYPE, ID, STIME, key.alias(KEY),
                          F.lit(None).cast("string").alias(TRACE), *packs)


def start_query_frame(spark: SparkSession, plan: Plan, wiring: FragmentWiring,
                      skip_epoch: int = 0) -> DataFrame:
    return build_fragment(plan, wiring, read_fragment_input(spark, wiring), skip_epoch)
