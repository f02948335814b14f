"""The SUnion against the real Kafka: two inputs on two clusters merged bucket by bucket,
each tuple exactly once and never behind a boundary that passed it, also across a kill -9;
unusable records dead-lettered on their input's cluster; an input that fails for longer
than D is one trace in Jaeger, whose context the REDO carries."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from medusa import trace_view
from medusa.dead_letters import BOX_HEADER, OFFSET_HEADER, REASON_HEADER, dead_letter_topic
from medusa.envelope import (
    ID_HEADER,
    REDO_HEADER,
    STIME_HEADER,
    TRACEPARENT_HEADER,
    TYPE_HEADER,
    Envelope,
    Headers,
    TupleType,
)
from medusa.jaeger_client import Trace
from medusa.producing import TupleProducer
from medusa.schemas import load_schema
from medusa.sensors import SensorReading, sensor_readings, to_dict
from medusa.settings import REPO_ROOT, kafka_config
from medusa.sunion import (
    INPUT_HEADER,
    POSITIONS_HEADER,
    SUnion,
    SUnionConfig,
    SUnionFencedError,
    SUnionInput,
    dump_config,
)
from medusa.sunion.service import transactional_id
from medusa.topics import ensure_topics
from tests.federation_processes import federation_env
from tests.waiting import wait_for, wait_until

pytestmark = pytest.mark.integration

BASE_MS = 1_700_000_000_000
FAR_MS = BASE_MS + 10_000_000
"""A final boundary far ahead: every bucket before it is released."""
AVRO_LIKE = b"\x00\x00\x00\x00\x01payload"


@dataclass(frozen=True)
class OutRecord:
    partition: int
    offset: int
    type: str
    tuple_id: str
    stime: int
    headers: dict[str, bytes]
    value: bytes | None


@dataclass
class OutputReader:
    """Reads the output topic (committed records only) from the start, as it grows."""

    bootstrap: str
    topic: str
    records: list[OutRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._consumer = Consumer(kafka_config(self.bootstrap, {
            "group.id": f"read-{uuid.uuid4()}", "enable.auto.commit": False,
            "isolation.level": "read_committed"}))
        partitions = self._consumer.list_topics(self.topic, timeout=10).topics[self.topic]
        self._consumer.assign([TopicPartition(self.topic, p, 0) for p in partitions.partitions])

    def read_until(self, done: Callable[[list[OutRecord]], bool], what: str,
                   timeout_s: float = 120.0) -> list[OutRecord]:
        def read() -> bool:
            if done(self.records):
                return True
            for message in self._consumer.consume(500, timeout=0.5):
                if message.error() is not None:
                    continue
                pairs = cast(list[tuple[str, bytes | None]], message.headers() or [])
                headers = {k: v for k, v in pairs if v is not None}
                self.records.append(OutRecord(
                    cast(int, message.partition()), cast(int, message.offset()),
                    headers[TYPE_HEADER].decode(), headers[ID_HEADER].decode(),
                    int(headers[STIME_HEADER]), headers, cast(bytes | None, message.value())))
            return False

        wait_until(f"{what} seen", read, timeout_s, interval_s=0)  # consume waits
        return self.records

    def close(self) -> None:
        self._consumer.close()


def _redo_boundary(record: OutRecord) -> bool:
    return record.type == TupleType.BOUNDARY.value and REDO_HEADER in record.headers


def _tuples(records: list[OutRecord]) -> list[OutRecord]:
    return [r for r in records if r.type != TupleType.BOUNDARY.value]


def _released_past(stime: int) -> Callable[[list[OutRecord]], bool]:
    """Done when an output BOUNDARY passed ``stime``: every tuple below it is out."""
    return lambda records: any(r.type == TupleType.BOUNDARY.value and r.stime > stime
                               for r in records)


def assert_merged_in_bucket_order(records: list[OutRecord]) -> None:
    """Per output partition: tuples in non-decreasing stime, none behind a boundary that
    passed it, and every boundary carries the positions of its release."""
    by_partition: dict[int, list[OutRecord]] = {}
    for record in records:
        by_partition.setdefault(record.partition, []).append(record)
    for partition, in_order in by_partition.items():
        boundary = last_stime = -1
        for record in sorted(in_order, key=lambda r: r.offset):
            if record.type == TupleType.BOUNDARY.value:
                assert record.stime >= boundary, "the SUnion's boundaries do not go back"
                boundary = record.stime
                positions = json.loads(record.headers[POSITIONS_HEADER])
                assert positions["released_through"] == record.stime
            else:
                assert record.stime >= boundary, (
                    f"{record.tuple_id} (stime {record.stime}) came after the boundary "
                    f"{boundary} on partition {partition}")
                assert record.stime >= last_stime, "tuples go out in stime order"
                last_stime = record.stime


def assert_each_once(records: list[OutRecord], expected_ids: set[str]) -> None:
    ids = [r.tuple_id for r in _tuples(records)]
    duplicated = {i for i in ids if ids.count(i) > 1} if len(ids) != len(set(ids)) else set()
    assert not duplicated, f"written twice: {sorted(duplicated)[:10]}"
    assert set(ids) == expected_ids, (f"missing {sorted(expected_ids - set(ids))[:10]}, "
                                      f"unexpected {sorted(set(ids) - expected_ids)[:10]}")


def _read_topic(bootstrap: str, topic: str, count: int, timeout_s: float = 60.0) -> list[Any]:
    consumer = Consumer(kafka_config(bootstrap, {
        "group.id": f"read-{uuid.uuid4()}", "auto.offset.reset": "earliest",
        "isolation.level": "read_committed"}))
    consumer.subscribe([topic])
    messages: list[Any] = []

    def read() -> bool:
        if len(messages) >= count:
            return True
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            messages.append(message)
        return False

    try:
        wait_until(lambda: f"{count} records on {topic} (only {len(messages)})", read,
                   timeout_s, interval_s=0)  # poll waits
    finally:
        consumer.close()
    return messages


def _wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
    """``wait_until`` looking every 0.1 s: the SUnion releases quickly."""
    wait_until(what, condition, timeout_s, interval_s=0.1)


@contextmanager
def running(config: SUnionConfig) -> Iterator[SUnion]:
    """The SUnion in a thread of this process; its failure fails the test."""
    stop = threading.Event()
    failures: list[BaseException] = []
    sunion = SUnion(config)
    sunion.open()

    def loop() -> None:
        try:
            sunion.run(stop)
        except BaseException as error:  # reported by the test
            failures.append(error)

    thread = threading.Thread(target=loop, name="sunion", daemon=True)
    thread.start()
    try:
        yield sunion
    finally:
        stop.set()
        thread.join(60)
        sunion.close()
    assert not failures, f"the SUnion failed: {failures[0]!r}"


@pytest.fixture
def clusters(federation) -> tuple[str, str]:
    """The bootstraps of two different participants."""
    return federation.bootstrap("alpha"), federation.bootstrap("beta")


def _sensor_producer(bootstrap: str, registry: Any, topic: str) -> TupleProducer:
    return TupleProducer(kafka_config(bootstrap), registry, topic,
                         load_schema("sensor_reading"), f"src-{topic}", to_dict=to_dict,
                         boundary_interval_s=0.2)


def test_two_clusters_merge_in_bucket_order_each_tuple_once(clusters, registry, topic) -> None:
    alpha, beta = clusters
    topic_a, topic_b, output = f"{topic}.a", f"{topic}.b", f"{topic}.out"
    ensure_topics(kafka_config(alpha), [topic_a], partitions=2)
    ensure_topics(kafka_config(beta), [topic_b], partitions=1)
    config = SUnionConfig(fragment="alpha/test/merge", output_topic=output,
                          output_bootstrap=alpha, bucket_ms=500,
                          inputs=[SUnionInput(name="a", topic=topic_a, bootstrap=alpha),
                                  SUnionInput(name="b", topic=topic_b, bootstrap=beta)])
    readings = {
        "a": list(sensor_readings(sensors=6, start_ms=BASE_MS, interval_ms=40, count=600)),
        "b": list(sensor_readings(sensors=4, start_ms=BASE_MS + 7, interval_ms=30, count=400,
                                  seed=5)),
    }
    expected_input = {r.tuple_id: name for name, rs in readings.items() for r in rs}
    payloads = {}
    with running(config) as sunion, \
            _sensor_producer(alpha, registry, topic_a) as producer_a, \
            _sensor_producer(beta, registry, topic_b) as producer_b:
        producers = {"a": producer_a, "b": producer_b}
        for index in range(600):
            for name, producer in producers.items():
                if index < len(readings[name]):
                    reading = readings[name][index]
                    producer.produce(reading, reading.tuple_id, reading.measured_at,
                                     key=reading.sensor_id)
                    payloads[reading.tuple_id] = producer.serialize(reading)
            if index % 50 == 0:
                for producer in producers.values():
                    producer.flush()
                    producer.emit_boundaries()
        for producer in producers.values():
            producer.emit_boundaries(FAR_MS)
            producer.flush()
        reader = OutputReader(alpha, output)
        try:
            records = reader.read_until(_released_past(FAR_MS - 1000), "the final release")
        finally:
            reader.close()
        state = sunion.state()

    assert_each_once(records, set(expected_input))
    assert_merged_in_bucket_order(records)
    for record in _tuples(records):
        assert record.headers[INPUT_HEADER].decode() == expected_input[record.tuple_id]
        assert record.value == payloads[record.tuple_id], "values pass through unchanged"
        assert record.partition == 0
    assert state["records_out"] == 1000 and state["held_tuples"] == 0
    assert state["dead_lettered"] == 0
    assert set(state["inputs"]["a"]["partitions"]) == {0, 1}
    assert state["inputs"]["b"]["partitions"][0]["boundary"] == FAR_MS
    assert state["released_through"] == FAR_MS


@dataclass
class Feeder:
    """Keeps both inputs flowing, in stime order, until stopped."""

    producers: dict[str, TupleProducer]
    produced: set[str] = field(default_factory=set)
    last_stime: int = BASE_MS
    stop: threading.Event = field(default_factory=threading.Event)
    failure: list[BaseException] = field(default_factory=list)
    paused: set[str] = field(default_factory=set)
    """Inputs whose producer is stopped for now (no tuple, no boundary): a failed input."""

    def run(self) -> None:
        try:
            step = 0
            while not self.stop.is_set():
                for name, producer in self.producers.items():
                    if name in self.paused:
                        continue
                    for sensor in range(5):
                        stime = BASE_MS + step * 20
                        tuple_id = f"{name}/{sensor}/{step}"
                        reading = SensorReading(f"s{sensor}", "temperature", float(step),
                                                "celsius", stime)
                        producer.produce(reading, tuple_id, stime, key=reading.sensor_id)
                        self.produced.add(tuple_id)
                        self.last_stime = stime
                    producer.poll()
                step += 1
                time.sleep(0.05)
        except BaseException as error:  # reported by the test
            self.failure.append(error)


def _start_sunion(config: SUnionConfig, directory: Path, name: str) -> subprocess.Popen[bytes]:
    path = directory / f"{name}.json"
    dump_config(config, path)
    log = (directory / f"{name}.log").open("wb")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO_ROOT / "services"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "medusa.sunion", "--config", str(path)],
                            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)


def _state(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def test_a_kill_9_loses_and_duplicates_nothing(clusters, registry, topic, tmp_path) -> None:
    alpha, beta = clusters
    topic_a, topic_b, output = f"{topic}.a", f"{topic}.b", f"{topic}.out"
    ensure_topics(kafka_config(alpha), [topic_a], partitions=2)
    ensure_topics(kafka_config(beta), [topic_b], partitions=1)
    base = SUnionConfig(fragment="alpha/test/kill", output_topic=output, output_bootstrap=alpha,
                        bucket_ms=200,
                        inputs=[SUnionInput(name="a", topic=topic_a, bootstrap=alpha),
                                SUnionInput(name="b", topic=topic_b, bootstrap=beta)])
    first_state, second_state = tmp_path / "first.state.json", tmp_path / "second.state.json"
    producers = {"a": _sensor_producer(alpha, registry, topic_a),
                 "b": _sensor_producer(beta, registry, topic_b)}
    feeder = Feeder(producers)
    feeding = threading.Thread(target=feeder.run, name="feeder", daemon=True)
    first = _start_sunion(base.model_copy(update={"state_file": str(first_state)}),
                          tmp_path, "first")
    second = None
    try:
        feeding.start()
        _wait_for(lambda: _state(first_state).get("transactions", 0) >= 3
                  and _state(first_state).get("records_out", 0) > 0,
                  "the first SUnion's releases")
        first.send_signal(signal.SIGKILL)
        assert first.wait(30) == -signal.SIGKILL
        written_before_kill = _state(first_state)["records_out"]
        second = _start_sunion(base.model_copy(update={"state_file": str(second_state)}),
                               tmp_path, "second")
        # Input keeps flowing until the new instance is seen releasing.
        _wait_for(lambda: _state(second_state).get("transactions", 0) >= 3
                  and _state(second_state).get("records_out", 0) > 0,
                  "the second SUnion's releases")
        feeder.stop.set()
        feeding.join(30)
        assert not feeder.failure, f"feeding failed: {feeder.failure[0]!r}"
        for producer in producers.values():
            producer.emit_boundaries(FAR_MS)
            producer.flush()
        reader = OutputReader(alpha, output)
        try:
            records = reader.read_until(_released_past(FAR_MS - 1000), "the final release")
        finally:
            reader.close()
        second.send_signal(signal.SIGTERM)
        assert second.wait(60) == 0, (tmp_path / "second.log").read_text()[-2000:]
    finally:
        feeder.stop.set()
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(10)
        for producer in producers.values():
            producer.close()

    assert written_before_kill > 0
    assert_each_once(records, feeder.produced)
    assert_merged_in_bucket_order(records)
    for record in _tuples(records):
        assert record.headers[INPUT_HEADER].decode() == record.tuple_id.split("/")[0]


def test_unusable_and_late_records_are_dead_lettered_on_their_input_cluster(
        clusters, topic) -> None:
    alpha, beta = clusters
    topic_a, topic_b, output = f"{topic}.a", f"{topic}.b", f"{topic}.out"
    ensure_topics(kafka_config(alpha), [topic_a], partitions=1)
    ensure_topics(kafka_config(beta), [topic_b], partitions=1)
    config = SUnionConfig(fragment="alpha/test/dlq", output_topic=output,
                          output_bootstrap=alpha,
                          inputs=[SUnionInput(name="a", topic=topic_a, bootstrap=alpha),
                                  SUnionInput(name="b", topic=topic_b, bootstrap=beta)])
    to_a, to_b = Producer(kafka_config(alpha)), Producer(kafka_config(beta))

    def send(producer: Producer, target: str, envelope: Envelope | None,
             value: bytes | None = AVRO_LIKE) -> None:
        headers: Headers = envelope.headers() if envelope is not None else [("other", b"x")]
        producer.produce(target, value=value, headers=headers)
        producer.flush(10)

    def boundary(producer: Producer, target: str, stime: int) -> None:
        send(producer, target, Envelope(TupleType.BOUNDARY, f"b/{stime}", stime), None)

    with running(config) as sunion:
        send(to_a, topic_a, Envelope(TupleType.STABLE, "good-a", BASE_MS + 100))
        send(to_a, topic_a, Envelope(TupleType.UNDO, "undo-a", BASE_MS + 200), None)
        send(to_a, topic_a, None)  # no envelope
        send(to_a, topic_a, Envelope(TupleType.STABLE, "no-value-a", BASE_MS + 300), None)
        send(to_a, topic_a, Envelope(TupleType.STABLE, "not-avro-a", BASE_MS + 300), b"{json}")
        send(to_b, topic_b, Envelope(TupleType.TENTATIVE, "good-b", BASE_MS + 150))
        send(to_b, topic_b, Envelope(TupleType.STABLE, "not-avro-b", BASE_MS + 160), b"\x01x")
        boundary(to_a, topic_a, BASE_MS + 2000)
        boundary(to_b, topic_b, BASE_MS + 2000)
        _wait_for(lambda: (sunion.state()["released_through"] or 0) >= BASE_MS + 2000,
                  "the release through the first boundary")
        send(to_a, topic_a, Envelope(TupleType.STABLE, "late-a", BASE_MS + 500))
        send(to_a, topic_a, Envelope(TupleType.STABLE, "good-a-2", BASE_MS + 2500))
        boundary(to_a, topic_a, FAR_MS)
        boundary(to_b, topic_b, FAR_MS)
        reader = OutputReader(alpha, output)
        try:
            records = reader.read_until(_released_past(FAR_MS - 1000), "the final release")
        finally:
            reader.close()
        state = sunion.state()

    assert [r.tuple_id for r in _tuples(records)] == ["good-a", "good-a-2"]
    assert state["dead_lettered"] == 6
    assert state["undos_received"] == 1, "an UNDO with nothing tentative withdraws nothing"
    # The output's own cluster: written in the release's transaction (read_committed).
    letters_a = _read_topic(alpha, dead_letter_topic(topic_a), 4)
    reasons = {dict(m.headers()).get(ID_HEADER, b"").decode() or "no envelope":
               dict(m.headers())[REASON_HEADER].decode() for m in letters_a}
    assert set(reasons) == {"no envelope", "no-value-a", "not-avro-a", "late-a"}
    assert "envelope" in reasons["no envelope"]
    assert "without a value" in reasons["no-value-a"]
    assert "magic byte" in reasons["not-avro-a"]
    assert "after the boundary" in reasons["late-a"]
    assert all(dict(m.headers())[BOX_HEADER] == b"alpha/test/dlq" for m in letters_a)
    late = next(m for m in letters_a if dict(m.headers()).get(ID_HEADER) == b"late-a")
    assert late.value() == AVRO_LIKE and dict(late.headers())[OFFSET_HEADER] == b"6"
    # A remote input's dead letters go to its own cluster; a TENTATIVE tuple that a stable
    # boundary passed with no UNDO is one (its upstream broke the protocol).
    letters_b = _read_topic(beta, dead_letter_topic(topic_b), 2)
    reasons_b = {dict(m.headers())[ID_HEADER]: dict(m.headers())[REASON_HEADER].decode()
                 for m in letters_b}
    assert set(reasons_b) == {b"good-b", b"not-avro-b"}
    assert "without an UNDO" in reasons_b[b"good-b"]


def test_a_new_instance_fences_the_old_one(clusters, topic) -> None:
    alpha, _ = clusters
    topic_a, output = f"{topic}.a", f"{topic}.out"
    ensure_topics(kafka_config(alpha), [topic_a], partitions=1)
    config = SUnionConfig(fragment="alpha/test/fence", output_topic=output,
                          output_bootstrap=alpha,
                          inputs=[SUnionInput(name="a", topic=topic_a, bootstrap=alpha)])
    producer = Producer(kafka_config(alpha))
    producer.produce(topic_a, value=AVRO_LIKE,
                     headers=Envelope(TupleType.STABLE, "t1", BASE_MS).headers())
    producer.produce(topic_a, value=None,
                     headers=Envelope(TupleType.BOUNDARY, "b1", BASE_MS + 1000).headers())
    producer.flush(10)
    with SUnion(config) as old, SUnion(config) as new:
        stop = threading.Event()
        give_up = threading.Timer(60, stop.set)  # run() returning means it was not fenced
        give_up.start()
        with pytest.raises(SUnionFencedError):
            old.run(stop)
        give_up.cancel()
        assert old.state()["transactions"] == 0
        with running(config) as newest:  # the third fences the second; it writes the tuple
            reader = OutputReader(alpha, output)
            try:
                records = reader.read_until(_released_past(BASE_MS), "the release")
            finally:
                reader.close()
            assert newest.state()["records_out"] == 1
        assert new.state()["transactions"] == 0
    assert [r.tuple_id for r in _tuples(records)] == ["t1"]


_NODE_SCRIPT = """
import sys, time
from pathlib import Path
from medusa.sunion.config import load_config
from medusa_spark.sunion_process import SUnionProcess
sunion = SUnionProcess(load_config(sys.argv[1]), Path(sys.argv[2])).start()
print(sunion.pid, flush=True)
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "\nState:\tZ" in status  # ended, not yet reaped by whoever adopted it


