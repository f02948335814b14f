"""Running boxes: each box is one Spark streaming query from its input topics to its output topic.

Around the box itself the runner does what every box needs: decode the inputs,
hold back late tuples with a watermark, pass BOUNDARY rows on (so downstream
windows close when no data arrives), send INVALID records to the dead-letter
topic of the stream they came from, and encode the results with the registered
schema and the envelope headers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from opentelemetry import trace
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StructType

from medusa.envelope import TRACEPARENT_HEADER, boundary
from medusa.registry import register
from medusa.schemas import load_schema
from medusa.stack.endpoints import Endpoints
from medusa.topics import dead_letter_topic, ensure_topics, partition_count
from medusa.tracing import context_of, traceparent
from medusa_spark.avro_types import record_schema, struct_of
from medusa_spark.durations import duration_ms
from medusa_spark.network.validate import Plan
from medusa_spark.soutput import Header, OutputFencedError, OutRecord, SOutput, record_id
from medusa_spark.streams import (
    BOUNDARY,
    CONTROL_EXTRA_TYPES,
    CONTROL_EXTRAS,
    ENVELOPE,
    INVALID,
    RAW,
    RAW_HEADERS,
    REASON,
    SOURCE,
    STIME,
    TRACE,
    TYPE,
    KafkaStream,
    encode,
    is_data,
    read_stream,
)

EMIT_TIME = "emit_time"
AVAILABLE_NOW = "available-now"
PORT = "_port"
"""On control rows: the input port a BOUNDARY or INVALID record came in on."""


@dataclass(frozen=True)
class BoxWiring:
    box: str
    inputs: dict[str, KafkaStream]
    output: KafkaStream
    output_fields: StructType
    """The output schema's fields, in order, with their Spark types."""
    partitions: int
    key: tuple[str, ...]
    topic_prefix: str
    """The prefix of this copy of the network's topics."""


def announce_start(stream: KafkaStream, partitions: int) -> None:
    """A BOUNDARY at stime 0 on every partition of a new topic.

    Spark gives an input a watermark only once a row has come in on it; until then a
    join or union downstream would follow its other inputs alone. This first row makes
    every box output an input with a watermark from the very first batch.
    """
    producer = Producer({"bootstrap.servers": stream.bootstrap, "enable.idempotence": True})
    for partition in range(partitions):
        envelope = boundary(f"{stream.topic}/start", partition, 0)
        producer.produce(stream.topic, value=None, partition=partition,
                         headers=envelope.headers())
    if producer.flush(30) != 0:
        raise RuntimeError(f"could not write the start boundary of {stream.topic}")


def _registered(registry: SchemaRegistryClient, topic: str, bootstrap: str,
                schema_text: str) -> KafkaStream:
    registration = register(registry, topic, schema_text)
    return KafkaStream(topic, bootstrap, registration.schema_id, schema_text)


def wire(plan: Plan, endpoints: Endpoints, registry: SchemaRegistryClient,
         topic_prefix: str = "", announce: bool = True) -> dict[str, BoxWiring]:
    """Creates the topics and registers the schemas the network needs; says who reads what.

    ``topic_prefix`` runs a copy of the network on topics of its own (tests, benchmarks).
    ``announce`` writes the start BOUNDARY into the topics the boxes write: once, when the
    network is deployed, not again when a node starts or takes over a box.
    """
    network = plan.network
    topic_prefix = network.topic_prefix + topic_prefix
    streams: dict[str, KafkaStream] = {}
    for name, spec in network.streams.items():
        bootstrap = endpoints.bootstrap(spec.participant)
        topic = topic_prefix + spec.topic
        ensure_topics({"bootstrap.servers": bootstrap}, [topic], partitions=network.partitions)
        streams[name] = _registered(registry, topic, bootstrap,
                                    load_schema(spec.schema_name).text)
    for box in plan.order:
        declared = plan.output_stream[box]
        if declared is not None:
            streams[box] = streams[declared]
            if announce:
                announce_start(streams[box], network.partitions)
            continue
        participant = network.boxes[box].participant or network.participant
        bootstrap = endpoints.bootstrap(participant)
        topic = topic_prefix + network.intermediate_topic(box)
        ensure_topics({"bootstrap.servers": bootstrap}, [topic], partitions=network.partitions)
        schema = record_schema(plan.output_schemas[box], box,
                               f"medusa.network.{network.name.replace('-', '_')}")
        streams[box] = _registered(registry, topic, bootstrap, schema)
        if announce:
            announce_start(streams[box], network.partitions)
    wiring = {}
    for box in plan.order:
        output = streams[box]
        inputs = {port: streams[source] for port, source in plan.inputs[box].items()}
        for stream in inputs.values():
            ensure_topics({"bootstrap.servers": stream.bootstrap},
                          [dead_letter_topic(stream.topic)], partitions=1)
        wiring[box] = BoxWiring(
            box=box, inputs=inputs, output=output, output_fields=struct_of(output.schema),
            partitions=partition_count({"bootstrap.servers": output.bootstrap}, output.topic),
            key=tuple(network.boxes[box].key), topic_prefix=topic_prefix,
        )
    return wiring


