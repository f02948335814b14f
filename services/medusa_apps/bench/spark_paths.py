"""Spark throughput: a plain Kafka-to-Kafka passthrough against a one-filter Medusa fragment.

All read the same pre-filled topic of position reports (with its producer's
BOUNDARY records and a last one past its end), one after the other on the same
SparkSession, and write to fresh topics. Each is timed from its start until its
output holds every record:

- the passthrough copies key, value and headers, reading to the end once
  (``availableNow``);
- the two-hop passthrough does so twice at once, into a middle topic and on from it into
  another (two queries): the Kafka traffic of a fragment behind its SUnion (the input
  read, the SUnion's topic written and read, the output written), and so the most a
  design with that hop could reach here, with no Python, Avro or transaction in it;
- the filter fragment runs as it does on a node: its SUnion (a process of its
  own) orders the topic into 1 s buckets on the fragment's input topic, one
  transaction per bucket, while the fragment's query reads that topic
  (``read_committed``), filters (keeping every report), and writes each
  micro-batch through the FragmentWriter and the SOutput as one transaction;
- the same fragment with its SUnion in the query (``sunion: in-query``): its Spark source
  reads the pre-filled topic and releases it in the same 1 s buckets, with no topic
  between them and no SUnion process;
- plain Spark running the same filter on the decoded reports: Kafka, the Avro decoded,
  the filter, the Avro encoded again in the wire format, Spark's Kafka sink (headers kept;
  no envelope, transaction or deduplication): what the fragment's query would be without
  Medusa;
- the same fragment without its SUnion reads the pre-filled topic directly
  (``availableNow``; each record tagged as the fragment's input, as the SUnion
  would): what the SUnion's ordering costs on top of the query.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from medusa.endpoints import Endpoints
from medusa.envelope import TYPE_HEADER
from medusa.linear_road.records import POSITION_REPORTS, STIME_ORIGIN_MS, to_dict
from medusa.producing import TupleProducer
from medusa.schemas import schema_for_topic
from medusa.settings import kafka_config, spark_kafka_options
from medusa.topics import ensure_topics
from medusa_apps.bench.cpu import CpuMeter, jvm_pid
from medusa_apps.bench.producers import Throughput, position_reports
from medusa_spark.fragment import (
    FragmentWiring,
    build_fragment,
    read_fragment_input,
)
from medusa_spark.fragment_writer import FragmentWriter
from medusa_spark.network.fragments import group
from medusa_spark.network.model import parse_network
from medusa_spark.network.validate import Plan, validate
from medusa_spark.soutput import OutRecord, SOutput
from medusa_spark.streams import BOUNDARY, INPUT_HEADER
from medusa_spark.sunion_process import SUnionProcess
from medusa_spark.wire import header
from medusa_spark.wiring import fragment_wiring, network_topics

NETWORK_NAME = "bench-filter"


class MeteredSink:
    """An SOutput that counts the data records it writes and the time its writes take."""

    def __init__(self, inner: SOutput) -> None:
        self.inner = inner
        self.topics = inner.topics
        self.standby = inner.standby
        self.stats = inner.stats
        """The SOutput's own (its transactions' commit time among them, which the writer's
        batch phases read)."""
        self.data_records = 0
        self.write_s = 0.0
        self.writes = 0

    def write(self, records: Sequence[OutRecord]) -> int:
        started = time.perf_counter()
        written = self.inner.write(records)
        self.write_s += time.perf_counter() - started
        self.writes += 1
        self.data_records += sum(1 for record in records if record.value is not None)
        return written

    def details(self) -> dict[str, Any]:
        """The batches written and the seconds their Kafka transactions took."""
        return {"batches_written": self.writes, "kafka_transactions_s": round(self.write_s, 3)}

    def promote(self, keep_tentative: bool = True, from_stime_ms: int | None = None) -> int:
        return self.inner.promote(keep_tentative, from_stime_ms)

    def close(self) -> None:
        self.inner.close()


def fill_topic(bootstrap: str, registry: SchemaRegistryClient, topic: str, count: int) -> None:
    """``count`` position reports, then a BOUNDARY past the last one's second on every
    partition, so a SUnion releases every bucket."""
    ensure_topics(kafka_config(bootstrap), [topic], partitions=4)
    last = 0
    with TupleProducer(kafka_config(bootstrap), registry, topic,
                       schema_for_topic(POSITION_REPORTS), "bench", to_dict=to_dict) as producer:
        for report in position_reports(count):
            producer.produce(report, report.tuple_id, STIME_ORIGIN_MS + report.time * 1000,
                             key=str(report.vid))
            last = max(last, report.time)
        producer.emit_boundaries(STIME_ORIGIN_MS + (last + 2) * 1000)


def _copy(spark: SparkSession, bootstrap: str, source: str, target: str, checkpoints: Path,
          to_the_end: bool) -> StreamingQuery:
    """Plain Spark copying ``source``'s records as they are (key, value and headers) into
    ``target``: reading to the end once (``availableNow``), or on as records come."""
    kafka = spark_kafka_options(bootstrap)
    frame = (spark.readStream.format("kafka").options(**kafka)
             .option("subscribe", source).option("startingOffsets", "earliest")
             .option("includeHeaders", "true").load()
             .select("key", "value", "headers"))
    writer = (frame.writeStream.format("kafka").options(**kafka).option("topic", target)
              .option("checkpointLocation", str(checkpoints / target)))
    return writer.trigger(availableNow=True).start() if to_the_end else \
        writer.trigger(processingTime="0 seconds").start()


def passthrough(spark: SparkSession, bootstrap: str, source: str, count: int,
                checkpoints: Path) -> Throughput:
    """Records copied as they are: key, value and headers."""
    target = f"bench.passthrough.{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_config(bootstrap), [target], partitions=4)
    started = time.perf_counter()
    query = _copy(spark, bootstrap, source, target, checkpoints, to_the_end=True)
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    return Throughput("Spark passthrough (Kafka to Kafka)", count, elapsed, _phases(query))


def spark_filter(spark: SparkSession, bootstrap: str, registry: SchemaRegistryClient,
                 source: str, count: int, checkpoints: Path) -> Throughput:
    """Plain Spark running the fragment's query alone: decode, filter, encode, Kafka."""
    from pyspark.sql.avro.functions import to_avro

    from medusa_spark.streams import wire_prefix
    from medusa_spark.wire import decode_avro, schema_id

    target = f"bench.spark-filter.{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_config(bootstrap), [target], partitions=4)
    registered = registry.get_latest_version(f"{source}-value")
    if registered.schema_id is None:
        raise RuntimeError(f"{source}: no schema registered for its values")
    schema, writer_id = str(registered.schema.schema_str), int(registered.schema_id)
    kafka = spark_kafka_options(bootstrap)
    raw = (spark.readStream.format("kafka").options(**kafka).option("subscribe", source)
           .option("startingOffsets", "earliest").option("includeHeaders", "true").load())
    report = decode_avro(F.col("value"), schema)
    decoded = raw.where(F.col("value").isNotNull() & (schema_id(F.col("value")) == writer_id)
                        ).select("key", "headers", report.alias("report"))
    kept = decoded.where(F.col("report.speed") >= 0)  # the fragment's predicate
    encoded = kept.select("key", "headers", F.concat(
        F.lit(wire_prefix(writer_id)), to_avro(F.col("report"), schema)).alias("value"))
    meter = CpuMeter().watch([jvm_pid(spark), os.getpid()])
    started = time.perf_counter()
    query = (encoded.writeStream.format("kafka").options(**kafka).option("topic", target)
             .option("checkpointLocation", str(checkpoints / target))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    return Throughput("Spark filter (Kafka, Avro decoded, filter, Avro encoded, Kafka)",
                      count, elapsed, {**_phases(query), "cpu_s": meter.stop()})


def two_hop_passthrough(spark: SparkSession, bootstrap: str, source: str, count: int,
                        checkpoints: Path, timeout_s: float = 900.0) -> Throughput:
    """Records copied as they are into a middle topic and, by a second query running at the
    same time, on from it into the target; timed until the target holds every record of
    ``source`` (its BOUNDARY records too)."""
    middle = f"bench.hop.{uuid.uuid4().hex[:8]}"
    target = f"bench.two-hop.{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_config(bootstrap), [middle, target], partitions=4)
    ends = Consumer(kafka_config(bootstrap, group_id=f"bench.ends.{uuid.uuid4().hex[:6]}"))
    expected = _records_in(ends, source)

    started = time.perf_counter()
    second = _copy(spark, bootstrap, middle, target, checkpoints, to_the_end=False)
    first = _copy(spark, bootstrap, source, middle, checkpoints, to_the_end=True)
    try:
        deadline = time.monotonic() + timeout_s
        while (copied := _records_in(ends, target)) < expected:
            for query in (first, second):
                if query.exception() is not None:
                    raise RuntimeError(f"the two-hop passthrough stopped: {query.exception()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the two-hop passthrough copied {copied:,} of "
                                   f"{expected:,} records in {timeout_s:.0f}s")
            time.sleep(0.02)
        elapsed = time.perf_counter() - started
    finally:
        second.stop()
        first.stop()
        ends.close()
    return Throughput("Spark passthrough through a second topic (Kafka to Kafka to Kafka)",
                      count, elapsed)


def _records_in(consumer: Consumer, topic: str) -> int:
    """The records a topic holds (none is compacted or trimmed here): its partitions' end
    offsets, summed."""
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
               for p in partitions)


