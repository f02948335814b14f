"""A stateless fragment's latency against plain Spark's, side by side in one run.

Readings go to one topic at ``rows_per_s``, each stamped with the wall clock when it is
produced (``measured_at``, its stime too). Three paths read that topic and keep every
reading (a filter whose predicate every reading passes):

- **the fragment**: a network of one ``filter`` box run as a node runs it, with the
  network's defaults but for its trigger (``0 seconds``): its SUnion (a process of its own)
  releases the readings in buckets of 1 s on the fragment's input topic, the query reads
  them in micro-batches, and the FragmentWriter writes each batch through the SOutput as
  one Kafka transaction;
- **the fragment with fine buckets**: the same with ``bucket: 100 milliseconds``;
- **the fragment with its SUnion in the query** (``sunion: in-query``), 1 s buckets: no
  SUnion process nor its topic, the query's source releases the readings itself;
- **plain Spark, micro-batch**: Kafka, the same filter, Spark's Kafka sink; trigger
  ``0 seconds``, the source's fetch wait at 10 ms as the fragment's;
- **plain Spark, Real-time Mode** (Spark 4.2 or newer): the same query with
  ``trigger(realTime=...)``, in update mode.

The bench runs the real-time paths side by side, then the micro-batch ones
(``measure_in_phases``). The readings' stimes are the producer's clock, so between
readings it promises the clock (BOUNDARY) every ``boundary_interval_s``: a SUnion
releases a bucket once every input partition has passed its end. The real-time
fragment's hops are read too (its SUnion's release, its query's staged rows), to say
where its time goes. A ``read_committed`` consumer per output notes, for each result,
the wall clock when it became readable minus ``measured_at``: produce to readable, as a
user sees it. The
readings go on until every path has delivered a result, then ``WARM_UP_S`` more (the
paths catch up with what came while they started); only the readings after that count.
How long each path took to its first result is reported apart (``first_result_s``).
"""

from __future__ import annotations

import io
import json
import threading
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Consumer, KafkaError
from confluent_kafka.schema_registry import SchemaRegistryClient
from fastavro import parse_schema, schemaless_reader
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro
from pyspark.sql.streaming import StreamingQuery

from medusa.consuming import take
from medusa.endpoints import Endpoints
from medusa.latency_stats import percentile
from medusa.producing import TupleProducer
from medusa.schemas import load_schema
from medusa.settings import END_OF_LOG_FETCH_WAIT_MS, kafka_config, spark_kafka_options
from medusa.topics import ensure_topics
from medusa_apps.bench.spark_paths import bench_fragment
from medusa_spark.fragment import SOURCE_FETCH_WAIT_MS, build_fragment, read_fragment_input
from medusa_spark.fragment_run import FragmentRun, start_fragment
from medusa_spark.realtime import REALTIME_BATCH, realtime_supported, staged_topic
from medusa_spark.sunion_process import SUnionProcess

WARM_UP_S = 15.0
"""After every path's first result: the paths catch up with what came while they started."""
START_TIMEOUT_S = 180.0
"""The longest wait for every path's first result."""
HIGH_RATE = 2_000
"""Readings a second of the second run: the paths keep their latency under load."""
PREDICATE = "value > -1000000"
FRAGMENT_BUCKETS = {"fragment": "1 second", "fragment_fine_buckets": "100 milliseconds",
                    "fragment_in_query": "1 second"}
"""The fragment as a network deploys it by default (1 s buckets), with finer buckets, and
with its SUnion in the query."""
IN_QUERY_PATHS = ("fragment_in_query",)
REALTIME_FRAGMENT_BUCKET = "10 milliseconds"
"""The real-time fragment's SUnion bucket: a record waits for its bucket's end and for
the producer's next BOUNDARY past it."""
PATHS = ("fragment", "fragment_fine_buckets", "fragment_in_query", "spark_microbatch",
         "spark_realtime", "fragment_realtime")
REALTIME_PATHS = ("spark_realtime", "fragment_realtime")
HOP_SUNION, HOP_STAGED = "_after_sunion", "_after_query"
"""The real-time fragment's hops, read as its output is: the SUnion's release (its input
topic) and the query's staged rows (before the relay's SOutput transaction)."""


