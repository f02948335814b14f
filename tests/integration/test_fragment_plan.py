"""The plan Spark makes of a fragment's query, which it plans and compiles again in every
micro-batch: each reader of the SUnion's topic (the boxes' inputs, the control rows)
decodes a record's value once. Spark's optimizer copies a projection's expressions into
each filter it pushes through it; the decoding is kept below the filters
(``streams.envelope_of``), where three decodes per reader had been planned."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from medusa_spark.fragment import build_fragment
from medusa_spark.network.model import parse_network
from medusa_spark.networks import LINEAR_ROAD, SENSOR_WINDOWS, network_text
from medusa_spark.testing import KAFKA_ROW, harness

pytestmark = pytest.mark.integration


def _optimized(spark, network: str, tmp_path: Path, fragment_of: dict[str, str] | None = None,
               fragment: str = "all") -> tuple[str, int]:
    """The fragment's optimised plan, and how many inputs it reads."""
    spec = parse_network(network_text(network))
    fragment_harness = harness(spark, spec, fragment_of, fragment)
    raw = spark.readStream.schema(KAFKA_ROW).parquet(str(tmp_path))
    query = build_fragment(fragment_harness.plan, fragment_harness.wiring, raw)
    analyzed = query._jdf.queryExecution().analyzed()  # a streaming plan: not run here
    optimized = spark._jsparkSession.sessionState().optimizer().execute(analyzed)
    return str(optimized.toString()), len(fragment_harness.fragment.inputs)


def _readers(plan: str) -> int:
    return len(re.findall(r"StreamingRelation", plan))


def test_each_reader_of_the_sensor_fragment_decodes_once(spark, tmp_path) -> None:
    plan, inputs = _optimized(spark, SENSOR_WINDOWS, tmp_path)
    assert inputs == 1 and _readers(plan) == 2  # the boxes' input, the control rows
    assert len(re.findall(r"from_avro", plan)) == _readers(plan), plan


def test_each_reader_of_the_linear_road_fragment_decodes_each_input_once(spark,
                                                                          tmp_path) -> None:
    boxes = parse_network(network_text(LINEAR_ROAD)).boxes
    plan, inputs = _optimized(spark, LINEAR_ROAD, tmp_path,
                              {box: "expenditures" if box in ("expenditures", "spent")
                               else "road" for box in boxes}, "road")
    # The reports and the balance queries, each read apart, and the control rows.
    assert inputs == 2 and _readers(plan) == 3
    # Each input's reader decodes its own records; the control rows' reader, every input's.
    assert len(re.findall(r"from_avro", plan)) == 2 * inputs, plan