@dataclass
class BenchFragment:
    """A network of one fragment on alpha, wired as a node wires it, writing through a
    metered SOutput."""

    plan: Plan
    wiring: FragmentWiring
    sink: MeteredSink

    def writer(self) -> FragmentWriter:
        return FragmentWriter(self.plan, self.wiring, sinks=[self.sink])


def bench_fragment(spark: SparkSession, endpoints: Endpoints, registry: SchemaRegistryClient,
                   text: str, network_name: str) -> BenchFragment:
    """The one fragment of network ``text``, its topics created and schemas registered."""
    plan = validate(parse_network(text), spark)
    fragments = group(plan)
    topics = network_topics(plan, fragments, endpoints, registry)
    (fragment,) = fragments.values()
    bootstrap = endpoints.bootstrap("alpha")
    wiring = fragment_wiring(topics, f"alpha/{network_name}", fragment, bootstrap)
    topics_out = [output.stream.topic for output in wiring.outputs.values()]
    sink = MeteredSink(SOutput(f"bench.{network_name}", topics_out, bootstrap))
    return BenchFragment(plan, wiring, sink)


def _filter_fragment(spark: SparkSession, endpoints: Endpoints, registry: SchemaRegistryClient,
                     source: str, execution: str = "micro-batch",
                     sunion: str = "process") -> BenchFragment:
    """A network of one filter that keeps every report, onto a fresh topic."""
    run = uuid.uuid4().hex[:8]
    text = yaml.safe_dump({
        "name": NETWORK_NAME, "participant": "alpha", "partitions": 4,
        "execution": execution, "sunion": sunion,
        "streams": {
            "reports": {"topic": source, "participant": "alpha", "schema": "position_report"},
            "kept": {"topic": f"bench.kept.{run}", "participant": "alpha",
                     "schema": "position_report"}},
        "boxes": {"keep_all": {"type": "filter", "params": {"predicate": "speed >= 0"}}},
        "arrows": [{"from": "reports", "to": "keep_all"}, {"from": "keep_all", "to": "kept"}],
    }, sort_keys=False)
    return bench_fragment(spark, endpoints, registry, text, f"{NETWORK_NAME}-{run}")