def _lateness(plan: Plan, box: str) -> str:
    return str(getattr(plan.boxes[box].params, "lateness", plan.network.lateness))


def build_box(spark: SparkSession, plan: Plan, wiring: BoxWiring,
              max_offsets_per_trigger: int | None = None) -> DataFrame:
    """The box's output rows: its results, then BOUNDARY and INVALID rows passed around it."""
    box = plan.boxes[wiring.box]
    inputs = {}
    for port, stream in wiring.inputs.items():
        frame = read_stream(spark, stream, max_offsets_per_trigger)
        if box.stateful:
            frame = frame.withWatermark(STIME, _lateness(plan, wiring.box))
        inputs[port] = frame
    results = box.apply({port: frame.where(is_data()) for port, frame in inputs.items()})
    value_columns = [
        (F.col(field.name).cast(field.dataType) if field.name in results.columns
         else F.lit(None).cast(field.dataType)).alias(field.name)
        for field in wiring.output_fields.fields if field.name != EMIT_TIME
    ]
    trace = (F.col(TRACE) if TRACE in results.columns else F.lit(None).cast("string"))
    output = results.select(*ENVELOPE, *value_columns,
                            *(F.lit(None).cast(t).alias(c) for c, t in
                              zip(CONTROL_EXTRAS, CONTROL_EXTRA_TYPES, strict=True)),
                            trace.alias(TRACE))
    lag = F.expr(f"INTERVAL {box.boundary_lag_ms()} MILLISECONDS")
    output = output.withColumn(PORT, F.lit(None).cast("string"))
    for port, frame in inputs.items():
        control = frame.where(F.col(TYPE).isin(BOUNDARY, INVALID)).select(
            F.col(TYPE), F.col("_id"),
            F.when(F.col(TYPE) == BOUNDARY, F.col(STIME) - lag).otherwise(F.col(STIME))
            .alias(STIME),
            *(F.lit(None).cast(field.dataType).alias(field.name)
              for field in wiring.output_fields.fields if field.name != EMIT_TIME),
            *CONTROL_EXTRAS,
            F.lit(None).cast("string").alias(TRACE),
            F.lit(port).alias(PORT),
        )
        output = output.unionByName(control)
    return output


class BoxHaltedError(RuntimeError):
    """Raised by a box's writer after ``halt``: the batch is left to whoever runs the box next."""


