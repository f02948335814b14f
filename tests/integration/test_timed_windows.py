"""An aggregate with ``expiry: timers`` gives what Spark's own aggregation gives (``expiry:
scan``): the same results, ids, stimes and types, written in the same batches, TENTATIVE
where a window held a TENTATIVE row, on input in stime order as a SUnion delivers it; a
late row is left out and no window is written twice. On local Spark."""

from __future__ import annotations

from typing import Any

import pytest

from medusa_spark.testing import Result, Tuple, at, boundary, box_network, run_network

pytestmark = pytest.mark.integration


def reading(seconds: float, vid: int, speed: int = 50, seg: int = 1,
            kind: str = "STABLE") -> Tuple:
    return Tuple("in", at(seconds), {"time": int(seconds), "vid": vid, "speed": speed,
                                     "xway": 0, "lane": 1, "dir": 0, "seg": seg,
                                     "pos": seg * 5280}, id=f"in-{vid}-{seconds}", type=kind)


BATCHES = [
    [reading(1, 1, 40, seg=1), reading(2, 2, 60, seg=2), reading(3, 3, 20, seg=2),
     reading(14, 4, 70, seg=1), boundary(15)],
    [reading(16, 5, 10, seg=1, kind="TENTATIVE"), reading(29, 6, 90, seg=2), boundary(31)],
    [reading(33, 8, 30, seg=1), reading(34, 9, 30, seg=2), boundary(46)],
    [reading(50, 10, 45, seg=2), reading(51, 10, 47, seg=2), boundary(80)],
]


def _batches_of(results: list[Result]) -> list[list[tuple[Any, ...]]]:
    """The results written before each BOUNDARY, in an order of their own."""
    batches: list[list[tuple[Any, ...]]] = [[]]
    for result in results:
        if result.type == "BOUNDARY":
            batches.append([])
            continue
        value = sorted(result.value.items()) if result.value else None
        batches[-1].append((result.type, result.id, result.stime, repr(value)))
    return [sorted(batch) for batch in batches if batch]


def _both(spark: Any, params: dict[str, Any], batches: list[list[Tuple]] = BATCHES
          ) -> tuple[list[list[tuple[Any, ...]]], ...]:
    found = []
    for expiry in ("scan", "timers"):
        network = box_network("aggregate", {**params, "expiry": expiry})
        found.append(_batches_of(run_network(spark, network, batches)["box"]))
    return found[0], found[1]


def test_a_tumbling_aggregate_per_group_with_every_function_and_having(spark) -> None:
    scanned, timed = _both(spark, {
        "window": {"type": "tumbling", "size": "10 seconds"}, "group_by": ["seg"],
        "aggregates": {"n": {"count": "*"}, "cars": {"count": "vid"},
                       "distinct": {"count_distinct": "vid"}, "total": {"sum": "speed"},
                       "mean": {"avg": "speed"}, "low": {"min": "speed"},
                       "high": {"max": "speed"}, "first": {"first": "vid"},
                       "last": {"last": "vid"}},
        "having": "n >= 1",
        "fields": {"seg": "seg", "n": "n", "cars": "cars", "distinct": "distinct",
                   "total": "total", "mean": "mean", "low": "low", "high": "high",
                   "first": "first", "last": "last", "start": "window_start"}})
    assert scanned, "the input makes results"
    assert timed == scanned


def test_a_sliding_aggregate_without_groups(spark) -> None:
    scanned, timed = _both(spark, {
        "window": {"type": "sliding", "size": "20 seconds", "slide": "5 seconds"},
        "aggregates": {"n": {"count": "*"}, "total": {"sum": "speed"}}})
    assert len(scanned) >= 3, "results in several batches"
    assert timed == scanned


def test_a_late_row_is_left_out_and_no_window_written_twice(spark) -> None:
    late = [*BATCHES[:2], [reading(5, 7, 55, seg=1), *BATCHES[2]], *BATCHES[3:]]
    params = {"window": {"type": "tumbling", "size": "10 seconds"}, "group_by": ["seg"],
              "aggregates": {"n": {"count": "*"}}}
    _, on_time = _both(spark, params)
    _, with_late = _both(spark, params, late)
    assert with_late == on_time