def filter_fragment(spark: SparkSession, endpoints: Endpoints, registry: SchemaRegistryClient,
                    source: str, count: int, checkpoints: Path,
                    on_progress: Callable[[int], None] | None = None,
                    timeout_s: float = 900.0, sunion_in_query: bool = False) -> Throughput:
    """The filter fragment with its SUnion in front (a process, or its query's source),
    both started at once; timed until the fragment's output holds ``count`` records."""
    fragment = _filter_fragment(spark, endpoints, registry, source,
                                sunion="in-query" if sunion_in_query else "process")
    wiring = fragment.wiring
    config = wiring.sunion_config()
    writer = fragment.writer()
    with tempfile.TemporaryDirectory(prefix="medusa-bench-sunion-") as folder:
        meter = CpuMeter().watch([jvm_pid(spark), os.getpid()])
        started = time.perf_counter()
        sunion = None if sunion_in_query else SUnionProcess(config, Path(folder)).start()
        if sunion is not None and sunion.process is not None:
            meter.watch([sunion.process.pid])
        query = (build_fragment(fragment.plan, wiring, read_fragment_input(spark, wiring))
                 .writeStream.queryName(f"bench-filter-sunion-{uuid.uuid4().hex[:6]}")
                 .outputMode("append").foreachBatch(writer)
                 .option("checkpointLocation",
                         str(checkpoints / f"{wiring.source.topic}-{uuid.uuid4().hex[:6]}"))
                 .trigger(processingTime=fragment.plan.network.trigger).start())
        try:
            _wait_written(fragment.sink, count, "the filter fragment",
                          lambda: None if query.isActive else str(query.exception()), sunion,
                          timeout_s, on_progress)
            elapsed = time.perf_counter() - started
            if on_progress is not None:
                on_progress(fragment.sink.data_records)
        finally:
            # Spark reports a batch's progress after its commit: wait for the last one's.
            settle = time.monotonic() + 10.0
            while (writer.last_written is not None and query.isActive
                   and time.monotonic() < settle
                   and _last_batch(query) < writer.last_written):
                time.sleep(0.1)
            phases = _phases(query)
            query.stop()
            writer.close()
            cpu_s = meter.stop()  # the SUnion's before it exits
            if sunion is not None:
                sunion.stop()
    name = ("Medusa filter fragment, SUnion in the query (query + SOutput)" if sunion_in_query
            else "Medusa filter fragment (SUnion + query + SOutput)")
    return Throughput(name, count, elapsed,
                      {**fragment.sink.details(), **phases, "cpu_s": cpu_s})