@dataclass
class PathLatency:
    """One path's produce-to-readable latencies, in ms."""

    name: str
    results: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None
    """The longest (a real-time query's pause between two batches shows here)."""
    results_per_s: float | None = None
    """Results that became readable per second, first to last (the input's rate when the
    path keeps up)."""
    first_result_s: float | None = None
    """From the run's start (the queries start then) to this path's first result."""
    over_time: list[tuple[float, float]] = field(default_factory=list)
    """(seconds since the input began, latency in ms) of each counted result."""
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "over_time"}


@dataclass
class StatelessLatency:
    rows_per_s: int
    seconds: float
    boundary_interval_s: float
    paths: dict[str, PathLatency]

    def summary(self) -> dict[str, Any]:
        fragment, fine, micro, real, realtime_fragment, in_query = (
            self.paths.get(name) for name in (
                "fragment", "fragment_fine_buckets", "spark_microbatch", "spark_realtime",
                "fragment_realtime", "fragment_in_query"))
        best = realtime_fragment or fragment
        return {
            "stateless_fragment_p50_ms": best.p50_ms if best else None,
            "stateless_fragment_p99_ms": best.p99_ms if best else None,
            "stateless_fragment_execution": "real-time" if realtime_fragment else
            "micro-batch",
            "stateless_fragment_microbatch_p50_ms": fragment.p50_ms if fragment else None,
            "stateless_fragment_microbatch_p99_ms": fragment.p99_ms if fragment else None,
            "stateless_fragment_fine_buckets_p50_ms": fine.p50_ms if fine else None,
            "stateless_fragment_fine_buckets_p99_ms": fine.p99_ms if fine else None,
            "stateless_fragment_in_query_p50_ms": in_query.p50_ms if in_query else None,
            "stateless_fragment_in_query_p99_ms": in_query.p99_ms if in_query else None,
            "spark_microbatch_p50_ms": micro.p50_ms if micro else None,
            "spark_microbatch_p99_ms": micro.p99_ms if micro else None,
            "spark_realtime_p50_ms": real.p50_ms if real else None,
            "spark_realtime_p99_ms": real.p99_ms if real else None,
            "rows_per_s": self.rows_per_s, "boundary_interval_s": self.boundary_interval_s,
            "paths": {name: path.as_dict() for name, path in self.paths.items()},
        }

    def microbatch_fragment_over_spark_microbatch(self, path: str = "fragment"
                                                  ) -> float | None:
        """A micro-batch fragment's p50 over plain Spark's micro-batch p50."""
        return _p50_over(self.paths.get(path), self.paths.get("spark_microbatch"))

    def fragment_over_spark_realtime(self) -> float | None:
        """The fragment's p50 over plain Spark's in Real-time Mode: the real-time
        fragment's where it runs, else the micro-batch one's."""
        return _p50_over(self.paths.get("fragment_realtime") or self.paths.get("fragment"),
                         self.paths.get("spark_realtime"))


def _p50_over(path: PathLatency | None, other: PathLatency | None) -> float | None:
    """``path``'s p50 over ``other``'s, one decimal; None when either has none."""
    if path is None or other is None or not path.p50_ms or not other.p50_ms:
        return None
    return round(path.p50_ms / other.p50_ms, 1)


def measure_in_phases(spark: SparkSession, endpoints: Endpoints,
                      registry: SchemaRegistryClient, checkpoints: Path, rows_per_s: int = 20,
                      seconds: float = 60.0, say: Callable[[str], None] = print
                      ) -> StatelessLatency:
    """The real-time paths side by side, then the micro-batch ones, in one run: on two
    cores, micro-batch queries on a 0 s trigger take the cores from the millisecond
    paths (all five at once: the real-time fragment's p50 59 ms against 20 ms alone)."""
    phases = [[path for path in PATHS if path in REALTIME_PATHS],
              [path for path in PATHS if path not in REALTIME_PATHS]]
    measured = [measure(spark, endpoints, registry, checkpoints, rows_per_s, seconds,
                        paths=phase, say=say) for phase in phases if phase]
    return StatelessLatency(rows_per_s, seconds, measured[0].boundary_interval_s,
                            {name: path for m in measured for name, path in m.paths.items()})


