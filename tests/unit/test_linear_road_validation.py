"""Validation of a Linear Road run's outputs (medusa.linear_road.validation), on hand-built
inputs, outputs and a stub reference, so that it does not depend on the reference's rules."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import pytest

from medusa.linear_road.records import (
    AccountBalanceQuery,
    DailyExpenditureQuery,
    HistoricalTolls,
    PositionReport,
)
from medusa.linear_road.run_records import RunRecords, input_record
from medusa.linear_road.validation import (
    OUTPUT_KINDS,
    READ_TIME,
    Published,
    Triggers,
    benchmark_lines,
    emit_seconds,
    validate,
)

pytestmark = pytest.mark.unit

START_MS = 1_700_000_000_000
"""Wall clock (ms) at which second 0 was published."""


@dataclass
class StubReference:
    toll_notifications: list[dict[str, Any]] = field(default_factory=list)
    accident_alerts: list[dict[str, Any]] = field(default_factory=list)
    account_balances: list[dict[str, Any]] = field(default_factory=list)
    daily_expenditures: list[dict[str, Any]] = field(default_factory=list)
    toll_assessments: list[dict[str, Any]] = field(default_factory=list)
    segment_statistics: list[dict[str, Any]] = field(default_factory=list)

    def balance_at(self, vid: int, second: int) -> int:
        return sum(c["toll"] for c in self.toll_assessments
                   if c["vid"] == vid and c["time"] <= second)


def published(record: Any, delay_ms: int = 0) -> Published:
    """A record published in real time: second t goes out t seconds after the start."""
    return Published(record, START_MS + record.time * 1000 + delay_ms)


def emitted(row: dict[str, Any], response_s: float) -> dict[str, Any]:
    """The network's output for ``row``, written ``response_s`` after its input went out."""
    return {**row, "emit_time": START_MS + row["time"] * 1000 + round(response_s * 1000)}


INPUTS = [
    published(HistoricalTolls(0, 7, 0, (5, 6, 7))),
    published(PositionReport(0, 7, 60, 0, 1, 0, 3, 3 * 5280)),
    published(PositionReport(30, 7, 60, 0, 1, 0, 4, 4 * 5280)),
    published(PositionReport(30, 8, 0, 0, 1, 0, 9, 9 * 5280)),
    published(AccountBalanceQuery(100, 7, 1)),
    published(DailyExpenditureQuery(101, 7, 0, 2, 2)),
]
TOLLS = [{"vid": 7, "time": 0, "xway": 0, "dir": 0, "seg": 3, "lav": 0, "toll": 0},
         {"vid": 7, "time": 30, "xway": 0, "dir": 0, "seg": 4, "lav": 35, "toll": 8},
         {"vid": 8, "time": 30, "xway": 0, "dir": 0, "seg": 9, "lav": 20, "toll": 0}]
ALERTS = [{"vid": 8, "time": 30, "xway": 0, "dir": 0, "seg": 10}]
# Car 7 is charged 8 at second 40 and 2 more at second 70.
CHARGES = [{"vid": 7, "time": 40, "xway": 0, "toll": 8},
           {"vid": 7, "time": 70, "xway": 0, "toll": 2}]
BALANCES = [{"qid": 1, "vid": 7, "time": 100, "result_time": 100, "balance": 10}]
EXPENDITURES = [{"qid": 2, "vid": 7, "time": 101, "xway": 0, "day": 2, "expenditure": 6}]


def reference() -> StubReference:
    return StubReference(toll_notifications=TOLLS, accident_alerts=ALERTS,
                         account_balances=BALANCES, daily_expenditures=EXPENDITURES,
                         toll_assessments=CHARGES)


def outputs(response_s: float = 1.0) -> dict[str, list[dict[str, Any]]]:
    """The network's outputs: every reference record, ``response_s`` after its input."""
    ref = reference()
    return {kind.field: [emitted(row, response_s) for row in getattr(ref, kind.field)]
            for kind in OUTPUT_KINDS}


