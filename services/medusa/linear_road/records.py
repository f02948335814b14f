"""Linear Road input records, their topics, and the benchmark's file formats.

CSV fields: Type, Time, VID, Spd, XWay, Lane, Dir, Seg, Pos, QID, S_init, S_end, DOW, TOD, Day;
fields a type does not use are -1. The historical toll file has rows ``vid,day,xway,toll``
(day 1..69), published grouped per (vid, xway) as ``HistoricalTolls``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from medusa.errors import MedusaError

POSITION_REPORTS = "linear-road.position-reports"
ACCOUNT_BALANCE_QUERIES = "linear-road.account-balance-queries"
DAILY_EXPENDITURE_QUERIES = "linear-road.daily-expenditure-queries"
TRAVEL_TIME_QUERIES = "linear-road.travel-time-queries"
HISTORICAL_TOLLS = "linear-road.historical-tolls"
TOLL_NOTIFICATIONS = "linear-road.toll-notifications"
ACCIDENT_ALERTS = "linear-road.accident-alerts"
ACCOUNT_BALANCES = "linear-road.account-balances"
DAILY_EXPENDITURES = "linear-road.daily-expenditures"
HISTORY_DAYS = 69
"""Days of historical tolls a car has: day 1 is yesterday."""

CSV_FIELDS = ("Type", "Time", "VID", "Spd", "XWay", "Lane", "Dir", "Seg", "Pos", "QID", "S_init",
              "S_end", "DOW", "TOD", "Day")
"""The benchmark's names of the CSV fields, in order."""
CSV_FIELD_COUNT = len(CSV_FIELDS)
STIME_ORIGIN_MS = 86_400_000
"""stime of simulation second 0: one day past the epoch, a whole number of minutes (so
windows align with simulation minutes) and clear of 0, which Spark's watermark treats
as "no watermark yet"."""
FEET_PER_SEGMENT = 5280
SEGMENTS = 100
EXIT_LANE = 4
ENTRANCE_LANE = 0


@dataclass(frozen=True)
class PositionReport:
    TYPE: ClassVar[int] = 0
    TOPIC: ClassVar[str] = POSITION_REPORTS
    time: int
    vid: int
    speed: int
    xway: int
    lane: int
    dir: int
    seg: int
    pos: int

    @property
    def tuple_id(self) -> str:
        return f"lr/pr/{self.xway}/{self.vid}/{self.time}"

    def csv_fields(self) -> list[int]:
        return [0, self.time, self.vid, self.speed, self.xway, self.lane, self.dir, self.seg,
                self.pos, -1, -1, -1, -1, -1, -1]


@dataclass(frozen=True)
class AccountBalanceQuery:
    TYPE: ClassVar[int] = 2
    TOPIC: ClassVar[str] = ACCOUNT_BALANCE_QUERIES
    time: int
    vid: int
    qid: int

    @property
    def tuple_id(self) -> str:
        return f"lr/q2/{self.qid}"

    def csv_fields(self) -> list[int]:
        return [2, self.time, self.vid, -1, -1, -1, -1, -1, -1, self.qid, -1, -1, -1, -1, -1]


@dataclass(frozen=True)
class DailyExpenditureQuery:
    TYPE: ClassVar[int] = 3
    TOPIC: ClassVar[str] = DAILY_EXPENDITURE_QUERIES
    time: int
    vid: int
    xway: int
    qid: int
    day: int

    @property
    def tuple_id(self) -> str:
        return f"lr/q3/{self.qid}"

    def csv_fields(self) -> list[int]:
        return [3, self.time, self.vid, -1, self.xway, -1, -1, -1, -1, self.qid, -1, -1, -1, -1,
                self.day]


@dataclass(frozen=True)
class TravelTimeQuery:
    TYPE: ClassVar[int] = 4
    TOPIC: ClassVar[str] = TRAVEL_TIME_QUERIES
    time: int
    vid: int
    xway: int
    qid: int
    s_init: int
    s_end: int
    dow: int
    tod: int

    @property
    def tuple_id(self) -> str:
        return f"lr/q4/{self.qid}"

    def csv_fields(self) -> list[int]:
        return [4, self.time, self.vid, -1, self.xway, -1, -1, -1, -1, self.qid, self.s_init,
                self.s_end, self.dow, self.tod, -1]


@dataclass(frozen=True)
class HistoricalTolls:
    """What a car spent on one expressway on each of the last 69 days (``tolls[d - 1]`` on
    day d): the benchmark's historical toll rows ``vid, day, xway, toll``, grouped per car
    and expressway. Published before the car's first report."""

    TOPIC: ClassVar[str] = HISTORICAL_TOLLS
    time: int
    vid: int
    xway: int
    tolls: tuple[int, ...]

    @property
    def tuple_id(self) -> str:
        return f"lr/hist/{self.xway}/{self.vid}"