def measure(spark: SparkSession, endpoints: Endpoints, registry: SchemaRegistryClient,
            checkpoints: Path, rows_per_s: int = 20, seconds: float = 60.0,
            boundary_interval_s: float = 0.005, paths: Collection[str] = PATHS,
            say: Callable[[str], None] = print) -> StatelessLatency:
    """``boundary_interval_s``: how often the producer promises its partitions' progress
    (``medusa produce``'s default is 1 s); every SUnion waits for those promises.
    ``paths``: which of ``PATHS`` run (the real-time ones are left out where this PySpark
    has no Real-time Mode)."""
    run = uuid.uuid4().hex[:6]
    realtime = realtime_supported()
    wanted = {path for path in paths if realtime or path not in REALTIME_PATHS}
    bootstrap = endpoints.bootstrap("alpha")
    readings = f"bench.latency.{run}.readings"
    fragments = {
        path: bench_fragment(spark, endpoints, registry,
                             _network(f"bench-latency-{run}-{index}", readings, run, bucket,
                                      sunion="in-query" if path in IN_QUERY_PATHS
                                      else "process"),
                             f"bench-latency-{run}-{index}")
        for index, (path, bucket) in enumerate(FRAGMENT_BUCKETS.items()) if path in wanted}
    writers = {path: fragment.writer() for path, fragment in fragments.items()}
    plain = {path: f"bench.latency.{run}.{path.replace('_', '-')}"
             for path in ("spark_microbatch", "spark_realtime") if path in wanted}
    if "fragment_realtime" in wanted:
        fragments["fragment_realtime"] = bench_fragment(
            spark, endpoints, registry,
            _network(f"bench-latency-{run}-rt", readings, run, REALTIME_FRAGMENT_BUCKET,
                     execution="real-time"), f"bench-latency-{run}-rt")
    ensure_topics(kafka_config(bootstrap), [readings, *plain.values()], partitions=1)
    outputs = {**{path: f.sink.topics[0] for path, f in fragments.items()}, **plain}
    if "fragment_realtime" in fragments:  # where the real-time fragment's time goes
        wiring = fragments["fragment_realtime"].wiring
        # Before its reader subscribes (a client learns of new topics only minutes later).
        ensure_topics(kafka_config(bootstrap), [staged_topic(wiring)], partitions=1)
        outputs.update({f"fragment_realtime{hop}": topic for hop, topic in (
            (HOP_SUNION, wiring.source.topic), (HOP_STAGED, staged_topic(wiring)))})
    say(f"stateless latency: {rows_per_s} readings a second through {', '.join(outputs)}, "
        f"side by side: until each has answered, {WARM_UP_S:.0f} s more, then {seconds:.0f} s "
        "counted")
    began = time.time()
    readers = {path: _Reader(bootstrap, topic) for path, topic in outputs.items()}
    for reader in readers.values():
        reader.start()
    queries: list[StreamingQuery] = []
    folder = checkpoints / f"latency-{run}"
    folder.mkdir(parents=True, exist_ok=True)
    for path in fragments:
        (folder / path).mkdir()
    sunions = [SUnionProcess(f.wiring.sunion_config(), folder / path).start()
               for path, f in fragments.items() if not f.wiring.sunion_in_query]
    runs: list[FragmentRun] = []
    try:
        for path, fragment in fragments.items():
            if path == "fragment_realtime":  # as a node runs it: its query and its relay
                runs.append(start_fragment(spark, fragment.plan, fragment.wiring,
                                           str(folder / path / "checkpoint")))
                queries.append(runs[-1].query)
                continue
            queries.append(
                build_fragment(fragment.plan, fragment.wiring,
                               read_fragment_input(spark, fragment.wiring))
                .writeStream.queryName(f"bench-latency-{path}-{run}").outputMode("append")
                .foreachBatch(writers[path])
                .option("checkpointLocation", str(folder / path / "checkpoint"))
                .trigger(processingTime="0 seconds").start())
        if "spark_microbatch" in plain:
            queries.append(
                _plain_filter(spark, bootstrap, readings, plain["spark_microbatch"])
                .option("checkpointLocation", str(folder / "microbatch"))
                .queryName(f"bench-latency-microbatch-{run}")
                .trigger(processingTime="0 seconds").start())
        if "spark_realtime" in plain:
            queries.append(
                _plain_filter(spark, bootstrap, readings, plain["spark_realtime"])
                .option("checkpointLocation", str(folder / "realtime"))
                .queryName(f"bench-latency-realtime-{run}").outputMode("update")
                .trigger(realTime=REALTIME_BATCH).start())  # the fragment's batch
        _produce(kafka_config(bootstrap), registry, readings, rows_per_s,
                 boundary_interval_s, queries, _Schedule(list(readers.values()), seconds))
        time.sleep(3.0)  # the last readings' results
    finally:
        for fragment_run in runs:
            fragment_run.abandon()
        for query in queries:
            query.stop()
        for writer in writers.values():
            writer.close()
        for sunion in sunions:
            sunion.stop()
        for reader in readers.values():
            reader.stop()
    paths = {path: reader.latency(path, began) for path, reader in readers.items()}
    for measured in paths.values():
        say(f"  {measured.name}: p50 {measured.p50_ms} ms, p99 {measured.p99_ms} ms over "
            f"{measured.results} results ({measured.results_per_s} a second); first result "
            f"{measured.first_result_s} s into the run")
    return StatelessLatency(rows_per_s, seconds, boundary_interval_s, paths)


