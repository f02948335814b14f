"""The SUnion in the query (``sunion: in-query``): a fragment's Spark source reads its
inputs directly and releases them bucket by bucket, as the SUnion process does.

On the real stack: a fragment over two partitions gives every tuple once, with late and
undecodable records dead-lettered; a batch replayed from Spark's offset log (its commit
removed, read again from Kafka) holds what it held the first time; and a cut link to the
cluster of one input holds the release back without failing the query, which goes on
after the heal with nothing lost or repeated.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, Producer

from medusa.consuming import TupleConsumer
from medusa.envelope import Envelope, TupleType
from medusa.producing import TupleProducer
from medusa.schemas import load_schema
from medusa.settings import kafka_config, spark_kafka_options
from medusa.sunion.config import SUnionConfig, SUnionInput
from medusa.topics import dead_letter_topic, ensure_topics
from medusa_spark.local_run import LocalNetworkRun
from medusa_spark.network.model import NetworkSpec, parse_network
from medusa_spark.sunion_source import SUNION_SOURCE, in_query_state
from medusa_spark.testing import BASE_MS, at, network_of
from tests.waiting import wait_for

pytestmark = pytest.mark.integration


def _report(seconds: float, vid: int, speed: int = 50) -> dict[str, Any]:
    return {"time": int(seconds), "vid": vid, "speed": speed, "xway": 0, "lane": 1, "dir": 0,
            "seg": 1, "pos": 5280}


def _in_query(network: NetworkSpec) -> NetworkSpec:
    return network.model_copy(update={"sunion": "in-query"})


MOVING = _in_query(network_of({"moving": {"type": "filter",
                                          "params": {"predicate": "speed > 0"}}},
                              [("reports", "moving")], {"reports": "position_report"}))


def _results(config: dict[str, str], registry: Any, topic: str) -> list[Any]:
    with TupleConsumer(config, registry, [topic], f"t-{uuid.uuid4()}") as consumer:
        return [c.record for c in consumer.drain()]


def _dead_letters(config: dict[str, str], topic: str, wanted: int) -> list[dict[str, bytes]]:
    reader = Consumer({**config, "group.id": f"t-{uuid.uuid4()}",
                       "auto.offset.reset": "earliest"})
    reader.subscribe([dead_letter_topic(topic)])
    letters: list[dict[str, bytes]] = []

    def enough() -> bool:
        message = reader.poll(1.0)
        if message is not None and message.error() is None:
            letters.append(dict(message.headers() or []))
        return len(letters) >= wanted
    try:
        wait_for(f"{wanted} dead letter(s) on {dead_letter_topic(topic)}", enough, 60,
                 interval_s=0)
    finally:
        reader.close()
    return letters


def test_a_fragment_reads_its_inputs_through_the_sunion_in_its_query(
        spark, federation, registry, tmp_path: Path) -> None:
    prefix = f"inq{uuid.uuid4().hex[:8]}."
    config = kafka_config(federation.bootstrap())
    with LocalNetworkRun(spark, MOVING, federation, registry, tmp_path / "checkpoints",
                         topic_prefix=prefix) as run:
        assert not run.sunions, "no SUnion process: the query reads the inputs itself"
        topic = run.topic("reports")
        out = next(w.outputs["moving"].stream.topic for w in run.wiring.values())
        with TupleProducer(config, registry, topic, load_schema("position_report"), "reports",
                           boundary_interval_s=3600) as producer:
            for second in range(20):
                producer.produce(_report(second, second, speed=second % 4), f"r-{second}",
                                 at(second), key=str(second % 3))
                if second % 5 == 4:
                    producer.emit_boundaries(at(second + 1))
            producer.flush()
            wait_for("the first 20 seconds released", lambda: any(
                r.type is TupleType.BOUNDARY and r.stime >= at(20)
                for r in _results(config, registry, out)), 120)
            # Below what went out already: its producer broke its promise.
            producer.produce(_report(1, 99), "late", at(1.5))
            producer.produce(_report(21, 21, speed=9), "r-21", at(21))
            producer.emit_boundaries(at(30))
        bad = Producer(config)
        bad.produce(topic, value=b"\x07not avro",
                    headers=Envelope(TupleType.STABLE, "poison", at(25)).headers())
        bad.flush(10)
        query = run.runs[0].query

        def settled() -> bool:
            state = in_query_state(query.lastProgress or {}, "t")
            return state.get("dead_lettered") == 2 and any(
                r.tuple_id == "r-21" for r in _results(config, registry, out))
        wait_for("r-21 written and both records dead-lettered", settled, 120)
        found = _results(config, registry, out)
        progress = query.lastProgress
    stable = [r for r in found if r.type is TupleType.STABLE]
    assert sorted(r.value["vid"] for r in stable) == \
        sorted([s for s in range(20) if s % 4] + [21]), "each moving car once, in order"
    assert all(r.type in (TupleType.STABLE, TupleType.BOUNDARY) for r in found)
    letters = _dead_letters(config, topic, 2)
    reasons = sorted(letter["medusa.dlq.reason"].decode() for letter in letters)
    assert reasons[0].startswith("stime ") and "already released" in reasons[0]
    assert "magic byte" in reasons[1]
    state = in_query_state(progress, "t")
    assert state["dead_lettered"] == 2 and state["dpc_state"] == "STABLE"
    assert state["records_in"] >= 24 and state["lag"] == 0


def _source_config(topic: str, bootstrap: str, fragment: str) -> str:
    return SUnionConfig(fragment=fragment, inputs=[
        SUnionInput(name="reports", topic=topic, bootstrap=bootstrap)],
        output_topic="unused", output_bootstrap=bootstrap, bucket_ms=1000
    ).model_dump_json(exclude_none=True)


def test_a_batch_replayed_from_the_offset_log_holds_what_it_held(
        spark, federation, registry, tmp_path: Path) -> None:
    """The first run's tasks read each release from the tracker's memory; after a restart
    the uncommitted batch is planned from the offset log and read from Kafka: the same
    rows, in the same order."""
    bootstrap = federation.bootstrap()
    config = kafka_config(bootstrap)
    topic = f"replay{uuid.uuid4().hex[:8]}.reports"
    ensure_topics(config, [topic], partitions=2)
    checkpoint = str(tmp_path / "replay")
    batches: dict[int, list[tuple[Any, ...]]] = {}

    def keep(frame: Any, batch_id: int) -> None:
        rows = tuple((row.value, tuple((h.key, h.value) for h in row.headers), row.offset)
                     for row in frame.collect())
        batches[batch_id] = [*batches.get(batch_id, []), rows]  # one step: read meanwhile

    def start() -> Any:
        reader = spark.readStream.format(SUNION_SOURCE).option(
            "config", _source_config(topic, bootstrap, f"replay/{topic}"))
        for key, value in spark_kafka_options(bootstrap).items():
            reader = reader.option(key, value)
        return (reader.load().writeStream.foreachBatch(keep)
                .option("checkpointLocation", checkpoint)
                .trigger(processingTime="200 milliseconds").start())

    def tuples_of(batch: tuple[Any, ...]) -> int:
        return sum(row[0] is not None for row in batch)

    query = start()
    try:
        with TupleProducer(config, registry, topic, load_schema("position_report"),
                           "reports", boundary_interval_s=3600) as producer:
            for step in range(4):
                for k in range(3):
                    second = step * 3 + k
                    producer.produce(_report(second, second), f"r-{second}", at(second),
                                     key=str(second))
                producer.emit_boundaries(at(step * 3 + 3))
                producer.flush()
                wait_for(f"step {step} released",
                         lambda wanted=step * 3 + 3: sum(  # type: ignore[misc]
                             tuples_of(runs[0]) for runs in list(batches.values())) >= wanted
                         or query.exception(), 120)
                assert query.exception() is None, query.exception()
    finally:
        query.stop()  # at once: the release's batch is the last one
    commits = Path(checkpoint) / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    first = batches[last][0]
    assert tuples_of(first) == 3, "the last batch released the last step's tuples"
    offsets = json.loads((Path(checkpoint) / "offsets" / str(last)).read_text()
                         .splitlines()[-1])
    assert offsets["ranges"], "its offset names the ranges it read"
    (commits / str(last)).unlink()
    jvm = spark._jvm.medusa.spark.sunion.BatchReader
    read_back = jvm.readFromKafka()
    query = start()
    try:
        wait_for(f"batch {last} again", lambda: len(batches[last]) > 1 or query.exception(),
                 120)
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
    assert jvm.readFromKafka() > read_back, "read back from Kafka"
    assert batches[last][1] == first, "from Kafka, the rows it had from memory"


def test_a_cut_link_holds_the_release_back_and_never_fails_the_query(
        spark, federation, registry, links, tmp_path: Path) -> None:
    """alpha's fragment merges alpha's readings with beta's, read through the link: cut,
    the releases wait for beta's boundaries and the query keeps running; healed, every
    tuple comes out once."""
    seen = federation.seen_from("alpha")
    prefix = f"cut{uuid.uuid4().hex[:8]}."
    merged = parse_network(yaml.safe_dump({
        "name": "t", "partitions": 1, "trigger": "200 milliseconds", "sunion": "in-query",
        "streams": {"here": {"topic": "in.here", "participant": "alpha",
                             "schema": "position_report"},
                    "there": {"topic": "in.there", "participant": "beta",
                              "schema": "position_report"}},
        "boxes": {"merged": {"type": "union", "participant": "alpha"}},
        "arrows": [{"from": "here", "to": "merged"}, {"from": "there", "to": "merged"}]}))
    with LocalNetworkRun(spark, merged, seen, registry, tmp_path / "checkpoints",
                         topic_prefix=prefix) as run:
        producers = {
            name: TupleProducer(kafka_config(federation.bootstrap(participant)), registry,
                                run.topic(name), load_schema("position_report"), name,
                                boundary_interval_s=3600)
            for name, participant in (("here", "alpha"), ("there", "beta"))}

        def second(value: int) -> None:
            for name, producer in producers.items():
                producer.produce(_report(value, value), f"{name}-{value}", at(value))
                producer.emit_boundaries(at(value + 1))
                producer.flush()
        out = next(w.outputs["merged"].stream.topic for w in run.wiring.values())
        alpha = kafka_config(federation.bootstrap("alpha"))
        try:
            for value in range(3):
                second(value)
            wait_for("the first seconds", lambda: len(
                [r for r in _results(alpha, registry, out) if r.type is TupleType.STABLE])
                >= 6, 120)
            links.partition("alpha", "beta")
            for value in range(3, 6):
                second(value)
            query = run.runs[0].query
            wait_for("alpha's seconds 3 to 5 read and held", lambda: in_query_state(
                query.lastProgress or {}, "t").get("held_tuples", 0) >= 3, 120)
            during = [r for r in _results(alpha, registry, out) if r.type is TupleType.STABLE]
            assert run.runs[0].query.isActive and run.runs[0].failure() is None
            assert max(r.stime for r in during) < at(3), "nothing past beta's last boundary"
            links.heal("alpha", "beta")
            wait_for("the held seconds after the heal", lambda: len(
                [r for r in _results(alpha, registry, out) if r.type is TupleType.STABLE])
                >= 12, 180)
        finally:
            links.heal()
            for producer in producers.values():
                producer.close()
    found = [r for r in _results(alpha, registry, out) if r.type is TupleType.STABLE]
    assert sorted(r.tuple_id for r in found) == sorted(
        f"{name}-{value}" for name in ("here", "there") for value in range(6))
    assert min(r.stime for r in found) >= BASE_MS