def test_a_sunion_stops_when_its_node_is_killed(clusters, topic, tmp_path) -> None:
    """The node starts its SUnions as processes of their own: killed (or stopped by
    Ctrl-C before it could stop them), it must not leave them running."""
    alpha, _ = clusters
    topic_a = f"{topic}.a"
    ensure_topics(kafka_config(alpha), [topic_a], partitions=1)
    config = SUnionConfig(fragment="alpha/test/orphan", output_topic=f"{topic}.out",
                          output_bootstrap=alpha,
                          inputs=[SUnionInput(name="a", topic=topic_a, bootstrap=alpha)])
    path = tmp_path / "sunion.json"
    dump_config(config, path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO_ROOT / "services"), str(REPO_ROOT / "spark_apps"),
         os.environ.get("PYTHONPATH", "")])}
    node = subprocess.Popen([sys.executable, "-c", _NODE_SCRIPT, str(path), str(tmp_path)],
                            stdout=subprocess.PIPE, env=env, cwd=REPO_ROOT)
    sunion_pid = 0
    try:
        assert node.stdout is not None
        sunion_pid = int(node.stdout.readline())
        state = tmp_path / "state.json"
        _wait_for(lambda: _state(state).get("opened_at") is not None, "the SUnion's start")
        node.send_signal(signal.SIGKILL)
        node.wait(30)
        _wait_for(lambda: _gone(sunion_pid), "the SUnion's stop after its node's kill")
        assert "has gone; stopping" in (tmp_path / "sunion.log").read_text()
    finally:
        if node.poll() is None:
            node.kill()
            node.wait(10)
        if sunion_pid and not _gone(sunion_pid):
            os.kill(sunion_pid, signal.SIGKILL)


