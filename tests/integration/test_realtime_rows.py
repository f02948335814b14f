"""A real-time fragment's rows as its query stages them (``realtime``), on local Spark
without Kafka: every reader of the source carries each BOUNDARY through its boxes, a
filter keeps it and a map passes it on, so that each reader stages its copy after its own
results below it; the INVALID records' reader carries none. Each result keeps its tuple's
DPC marks."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from pyspark.sql.types import LongType, StructField, StructType

from medusa_spark.fragment import OUTPUT, build_fragment
from medusa_spark.streams import BOUNDARY, EPOCH, INVALID, READER, SOURCE_OFFSET, STIME, TYPE
from medusa_spark.testing import KAFKA_ROW, Tuple, at, boundary, harness, network_of

pytestmark = pytest.mark.integration


def _report(seconds: float, vid: int, speed: int, input_: str) -> Tuple:
    return Tuple(input_, at(seconds), {"time": int(seconds), "vid": vid, "speed": speed,
                                       "xway": 0, "lane": 1, "dir": 0, "seg": 1, "pos": 5280},
                 id=f"{input_}-{vid}", type="STABLE")


def test_each_reader_stages_every_boundary_after_its_results_below_it(spark) -> None:
    network = network_of(
        {"both": {"type": "union"},
         "moving": {"type": "filter", "params": {"predicate": "speed > 0"}},
         "kmh": {"type": "map", "params": {"fields": {"vid": "vid",
                                                      "kmh": "CAST(speed * 1.6 AS INT)"},
                                           "where": "kmh > 10"}}},
        [("a", "both.a"), ("b", "both.b"), ("both", "moving"), ("moving", "kmh")],
        {"a": "position_report", "b": "position_report"}, execution="real-time")
    fragment = harness(spark, network, outputs=["kmh"])
    tuples = [_report(1, 1, 0, "a"), _report(2, 2, 30, "a"), boundary(10),
              replace(_report(11, 3, 20, "b"), type="TENTATIVE", epoch=2),
              Tuple("b", at(12), None, raw=b"not avro", id="bad", type="STABLE"), boundary(20)]
    rows = [(*fragment._row(t, i), i) for i, t in enumerate(tuples)]
    with_offset = StructType([*KAFKA_ROW.fields, StructField(SOURCE_OFFSET, LongType())])
    source = spark.createDataFrame(rows, with_offset)

    staged = build_fragment(fragment.plan, fragment.wiring, lambda: source).collect()

    results = sorted(r["_id"] for r in staged if r[OUTPUT] is not None)
    assert results == ["a-2", "b-3"], "the filter and the map's where hold as before"
    assert {r["_id"]: (r[TYPE], r[EPOCH]) for r in staged if r[OUTPUT] is not None} == {
        "a-2": ("STABLE", None), "b-3": ("TENTATIVE", 2)}, \
        "a result keeps its tuple's DPC marks through the boxes (its writer reconciles)"
    boundaries = Counter((r[SOURCE_OFFSET], r[READER]) for r in staged if r[TYPE] == BOUNDARY)
    assert boundaries == {(2, 0): 1, (2, 1): 1, (5, 0): 1, (5, 1): 1}, \
        "each of the two readers carries each BOUNDARY through union, filter and map, once"
    assert all(r[OUTPUT] is None and r[STIME] is not None
               for r in staged if r[TYPE] == BOUNDARY)
    assert [r["_id"] for r in staged if r[TYPE] == INVALID] == ["bad"], \
        "an unusable tuple goes to its dead letters once, from the control rows' reader"
