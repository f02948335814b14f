"""The benchmark's pure bookkeeping: percentiles, missing results, the L-rating, breakdowns."""

import math
from dataclasses import dataclass, field
from typing import Any

import pytest

from medusa.latency_stats import percentile, rounded, with_missing
from medusa.linear_road.records import AccountBalanceQuery, PositionReport
from medusa.linear_road.validation import Published, Timing, Validation, validate
from medusa_apps.bench.linear_road_latency import (
    OUTPUTS,
    RAMP_S,
    TYPE_FIGURES,
    StepResult,
    batch_breakdown,
    delivery_s,
    l_rating,
    profile_for,
    step_met,
)

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


# -- a step's validation, without Kafka ---------------------------------------------------------


@dataclass
class _Reference:
    toll_notifications: list[dict[str, Any]] = field(default_factory=list)
    accident_alerts: list[dict[str, Any]] = field(default_factory=list)
    account_balances: list[dict[str, Any]] = field(default_factory=list)
    daily_expenditures: list[dict[str, Any]] = field(default_factory=list)

    def balance_at(self, vid: int, second: int) -> int:
        return 0


def _validation(latency: float, reports: int = 100, missing: int = 0, wrong: int = 0,
                duplicated: int = 0) -> Validation:
    """``reports`` position reports (one per second, published at its second), each with
    one expected toll notification, answered ``latency`` s later; one account balance
    query answered at once."""
    inputs = [Published(PositionReport(t, t, 30, 0, 1, 0, 1, 5280), t * 1000)
              for t in range(reports)]
    inputs.append(Published(AccountBalanceQuery(3, 7, 1), 3000))
    tolls = [{"vid": t, "time": t, "xway": 0, "dir": 0, "seg": 1, "lav": 30, "toll": 0}
             for t in range(reports)]
    reference = _Reference(toll_notifications=tolls, account_balances=[
        {"qid": 1, "vid": 7, "time": 3, "result_time": 3, "balance": 0}])
    got = [{**row, "emit_time": int((row["time"] + latency) * 1000)}
           for row in tolls[missing:]]
    for row in got[:wrong]:
        row["toll"] = 99
    got += [dict(row) for row in got[wrong:wrong + duplicated]]
    balances = [{"qid": 1, "vid": 7, "time": 3, "result_time": 3, "balance": 0,
                 "emit_time": 3100}]
    return validate(inputs, {"toll_notifications": got, "account_balances": balances},
                    reference)


def _step(xways: int, latency: float, error: str | None = None, **faults: int) -> StepResult:
    return StepResult(xways, 60, validation=_validation(latency, **faults), error=error)


def test_a_step_is_met_when_its_validation_passes() -> None:
    assert _step(1, 4.9).met
    assert not _step(1, 5.1).met  # every response late
    assert not _step(1, 1.0, missing=1).met
    assert not _step(1, 1.0, wrong=1).met
    assert not _step(1, 1.0, duplicated=1).met
    assert not _step(1, 1.0, error="the fragment failed").met
    assert not StepResult(1, 60).met  # not validated
    assert step_met(True) and not step_met(False) and not step_met(None)
    assert not step_met(True, error="the fragment failed")


def test_one_late_output_fails_the_step_whatever_the_p99() -> None:
    validation = _validation(1.0, reports=200)
    validation.types[0].timings[0] = Timing(0, 6.0)  # one of 200 late
    step = StepResult(1, 60, validation=validation)
    assert step.percentile(0.99) == 1.0
    assert not step.met and step.as_dict()["types"]["toll_notifications"]["late"] == 1


def test_the_l_rating_is_the_highest_l_met_before_the_first_failure() -> None:
    assert l_rating([_step(1, 1.0), _step(2, 2.0), _step(3, 9.0)]) == 2
    assert l_rating([_step(1, 9.0)]) is None
    assert l_rating([]) is None
    assert l_rating([_step(1, 1.0), _step(2, 1.0, missing=1), _step(3, 1.0)]) == 1
    assert l_rating([_step(2, 1.0), _step(1, 1.0)]) == 2
    assert l_rating([_step(2, 1.0), _step(3, 1.0)]) is None  # L = 1 was not run