def filter_fragment_realtime(spark: SparkSession, endpoints: Endpoints,
                             registry: SchemaRegistryClient, source: str, count: int,
                             checkpoints: Path, timeout_s: float = 900.0) -> Throughput:
    """The same filter fragment in Real-time Mode, run as a node runs it (its SUnion, its
    query staging its rows, and the relay writing them through the metered SOutput);
    timed until its output holds ``count`` records."""
    from medusa_spark.fragment_run import start_fragment
    from medusa_spark.network.execution import REAL_TIME

    fragment = _filter_fragment(spark, endpoints, registry, source, execution=REAL_TIME)
    wiring = fragment.wiring
    with tempfile.TemporaryDirectory(prefix="medusa-bench-sunion-") as folder:
        started = time.perf_counter()
        sunion = SUnionProcess(wiring.sunion_config(), Path(folder)).start()
        run = start_fragment(spark, fragment.plan, wiring,
                             str(checkpoints / f"realtime-{wiring.source.topic}"),
                             sinks=[fragment.sink])
        try:
            if run.execution != REAL_TIME:
                raise RuntimeError(f"the filter fragment runs on micro-batches: "
                                   f"{run.execution_why}")
            _wait_written(fragment.sink, count, "the real-time filter fragment", run.failure,
                          sunion, timeout_s)
            elapsed = time.perf_counter() - started
        finally:
            run.abandon()
            sunion.stop()
    return Throughput("Medusa filter fragment in Real-time Mode (SUnion + query + relay + "
                      "SOutput)", count, elapsed, fragment.sink.details())


