from pathlib import Path

import pytest

from medusa.linear_road.records import (
    AccountBalanceQuery,
    CsvLineError,
    DailyExpenditureQuery,
    PositionReport,
    TravelTimeQuery,
    parse_csv_line,
    to_csv_line,
)
from medusa.linear_road.sources import BadLines, StrictCsvError, from_csv

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("record", [
    PositionReport(30, 107, 55, 0, 2, 1, 42, 223344),
    AccountBalanceQuery(31, 107, 9),
    DailyExpenditureQuery(32, 108, 1, 10, 5),
    TravelTimeQuery(33, 109, 0, 11, 3, 17, 2, 600),
])
def test_csv_round_trip(record: object) -> None:
    line = to_csv_line(record)  # type: ignore[arg-type]
    assert len(line.split(",")) == 15
    assert parse_csv_line(line) == record


@pytest.mark.parametrize(("line", "reason"), [
    ("0,1,2", "expected 15"),
    ("0,1,2,3,4,5,6,7,x,-1,-1,-1,-1,-1,-1", "field 9 is not an integer: 'x'"),
    ("9,1,2,3,4,1,0,7,8,-1,-1,-1,-1,-1,-1", "unknown record type 9"),
    ("0,1,2,300,0,1,0,7,8,-1,-1,-1,-1,-1,-1", "speed must be in 0..100"),
    ("0,1,2,30,0,1,0,100,8,-1,-1,-1,-1,-1,-1", "seg must be in 0..99"),
])
def test_bad_lines_say_why(line: str, reason: str) -> None:
    with pytest.raises(CsvLineError, match=reason):
        parse_csv_line(line)


def _write(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "input.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD_0 = "0,0,101,50,0,1,0,3,16000,-1,-1,-1,-1,-1,-1"
GOOD_1 = "0,30,101,50,0,1,0,3,18200,-1,-1,-1,-1,-1,-1"
GOOD_2 = "2,30,101,-1,-1,-1,-1,-1,-1,7,-1,-1,-1,-1,-1"


def test_from_csv_groups_by_second_and_counts_bad_lines(tmp_path: Path) -> None:
    path = _write(tmp_path, [GOOD_0, "garbage", GOOD_1, GOOD_2, "0,1,2"])
    bad = BadLines()
    seconds = list(from_csv(path, bad))
    assert [(t, len(batch)) for t, batch in seconds] == [(0.0, 1), (30.0, 2)]
    assert bad.count == 2
    assert [number for number, _ in bad.first] == [2, 5]


def test_from_csv_rejects_time_going_backwards(tmp_path: Path) -> None:
    path = _write(tmp_path, [GOOD_1, GOOD_0])
    bad = BadLines()
    assert len(list(from_csv(path, bad))) == 1
    assert bad.first == [(2, "time goes backwards (0 after 30)")]


def test_strict_stops_at_the_first_bad_line(tmp_path: Path) -> None:
    path = _write(tmp_path, [GOOD_0, GOOD_1, "bad line"])
    with pytest.raises(StrictCsvError, match=r"input.csv:3: expected 15") as raised:
        list(from_csv(path, BadLines(), strict=True))
    assert raised.value.line_number == 3