def test_toll_notification_latency_is_the_validators_response_time() -> None:
    step = _step(1, 2.0, missing=2)
    assert step.notifications == 98 and step.expected_notifications == 100
    assert step.latencies_s[0] == (2.0, 2.0)
    assert len(step.latencies_s) == 98
    assert math.isinf(step.percentile(0.99) or 0)  # 2% missing
    assert step.percentile(0.5) == 2.0
    assert StepResult(1, 60).latencies_s == [] and StepResult(1, 60).percentile(0.99) is None


def test_a_step_reports_every_output_type() -> None:
    figures = _step(2, 1.0, wrong=1, duplicated=2).as_dict()
    assert figures["validation_passed"] is False and figures["met"] is False
    assert figures["outputs_match_reference"] is False
    assert figures["mismatches"] == {
        "toll_notifications": {"missing": 1, "wrong": 1, "duplicated": 2}}
    assert figures["target_rate_per_s"] == 2 * 1700
    assert list(figures["types"]) == list(OUTPUTS) == [
        "toll_notifications", "accident_alerts", "account_balances", "daily_expenditures"]
    # The wrong output leaves its expected one missing, which counts as infinitely late.
    tolls = figures["types"]["toll_notifications"]
    assert {key: tolls[key] for key in ("type", "expected", "got", "missing", "wrong",
                                        "duplicated", "late", "p50_s", "max_s", "passed")} == {
        "type": 0, "expected": 100, "got": 102, "missing": 1, "wrong": 1, "duplicated": 2,
        "late": 0, "p50_s": 1.0, "max_s": "inf", "passed": False}
    balances = figures["types"]["account_balances"]
    assert balances["expected"] == balances["got"] == 1 and balances["passed"] is True
    assert balances["p99_s"] == 0.1
    assert figures["types"]["accident_alerts"]["expected"] == 0
    for key in ("p50_latency_s", "p99_latency_s", "max_latency_s", "notifications",
                "expected_notifications", "inputs_read", "delivery_p99_s", "drained",
                "error", "batch_breakdown"):
        assert key in figures


def test_an_unvalidated_step_keeps_the_same_keys() -> None:
    figures = StepResult(1, 60, error="boom").as_dict()
    assert figures["validation_passed"] is None and figures["met"] is False
    assert figures["outputs_match_reference"] is None and figures["mismatches"] == {}
    for name in OUTPUTS:
        entry = figures["types"][name]
        assert set(entry) == {"type", "name", *TYPE_FIGURES}
        assert all(entry[key] is None for key in TYPE_FIGURES)
    validated = _step(1, 1.0).as_dict()["types"]["toll_notifications"]
    assert set(validated) == {"type", "name", *TYPE_FIGURES}


def test_delivery_is_arrival_minus_emit_time() -> None:
    rows = [(2500, "toll_notifications", {"emit_time": 2000}),
            (900, "account_balances", {"emit_time": 400}), (1, "accident_alerts", {})]
    assert delivery_s(rows) == [0.5, 0.5]
    step = StepResult(1, 60, delivery_s=[0.1] * 99 + [2.0])
    assert step.as_dict()["delivery_p99_s"] == 0.1


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
    assert operator == {"query": "", "operator": "stateStoreSave", "updates_ms": 30,
                        "removals_ms": 6,
                        "commit_ms": 10, "rows_updated": 10, "rows_removed": 5,
                        "rows_total": 35, "memory_bytes": 1000}
    assert batch_breakdown([])["batches"] == 0
    # Two queries (a network's two fragments): their operators stay apart.
    two = batch_breakdown([{"name": "road", "stateOperators": [{"operatorName": "a"}]},
                           {"name": "join", "stateOperators": [{"operatorName": "b"}]}])
    assert [(o["query"], o["operator"]) for o in two["state_operators"]] == [
        ("join", "b"), ("road", "a")]


def test_l_expressways_rise_from_the_floor_then_hold_the_peak_rate() -> None:
    profile = profile_for(3, 120)
    assert profile.xways == 3 and profile.duration_s == RAMP_S + 120
    assert (profile.start_rate, profile.peak_rate, profile.ramp_s) == (100, 1700, RAMP_S)
    floor = profile_for(1, 90, rate_per_xway=100)
    assert floor.start_rate == floor.peak_rate == 100 and floor.ramp_s is None
