from pathlib import Path

import pytest

from medusa.linear_road.records import (
    HISTORICAL_TOLLS,
    HISTORY_DAYS,
    POSITION_REPORTS,
    TOPICS,
    AccountBalanceQuery,
    CsvLineError,
    DailyExpenditureQuery,
    HistoricalTolls,
    HistoryLineError,
    PositionReport,
    TravelTimeQuery,
    parse_csv_line,
    parse_history_line,
    to_csv_line,
    to_history_lines,
)
from medusa.linear_road.sources import (
    BadLines,
    StrictCsvError,
    from_csv,
    keyed,
    read_history,
    with_history,
)

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


# Historical tolls ----------------------------------------------------------------------------

def test_history_is_an_input_topic_keyed_by_vid() -> None:
    assert HISTORICAL_TOLLS in TOPICS and POSITION_REPORTS in TOPICS
    row = keyed(HistoricalTolls(0, 107, 1, (5,) * HISTORY_DAYS))
    assert (row.topic, row.key, row.tuple_id) == (HISTORICAL_TOLLS, "107", "lr/hist/1/107")


@pytest.mark.parametrize(("line", "parsed"), [
    ("107,1,0,55", (107, 1, 0, 55)),
    (" 107 , 69 , 2 , 0 \n", (107, 69, 2, 0)),
])
def test_history_lines_parse(line: str, parsed: tuple[int, int, int, int]) -> None:
    assert parse_history_line(line) == parsed


@pytest.mark.parametrize(("line", "reason"), [
    ("107,1,0", r"expected 4 comma-separated fields \(vid,day,xway,toll\), got 3"),
    ("107,1,0,55,9", "expected 4 comma-separated fields"),
    ("car,1,0,55", r"field 1 \(vid\) is not an integer: 'car'"),
    ("107,x,0,55", r"field 2 \(day\) is not an integer: 'x'"),
    ("107,1,0,", r"field 4 \(toll\) is not an integer: ''"),
    ("107,0,0,55", r"field 2 \(day\) must be in 1..69, got 0"),
    ("107,70,0,55", r"field 2 \(day\) must be in 1..69, got 70"),
    ("107,1,-1,55", r"field 3 \(xway\) must not be negative, got -1"),
    ("107,1,0,-5", r"field 4 \(toll\) must not be negative, got -5"),
])
def test_bad_history_lines_name_the_field(line: str, reason: str) -> None:
    with pytest.raises(HistoryLineError, match=reason):
        parse_history_line(line)


def test_history_file_is_grouped_per_car_and_expressway(tmp_path: Path) -> None:
    path = tmp_path / "historical-tolls.out"
    path.write_text("\n".join([
        "107,1,0,10", "107,2,1,20", "108,1,0,30", "", "107,3,0,40",
        "oops", "107,1,0,11", "108,99,0,1", "109, 69, 2, 7",
    ]) + "\n")
    bad = BadLines()
    history = read_history(path, bad)
    zeros = [0] * HISTORY_DAYS
    assert history == [
        HistoricalTolls(0, 107, 0, tuple([10, 0, 40, *zeros[3:]])),
        HistoricalTolls(0, 107, 1, tuple([0, 20, *zeros[2:]])),
        HistoricalTolls(0, 108, 0, tuple([30, *zeros[1:]])),
        HistoricalTolls(0, 109, 2, tuple([*zeros[:68], 7])),
    ]
    assert bad.count == 3
    assert bad.first == [
        (6, "expected 4 comma-separated fields (vid,day,xway,toll), got 1"),
        (7, "a second row for vid 107, day 1, xway 0"),
        (8, "field 2 (day) must be in 1..69, got 99"),
    ]
    with pytest.raises(StrictCsvError, match=r"historical-tolls\.out:6: expected 4") as raised:
        read_history(path, BadLines(), strict=True)
    assert raised.value.line_number == 6


def test_history_lines_written_read_back(tmp_path: Path) -> None:
    written = HistoricalTolls(0, 107, 2, tuple(range(HISTORY_DAYS)))
    lines = to_history_lines(written)
    assert lines[:2] == ["107,1,2,0", "107,2,2,1"] and len(lines) == HISTORY_DAYS
    path = tmp_path / "history.csv"
    path.write_text("\n".join(lines) + "\n")
    assert read_history(path, BadLines()) == [written]


def test_history_goes_out_at_second_0_ahead_of_the_traffic(tmp_path: Path) -> None:
    history = [HistoricalTolls(0, 101, 0, (1,) * HISTORY_DAYS)]
    starts_at_0 = list(with_history(history, from_csv(
        _write(tmp_path, [GOOD_0, GOOD_1, GOOD_2]), BadLines())))
    assert [(t, [k.topic for k in batch]) for t, batch in starts_at_0] == [
        (0.0, [HISTORICAL_TOLLS, POSITION_REPORTS]),
        (30.0, [POSITION_REPORTS, "linear-road.account-balance-queries"]),
    ]
    starts_later = list(with_history(history, from_csv(_write(tmp_path, [GOOD_1]), BadLines())))
    assert [(t, len(batch)) for t, batch in starts_later] == [(0.0, 1), (30.0, 1)]
    assert list(with_history(history, iter([]))) == [(0.0, [keyed(history[0])])]
    assert list(with_history([], iter([]))) == []