def test_a_partition_added_to_an_input_is_followed(clusters, topic) -> None:
    alpha, _ = clusters
    topic_a, output = f"{topic}.a", f"{topic}.out"
    admin_config = kafka_config(alpha)
    ensure_topics(admin_config, [topic_a], partitions=1)
    config = SUnionConfig(fragment="alpha/test/grow", output_topic=output,
                          output_bootstrap=alpha,
                          inputs=[SUnionInput(name="a", topic=topic_a, bootstrap=alpha)])
    producer = Producer(admin_config)

    def send(partition: int, kind: TupleType, tuple_id: str, stime: int) -> None:
        value = None if kind is TupleType.BOUNDARY else AVRO_LIKE
        producer.produce(topic_a, value=value, partition=partition,
                         headers=Envelope(kind, tuple_id, stime).headers())
        producer.flush(10)

    with running(config) as sunion:
        send(0, TupleType.STABLE, "p0", BASE_MS)
        send(0, TupleType.BOUNDARY, "b0", BASE_MS + 1000)
        _wait_for(lambda: sunion.state()["records_out"] == 1, "the first release")
        admin = AdminClient(admin_config)
        for future in admin.create_partitions([NewPartitions(topic_a, 2)]).values():
            future.result(30)
        _wait_for(lambda: len(producer.list_topics(topic_a, timeout=5).topics[topic_a]
                              .partitions) == 2, "the producer seeing the new partition")
        send(1, TupleType.STABLE, "p1", BASE_MS + 1500)
        _wait_for(lambda: 1 in sunion.state()["inputs"]["a"]["partitions"],
                  "the new partition followed")
        # From now on the new partition holds releases back until its own boundary comes.
        send(0, TupleType.BOUNDARY, "b0-2", FAR_MS)
        _wait_for(lambda: sunion.state()["inputs"]["a"]["partitions"][0]["boundary"] == FAR_MS,
                  "partition 0's boundary read")
        assert sunion.state()["released_through"] == BASE_MS + 1000
        send(1, TupleType.BOUNDARY, "b1", FAR_MS)
        reader = OutputReader(alpha, output)
        try:
            records = reader.read_until(_released_past(FAR_MS - 1000), "the final release")
        finally:
            reader.close()
    assert [r.tuple_id for r in _tuples(records)] == ["p0", "p1"]