class BatchWriter:
    """foreachBatch sink: results to the output topic, INVALID rows to dead-letter topics,
    then one BOUNDARY per output partition.

    The box's own boundary is the smallest of its inputs' latest boundaries: an input
    that is behind holds the output back, as SUnion holds a bucket until every input's
    BOUNDARY has passed it. A stateful box releases it one batch later: Spark computes
    the watermark a batch uses from the batches before it, so results that the inputs
    of this batch make final only come out in the next one.
    """

    def __init__(self, wiring: BoxWiring, on_batch: Callable[[str, int], None] | None = None,
                 delay_boundaries: bool = False, standby: bool = False):
        self.wiring = wiring
        self.on_batch = on_batch
        self.delay_boundaries = delay_boundaries
        self.output = SOutput(wiring.output.topic, wiring.output.bootstrap, standby=standby)
        self._fields = [f.name for f in wiring.output_fields.fields]
        self._input_boundaries: dict[str, Any] = {}
        self._pending: Any = None
        self._emitted: Any = None
        self.lock = threading.Lock()
        self._halted = False
        self.last_written: int | None = None
        """The id of the last batch written in full."""

    def halt(self) -> int | None:
        """No batch is written after this returns; says the last one that was."""
        with self.lock:
            self._halted = True
            return self.last_written

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        # Held for the whole batch: ``halt`` waits for a batch being written to finish.
        with self.lock:
            if self._halted:
                # Nothing of this batch is written and Spark does not commit it, so the
                # box's next runner replays it from the same offsets and state.
                raise BoxHaltedError(f"box {self.wiring.box} is handing over; "
                                     f"batch {batch_id} is left to its next runner")
            self._write_batch(batch, batch_id)
            self.last_written = batch_id
        if self.on_batch is not None:
            self.on_batch(self.wiring.box, batch_id)

    def _write_batch(self, batch: DataFrame, batch_id: int) -> None:
        output = self.wiring.output
        batch = batch.persist()
        try:
            data = batch.where(is_data())
            if EMIT_TIME in self._fields:
                data = data.withColumn(EMIT_TIME, F.unix_millis(F.current_timestamp()))
            encoded = encode(data, self._fields, output.schema_id, output.schema,
                             list(self.wiring.key) or None)
            started_ns = time.time_ns()
            records = [self._traced(_out_record(row), row[TRACE], started_ns, batch_id)
                       if row[TRACE] else _out_record(row) for row in encoded.collect()]
            self._dead_letters(batch.where(F.col(TYPE) == INVALID))
            latest = (batch.where(F.col(TYPE) == BOUNDARY).groupBy(PORT)
                      .agg(F.unix_millis(F.max(STIME)).alias("stime")).collect())
            for row in latest:
                known = self._input_boundaries.get(row[PORT])
                if known is None or row["stime"] > known:
                    self._input_boundaries[row[PORT]] = row["stime"]
            current = (min(self._input_boundaries.values())
                       if set(self._input_boundaries) >= set(self.wiring.inputs) else None)
            release = self._pending if self.delay_boundaries else current
            self._pending = current
            if release is not None and (self._emitted is None or release > self._emitted):
                records += self._boundaries(release)
                self._emitted = release
            # Results and boundaries of the batch: one transaction, each id once.
            self.output.write(records)
        finally:
            batch.unpersist()

    def _write(self, frame: DataFrame, topic: str) -> None:
        (frame.write.format("kafka")
         .option("kafka.bootstrap.servers", self.wiring.output.bootstrap)
         .option("topic", topic).save())

    def _dead_letters(self, invalid: DataFrame) -> None:
        for (source,) in invalid.select(SOURCE).distinct().collect():
            letters = invalid.where(F.col(SOURCE) == source).select(
                F.lit(None).cast("string").alias("key"), F.col(RAW).alias("value"),
                F.concat(F.coalesce(F.col(RAW_HEADERS), F.array().cast(
                    "array<struct<key:string,value:binary>>")), F.array(
                    F.struct(F.lit("medusa.dlq.reason").alias("key"),
                             F.col(REASON).cast("binary").alias("value")),
                    F.struct(F.lit("medusa.dlq.topic").alias("key"),
                             F.col(SOURCE).cast("binary").alias("value")),
                    F.struct(F.lit("medusa.dlq.box").alias("key"),
                             F.lit(self.wiring.box).cast("binary").alias("value")),
                )).alias("headers"))
            self._write(letters, dead_letter_topic(source))

    def _traced(self, record: OutRecord, parent: str, started_ns: int,
                batch_id: int) -> OutRecord:
        """A sampled tuple: a span for this box, whose context rides on to the next."""
        span = trace.get_tracer("medusa").start_span(
            f"box {self.wiring.box}", context=context_of(parent), start_time=started_ns,
            attributes={"medusa.id": record.tuple_id, "medusa.box": self.wiring.box,
                        "medusa.batch": batch_id})
        span.end()
        own = traceparent(span)
        return record if own is None else _with_header(record, TRACEPARENT_HEADER, own.encode())

    def _boundaries(self, stime_ms: int) -> list[OutRecord]:
        envelopes = [boundary(self.wiring.box, p, stime_ms) for p in range(self.wiring.partitions)]
        return [OutRecord(e.tuple_id, None, e.headers(), partition=p)
                for p, e in enumerate(envelopes)]


def _with_header(record: OutRecord, key: str, value: bytes) -> OutRecord:
    headers = [(k, v) for k, v in record.headers if k != key] + [(key, value)]
    return OutRecord(record.tuple_id, record.value, headers, record.key, record.partition)


def _out_record(row: Any) -> OutRecord:
    headers: list[Header] = [(h["key"], None if h["value"] is None else bytes(h["value"]))
                             for h in row["headers"]]
    key = row["key"]
    return OutRecord(record_id(headers), None if row["value"] is None else bytes(row["value"]),
                     headers, key=None if key is None else key.encode())