def counts(result: Any, type_: int) -> tuple[int, int, int, int, int, int]:
    row = result.result(type_)
    return row.expected, row.got, row.missing, row.wrong, row.duplicated, row.late


def test_outputs_equal_to_the_reference_pass() -> None:
    result = validate(INPUTS, outputs(1.5), reference())
    assert result.passed
    for kind in OUTPUT_KINDS:
        expected = len(getattr(reference(), kind.field))
        assert counts(result, kind.type) == (expected, expected, 0, 0, 0, 0)
        assert result.result(kind.type).percentile(0.99) == pytest.approx(1.5)
        assert result.result(kind.type).untimed == 0
    assert all(row["passed"] for row in result.as_dict()["types"])
    json.dumps(result.as_dict())  # JSON as it is


def test_emit_time_is_left_out_of_the_comparison() -> None:
    got = outputs()
    got["toll_notifications"][0]["emit_time"] += 1234
    assert validate(INPUTS, got, reference()).passed


def test_a_missing_output_is_counted_in_its_type_and_infinitely_late() -> None:
    got = outputs()
    del got["toll_notifications"][1]
    result = validate(INPUTS, got, reference())
    assert not result.passed and not result.correct
    assert counts(result, 0) == (3, 2, 1, 0, 0, 0)
    assert all(result.result(t).passed for t in (1, 2, 3))
    tolls = result.result(0)
    assert math.isinf(tolls.percentile(0.99) or 0) and math.isinf(tolls.percentile(1.0) or 0)
    assert tolls.percentile(0.5) == pytest.approx(1.0)
    assert tolls.as_dict()["p99_s"] == "inf"
    assert tolls.comparison.missing_examples == [TOLLS[1]]


def test_a_wrong_output_is_missing_and_wrong() -> None:
    got = outputs()
    got["accident_alerts"][0]["seg"] = 11
    result = validate(INPUTS, got, reference())
    assert counts(result, 1) == (1, 1, 1, 1, 0, 0)
    assert result.result(1).comparison.unexpected_examples[0]["seg"] == 11
    assert not result.passed and all(result.result(t).passed for t in (0, 2, 3))


def test_an_output_nobody_asked_for_is_wrong() -> None:
    got = outputs()
    got["daily_expenditures"].append(emitted({"qid": 99, "vid": 7, "time": 101, "xway": 0,
                                              "day": 1, "expenditure": 5}, 1.0))
    result = validate(INPUTS, got, reference())
    assert counts(result, 3) == (1, 2, 0, 1, 0, 0)
    assert result.result(3).untimed == 1  # no query 99 was published


def test_an_output_written_twice_is_duplicated() -> None:
    got = outputs()
    got["toll_notifications"].append(emitted(TOLLS[2], 2.0))
    result = validate(INPUTS, got, reference())
    assert counts(result, 0) == (3, 4, 0, 0, 1, 0)
    assert not result.passed and all(result.result(t).passed for t in (1, 2, 3))
    assert not result.correct


def test_a_second_answer_to_a_query_is_duplicated_even_when_valid() -> None:
    got = outputs()
    got["account_balances"].append(emitted({**BALANCES[0], "result_time": 70}, 2.0))
    result = validate(INPUTS, got, reference())
    assert counts(result, 2) == (1, 2, 0, 0, 1, 0)


def test_an_output_after_five_seconds_is_late() -> None:
    got = outputs()
    got["daily_expenditures"] = [emitted(EXPENDITURES[0], 5.2)]
    result = validate(INPUTS, got, reference())
    assert counts(result, 3) == (1, 1, 0, 0, 0, 1)
    assert result.result(3).percentile(1.0) == pytest.approx(5.2)
    assert not result.passed and all(result.result(t).passed for t in (0, 1, 2))
    assert result.correct  # late, but right: the demo tells the two apart
    # Exactly 5 s is in time.
    got["daily_expenditures"] = [emitted(EXPENDITURES[0], 5.0)]
    assert validate(INPUTS, got, reference()).passed


