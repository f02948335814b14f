import json
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from medusa import credentials
from medusa.consuming import TupleConsumer
from medusa.dead_letters import (
    OFFSET_HEADER,
    PARTITION_HEADER,
    REASON_HEADER,
    TOPIC_HEADER,
    dead_letter_topic,
)
from medusa.envelope import Envelope, TupleType, decode_record
from medusa.linear_road.records import HISTORY_DAYS
from medusa.producing import TupleProducer
from medusa.schemas import load_schema
from medusa.sensors import SensorReading, sensor_readings, to_dict
from medusa.topics import delete_topics_named, ensure_topics
from tests.waiting import first_within

pytestmark = pytest.mark.integration


def _ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def _read_all(kafka_config: dict, topic: str, expected: int | None = None,
              timeout_s: float = 60.0, idle_s: float = 3.0) -> list:
    """Every record of the topic: until ``expected`` arrived, or none came for ``idle_s``."""
    consumer = Consumer({**kafka_config, "group.id": f"g-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    messages: list = []
    last_seen = [time.monotonic()]

    def finished() -> bool:
        if expected is not None and len(messages) >= expected:
            return True
        if messages and time.monotonic() - last_seen[0] > idle_s:
            return True
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            messages.append(message)
            last_seen[0] = time.monotonic()
        return False

    try:
        first_within(finished, timeout_s, interval_s=0)  # poll waits
    finally:
        consumer.close()
    return messages


def test_values_are_written_as_confluent_kafkas_avro_serializer_writes_them(
        kafka_config, registry, topic) -> None:
    """The producer writes with fastavro itself; the bytes are the registry client's."""
    from confluent_kafka.schema_registry.avro import AvroSerializer

    from medusa.registry import SERDE_CONFIG

    ensure_topics(kafka_config, [topic], partitions=1)
    schema = load_schema("sensor_reading")
    with TupleProducer(kafka_config, registry, topic, schema, "test-src",
                       to_dict=to_dict) as producer:
        serializer = AvroSerializer(registry, schema.text, to_dict,
                                    conf={"auto.register.schemas": False, **SERDE_CONFIG})
        context = SerializationContext(topic, MessageField.VALUE)
        for reading in sensor_readings(sensors=3, start_ms=1_000_000, interval_ms=1000,
                                       count=12):
            assert producer.serialize(reading) == serializer(reading, context)
        with pytest.raises(ValueError, match="does not fit the topic's schema"):
            producer.serialize({"sensor_id": 7})


def test_round_trip_through_the_registry_with_headers_and_boundaries(
        kafka_config, registry, topic) -> None:
    ensure_topics(kafka_config, [topic], partitions=3)
    readings = list(sensor_readings(sensors=10, start_ms=1_000_000, interval_ms=1000, count=50))
    with TupleProducer(kafka_config, registry, topic, load_schema("sensor_reading"), "test-src",
                       to_dict=to_dict, boundary_interval_s=3600) as producer:
        for reading in readings:
            producer.produce(reading, reading.tuple_id, reading.measured_at, key=reading.sensor_id)
        producer.emit_boundaries()
    assert producer.stats.sent == 50 and producer.stats.failed == 0
    # close() adds a final boundary round: two rounds over three partitions.
    assert producer.stats.boundaries == 6

    messages = _read_all(kafka_config, topic, expected=56)
    deserializer = AvroDeserializer(registry)
    decoded = []
    for message in messages:
        value = (deserializer(message.value(), SerializationContext(topic, MessageField.VALUE))
                 if message.value() is not None else None)
        decoded.append((message.partition(), decode_record(message.headers(), value)))
    data = [r for _, r in decoded if r.type is TupleType.STABLE]
    boundaries = [(p, r) for p, r in decoded if r.type is TupleType.BOUNDARY]
    assert sorted(r.tuple_id for r in data) == sorted(r.tuple_id for r in readings)
    # timestamp-millis comes back as an aware datetime
    received = {r.tuple_id: {**r.value, "measured_at": _ms(r.value["measured_at"])} for r in data}
    assert received == {r.tuple_id: to_dict(r) for r in readings}
    assert all(r.stime == _ms(r.value["measured_at"]) for r in data)
    assert {p for p, _ in boundaries} == {0, 1, 2}
    # The BOUNDARY promise: nothing after it on its partition has a smaller stime.
    for partition, marker in boundaries:
        position = next(i for i, (p, r) in enumerate(decoded) if r is marker)
        later = [r for p, r in decoded[position:] if p == partition and r.value is not None]
        assert all(r.stime >= marker.stime for r in later)
    assert max(r.stime for _, r in boundaries) == max(r.measured_at for r in readings)


def test_boundaries_are_emitted_at_the_configured_interval(kafka_config, registry, topic) -> None:
    ensure_topics(kafka_config, [topic], partitions=2)
    with TupleProducer(kafka_config, registry, topic, load_schema("sensor_reading"), "src",
                       to_dict=to_dict, boundary_interval_s=0.2) as producer:
        for reading in sensor_readings(sensors=2, start_ms=0, interval_ms=100, count=10):
            producer.produce(reading, reading.tuple_id, reading.measured_at)
            time.sleep(0.05)
    # 0.5 s of producing at a 0.2 s interval: at least two rounds, plus the final one.
    assert producer.stats.boundaries >= 3 * 2


def test_undecodable_records_go_to_the_dead_letter_topic_with_their_reason(
        kafka_config, registry, topic) -> None:
    ensure_topics(kafka_config, [topic], partitions=1)
    good = SensorReading("s1", "temperature", 20.5, "celsius", 42)
    with TupleProducer(kafka_config, registry, topic, load_schema("sensor_reading"), "src",
                       to_dict=to_dict) as producer:
        producer.produce(good, good.tuple_id, good.measured_at)
        producer.flush()  # two producers: keep the records in this order on the partition
        raw = Producer(kafka_config)
        raw.produce(topic, value=b"not avro at all",
                    headers=Envelope(TupleType.STABLE, "bad-1", 43).headers())
        raw.produce(topic, value=b"\x00\x00\x00\x00\x01xyz", headers=[("x", b"no envelope")])
        raw.flush(10)
        producer.produce(good, "after-the-bad-ones", 44)

    with TupleConsumer(kafka_config, registry, [topic], f"g-{uuid.uuid4()}") as consumer:
        # Two stable + the final BOUNDARY (asked for more, it waited out the timeout).
        taken = consumer.take(3, timeout_s=30)
        assert consumer.dead_lettered == 2
        assert len(taken) == 3
    ids = [c.record.tuple_id for c in taken if c.record.type is TupleType.STABLE]
    assert ids == [good.tuple_id, "after-the-bad-ones"], "processing goes on after a bad record"

    letters = _read_all(kafka_config, dead_letter_topic(topic), expected=2)
    assert [m.value() for m in letters] == [b"not avro at all", b"\x00\x00\x00\x00\x01xyz"]
    first, second = (dict(m.headers()) for m in letters)
    assert first[TOPIC_HEADER] == topic.encode()
    assert first[PARTITION_HEADER] == b"0"
    assert first[OFFSET_HEADER] == b"1"
    assert b"magic byte" in first[REASON_HEADER].lower() or first[REASON_HEADER]
    assert b"lacks envelope header" in second[REASON_HEADER]
    assert first["medusa.id"] == b"bad-1", "original headers are kept"


def _cli(federation, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {"MEDUSA_EXTERNAL_KAFKA": ",".join(f"{k}={v}" for k, v in federation.kafka.items()),
           # the stack's logins: the command authenticates as admin
           "MEDUSA_CREDENTIALS_FILE": str(credentials.process_credentials_file()),
           "MEDUSA_EXTERNAL_REGISTRY_URL": federation.registry_url,
           "MEDUSA_PRODUCER_BOUNDARY_INTERVAL_S": "0.5", "PATH": ""}
    return subprocess.run([sys.executable, "-m", "medusa_apps", *args], capture_output=True,
                          text=True, env=env, timeout=timeout)


def test_csv_replay_counts_bad_lines_and_publishes_the_rest(
        federation, kafka_config, tmp_path: Path) -> None:
    run = str(uuid.uuid4().int % 90_000 + 10_000)  # vehicle ids must be integers
    lines = [
        f"0,0,{run}1,50,0,1,0,3,16000,-1,-1,-1,-1,-1,-1",
        "this is not a record",
        f"0,0,{run}2,60,0,2,1,7,40000,-1,-1,-1,-1,-1,-1",
        f"2,1,{run}1,-1,-1,-1,-1,-1,-1,77,-1,-1,-1,-1,-1",
        "0,1,5,999,0,1,0,3,16000,-1,-1,-1,-1,-1,-1",
        f"0,30,{run}1,52,0,1,0,3,18300,-1,-1,-1,-1,-1,-1",
    ]
    path = tmp_path / "input.csv"
    path.write_text("\n".join(lines) + "\n")
    prefix = f"test.{run}."
    result = _cli(federation, "produce", "linear-road", "--from-file", str(path),
                  "--speedup", "0", "--json", "--topic-prefix", prefix)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["sent"] == 4
    assert summary["bad_lines"] == 2
    assert summary["bad_line_numbers"] == [2, 5]
    assert summary["failed"] == 0
    reports = _read_all(kafka_config, f"{prefix}linear-road.position-reports")
    assert len([m for m in reports if m.value() is not None]) == 3

    strict = _cli(federation, "produce", "linear-road", "--from-file", str(path), "--strict")
    assert strict.returncode == 1
    assert "input.csv:2:" in strict.stderr


def test_generated_linear_road_traffic_reaches_every_input_topic(
        federation, kafka_config, tmp_path: Path) -> None:
    csv, history = tmp_path / "generated.csv", tmp_path / "history.txt"
    prefix = f"test.{uuid.uuid4().hex[:6]}."
    result = _cli(federation, "produce", "linear-road", "--duration", "120", "--peak-rate", "100",
                  "--speedup", "0", "--write-csv", str(csv), "--write-history", str(history),
                  "--json", "--topic-prefix", prefix)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["failed"] == 0
    lines = csv.read_text().splitlines()
    # The historical tolls: the benchmark's rows (a car's 69 days), one record per car.
    cars = len(history.read_text().splitlines()) // HISTORY_DAYS
    assert summary["sent"] == len(lines) + cars and len(lines) > 1000
    assert "sent" in result.stderr, "a progress line with the rate is shown"
    by_type = {kind: sum(1 for line in lines if line.startswith(f"{kind},")) for kind in "023"}
    for kind, topic in (("0", "position-reports"), ("2", "account-balance-queries"),
                        ("3", "daily-expenditure-queries")):
        messages = _read_all(kafka_config, f"{prefix}linear-road.{topic}")
        assert by_type[kind] > 0
        assert len([m for m in messages if m.value() is not None]) == by_type[kind], topic
    messages = _read_all(kafka_config, f"{prefix}linear-road.historical-tolls")
    assert len([m for m in messages if m.value() is not None]) == cars > 0


def test_bad_cli_arguments_say_what_was_expected(federation) -> None:
    result = _cli(federation, "produce", "linear-road", "--xways", "zero")
    assert result.returncode == 2
    assert "--xways" in result.stderr and "integer" in result.stderr
    result = _cli(federation, "produce", "sensors", "--participant", "nobody")
    assert result.returncode == 2
    assert "no participant 'nobody'" in result.stderr


def test_a_consumer_of_a_topic_not_there_yet_waits_for_it_instead_of_failing(
        kafka_config, registry) -> None:
    """A BPM agent's first read of its ledger met a topic just made that the broker's
    metadata did not show yet, and the agent died of it."""
    missing = f"medusa.test.later-{uuid.uuid4().hex[:8]}"
    with TupleConsumer(kafka_config, registry, [missing], f"g-{uuid.uuid4()}") as consumer:
        assert consumer.drain(idle_s=2.0, timeout_s=10.0) == []


def test_a_networks_topics_are_deleted_by_their_prefix(kafka_config) -> None:
    """The benchmarks delete what they created (a move's ballast is gigabytes)."""
    prefix = f"t-deleted-{uuid.uuid4().hex[:6]}."
    topics = [f"{prefix}a", f"{prefix}b"]
    ensure_topics(kafka_config, topics, partitions=1)
    assert sorted(delete_topics_named(kafka_config, prefix)) == topics

    def gone() -> bool:
        listed = AdminClient(kafka_config).list_topics(timeout=10).topics
        return not any(name.startswith(prefix) for name in listed)
    assert first_within(gone, 30), f"topics {topics} still listed 30 s after their deletion"