@dataclass
class BoxRun:
    """A running box: its Spark query and the writer that can halt it between batches."""

    box: str
    query: StreamingQuery
    writer: BatchWriter
    checkpoint: str

    def failure(self) -> str | None:
        """Why the query stopped, unless it stopped because it was asked to."""
        error = self.query.exception()
        if error is None or BoxHaltedError.__name__ in str(error):
            return None
        return str(error)

    def fenced(self) -> bool:
        """Whether the query stopped because another node took over its output."""
        error = self.query.exception()
        return error is not None and OutputFencedError.__name__ in str(error)

    @property
    def standby(self) -> bool:
        return self.writer.output.standby

    def promote(self) -> int:
        """A standby replica becomes the box's writer; returns the results it caught up.

        It does not wait for a batch in progress: that batch's results, written after the
        promotion, go through the same deduplication.
        """
        return self.writer.output.promote()

    def abandon(self) -> None:
        """Stops at once, writing nothing more: the box belongs to another node now."""
        self.writer.halt()
        self.query.stop()
        self.writer.output.close()

    def hand_over(self, timeout_s: float = 120.0) -> None:
        """Stops the box at a batch boundary, so its checkpoint holds exactly what it wrote.

        Every batch written is committed to the checkpoint before the query stops; a
        batch begun after ``halt`` writes nothing and is replayed by the next runner.
        """
        last = self.writer.halt()
        deadline = time.monotonic() + timeout_s
        while last is not None and self.query.isActive:
            progress: dict[str, Any] = self.query.lastProgress or {}
            if int(progress.get("batchId", -1)) >= last:
                break  # progress is reported after the batch's commit
            if time.monotonic() > deadline:
                raise TimeoutError(f"box {self.box}: batch {last} was not committed within "
                                   f"{timeout_s:.0f}s")
            time.sleep(0.05)
        self.query.stop()
        self.writer.output.close()


def checkpoint_location(checkpoint_root: str, plan: Plan, wiring: BoxWiring) -> str:
    # Topics are part of a query's identity: a copy on other topics has its own checkpoints.
    return (f"{checkpoint_root.rstrip('/')}/{plan.network.name}/"
            f"{wiring.topic_prefix}{wiring.box}")


def run_box(spark: SparkSession, plan: Plan, wiring: BoxWiring, checkpoint: str,
            trigger: str | None = None, max_offsets_per_trigger: int | None = None,
            on_batch: Callable[[str, int], None] | None = None,
            standby: bool = False) -> BoxRun:
    """Starts one box as a Spark query, resuming from ``checkpoint`` when it holds one.

    A ``standby`` box (an active replica) computes everything and writes nothing until
    promoted (see ``soutput``).
    """
    network = plan.network
    frame = build_box(spark, plan, wiring, max_offsets_per_trigger)
    interval = trigger or network.trigger
    batch_writer = BatchWriter(wiring, on_batch,
                               delay_boundaries=plan.boxes[wiring.box].stateful,
                               standby=standby)
    suffix = "/standby" if standby else ""
    writer = (frame.writeStream.queryName(f"{network.name}/{wiring.box}{suffix}")
              .outputMode("append")
              .foreachBatch(batch_writer)
              .option("checkpointLocation", checkpoint))
    if interval == AVAILABLE_NOW:  # process what is there, then stop (benchmarks)
        query = writer.trigger(availableNow=True).start()
    else:
        duration_ms(interval)  # fail early on a malformed trigger
        query = writer.trigger(processingTime=interval).start()
    return BoxRun(wiring.box, query, batch_writer, checkpoint)


def start_box(spark: SparkSession, plan: Plan, wiring: BoxWiring, checkpoint_root: str,
              trigger: str | None = None, max_offsets_per_trigger: int | None = None,
              on_batch: Callable[[str, int], None] | None = None) -> StreamingQuery:
    """A box's query, checkpointed under ``checkpoint_root``."""
    return run_box(spark, plan, wiring, checkpoint_location(checkpoint_root, plan, wiring),
                   trigger, max_offsets_per_trigger, on_batch).query


def _busy(query: StreamingQuery) -> bool:
    progress: dict[str, Any] = query.lastProgress or {}
    return bool(query.status.get("isTriggerActive") or query.status.get("isDataAvailable")
                or progress.get("numInputRows", 1) != 0)


def wait_until_quiet(queries: list[StreamingQuery], timeout_s: float = 600.0,
                     quiet_checks: int = 3, interval_s: float = 3.0,
                     on_check: Callable[[int], None] | None = None) -> None:
    """Waits until no query has had input for ``quiet_checks`` checks in a row.

    Raises the first query's failure, or TimeoutError.
    """
    deadline = time.monotonic() + timeout_s
    quiet, check = 0, 0
    while quiet < quiet_checks:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the boxes were still busy after {timeout_s:.0f}s")
        time.sleep(interval_s)
        check += 1
        for query in queries:
            failure = query.exception()
            if failure is not None:
                raise RuntimeError(f"box {query.name} failed: {failure}") from None
        busy = [q for q in queries if _busy(q)]
        quiet = 0 if busy else quiet + 1
        if on_check is not None:
            on_check(len(busy))
