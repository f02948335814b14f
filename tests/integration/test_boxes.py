"""What each box type promises, one box at a time, on local Spark without Kafka.

Every type of ``medusa_spark.boxes.BOX_TYPES`` has its tests here or in
``test_fragment_semantics.py`` (window edges and BOUNDARY-driven closing of a tumbling
aggregate, chained windows, joins with and without a match, TENTATIVE results): filter,
map, union, aggregate (tumbling with group-by and having, sliding, session), join (the
stime of an inner join whose right tuple comes later), process and port.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

import pandas as pd
import pytest
from pyspark.sql.types import IntegerType, StructField, StructType

from medusa_spark.boxes import BOX_TYPES
from medusa_spark.boxes.process import Processor
from medusa_spark.streams import ID, STIME
from medusa_spark.testing import (
    BASE_MS,
    Tuple,
    at,
    boundary,
    data,
    network_of,
    processor_path,
    run_box,
    run_network,
)

pytestmark = pytest.mark.integration

COVERED = {"filter", "map", "union", "aggregate", "join", "process", "port"}
START_S = f"CAST((unix_millis(window_start) - {BASE_MS}) DIV 1000 AS INT)"
"""A window's start in seconds after ``BASE_MS``."""


def report(seconds: float, vid: int, speed: int = 50, seg: int = 1, input_: str = "in",
           kind: str = "STABLE") -> Tuple:
    return Tuple(input_, at(seconds), {"time": int(seconds), "vid": vid, "speed": speed,
                                       "xway": 0, "lane": 1, "dir": 0, "seg": seg,
                                       "pos": seg * 5280}, id=f"{input_}-{vid}-{seconds}",
                 type=kind)


def test_every_box_type_is_covered() -> None:
    assert set(BOX_TYPES) == COVERED, "a new box type needs its tests here"


def test_filter_keeps_the_tuples_its_predicate_holds_for_as_they_are(spark) -> None:
    found = run_box(spark, "filter", {"predicate": "speed > 0"},
                    [[report(1, 1, speed=0), report(2, 2, speed=30), boundary(10)]])
    assert [(r.id, r.stime, r.value["vid"]) for r in found if r.value] == [
        ("in-2-2", at(2), 2)]


def test_map_computes_fields_then_keeps_what_where_holds(spark) -> None:
    found = run_box(spark, "map", {"fields": {"vid": "vid", "kmh": "CAST(speed * 1.6 AS INT)"},
                                   "where": "kmh > 50"},
                    [[report(1, 1, speed=30), report(2, 2, speed=40), boundary(10)]])
    assert [(r.id, r.stime, r.value) for r in found] == [("in-2-2", at(2), {"vid": 2, "kmh": 64})]
    renamed = run_box(spark, "map", {"fields": {"vid": "vid"},
                                     "id": "concat('car-', CAST(vid AS STRING))"},
                      [[report(1, 7), boundary(10)]])
    assert [r.id for r in renamed] == ["car-7"]


def test_union_passes_every_tuple_of_every_input_once(spark) -> None:
    both = {"a": "position_report", "b": "position_report"}
    found = run_box(spark, "union", None, [
        [report(1, 1, input_="a"), report(2, 2, input_="b")],
        [report(3, 3, input_="b"), boundary(10)]], inputs=both)
    assert sorted((r.id, r.stime) for r in found) == [
        ("a-1-1", at(1)), ("b-2-2", at(2)), ("b-3-3", at(3))]


def test_tumbling_aggregate_per_group_with_having(spark) -> None:
    found = run_box(spark, "aggregate", {
        "window": {"type": "tumbling", "size": "60 seconds"}, "group_by": ["seg"],
        "aggregates": {"n": {"count": "*"}, "total": {"sum": "speed"}, "mean": {"avg": "speed"},
                       "low": {"min": "speed"}, "first": {"first": "vid"},
                       "last": {"last": "vid"}},
        "having": "n >= 2",
        "fields": {"seg": "seg", "n": "n", "total": "total", "mean": "mean", "low": "low",
                   "first": "first", "last": "last", "start_s": START_S}},
        [[report(1, 1, 40, seg=1), report(2, 2, 60, seg=2), report(3, 3, 20, seg=2),
          report(61, 4, 10, seg=1), report(62, 5, 10, seg=1), boundary(130)]])
    assert sorted((r.value["start_s"], r.value["seg"], r.value["n"], r.value["total"],
                   r.value["mean"], r.value["low"], r.value["first"], r.value["last"])
                  for r in found if r.value) == [
        (0, 2, 2, 80, 40.0, 20, 2, 3),  # seg 1 has one report in [0, 60): below having
        (60, 1, 2, 20, 10.0, 10, 4, 5)]
    assert len({r.id for r in found}) == 2, "a result's id names its group and window"


