"""Producer throughput: Kafka's own perf tool, a bare confluent-kafka producer, a hand-written
confluent-kafka Avro producer, Medusa's producer.

All four write records of the same value size to fresh topics of the same
cluster with the same delivery settings (acks=all, idempotence, linger), one
after the other in one run, so their ratios mean something on a noisy machine.
"""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from medusa.envelope import Envelope, TupleType
from medusa.linear_road.records import STIME_ORIGIN_MS, PositionReport, to_dict
from medusa.linear_road.traffic import TrafficProfile, TrafficSimulation
from medusa.producing import TupleProducer
from medusa.registry import SERDE_CONFIG, register
from medusa.schemas import load_schema
from medusa.settings import kafka_config
from medusa.stack.components import client_properties_file, java_binary, kafka_libs
from medusa.stack.layout import StackLayout
from medusa.topics import ensure_topics

DELIVERY = {"acks": "all", "enable.idempotence": True, "linger.ms": 20}


@dataclass(frozen=True)
class Throughput:
    name: str
    records: int
    seconds: float
    details: dict[str, Any] = field(default_factory=dict, compare=False)
    """Where the time went, when the run knows (e.g. a fragment's Kafka transactions)."""

    @property
    def per_second(self) -> float:
        return self.records / self.seconds

    def as_dict(self) -> dict[str, Any]:
        result = {"name": self.name, "records": self.records,
                  "seconds": round(self.seconds, 3), "records_per_s": round(self.per_second, 1)}
        if self.details:
            result["details"] = self.details
        return result


def mean_of(first: Throughput, second: Throughput) -> Throughput:
    """Two runs of the same producer as one figure: their records over their mean time."""
    return Throughput(first.name, first.records, (first.seconds + second.seconds) / 2)


def position_reports(count: int) -> list[PositionReport]:
    reports: list[PositionReport] = []
    simulation = TrafficSimulation(TrafficProfile(xways=1, duration_s=10**6, peak_rate=1700,
                                                  start_rate=1700))
    for _, records in simulation.run():
        reports.extend(r for r in records if isinstance(r, PositionReport))
        if len(reports) >= count:
            return reports[:count]
    return reports


def medusa_producer(bootstrap: str, registry: SchemaRegistryClient,
                    reports: list[PositionReport]) -> tuple[Throughput, int]:
    """Avro through the registry, envelope headers, BOUNDARY records every second."""
    topic = f"bench.medusa.{uuid.uuid4().hex[:8]}"
    config = kafka_config(bootstrap, linger_ms=20)
    ensure_topics(config, [topic], partitions=4)
    # Set up (the schema registered, the topic's partitions read) before the clock starts,
    # as the hand-written producer is.
    producer = TupleProducer(config, registry, topic, load_schema("position_report"), "bench",
                             to_dict=to_dict)
    started = time.perf_counter()
    try:
        for report in reports:
            producer.produce(report, report.tuple_id, STIME_ORIGIN_MS + report.time * 1000,
                             key=str(report.vid))
    finally:
        producer.close()  # its last BOUNDARY records and the flush: timed
    elapsed = time.perf_counter() - started
    if producer.stats.failed:
        raise RuntimeError(f"medusa producer: {producer.stats.errors[:3]}")
    value_size = len(producer.serialize(reports[0]))
    return Throughput("medusa producer (Avro + envelope)", len(reports), elapsed), value_size


def avro_client_producer(bootstrap: str, registry: SchemaRegistryClient,
                         reports: list[PositionReport]) -> Throughput:
    """What a user would write without Medusa: confluent-kafka's ``AvroSerializer`` and the
    same envelope headers, no BOUNDARY records (Medusa's producer writes those too)."""
    topic = f"bench.avro.{uuid.uuid4().hex[:8]}"
    config = kafka_config(bootstrap, linger_ms=20)
    ensure_topics(config, [topic], partitions=4)
    schema = load_schema("position_report")
    register(registry, topic, schema)
    serializer = AvroSerializer(registry, schema.text, to_dict,
                                conf={"auto.register.schemas": False, **SERDE_CONFIG})
    context = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"enable.idempotence": True, "acks": "all", **config})
    started = time.perf_counter()
    for report in reports:
        stime = STIME_ORIGIN_MS + report.time * 1000
        headers = Envelope(TupleType.STABLE, report.tuple_id, stime).headers()
        value = serializer(report, context)
        while True:
            try:
                producer.produce(topic, value, str(report.vid), headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    undelivered = producer.flush(60)
    if undelivered:
        raise RuntimeError(f"avro client producer: {undelivered} record(s) undelivered")
    return Throughput("confluent-kafka AvroSerializer producer (Avro + envelope headers)",
                      len(reports), time.perf_counter() - started)


def bare_producer(bootstrap: str, count: int, value_size: int) -> Throughput:
    topic = f"bench.bare.{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_config(bootstrap), [topic], partitions=4)
    producer = Producer(kafka_config(bootstrap, DELIVERY))
    payload = b"x" * value_size
    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, payload, key=str(i % 50_000))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(60)
    return Throughput("confluent-kafka producer (bytes)", count, time.perf_counter() - started)


_PERF_LINE = re.compile(r"(\d+) records sent, ([\d.]+) records/sec")


def kafka_perf_tool(layout: StackLayout, bootstrap: str, count: int,
                    value_size: int) -> Throughput:
    topic = f"bench.perf.{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_config(bootstrap), [topic], partitions=4)
    with client_properties_file(bootstrap, **DELIVERY) as config:
        completed = subprocess.run(
            [java_binary(layout), "-Xmx512m", "-cp", f"{kafka_libs(layout)}/*",
             "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
             "--num-records", str(count), "--record-size", str(value_size),
             "--throughput", "-1", "--command-config", str(config)],
            capture_output=True, text=True, check=True)
    summary = _PERF_LINE.findall(completed.stdout)
    if not summary:
        raise RuntimeError(f"no summary from ProducerPerformance:\n{completed.stdout[-2000:]}")
    records, rate = summary[-1]
    # The tool's own rate, which leaves out the JVM's start-up.
    return Throughput("Kafka ProducerPerformance", int(records), int(records) / float(rate))


def kafka_consumer_perf_tool(layout: StackLayout, bootstrap: str, topic: str,
                             count: int) -> Throughput:
    """Kafka's ConsumerPerformance reading ``count`` records of ``topic``."""
    with client_properties_file(bootstrap) as config:
        completed = subprocess.run(
            [java_binary(layout), "-Xmx512m", "-cp", f"{kafka_libs(layout)}/*",
             "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap,
             "--topic", topic, "--num-records", str(count), "--timeout", "60000",
             "--command-config", str(config)],
            capture_output=True, text=True, check=True)
    # A header line of column names, then one line of values, both ", "-separated.
    lines = [line for line in completed.stdout.splitlines() if ", " in line]
    if len(lines) < 2:
        raise RuntimeError(f"no summary from ConsumerPerformance:\n{completed.stdout[-2000:]}")
    row = dict(zip(lines[-2].split(", "), lines[-1].split(", "), strict=False))
    records = int(row["data.consumed.in.nMsg"])
    return Throughput("Kafka ConsumerPerformance", records,
                      records / float(row["nMsg.sec"]))
