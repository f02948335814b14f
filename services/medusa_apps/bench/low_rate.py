"""A stateful fragment at a few rows a second: how long each of its micro-batches takes,
against Spark's own query doing the same aggregation on the same session.

The fragment is the sensor-windows example (a filter, then a 10 s tumbling window per
sensor), run as a node runs it: its SUnion (a process of its own) orders the readings
into 1 s buckets on the fragment's input topic, and the query reads that topic, computes
and writes each micro-batch through the FragmentWriter and the SOutput as one
transaction. Spark's own query reads the readings topic straight (the same Kafka
settings, its fetch as short a wait at the end of the log as the fragment's source),
decodes the Avro values, keeps the same rows and counts them per sensor and window into
``foreachBatch``. Both run side by side on one trigger of 1 s while the readings come in
at ``rows_per_s``; only batches that read rows count.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro
from pyspark.sql.streaming import StreamingQuery

from medusa.batch_phases import describe, median_phases
from medusa.endpoints import Endpoints
from medusa.latency_stats import percentile
from medusa.schemas import schema_for_topic
from medusa.sensor_windows import SteadyInput
from medusa.sensors import SENSOR_READINGS
from medusa.settings import kafka_config, spark_kafka_options
from medusa_apps.bench.spark_paths import bench_fragment
from medusa_spark.fragment import SOURCE_FETCH_WAIT_MS, build_fragment, read_source
from medusa_spark.networks import network_yaml
from medusa_spark.sunion_process import SUnionProcess

WARM_UP_S = 20.0
"""Batches in the first seconds plan and compile the query's code: not counted."""