def test_positions_are_found_behind_a_large_aborted_transaction(clusters, topic) -> None:
    alpha, _ = clusters
    topic_a, output = f"{topic}.a", f"{topic}.out"
    ensure_topics(kafka_config(alpha), [topic_a], partitions=1)
    config = SUnionConfig(fragment="alpha/test/tail", output_topic=output,
                          output_bootstrap=alpha,
                          inputs=[SUnionInput(name="a", topic=topic_a, bootstrap=alpha)])
    producer = Producer(kafka_config(alpha))

    def send(kind: TupleType, tuple_id: str, stime: int) -> None:
        value = None if kind is TupleType.BOUNDARY else AVRO_LIKE
        producer.produce(topic_a, value=value, headers=Envelope(kind, tuple_id, stime).headers())
        producer.flush(10)

    send(TupleType.STABLE, "t1", BASE_MS)
    send(TupleType.BOUNDARY, "b1", BASE_MS + 1000)
    send(TupleType.STABLE, "t2", BASE_MS + 1500)  # held at the end of the first run
    with running(config) as first:
        _wait_for(lambda: first.state()["records_out"] == 1, "the first release")
    # A writer dies in the middle of a transaction larger than the first read-back window.
    dying = Producer(kafka_config(alpha, {"transactional.id": transactional_id(output)}))
    dying.init_transactions(30)
    dying.begin_transaction()
    for index in range(1200):
        dying.produce(output, value=AVRO_LIKE, partition=0,
                      headers=Envelope(TupleType.STABLE, f"junk-{index}", BASE_MS).headers())
    dying.flush(30)
    send(TupleType.STABLE, "t3", BASE_MS + 2500)
    send(TupleType.BOUNDARY, "b2", FAR_MS)
    with running(config) as second:
        reader = OutputReader(alpha, output)
        try:
            records = reader.read_until(_released_past(FAR_MS - 1000), "the final release")
        finally:
            reader.close()
        assert second.state()["records_out"] == 2
    assert [r.tuple_id for r in _tuples(records)] == ["t1", "t2", "t3"]