def test_the_response_runs_from_the_inputs_publish_time() -> None:
    # The report of second 30 went out 4 s late: an output 6 s after second 30 took 2 s.
    inputs = [published(r.record, 4000) if getattr(r.record, "time", 0) == 30 else r
              for r in INPUTS]
    got = outputs()
    got["toll_notifications"] = [emitted(row, 6.0 if row["time"] == 30 else 1.0)
                                 for row in TOLLS]
    result = validate(inputs, got, reference())
    assert result.result(0).late == 0
    assert result.result(0).percentile(1.0) == pytest.approx(2.0)
    assert sorted(t.emit_s for t in result.result(0).timings) == pytest.approx([1.0, 32.0,
                                                                                  32.0])


def test_the_response_may_end_when_a_reader_got_the_output() -> None:
    # Emitted 1 s after its input, read 4.5 s later (the transaction's commit, the fetch):
    # by the reader's time it is late; by the writer's, in time.
    got = outputs()
    got["daily_expenditures"] = [{**emitted(EXPENDITURES[0], 1.0),
                                  READ_TIME: emitted(EXPENDITURES[0], 5.5)["emit_time"]}]
    assert validate(INPUTS, got, reference()).passed
    by_reader = validate(INPUTS, got, reference(), answered_at=READ_TIME)
    assert counts(by_reader, 3) == (1, 1, 0, 0, 0, 1)
    assert by_reader.result(3).percentile(1.0) == pytest.approx(5.5)
    assert by_reader.correct  # the reader's time is left out of the comparison


@pytest.mark.parametrize(("result_time", "balance", "accepted"), [
    (100, 10, True),   # as of the query's second
    (70, 10, True),    # the charge of second 70 included
    (69, 8, True),     # before it: it may be missing, within the last minute
    (40, 8, True),     # the window's first second
    (40, 10, False),   # a balance that was never true at 40
    (39, 0, False),    # more than 60 s before the query
    (101, 10, False),  # after the query
])
def test_an_account_balance_may_be_as_of_any_second_of_the_last_minute(
        result_time: int, balance: int, accepted: bool) -> None:
    got = outputs()
    got["account_balances"] = [emitted({**BALANCES[0], "result_time": result_time,
                                        "balance": balance}, 1.0)]
    result = validate(INPUTS, got, reference())
    assert result.result(2).passed is accepted
    assert counts(result, 2)[2:4] == ((0, 0) if accepted else (1, 1))


def test_the_trigger_of_a_report_output_is_found_by_car_when_its_xway_is_wrong() -> None:
    triggers = Triggers.of(INPUTS)
    kind = OUTPUT_KINDS[0]
    assert triggers.publish_ms(kind, {**TOLLS[1], "xway": 3}) == START_MS + 30_000
    # A car that reported on two xways at one second is ambiguous.
    twice = [*INPUTS, published(PositionReport(30, 7, 60, 1, 1, 0, 4, 4 * 5280), 500)]
    assert Triggers.of(twice).publish_ms(kind, {**TOLLS[1], "xway": 3}) is None
    assert Triggers.of(twice).publish_ms(kind, {**TOLLS[1], "xway": 1}) == START_MS + 30_500


def test_the_table_has_a_row_per_type() -> None:
    got = outputs()
    del got["toll_notifications"][0]
    text = validate(INPUTS, got, reference()).text()
    lines = text.splitlines()
    assert [cell.strip() for cell in lines[0].split("|")] == [
        "type", "expected", "got", "missing", "wrong", "duplicated", "late", "p50", "p99",
        "max"]
    assert [cell.strip() for cell in lines[1].split("|")] == [
        "0 toll notifications", "3", "2", "1", "0", "0", "0", "1.00s", "never", "never"]
    assert len(lines) == 5
    assert validate(INPUTS, got, reference()).table().row_count == 4