def _network(name: str, readings: str, run: str, bucket: str,
             execution: str = "micro-batch", sunion: str = "process") -> str:
    return yaml.safe_dump({
        "name": name, "participant": "alpha", "partitions": 1, "trigger": "0 seconds",
        "bucket": bucket, "execution": execution, "sunion": sunion,
        "streams": {
            "readings": {"topic": readings, "participant": "alpha",
                         "schema": "sensor_reading"},
            "kept": {"topic": f"bench.latency.{run}.{name}.kept", "participant": "alpha",
                     "schema": "sensor_reading"}},
        "boxes": {"keep": {"type": "filter", "params": {"predicate": PREDICATE}}},
        "arrows": [{"from": "readings", "to": "keep"}, {"from": "keep", "to": "kept"}],
    }, sort_keys=False)


def _plain_filter(spark: SparkSession, bootstrap: str, source: str, sink: str) -> Any:
    """Kafka -> the filter on the decoded reading -> Spark's Kafka sink, the record as it
    came (value and headers)."""
    schema = load_schema("sensor_reading").text
    options = spark_kafka_options(bootstrap)
    raw: DataFrame = (spark.readStream.format("kafka").options(**options)
                      .option("subscribe", source).option("startingOffsets", "latest")
                      .option("includeHeaders", "true")
                      .option("kafka.fetch.max.wait.ms", str(SOURCE_FETCH_WAIT_MS)).load())
    reading = from_avro(F.expr("substring(value, 6, length(value) - 5)"), schema)
    kept = raw.where(reading.getField("value") > -1000000)  # PREDICATE, on the reading
    return (kept.select("key", "value", "headers").writeStream.format("kafka")
            .options(**options).option("topic", sink))


class _Schedule:
    """When the readings stop: every path has answered, ``WARM_UP_S`` have passed since,
    and then ``seconds`` counted (the readers count from that moment on)."""

    def __init__(self, readers: list[_Reader], seconds: float) -> None:
        self.readers = readers
        self.seconds = seconds
        self.started = time.monotonic()
        self.answered_at: float | None = None
        self.counting_at: float | None = None

    def done(self) -> bool:
        now = time.monotonic()
        if self.answered_at is None:
            if all(reader.first_at_ms is not None for reader in self.readers):
                self.answered_at = now
            elif now - self.started > START_TIMEOUT_S:
                silent = [r.topic for r in self.readers if r.first_at_ms is None]
                raise TimeoutError(f"no result on {', '.join(silent)} within "
                                   f"{START_TIMEOUT_S:.0f} s")
            return False
        if self.counting_at is None:
            if now - self.answered_at < WARM_UP_S:
                return False
            self.counting_at = now
            for reader in self.readers:
                reader.count_from_ms = time.time() * 1000
        return now - self.counting_at >= self.seconds