def _wait_written(sink: MeteredSink, count: int, what: str,
                  failure: Callable[[], str | None], sunion: SUnionProcess | None,
                  timeout_s: float,
                  on_progress: Callable[[int], None] | None = None) -> None:
    """Until ``sink`` has written ``count`` data records; raises if the fragment (``failure``
    says why it stopped) or its SUnion stops first, or the time is up."""
    deadline = time.monotonic() + timeout_s
    while sink.data_records < count:
        stopped = failure()
        if stopped is not None:
            raise RuntimeError(f"{what} stopped: {stopped}")
        if sunion is not None and not sunion.alive():
            raise RuntimeError(f"{what}'s SUnion exited; see {sunion.log_path}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} wrote {sink.data_records:,} of {count:,} records in "
                               f"{timeout_s:.0f}s")
        if on_progress is not None:
            on_progress(sink.data_records)
        time.sleep(0.02)


def _last_batch(query: StreamingQuery) -> int:
    """The id of the last batch Spark reported progress for (-1 before the first)."""
    progress: dict[str, Any] = query.lastProgress or {}
    return int(progress.get("batchId", -1))


def _phases(query: StreamingQuery) -> dict[str, float]:
    """Seconds per phase of the query's batches (Spark's ``durationMs``), summed."""
    total: dict[str, float] = {}
    for progress in query.recentProgress:
        for phase, ms in (json.loads(progress.json).get("durationMs") or {}).items():
            total[phase] = total.get(phase, 0.0) + (ms or 0) / 1000
    return {f"{phase}_s": round(seconds, 3) for phase, seconds in sorted(total.items())}


def _tagged(raw: DataFrame, input_name: str) -> DataFrame:
    """The input's records as the SUnion would write them: tuples tagged with the input's
    name; BOUNDARY records untagged (the query's own, not a tuple of an input)."""
    tag = F.struct(F.lit(INPUT_HEADER).alias("key"),
                   F.lit(input_name).cast("binary").alias("value"))
    headers = F.coalesce(F.col("headers"), F.array())
    return raw.withColumn("headers", F.when(header(TYPE_HEADER) == BOUNDARY, headers)
                          .otherwise(F.concat(headers, F.array(tag))))


def filter_fragment_without_sunion(spark: SparkSession, endpoints: Endpoints,
                                   registry: SchemaRegistryClient, source: str, count: int,
                                   checkpoints: Path) -> Throughput:
    """The same fragment reading the pre-filled topic directly, to its end."""
    fragment = _filter_fragment(spark, endpoints, registry, source)
    wiring = fragment.wiring
    (name,) = wiring.inputs
    stream = wiring.inputs[name]
    kafka = spark_kafka_options(stream.bootstrap)
    raw = (spark.readStream.format("kafka").options(**kafka)
           .option("subscribe", stream.topic).option("startingOffsets", "earliest")
           .option("includeHeaders", "true").load())
    writer = fragment.writer()
    started = time.perf_counter()
    query = (build_fragment(fragment.plan, wiring, _tagged(raw, name))
             .writeStream.queryName(f"bench-filter-direct-{uuid.uuid4().hex[:6]}")
             .outputMode("append").foreachBatch(writer)
             .option("checkpointLocation", str(checkpoints / f"direct-{stream.topic}"))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination()
    finally:
        writer.close()
    elapsed = time.perf_counter() - started
    if fragment.sink.data_records != count:
        raise RuntimeError(f"the filter fragment without SUnion wrote "
                           f"{fragment.sink.data_records:,} of {count:,} records")
    return Throughput("Medusa filter fragment without SUnion", count, elapsed,
                      {**fragment.sink.details(), **_phases(query)})