def test_emit_in_simulation_seconds() -> None:
    assert emit_seconds(30, 2.5) == 32.5


def test_outputs_written_as_the_benchmark_does_with_emit_in_simulation_seconds() -> None:
    lines = benchmark_lines(outputs(response_s=2.5), Triggers.of(INPUTS))
    assert lines == ["0,7,0,2,0,0", "0,7,30,32,35,8", "0,8,30,32,20,0", "1,30,32,10",
                     "2,100,102,100,1,10", "3,101,103,2,6"]


def test_run_records_put_inputs_in_processing_order() -> None:
    run = RunRecords(inputs=[INPUTS[4], INPUTS[2], INPUTS[1], INPUTS[0]])
    assert [type(r).__name__ for r in run.reference_input()] == [
        "HistoricalTolls", "PositionReport", "PositionReport", "AccountBalanceQuery"]
    assert input_record("linear-road.historical-tolls",
                        {"time": 0, "vid": 7, "xway": 0, "tolls": [1, 2]}
                        ) == HistoricalTolls(0, 7, 0, (1, 2))


# -- the command ------------------------------------------------------------------------------


def _command(monkeypatch: pytest.MonkeyPatch, tmp_path: Any, read: Any) -> Any:
    from typer.testing import CliRunner

    from medusa.linear_road import run_records
    from medusa_apps import cli
    from medusa_apps.cli import linear_road

    monkeypatch.setattr(linear_road, "_clients", lambda participant: ({}, None))
    monkeypatch.setattr(run_records, "read_run", read)
    return CliRunner().invoke(cli.app, ["linear-road", "validate", "--prefix", "run1.",
                                        "--json", str(tmp_path / "result.json")])


def test_the_command_passes_a_run_whose_outputs_are_the_references(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from medusa.linear_road.reference import compute

    run = RunRecords(inputs=list(INPUTS))
    expected = compute(run.reference_input())
    run.outputs = {kind.field: [emitted(row, 0.5) for row in getattr(expected, kind.field)]
                   for kind in OUTPUT_KINDS}
    invoked = _command(monkeypatch, tmp_path, lambda *args, **kwargs: run)
    assert invoked.exit_code == 0, invoked.output
    assert "PASS" in invoked.output
    assert json.loads((tmp_path / "result.json").read_text())["passed"] is True

    run.outputs["toll_notifications"] = run.outputs["toll_notifications"][1:]
    invoked = _command(monkeypatch, tmp_path, lambda *args, **kwargs: run)
    assert invoked.exit_code == 1 and "FAIL" in invoked.output


def test_the_command_names_a_missing_topic(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Any) -> None:
    from medusa.linear_road.run_records import MissingTopicsError

    def read(*args: Any, **kwargs: Any) -> RunRecords:
        raise MissingTopicsError(["run1.linear-road.account-balances"])

    invoked = _command(monkeypatch, tmp_path, read)
    assert invoked.exit_code == 2
    assert "run1.linear-road.account-balances" in invoked.output


def test_the_table_fits_an_80_column_terminal_without_breaking_numbers() -> None:
    from rich.console import Console

    console = Console(width=80, record=True)
    console.print(validate(INPUTS, outputs(), reference()).table())
    lines = console.export_text().splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    assert any("notifications" in line for line in lines)


def test_a_failed_run_says_which_rule_or_bound_failed_and_by_how_much() -> None:
    assert validate(INPUTS, outputs(), reference()).failures() == []
    late = outputs(response_s=7.5)
    del late["toll_notifications"][0]
    failures = validate(INPUTS, late, reference()).failures()
    assert "toll notifications: 1 of 3 missing (never answered)" in failures
    assert any(line.startswith("toll notifications: 2 of 2 later than the 5 s bound")
               and "worst 7.50s" in line for line in failures), failures