def _partition_trace(query_url: str, trace_id: int, spans: list[str],
                     timeout_s: float = 90.0) -> Trace:
    """The partition trace ``trace_id`` as ``medusa trace --kind partition`` finds it, once
    it has every span named."""
    seen: list[list[str]] = []

    def complete() -> Trace | None:
        try:
            recent = trace_view.recent(query_url, "partition", 20, 900)
        except httpx.HTTPError:
            recent = []
        seen[:] = [sorted(s.name for s in t.spans) for t in recent]
        return next((found for found in recent if int(found.trace_id, 16) == trace_id
                     and all(found.named(name) for name in spans)), None)

    return wait_for(lambda: f"the partition trace {trace_id:032x} with {spans} in Jaeger "
                            f"(found {seen})", complete, timeout_s, interval_s=1)


def test_an_up_failure_period_is_one_trace_in_jaeger(federation, clusters, registry, topic,
                                                      tmp_path) -> None:
    alpha, beta = clusters
    topic_a, topic_b, output = f"{topic}.a", f"{topic}.b", f"{topic}.out"
    ensure_topics(kafka_config(alpha), [topic_a], partitions=1)
    ensure_topics(kafka_config(beta), [topic_b], partitions=1)
    fragment = f"alpha/test/trace-{uuid.uuid4().hex[:8]}"
    state_file = tmp_path / "state.json"
    config = SUnionConfig(fragment=fragment, output_topic=output, output_bootstrap=alpha,
                          bucket_ms=200, max_delay_ms=2000, state_file=str(state_file),
                          otlp_endpoint=federation.otlp_endpoint,
                          inputs=[SUnionInput(name="a", topic=topic_a, bootstrap=alpha),
                                  SUnionInput(name="b", topic=topic_b, bootstrap=beta)])
    producers = {"a": _sensor_producer(alpha, registry, topic_a),
                 "b": _sensor_producer(beta, registry, topic_b)}
    feeder = Feeder(producers)
    feeding = threading.Thread(target=feeder.run, name="feeder", daemon=True)
    sunion = _start_sunion(config, tmp_path, "sunion")

    def state() -> dict[str, Any]:
        return _state(state_file)

    try:
        feeding.start()
        _wait_for(lambda: state().get("transactions", 0) >= 3, "the first stable releases")
        tentative_before, redos_before = state()["tentative_releases"], state()["redos"]
        feeder.paused.add("b")  # input b fails: a bucket waits D, then goes out TENTATIVE
        _wait_for(lambda: state()["tentative_releases"] > tentative_before,
                  "a tentative release after D")
        feeder.paused.discard("b")  # and comes back: the REDO
        _wait_for(lambda: state()["redos"] > redos_before, "the REDO")
        reader = OutputReader(alpha, output)
        try:
            records = reader.read_until(
                lambda rs: any(_redo_boundary(r) for r in rs), "the REDO's boundary")
        finally:
            reader.close()
    finally:
        feeder.stop.set()
        feeding.join(30)
        sunion.send_signal(signal.SIGTERM)
        exited = sunion.wait(60)
        for producer in producers.values():
            producer.close()
    assert exited == 0, (tmp_path / "sunion.log").read_text()[-2000:]
    assert not feeder.failure, f"feeding failed: {feeder.failure[0]!r}"

    redo = [r for r in records if _redo_boundary(r)][-1]
    _, trace_id, root_id, _ = redo.headers[TRACEPARENT_HEADER].decode().split("-")
    stages = ["delay", "tentative release", "heal", "stabilization"]
    found = _partition_trace(federation.jaeger_query_url, int(trace_id, 16), stages)
    rows = trace_view.timeline(found)
    assert [(row.span.name, row.depth) for row in rows] == [
        (f"up-failure {fragment}", 0), *((stage, 1) for stage in stages)]
    root = rows[0].span
    assert root.service == "medusa-sunion" and int(root.span_id, 16) == int(root_id, 16), \
        "the REDO's boundary carries the root's context"
    delay, tentative, heal, stabilization = (row.span for row in rows[1:])
    assert delay.start_us == root.start_us
    assert delay.start_us <= tentative.start_us <= heal.start_us <= stabilization.start_us
    assert delay.attributes["medusa.dpc.delay_ms"] == 2000
    assert "b[0]" in delay.attributes["medusa.dpc.failed_inputs"]
    assert tentative.attributes["medusa.dpc.epoch"] == int(redo.headers[REDO_HEADER])
    assert tentative.attributes["medusa.dpc.tentative_releases"] >= 1

    png = tmp_path / "partition.png"
    shown = subprocess.run(
        [sys.executable, "-m", "medusa_apps", "trace", "--kind", "partition", "--last", "5",
         "--png", str(png)], capture_output=True, text=True, timeout=120, check=False,
        env={**federation_env(federation, tmp_path), "COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.split(f"up-failure {fragment} (trace {found.trace_id})", 1)
    assert len(lines) == 2, shown.stdout
    for stage in stages:
        assert f"{stage}  [medusa-sunion]" in lines[1], f"{stage} not shown:\n{shown.stdout}"
    assert png.read_bytes()[:4] == b"\x89PNG"
