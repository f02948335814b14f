"""The pieces of ``expiry: timers`` that need no Spark: where a stime's windows start, how
an accumulator treats nulls, and which windows it takes."""

from __future__ import annotations

import pytest

from medusa_spark.boxes.aggregate import AggregateBox
from medusa_spark.boxes.base import BoxError
from medusa_spark.boxes.timed_windows import Windows, _add, _empty, _result

pytestmark = pytest.mark.unit

S = 1_000_000  # a second in microseconds


def test_a_stime_falls_in_one_tumbling_window_and_in_size_over_slide_sliding_ones() -> None:
    assert Windows(10 * S, 10 * S).starts(25 * S) == [20 * S]
    assert Windows(10 * S, 10 * S).starts(20 * S) == [20 * S], "a window holds its start"
    assert Windows(20 * S, 5 * S).starts(12 * S) == [10 * S, 5 * S, 0, -5 * S]
    assert Windows(10 * S, 10 * S, offset_us=3 * S).starts(12 * S) == [3 * S]


@pytest.mark.parametrize(("function", "values", "expected"), [
    ("count", [1, None, 3], 2), ("count_distinct", [1, 1, None, 2], 2), ("sum", [None], None),
    ("sum", [1, None, 2], 3), ("avg", [None], None), ("avg", [1, 2], 1.5),
    ("min", [3, None, 1], 1), ("max", [3, None, 1], 3), ("first", [None, 5, 6], 5),
    ("last", [5, 6, None], 6)])
def test_an_accumulator_skips_nulls_as_spark_does(function, values, expected) -> None:
    held = _empty(function)
    for stime, value in enumerate(values):
        held = _add(function, held, value, stime)
    assert _result(function, held) == expected


def test_a_session_window_cannot_expire_by_timers() -> None:
    with pytest.raises(BoxError, match="session"):
        AggregateBox("agg", {"window": {"type": "session", "gap": "10 seconds"},
                             "aggregates": {"n": {"count": "*"}}, "expiry": "timers"})