def _produce(config: dict[str, Any], registry: SchemaRegistryClient, topic: str,
             rows_per_s: int, boundary_interval_s: float, queries: list[StreamingQuery],
             schedule: _Schedule) -> None:
    """Readings at ``rows_per_s``, each stamped with the wall clock as it goes, until the
    schedule says."""
    interval = 1.0 / rows_per_s
    sent = 0
    with TupleProducer({**config, "linger.ms": 0}, registry, topic,
                       load_schema("sensor_reading"), "bench-latency",
                       boundary_interval_s=boundary_interval_s) as producer:
        started = time.monotonic()
        checked = 0.0
        while not schedule.done():
            if time.monotonic() - checked > 1.0:  # a call into the JVM per query: not per row
                checked = time.monotonic()
                for query in queries:
                    if not query.isActive:
                        raise RuntimeError(f"{query.name} stopped: {query.exception()}")
            now = time.time_ns() // 1_000_000
            producer.produce({"sensor_id": f"s{sent % 10}", "kind": "temperature",
                              "value": float(sent % 40), "unit": "C", "measured_at": now,
                              "site": None}, f"bench-latency/{sent}", now,
                             key=f"s{sent % 10}")
            producer.poll()
            sent += 1
            next_at = started + sent * interval
            while (left := next_at - time.monotonic()) > 0:
                time.sleep(min(left, boundary_interval_s))
                # The readings' stimes are this clock: nothing later has a smaller one.
                producer.emit_boundaries(time.time_ns() // 1_000_000)


class _Reader(threading.Thread):
    """Reads one output topic as a ``read_committed`` user would, from its start, and
    notes each data record's latency (readable minus ``measured_at``)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True, name=f"latency-reader-{topic}")
        self.topic = topic
        self.count_from_ms = float("inf")
        """Readings produced from then on count (set by ``_Schedule``)."""
        self.first_at_ms: float | None = None
        """When its first result became readable."""

        self.samples: list[tuple[float, float]] = []
        self._stopping = threading.Event()
        self._parsed = parse_schema(json.loads(load_schema("sensor_reading").text))
        self._consumer = Consumer(kafka_config(bootstrap, {
            "group.id": f"medusa-bench-latency-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": END_OF_LOG_FETCH_WAIT_MS}))

    def run(self) -> None:
        self._consumer.subscribe([self.topic])
        try:
            while not self._stopping.is_set():
                for message in take(self._consumer, 100, 0.1):
                    now_ms = time.time_ns() / 1_000_000
                    error = message.error()
                    if error is not None:
                        if error.code() != KafkaError._PARTITION_EOF:
                            raise RuntimeError(str(error))
                        continue
                    value = message.value()
                    if not value:  # BOUNDARY and the other control records
                        continue
                    reading: Any = schemaless_reader(io.BytesIO(value[5:]), self._parsed)
                    produced = reading["measured_at"]
                    produced_ms = produced.timestamp() * 1000 if hasattr(
                        produced, "timestamp") else float(produced)
                    if self.first_at_ms is None:
                        self.first_at_ms = now_ms
                    if produced_ms >= self.count_from_ms:
                        self.samples.append((produced_ms, now_ms - produced_ms))
        finally:
            self._consumer.close()

    def stop(self) -> None:
        self._stopping.set()
        self.join(10)

    def latency(self, name: str, began: float) -> PathLatency:
        values = [latency for _, latency in self.samples]
        path = PathLatency(name, len(values))
        if values:
            path.p50_ms = round(percentile(values, 0.5) or 0.0, 1)
            path.p99_ms = round(percentile(values, 0.99) or 0.0, 1)
            path.max_ms = round(max(values), 1)
        arrivals = [at + latency for at, latency in self.samples]
        if len(arrivals) > 1 and max(arrivals) > min(arrivals):
            path.results_per_s = round((len(arrivals) - 1) * 1000 /
                                       (max(arrivals) - min(arrivals)), 1)
        path.over_time = [(round(at / 1000 - began, 2), round(latency, 1))
                          for at, latency in self.samples]
        if self.first_at_ms is not None:
            path.first_result_s = round(self.first_at_ms / 1000 - began, 1)
        return path