@dataclass(frozen=True)
class LowRate:
    rows_per_s: int
    seconds: float
    fragment_batches: int
    fragment_batch_ms_p50: float | None
    fragment_batch_ms_p90: float | None
    spark_batches: int
    spark_batch_ms_p50: float | None
    spark_batch_ms_p90: float | None
    fragment_phases_ms_p50: dict[str, float]
    """Spark's ``durationMs`` of the fragment's batches, each phase's median."""
    fragment_batch_phases_ms: dict[str, float]
    """Where the fragment's batches spent their time, each phase's median
    (``medusa.batch_phases``: Spark's phases with the writer's own)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> dict[str, Any]:
        return {"low_rate_batch_ms": self.fragment_batch_ms_p50,
                "spark_low_rate_batch_ms": self.spark_batch_ms_p50,
                "low_rate_over_spark": round(self.fragment_batch_ms_p50 /
                                             self.spark_batch_ms_p50, 2)
                if self.fragment_batch_ms_p50 and self.spark_batch_ms_p50 else None,
                "low_rate_rows_per_s": self.rows_per_s, "runs": self.as_dict()}


def measure(spark: SparkSession, endpoints: Endpoints, registry: SchemaRegistryClient,
            checkpoints: Path, rows_per_s: int = 5, seconds: float = 60.0,
            say: Callable[[str], None] = print) -> LowRate:
    run = uuid.uuid4().hex[:6]
    name, prefix = f"bench-low-rate-{run}", f"bench-low-rate-{run}."
    fragment = bench_fragment(spark, endpoints, registry,
                              network_yaml(name, prefix, box_participant="alpha"), name)
    plan, wiring, writer = fragment.plan, fragment.wiring, fragment.writer()
    bootstrap = endpoints.bootstrap("alpha")
    readings = f"{prefix}sensors.readings"
    steady = SteadyInput(kafka_config(bootstrap), registry, readings, rows_per_s,
                         int(WARM_UP_S + seconds) + 5)
    trigger = plan.network.trigger
    say(f"a stateful fragment at {rows_per_s} rows a second: its batches against Spark's "
        f"own query, side by side for {WARM_UP_S + seconds:.0f} s")
    with tempfile.TemporaryDirectory(prefix="medusa-bench-sunion-") as folder:
        steady.start()
        sunion = SUnionProcess(wiring.sunion_config(), Path(folder)).start()
        medusa_query = (build_fragment(plan, wiring, read_source(spark, wiring.source))
                        .writeStream.queryName(f"bench-low-rate-fragment-{run}")
                        .outputMode("append").foreachBatch(writer)
                        .option("checkpointLocation", str(checkpoints / f"low-rate-{run}"))
                        .trigger(processingTime=trigger).start())
        spark_query = (_plain_aggregation(spark, bootstrap, readings)
                       .writeStream.queryName(f"bench-low-rate-spark-{run}")
                       .outputMode("append").foreachBatch(_collect)
                       .option("checkpointLocation", str(checkpoints / f"spark-{run}"))
                       .trigger(processingTime=trigger).start())
        try:
            started = time.monotonic()
            end = started + WARM_UP_S + seconds
            while time.monotonic() < end:
                for query in (medusa_query, spark_query):
                    if not query.isActive:
                        raise RuntimeError(f"{query.name} stopped: {query.exception()}")
                time.sleep(1.0)
            counted_from_ms = _epoch_ms() - int(seconds * 1000)
            counted = _progress(medusa_query, counted_from_ms)
            plain = _batch_ms(_progress(spark_query, counted_from_ms))
        finally:
            for query in (medusa_query, spark_query):
                query.stop()
            writer.close()
            sunion.stop()
            steady.end_in(0)
    batches = _batch_ms(counted)
    result = LowRate(
        rows_per_s, seconds, len(batches), _percentile(batches, 50),
        _percentile(batches, 90), len(plain), _percentile(plain, 50), _percentile(plain, 90),
        _phase_medians(counted), median_phases(counted, writer.recent_times.by_batch()))
    say(f"  fragment: p50 {result.fragment_batch_ms_p50} ms, p90 "
        f"{result.fragment_batch_ms_p90} ms over {result.fragment_batches} batches; Spark's "
        f"own: p50 {result.spark_batch_ms_p50} ms, p90 {result.spark_batch_ms_p90} ms over "
        f"{result.spark_batches}")
    say(f"  the fragment's median {describe(result.fragment_batch_phases_ms)}")
    return result


def _plain_aggregation(spark: SparkSession, bootstrap: str, topic: str) -> DataFrame:
    """The fragment's work in plain Spark: the readings decoded (Confluent's framing is a
    zero byte and a 4-byte schema id), filtered and counted per sensor and 10 s window."""
    schema = schema_for_topic(SENSOR_READINGS).text
    raw = (spark.readStream.format("kafka").options(**spark_kafka_options(bootstrap))
           .option("subscribe", topic).option("startingOffsets", "earliest")
           .option("kafka.fetch.max.wait.ms", str(SOURCE_FETCH_WAIT_MS)).load())
    readings = raw.select(from_avro(F.expr("substring(value, 6, length(value) - 5)"),
                                    schema).alias("r")).select("r.*")
    return (readings.where("value > -1000000 AND value < 1000000")
            .withWatermark("measured_at", "0 seconds")
            .groupBy(F.window("measured_at", "10 seconds"), "sensor_id")
            .agg(F.count("value").alias("readings"), F.sum("value").alias("total"),
                 F.max("value").alias("top")))


def _collect(batch: DataFrame, _batch_id: int) -> None:
    batch.toArrow()


def _epoch_ms() -> int:
    return time.time_ns() // 1_000_000


def _progress(query: StreamingQuery, from_ms: int) -> list[dict[str, Any]]:
    """The query's batches that read rows, begun at ``from_ms`` or later."""
    found = []
    for progress in query.recentProgress:
        data = json.loads(progress.json)
        begun = datetime.fromisoformat(data["timestamp"].replace("Z", "+00:00"))
        if begun.timestamp() * 1000 >= from_ms and int(data.get("numInputRows") or 0) > 0:
            found.append(data)
    return found


def _batch_ms(batches: list[dict[str, Any]]) -> list[float]:
    return [float(p["durationMs"]["triggerExecution"]) for p in batches]


def _phase_medians(batches: list[dict[str, Any]]) -> dict[str, float]:
    phases: dict[str, list[float]] = {}
    for progress in batches:
        for phase, ms in (progress.get("durationMs") or {}).items():
            phases.setdefault(phase, []).append(float(ms or 0))
    return {phase: statistics.median(values) for phase, values in sorted(phases.items())}


def _percentile(values: list[float], q: int) -> float | None:
    value = percentile(values, q / 100)
    return None if value is None else round(value, 1)