def test_sliding_aggregate_counts_a_tuple_in_every_window_holding_it(spark) -> None:
    found = run_box(spark, "aggregate", {
        "window": {"type": "sliding", "size": "60 seconds", "slide": "30 seconds"},
        "aggregates": {"n": {"count": "*"}}, "fields": {"n": "n", "start_s": START_S}},
        [[report(40, 1), report(70, 2), boundary(200)]])
    assert sorted((r.value["start_s"], r.value["n"]) for r in found if r.value) == [
        (0, 1), (30, 2), (60, 1)]


def test_session_aggregate_closes_a_session_after_its_gap(spark) -> None:
    found = run_box(spark, "aggregate", {
        "window": {"type": "session", "gap": "10 seconds"}, "group_by": ["vid"],
        "aggregates": {"n": {"count": "*"}},
        "fields": {"vid": "vid", "n": "n", "start_s": START_S}},
        [[report(1, 1), report(5, 1), report(30, 1), report(2, 2)], [boundary(100)]])
    assert sorted((r.value["vid"], r.value["start_s"], r.value["n"])
                  for r in found if r.value) == [(1, 1, 2), (1, 30, 1), (2, 2, 1)]


def test_inner_join_with_the_right_tuple_later_takes_its_stime(spark) -> None:
    sides = {"left": "position_report", "right": "position_report"}
    found = run_box(spark, "join", {
        "keys": [["vid", "vid"]], "within": {"lower": "0 seconds", "upper": "30 seconds"},
        "where": "r.speed < l.speed", "fields": {"vid": "l.vid", "drop": "l.speed - r.speed"}},
        [[report(10, 1, 60, input_="left"), report(20, 1, 40, input_="right"),
          report(10, 2, 60, input_="left"), report(50, 2, 40, input_="right"),  # too late
          report(10, 3, 60, input_="left"), report(20, 3, 70, input_="right"),  # not where
          boundary(200)]], inputs=sides)
    assert [(r.value, r.stime, r.id) for r in found] == [
        ({"vid": 1, "drop": 20}, at(20), "box/left-1-10/right-1-20")]


def _ints(*names: str) -> StructType:
    return StructType([StructField(name, IntegerType(), False) for name in names])


class Tally(Processor):
    """Per car: on every report how many it has made (``counts``), and its first speed
    (``firsts``)."""

    inputs: ClassVar[tuple[str, ...]] = ("reports",)
    outputs: ClassVar[dict[str, StructType]] = {  # as account balances
        port: _ints("qid", "vid", "time", "result_time", "balance")
        for port in ("counts", "firsts")}

    def process(self, state: Any | None, rows: pd.DataFrame
                ) -> tuple[Any, dict[str, pd.DataFrame]]:
        seen = state or 0
        counts, firsts = [], []
        for id_, stime, vid, time, speed in zip(rows[ID], rows[STIME], rows["vid"],
                                                rows["time"], rows["speed"], strict=True):
            seen += 1
            counts.append((f"{id_}/count", stime, 0, vid, time, time, seen))
            if seen == 1:
                firsts.append((f"{id_}/first", stime, 0, vid, time, time, speed))
        columns = [ID, STIME, "qid", "vid", "time", "result_time", "balance"]
        return seen, {"counts": pd.DataFrame(counts, columns=columns),
                      "firsts": pd.DataFrame(firsts, columns=columns)}


def test_process_box_keeps_state_per_key_and_its_port_boxes_split_its_ports(spark) -> None:
    tally = network_of(
        {"tally": {"type": "process", "params": {"processor": processor_path(Tally),
                                                 "key": ["vid"]}},
         "counts": {"type": "port", "params": {"port": "counts"}},
         "firsts": {"type": "port", "params": {"port": "firsts"}}},
        [("reports", "tally.reports"), ("tally", "counts"), ("tally", "firsts"),
         ("counts", "counts_out"), ("firsts", "firsts_out")],
        {"reports": "position_report", "counts_out": "account_balance",
         "firsts_out": "account_balance"})
    found = run_network(spark, tally, [
        [report(1, 1, 30, input_="reports"), report(2, 2, 40, input_="reports")],
        [report(3, 1, 50, input_="reports"), boundary(10)],
        [replace(report(11, 1, 60, input_="reports", kind="TENTATIVE"), epoch=1),
         boundary(20, epoch=1)]])
    counts = sorted((r.stime, r.value["vid"], r.value["balance"], r.type)
                    for r in data(found["counts"]) if r.value)
    assert counts == [(at(1), 1, 1, "STABLE"), (at(2), 2, 1, "STABLE"),
                      (at(3), 1, 2, "STABLE"), (at(11), 1, 3, "TENTATIVE")]
    assert sorted((r.value["vid"], r.value["balance"])
                  for r in data(found["firsts"]) if r.value) == [(1, 30), (2, 40)]
    assert {r.id for r in data(found["firsts"])} == {"reports-1-1/first", "reports-2-2/first"}
