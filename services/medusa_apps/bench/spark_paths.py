"""Spark throughput: a plain Kafka-to-Kafka passthrough against a single Medusa filter box.

Both read the same pre-filled topic of position reports to the end (availableNow)
on the same SparkSession, one after the other, and write to fresh topics.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import yaml
from confluent_kafka.schema_registry import SchemaRegistryClient
from pyspark.sql import SparkSession

from medusa.linear_road.records import POSITION_REPORTS, STIME_ORIGIN_MS, to_dict
from medusa.producing import TupleProducer
from medusa.schemas import schema_for_topic
from medusa.settings import kafka_config, spark_kafka_options
from medusa.stack.endpoints import Endpoints
from medusa.topics import ensure_topics
from medusa_apps.bench.producers import Throughput, position_reports
from medusa_spark.network.model import parse_network
from medusa_spark.network.validate import validate
from medusa_spark.runner import AVAILABLE_NOW, start_box, wire


def fill_topic(bootstrap: str, registry: SchemaRegistryClient, topic: str, count: int) -> None:
    ensure_topics(kafka_config(bootstrap), [topic], partitions=4)
    with TupleProducer(kafka_config(bootstrap), registry, topic,
                       schema_for_topic(POSITION_REPORTS), "bench", to_dict=to_dict) as producer:
        for report in position_reports(count):
            producer.produce(report, report.tuple_id, STIME_ORIGIN_MS + report.time * 1000,
                             key=str(report.vid))


def passthrough(spark: SparkSession, bootstrap: str, source: str, count: int,
                checkpoints: Path) -> Throughput:
    """Records copied as they are: key, value and headers."""
    target = f"bench.passthrough.{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_config(bootstrap), [target], partitions=4)
    kafka = spark_kafka_options(bootstrap)
    frame = (spark.readStream.format("kafka").options(**kafka)
             .option("subscribe", source).option("startingOffsets", "earliest")
             .option("includeHeaders", "true").load()
             .select("key", "value", "headers"))
    started = time.perf_counter()
    query = (frame.writeStream.format("kafka").options(**kafka)
             .option("topic", target).option("checkpointLocation", str(checkpoints / target))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return Throughput("Spark passthrough (Kafka to Kafka)", count,
                      time.perf_counter() - started)


def filter_box(spark: SparkSession, endpoints: Endpoints, registry: SchemaRegistryClient,
               source: str, count: int, checkpoints: Path) -> Throughput:
    """The same records through a Medusa filter box that keeps them all."""
    text = yaml.safe_dump({
        "name": "bench-filter", "partitions": 4,
        "streams": {
            "reports": {"topic": source, "participant": "alpha", "schema": "position_report"},
            "kept": {"topic": f"bench.kept.{uuid.uuid4().hex[:8]}", "participant": "alpha",
                     "schema": "position_report"}},
        "boxes": {"keep_all": {"type": "filter", "params": {"predicate": "speed >= 0"}}},
        "arrows": [{"from": "reports", "to": "keep_all"}, {"from": "keep_all", "to": "kept"}],
    }, sort_keys=False)
    plan = validate(parse_network(text), spark)
    box = wire(plan, endpoints, registry)["keep_all"]
    started = time.perf_counter()
    query = start_box(spark, plan, box, str(checkpoints / box.output.topic),
                      trigger=AVAILABLE_NOW)
    query.awaitTermination()
    return Throughput("Medusa filter box", count, time.perf_counter() - started)
