"""A secondary's rehearsal of a fragment's query (``node.rehearsals``) on the real stack:
it runs the sensor-windows fragment over what its SUnion wrote and writes nothing; a
source topic not made yet is left alone (not made by reading it). Its batches run after the
serving queries' (the preparing pool, at a rebuild's priority)."""

from __future__ import annotations

import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from medusa.sensor_windows import SteadyInput
from medusa.settings import kafka_config
from medusa_apps.bench.spark_paths import bench_fragment
from medusa_spark.networks import network_yaml
from medusa_spark.node.rehearsals import rehearse
from medusa_spark.sunion_process import SUnionProcess

pytestmark = pytest.mark.integration


def _records(bootstrap: str, topic: str) -> int:
    consumer = Consumer(kafka_config(bootstrap, group_id=f"check-{uuid.uuid4().hex[:6]}",
                                     auto_offset_reset="earliest"))
    try:
        consumer.subscribe([topic])
        found, deadline = 0, time.monotonic() + 5
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                found += 1
        return found
    finally:
        consumer.close()


def test_a_rehearsal_runs_the_fragment_and_writes_nothing(federation, spark, registry,
                                                          monkeypatch) -> None:
    from medusa_spark.node import rehearsals
    from medusa_spark.scheduler_pools import PREPARING

    pools: list[tuple[str, bool]] = []

    def run_jobs_in(session, pool: str, rebuilding: bool = False) -> None:
        pools.append((pool, rebuilding))
        original(session, pool, rebuilding)
    original = rehearsals.run_jobs_in
    monkeypatch.setattr(rehearsals, "run_jobs_in", run_jobs_in)
    run = uuid.uuid4().hex[:6]
    name, prefix = f"rehearsal-{run}", f"rehearsal-{run}."
    fragment = bench_fragment(spark, federation, registry,
                              network_yaml(name, prefix, box_participant="alpha"), name)
    wiring = fragment.wiring
    bootstrap = federation.bootstrap("alpha")
    outputs = [output.stream for output in wiring.outputs.values()]
    before = {stream.topic: _records(stream.bootstrap, stream.topic) for stream in outputs}
    steady = SteadyInput(kafka_config(bootstrap), registry, f"{prefix}sensors.readings", 20,
                         30)
    with tempfile.TemporaryDirectory() as folder:
        steady.start()
        sunion = SUnionProcess(wiring.sunion_config(), Path(folder)).start()
        try:
            deadline = time.monotonic() + 60
            while _records(bootstrap, wiring.source.topic) == 0:
                assert time.monotonic() < deadline, "the SUnion wrote nothing"
            assert rehearse(spark, fragment.plan, wiring)
        finally:
            sunion.stop()
            steady.end_in(0)
    after = {stream.topic: _records(stream.bootstrap, stream.topic) for stream in outputs}
    assert after == before, "nothing but the outputs' start boundaries, made with the topics"
    # Its batches gave way to the serving queries', as a rebuild's do.
    assert pools and set(pools) == {(PREPARING, True)}, pools


def test_a_source_topic_not_made_yet_is_not_made_by_the_rehearsal(federation, spark,
                                                                   registry) -> None:
    run = uuid.uuid4().hex[:6]
    name, prefix = f"rehearsal-{run}", f"rehearsal-{run}."
    fragment = bench_fragment(spark, federation, registry,
                              network_yaml(name, prefix, box_participant="alpha"), name)
    missing = f"{prefix}not-made-yet"
    wiring = replace(fragment.wiring, source=replace(fragment.wiring.source, topic=missing))
    assert not rehearse(spark, fragment.plan, wiring)
    admin = AdminClient(kafka_config(wiring.source.bootstrap))
    assert missing not in admin.list_topics(timeout=10).topics
