"""The benchmark's pure bookkeeping: percentiles, missing results, the L-rating, breakdowns."""

import math

import pytest

from medusa_apps.bench.linear_road_latency import (
    StepResult,
    batch_breakdown,
    compare,
    l_rating,
    profile_for,
    step_met,
)
from medusa_apps.bench.live import percentile, rounded, with_missing

pytestmark = pytest.mark.unit


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]  # 1 .. 100
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    assert percentile([3.0], 0.99) == 3.0
    assert percentile([], 0.5) is None
    assert percentile([5.0, 1.0, 3.0], 0.5) == 3.0


def test_missing_results_count_as_infinitely_late() -> None:
    padded = with_missing([1.0, 2.0], expected=4)
    assert padded[:2] == [1.0, 2.0] and all(math.isinf(v) for v in padded[2:])
    assert with_missing([1.0, 2.0], expected=None) == [1.0, 2.0]
    assert with_missing([1.0, 2.0], expected=1) == [1.0, 2.0]
    # 1% missing is enough to put the p99 at infinity.
    assert math.isinf(percentile(with_missing([0.1] * 98, expected=100), 0.99) or 0)
    assert rounded(math.inf) == "inf" and rounded(1.23456) == 1.235 and rounded(None) is None


def _step(xways: int, latency: float, match: bool | None = True, notifications: int = 100,
          expected: int | None = 100) -> StepResult:
    step = StepResult(xways, 60, expected_notifications=expected, outputs_match=match)
    step.latencies_s = [(float(t), latency) for t in range(notifications)]
    return step


def test_a_step_is_met_when_its_p99_is_within_5s_and_its_outputs_are_right() -> None:
    assert _step(1, 4.9).met
    assert not _step(1, 5.1).met
    assert not _step(1, 1.0, match=False).met
    assert not _step(1, 1.0, match=None).met
    assert not _step(1, 1.0, notifications=90, expected=100).met
    assert not step_met(None, True)
    assert not step_met(1.0, True, error="the fragment failed")


def test_the_l_rating_is_the_highest_l_met_before_the_first_failure() -> None:
    assert l_rating([_step(1, 1.0), _step(2, 2.0), _step(3, 9.0)]) == 2
    assert l_rating([_step(1, 9.0)]) is None
    assert l_rating([]) is None
    assert l_rating([_step(1, 1.0), _step(2, 1.0, match=False), _step(3, 1.0)]) == 1
    assert l_rating([_step(2, 1.0), _step(1, 1.0)]) == 2


def test_outputs_are_compared_as_multisets() -> None:
    expected = {"a": [{"x": 1}, {"x": 1}, {"x": 2}], "b": [{"y": 1}]}
    assert compare(expected, {"a": [{"x": 2}, {"x": 1}, {"x": 1}], "b": [{"y": 1}]}) == {}
    assert compare(expected, {"a": [{"x": 1}, {"x": 2}, {"x": 3}]}) == {
        "a": {"missing": 1, "extra": 1}, "b": {"missing": 1, "extra": 0}}


def test_batch_breakdown_sums_phases_and_operators() -> None:
    progresses = [
        {"batchId": 1, "numInputRows": 10, "sources": [{}, {}],
         "durationMs": {"addBatch": 300, "queryPlanning": 50, "triggerExecution": 400},
         "stateOperators": [{"operatorName": "stateStoreSave", "allUpdatesTimeMs": 20,
                             "allRemovalsTimeMs": 5, "commitTimeMs": 7, "numRowsTotal": 40,
                             "numRowsUpdated": 10, "memoryUsedBytes": 1000}]},
        {"batchId": 2, "numInputRows": 0,
         "durationMs": {"addBatch": 100, "queryPlanning": 30, "triggerExecution": 200},
         "stateOperators": [{"operatorName": "stateStoreSave", "allUpdatesTimeMs": 10,
                             "allRemovalsTimeMs": 1, "commitTimeMs": 3, "numRowsTotal": 35,
                             "numRowsRemoved": 5, "memoryUsedBytes": 900}]},
    ]
    breakdown = batch_breakdown(progresses, writer_ms=120.0, writer_transactions=2)
    assert breakdown["batches"] == 2 and breakdown["input_rows"] == 10
    assert breakdown["sources"] == 2
    assert breakdown["phase_ms_total"]["addBatch"] == 400
    assert breakdown["phase_ms_per_batch"]["queryPlanning"] == 40.0
    assert breakdown["add_batch_without_kafka_ms_total"] == 280.0
    assert breakdown["trigger_ms_p50"] == 200.0 and breakdown["trigger_ms_p99"] == 400.0
    (operator,) = breakdown["state_operators"]
    assert operator == {"operator": "stateStoreSave", "updates_ms": 30, "removals_ms": 6,
                        "commit_ms": 10, "rows_updated": 10, "rows_removed": 5,
                        "rows_total": 35, "memory_bytes": 1000}
    assert batch_breakdown([])["batches"] == 0


def test_l_expressways_run_at_the_peak_rate_from_the_start() -> None:
    profile = profile_for(3, 120)
    assert profile.xways == 3 and profile.duration_s == 120
    assert profile.start_rate == profile.peak_rate == 1700
