"""Box semantics on real Spark and Kafka, with hand-written tuples and stimes.

Window edges, windows closed by BOUNDARY records alone, empty windows, data later
than the watermark, joins without a match, TENTATIVE propagation, dead letters.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, Producer

from medusa.consuming import TupleConsumer
from medusa.envelope import Envelope, TupleType
from medusa.producing import TupleProducer
from medusa.schemas import load_schema
from medusa.topics import dead_letter_topic
from medusa_spark.local_run import LocalNetworkRun
from medusa_spark.network.model import parse_network

pytestmark = pytest.mark.integration

SECOND = 1000
BASE_MS = 86_400_000  # clear of stime 0, which Spark reads as "no watermark"


@dataclass
class Tuple_:
    stime_s: float
    value: dict[str, Any] | None = None
    kind: TupleType = TupleType.STABLE
    tuple_id: str | None = None


def report(stime_s: float, vid: int, speed: int = 50, seg: int = 1,
           kind: TupleType = TupleType.STABLE) -> Tuple_:
    return Tuple_(stime_s, {"time": int(stime_s), "vid": vid, "speed": speed, "xway": 0,
                            "lane": 1, "dir": 0, "seg": seg, "pos": seg * 5280}, kind)


def boundary(stime_s: float) -> Tuple_:
    return Tuple_(stime_s, None, TupleType.BOUNDARY)


def run_network(spark, federation, registry, tmp_path, boxes: dict, arrows: list,
                inputs: dict[str, list[Tuple_]], output_schema: str | None = None,
                lateness: str = "10 seconds", raw: dict[str, bytes] | None = None,
                prefix: str | None = None,
                then: dict[str, list[Tuple_]] | None = None) -> list[Any]:
    """Runs a small network over hand-written inputs; returns the output tuples.

    ``raw`` values are written to an input's topic first, as they are (bad records);
    ``then`` is written once the boxes have processed ``inputs`` (a later micro-batch).
    """
    prefix = prefix or f"box{uuid.uuid4().hex[:8]}."
    streams = {name: {"topic": f"in.{name}", "participant": "alpha",
                      "schema": "position_report"} for name in inputs}
    if output_schema:
        streams["out"] = {"topic": "out", "participant": "alpha", "schema": output_schema}
    text = yaml.safe_dump({"name": "t", "partitions": 1, "trigger": "200 milliseconds",
                           "lateness": lateness, "streams": streams, "boxes": boxes,
                           "arrows": arrows}, sort_keys=False)
    run = LocalNetworkRun(spark, parse_network(text), federation, registry,
                          tmp_path / "checkpoints", topic_prefix=prefix)
    config = {"bootstrap.servers": federation.bootstrap()}
    with run:
        for name, value in (raw or {}).items():
            bad = Producer(config)
            bad.produce(run.topic(name), value=value,
                        headers=Envelope(TupleType.STABLE, "poison", BASE_MS).headers())
            bad.flush(10)
        for phase, phase_inputs in enumerate([inputs, then or {}]):
            for name, tuples in phase_inputs.items():
                with TupleProducer(config, registry, run.topic(name),
                                   load_schema("position_report"), name,
                                   boundary_interval_s=3600) as producer:
                    for number, item in enumerate(tuples):
                        stime = BASE_MS + round(item.stime_s * SECOND)
                        if item.kind is TupleType.BOUNDARY:
                            producer.emit_boundaries(stime)
                        else:
                            producer.produce(item.value,
                                             item.tuple_id or f"{name}-{phase}-{number}", stime,
                                             tuple_type=item.kind)
            run.wait_until_quiet(timeout_s=300)
        last_box = list(run.plan.order)[-1]
        out_topic = run.wiring[last_box].output.topic
        with TupleConsumer(config, registry, [out_topic], f"t-{uuid.uuid4()}") as consumer:
            tuples = consumer.drain()
        return [c.record for c in tuples
                if c.record.type in (TupleType.STABLE, TupleType.TENTATIVE)]


COUNT_PER_MINUTE = {
    "per_minute": {"type": "aggregate", "params": {
        "window": {"type": "tumbling", "size": "60 seconds"},
        "group_by": ["seg"],
        "aggregates": {"cars": {"count_distinct": "vid"}, "top": {"max": "speed"}},
        "fields": {"seg": "seg", "cars": "cars", "top": "top",
                   "start_s": "CAST((unix_millis(window_start) - 86400000) DIV 1000 AS INT)"}}},
}
INTO_COUNT = [{"from": "reports", "to": "per_minute"}]


def test_window_edges_and_boundary_driven_closing(spark, federation, registry, tmp_path):
    inputs = {"reports": [
        report(0, 1), report(59.999, 2),          # first window [0, 60)
        report(60, 3),                            # second window starts at exactly 60 s
        boundary(130),                            # no data: the boundary alone closes both
    ]}
    found = run_network(spark, federation, registry, tmp_path, COUNT_PER_MINUTE, INTO_COUNT,
                        inputs)
    results = sorted((r.value["start_s"], r.value["cars"]) for r in found)
    assert results == [(0, 2), (60, 1)]
    stimes = sorted(r.stime - BASE_MS for r in found)
    assert stimes == [59_999, 119_999], "a result's stime is the last millisecond of its window"
    assert len({r.tuple_id for r in found}) == 2


def test_empty_windows_give_nothing_and_open_windows_wait(spark, federation, registry,
                                                          tmp_path):
    inputs = {"reports": [report(5, 1), report(200, 2), boundary(250)]}
    found = run_network(spark, federation, registry, tmp_path, COUNT_PER_MINUTE, INTO_COUNT,
                        inputs)
    # [0,60) and [180,240) have data; [60,180) are empty; [240,300) is still open at 250 s.
    assert sorted(r.value["start_s"] for r in found) == [0, 180]


def test_data_later_than_the_watermark_is_dropped(spark, federation, registry, tmp_path):
    first = {"reports": [report(10, 1), boundary(100)]}   # watermark 90 s: [0, 60) closes
    later = {"reports": [
        report(20, 2),                  # 80 s late, beyond the 10 s lateness: dropped
        report(95, 3),                  # 5 s behind the boundary, within lateness: counted
        boundary(200),
    ]}
    found = run_network(spark, federation, registry, tmp_path, COUNT_PER_MINUTE, INTO_COUNT,
                        first, then=later)
    assert sorted((r.value["start_s"], r.value["cars"]) for r in found) == [(0, 1), (60, 1)]


def test_a_result_is_tentative_when_an_input_was(spark, federation, registry, tmp_path):
    inputs = {"reports": [report(1, 1), report(2, 2, kind=TupleType.TENTATIVE),
                          report(70, 3), boundary(200)]}
    found = run_network(spark, federation, registry, tmp_path, COUNT_PER_MINUTE, INTO_COUNT,
                        inputs)
    kinds = {r.value["start_s"]: r.type for r in found}
    assert kinds == {0: TupleType.TENTATIVE, 60: TupleType.STABLE}


def _join(how: str) -> dict:
    return {"pair": {"type": "join", "params": {
        "how": how, "keys": [["vid", "vid"]],
        "within": {"lower": "-30 seconds", "upper": "-30 seconds"},
        "fields": {"vid": "l.vid", "now": "l.seg", "before": "r.seg"}}}}


JOIN_ARROWS = [{"from": "left", "to": "pair.left"}, {"from": "right", "to": "pair.right"}]


def test_joins_with_and_without_a_match(spark, federation, registry, tmp_path):
    inputs = {
        "left": [report(30, 1, seg=2), report(30, 2, seg=5), boundary(200)],
        "right": [report(0, 1, seg=1), report(10, 2, seg=4), boundary(200)],
    }
    inner = run_network(spark, federation, registry, tmp_path / "inner", _join("inner"),
                        JOIN_ARROWS, inputs)
    assert [(r.value["vid"], r.value["now"], r.value["before"]) for r in inner] == [(1, 2, 1)]
    outer = run_network(spark, federation, registry, tmp_path / "outer", _join("left_outer"),
                        JOIN_ARROWS, inputs)
    assert sorted((r.value["vid"], r.value["before"]) for r in outer) == [(1, 1), (2, None)]
    matched = next(r for r in outer if r.value["vid"] == 1)
    assert matched.tuple_id == "pair/left-0-0/right-0-0"


def test_undecodable_input_goes_to_the_dead_letter_topic(spark, federation, registry,
                                                         tmp_path):
    prefix = f"box{uuid.uuid4().hex[:8]}."
    garbage = b"\x00\x00\x00\x7f\x7fgarbage"
    found = run_network(spark, federation, registry, tmp_path,
                        {"moving": {"type": "filter", "params": {"predicate": "speed > 0"}}},
                        [{"from": "reports", "to": "moving"}],
                        {"reports": [report(1, 1), boundary(100)]},
                        raw={"reports": garbage}, prefix=prefix)
    assert [r.value["vid"] for r in found] == [1], "processing goes on after a bad record"
    reader = Consumer({"bootstrap.servers": federation.bootstrap(),
                       "group.id": f"t-{uuid.uuid4()}", "auto.offset.reset": "earliest"})
    reader.subscribe([dead_letter_topic(f"{prefix}in.reports")])
    letters = []
    for _ in range(30):
        message = reader.poll(1.0)
        if message is not None and message.error() is None:
            letters.append(message)
            break
    reader.close()
    assert letters, "the undecodable record reached the dead-letter topic"
    headers = dict(letters[0].headers())
    assert letters[0].value() == garbage
    assert b"written with schema id" in headers["medusa.dlq.reason"]
    assert headers["medusa.dlq.box"] == b"moving"
    assert headers["medusa.id"] == b"poison", "the original headers are kept"