def to_history_lines(history: HistoricalTolls) -> list[str]:
    """The benchmark's historical toll file rows: ``vid,day,xway,toll``."""
    return [f"{history.vid},{day},{history.xway},{toll}"
            for day, toll in enumerate(history.tolls, start=1)]


CsvRecord = PositionReport | AccountBalanceQuery | DailyExpenditureQuery | TravelTimeQuery
"""The records of the benchmark's 15-field CSV format."""
LinearRoadRecord = CsvRecord | HistoricalTolls
"""Linear Road input, as the producer publishes it: CSV records and historical tolls."""
RECORD_TYPES: tuple[type[CsvRecord], ...] = (
    PositionReport, AccountBalanceQuery, DailyExpenditureQuery, TravelTimeQuery,
)
TOPICS = (*(record_type.TOPIC for record_type in RECORD_TYPES), HISTORICAL_TOLLS)
"""Every Linear Road input topic, each record keyed by its vid."""


def to_dict(record: LinearRoadRecord, _context: Any = None) -> dict[str, Any]:
    fields = dict(vars(record))  # flat fields: no deep copy (asdict's) per record
    if isinstance(record, HistoricalTolls):
        fields["tolls"] = list(record.tolls)
    return fields


def to_csv_line(record: CsvRecord) -> str:
    return ",".join(str(value) for value in record.csv_fields())


class CsvLineError(MedusaError, ValueError):
    """A line that is not a valid Linear Road record; the message says why."""


class HistoryLineError(CsvLineError):
    """A line that is not a valid historical toll row; the message names the field."""


_RANGES = {  # field: (low, high) inclusive, checked on position reports
    "speed": (0, 100), "lane": (0, 4), "dir": (0, 1), "seg": (0, SEGMENTS - 1),
    "pos": (0, SEGMENTS * FEET_PER_SEGMENT - 1),
}


def parse_csv_line(line: str) -> CsvRecord:
    parts = [part.strip() for part in line.strip().split(",")]
    if len(parts) != CSV_FIELD_COUNT:
        raise CsvLineError(f"expected {CSV_FIELD_COUNT} comma-separated fields "
                           f"({','.join(CSV_FIELDS)}), got {len(parts)}")
    values = []
    # Field by field, so that the field named is the one int() refused ('--1', '²' and
    # 5000 digits look like digits but are not integers to it).
    for number, part in enumerate(parts, start=1):
        try:
            values.append(int(part))
        except ValueError:
            raise CsvLineError(f"field {number} is not an integer: {part!r}") from None
    (kind, time, vid, speed, xway, lane, direction, seg, pos, qid, s_init, s_end, dow, tod,
     day) = values
    if time < 0:
        raise CsvLineError(f"time must not be negative, got {time}")
    match kind:
        case 0:
            report = PositionReport(time, vid, speed, xway, lane, direction, seg, pos)
            for name, (low, high) in _RANGES.items():
                value = getattr(report, name)
                if not low <= value <= high:
                    raise CsvLineError(f"{name} must be in {low}..{high}, got {value}")
            return report
        case 2:
            return AccountBalanceQuery(time, vid, qid)
        case 3:
            return DailyExpenditureQuery(time, vid, xway, qid, day)
        case 4:
            return TravelTimeQuery(time, vid, xway, qid, s_init, s_end, dow, tod)
        case _:
            raise CsvLineError(f"unknown record type {kind} (expected 0, 2, 3 or 4)")


HISTORY_FIELDS = ("vid", "day", "xway", "toll")
"""The fields of a row of the benchmark's historical toll file, in order."""


def parse_history_line(line: str) -> tuple[int, int, int, int]:
    """``(vid, day, xway, toll)`` of a row of the benchmark's historical toll file
    (``vid,day,xway,toll``, comma separated, spaces allowed)."""
    parts = [part.strip() for part in line.strip().split(",")]
    if len(parts) != len(HISTORY_FIELDS):
        raise HistoryLineError(f"expected {len(HISTORY_FIELDS)} comma-separated fields "
                               f"({','.join(HISTORY_FIELDS)}), got {len(parts)}")
    values = []
    for number, (name, part) in enumerate(zip(HISTORY_FIELDS, parts, strict=True), start=1):
        try:
            values.append(int(part))
        except ValueError:
            raise HistoryLineError(
                f"field {number} ({name}) is not an integer: {part!r}") from None
    vid, day, xway, toll = values
    if not 1 <= day <= HISTORY_DAYS:
        raise HistoryLineError(f"field 2 (day) must be in 1..{HISTORY_DAYS}, got {day}")
    for number, name, value in ((1, "vid", vid), (3, "xway", xway), (4, "toll", toll)):
        if value < 0:
            raise HistoryLineError(f"field {number} ({name}) must not be negative, got {value}")
    return vid, day, xway, toll
