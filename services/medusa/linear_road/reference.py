"""An independent, pure-Python reference for the Linear Road rules in SEMANTICS.md.

It reads the whole input at once and computes every compared output, one small function per
numbered rule, so that the streaming implementation can be checked against it record for
record. Records are processed in SEMANTICS.md's order: by time, and within one second the
historical tolls, then the position reports, then the queries, each in input order.

Readings chosen where SEMANTICS.md leaves room (the most literal one, or the benchmark's):
- Segments: statistics, triggers, tolls and alerts use a report's own `seg` field; an
  accident's segment is `pos // 5280`, as rule 6 says. They agree on valid input.
- Rules 1-2: statistics are of whole minutes (the toll of minute m only needs minutes before
  m). The LAV is the plain mean of the `avg_speed` of minutes m-5 .. m-1 that have
  statistics, computed exactly (fractions) and rounded half up.
- Rule 3: "no accident active on the segment or the four downstream of it" means that the
  segment is in the zone (rule 6) of an accident active in minute m on the same xway and
  dir, the same condition as rule 9's; an alerted report's toll is therefore 0.
- Rule 5: a new trip restarts the count of identical reports even at an identical place
  (possible only after an exit-lane report). A car that stops reporting stays stopped, so
  an accident whose cars never report again is never cleared.
- Rule 6: an accident detected and cleared in the same minute is never active. A place has
  at most one open accident: a new one there needs the previous one cleared first.
- Rule 7: only a different `seg` (or a new trip) triggers; a report in the same segment with
  another dir does not.
- Rule 9: one alert per triggering report, naming the nearest accident ahead.
- Rule 10: the charge is the toll of the car's last toll notification, on the report's xway.
- Rule 11: `result_time` is the query's own time; the balance includes the charges of that
  second (its reports come before its queries).
- Rule 12: the row used is the last historical row for (vid, xway) processed before the
  query (a row processed later does not count); a `day` outside 1 .. len(tolls) gives 0.
- Several reports of one car in one second are consecutive reports in input order.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Any

from medusa.linear_road.records import (
    EXIT_LANE,
    FEET_PER_SEGMENT,
    SEGMENTS,
    AccountBalanceQuery,
    DailyExpenditureQuery,
    HistoricalTolls,
    LinearRoadRecord,
    PositionReport,
    TravelTimeQuery,
)

LAV_MINUTES = 5
TOLL_MAX_LAV = 40
TOLL_MIN_CARS = 50
STOPPED_REPORTS = 4
ZONE_SEGMENTS = 4

Segment = tuple[int, int, int]  # (xway, dir, seg)
SegmentMinute = tuple[int, int, int, int]  # (xway, dir, seg, minute)
Place = tuple[int, int, int]  # (xway, dir, pos)
Record = LinearRoadRecord | HistoricalTolls
Row = dict[str, Any]


@dataclass
class ReferenceOutput:
    toll_notifications: list[Row]  # {vid, time, xway, dir, seg, lav, toll}
    accident_alerts: list[Row]  # {vid, time, xway, dir, seg}
    account_balances: list[Row]  # {qid, vid, time, result_time, balance}
    daily_expenditures: list[Row]  # {qid, vid, time, xway, day, expenditure}
    toll_assessments: list[Row]  # {vid, time, xway, toll}
    segment_statistics: list[Row]  # {xway, dir, seg, minute, car_count, avg_speed}

    def balance_at(self, vid: int, second: int) -> int:
        """The sum of the car's charges (toll assessments) with time <= `second`."""
        return balance(self._charges_by_vid.get(vid, []), vid, second)

    @cached_property
    def _charges_by_vid(self) -> dict[int, list[Row]]:
        return charges_by_vid(self.toll_assessments)


def minute(time: int) -> int:
    """The simulation minute of a second: minute 1 is seconds 0..59."""
    return time // 60 + 1


# Processing order -----------------------------------------------------------------------------

_RANK: dict[type, int] = {HistoricalTolls: 0, PositionReport: 1, AccountBalanceQuery: 2,
                          DailyExpenditureQuery: 2, TravelTimeQuery: 2}


def processing_order(records: Iterable[Record]) -> list[Record]:
    """By time; within a second historical tolls, reports, queries, each in input order."""
    return sorted(records, key=lambda record: (record.time, _RANK[type(record)]))


# Rule 1: statistics ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Statistics:
    cars: int
    avg_speed: Fraction


def mean(values: list[Fraction]) -> Fraction:
    return sum(values, Fraction(0)) / len(values)


def segment_statistics(reports: list[PositionReport]) -> dict[SegmentMinute, Statistics]:
    """Rule 1: distinct vids, and the mean of the per-car mean speeds, per segment minute."""
    speeds: dict[SegmentMinute, dict[int, list[Fraction]]] = defaultdict(
        lambda: defaultdict(list))
    for r in reports:
        speeds[(r.xway, r.dir, r.seg, minute(r.time))][r.vid].append(Fraction(r.speed))
    return {key: Statistics(len(cars), mean([mean(s) for s in cars.values()]))
            for key, cars in speeds.items()}


# Rule 2: LAV ----------------------------------------------------------------------------------

def round_half_up(value: Fraction) -> int:
    return math.floor(value + Fraction(1, 2))


def lav(stats: dict[SegmentMinute, Statistics], segment: Segment, m: int) -> int | None:
    """Rule 2: the rounded mean avg_speed of minutes m-5 .. m-1 with statistics; or None."""
    speeds = [stats[(*segment, p)].avg_speed for p in range(m - LAV_MINUTES, m)
              if (*segment, p) in stats]
    return round_half_up(mean(speeds)) if speeds else None


# Rule 3: toll ---------------------------------------------------------------------------------

def toll(stats: dict[SegmentMinute, Statistics], accidents: list[Accident],
         segment: Segment, m: int) -> int:
    """Rule 3: 2 * (cars(m-1) - 50)^2 if LAV(m) < 40, cars(m-1) > 50 and no accident ahead."""
    average = lav(stats, segment, m)
    previous = stats.get((*segment, m - 1))
    cars = previous.cars if previous is not None else 0
    if (average is not None and average < TOLL_MAX_LAV and cars > TOLL_MIN_CARS
            and not accidents_ahead(accidents, segment, m)):
        return 2 * (cars - TOLL_MIN_CARS) ** 2
    return 0


# Rules 4 and 5: trips and stopped cars --------------------------------------------------------

def starts_trip(previous: PositionReport | None, r: PositionReport) -> bool:
    """Rule 4: the car's first report, or its previous one was on the exit lane or on another
    xway."""
    return previous is None or previous.lane == EXIT_LANE or previous.xway != r.xway


def identical(a: PositionReport, b: PositionReport) -> bool:
    """Rule 5: the same (xway, dir, lane, pos)."""
    return (a.xway, a.dir, a.lane, a.pos) == (b.xway, b.dir, b.lane, b.pos)


@dataclass(frozen=True)
class Step:
    """A position report, the car's previous report, whether it starts a trip (rule 4) and
    its run (rule 5): the consecutive identical reports of the trip ending with it."""

    report: PositionReport
    previous: PositionReport | None
    new_trip: bool
    run: int


def car_steps(reports: list[PositionReport]) -> list[Step]:
    """Rules 4 and 5 for each report, walking each car's reports in order."""
    last: dict[int, Step] = {}
    steps = []
    for r in reports:
        before = last.get(r.vid)
        previous = before.report if before is not None else None
        new_trip = starts_trip(previous, r)
        run = 1
        if before is not None and not new_trip and identical(before.report, r):
            run = before.run + 1
        step = Step(r, previous, new_trip, run)
        last[r.vid] = step
        steps.append(step)
    return steps


def is_stopped(step: Step) -> bool:
    """Rule 5: stopped from the fourth consecutive identical report on."""
    return step.run >= STOPPED_REPORTS


# Rule 6: accidents ----------------------------------------------------------------------------

@dataclass
class Accident:
    xway: int
    dir: int
    pos: int
    detected: int  # minute d
    cleared: int | None = None  # minute c; None while not cleared

    @property
    def seg(self) -> int:
        return self.pos // FEET_PER_SEGMENT

    def active(self, m: int) -> bool:
        """Active in minutes d+1 .. c (d+1 .. forever while not cleared)."""
        return self.detected + 1 <= m and (self.cleared is None or m <= self.cleared)

    def zone(self) -> range:
        """Its segment and the four upstream, within 0..99."""
        a = self.seg
        low, high = (a - ZONE_SEGMENTS, a) if self.dir == 0 else (a, a + ZONE_SEGMENTS)
        return range(max(low, 0), min(high, SEGMENTS - 1) + 1)


def accidents(steps: list[Step]) -> list[Accident]:
    """Rule 6: an accident at a place while 2+ cars are stopped there; detected at the report
    making the second car stopped, cleared at the report leaving fewer than two."""
    stopped_cars: dict[Place, set[int]] = defaultdict(set)
    stopped_at: dict[int, Place] = {}  # vid -> where it is stopped
    open_accidents: dict[Place, Accident] = {}
    found = []
    for step in steps:
        r = step.report
        before = stopped_at.pop(r.vid, None)
        after = (r.xway, r.dir, r.pos) if is_stopped(step) else None
        if before is not None and before != after:
            stopped_cars[before].discard(r.vid)
            if len(stopped_cars[before]) < 2 and before in open_accidents:
                open_accidents.pop(before).cleared = minute(r.time)
        if after is not None:
            stopped_at[r.vid] = after
            if r.vid not in stopped_cars[after]:
                stopped_cars[after].add(r.vid)
                if len(stopped_cars[after]) == 2:
                    accident = Accident(*after, detected=minute(r.time))
                    open_accidents[after] = accident
                    found.append(accident)
    return found


def accidents_ahead(accidents: list[Accident], segment: Segment, m: int) -> list[Accident]:
    """The accidents active in minute m on the segment's xway and dir whose zone has it."""
    xway, direction, seg = segment
    return [a for a in accidents if (a.xway, a.dir) == (xway, direction) and a.active(m)
            and seg in a.zone()]


# Rule 7: triggering reports -------------------------------------------------------------------

def triggers(step: Step) -> bool:
    """Rule 7: not on the exit lane, and a new trip or another segment than the previous."""
    r, previous = step.report, step.previous
    return r.lane != EXIT_LANE and (
        step.new_trip or (previous is not None and r.seg != previous.seg))


# Rule 8: toll notifications -------------------------------------------------------------------

def toll_notification(r: PositionReport, stats: dict[SegmentMinute, Statistics],
                      accidents: list[Accident]) -> Row:
    """Rule 8: the report's fields, the LAV (0 without one) and the toll of its minute."""
    segment, m = (r.xway, r.dir, r.seg), minute(r.time)
    average = lav(stats, segment, m)
    return {"vid": r.vid, "time": r.time, "xway": r.xway, "dir": r.dir, "seg": r.seg,
            "lav": average if average is not None else 0,
            "toll": toll(stats, accidents, segment, m)}


# Rule 9: accident alerts ----------------------------------------------------------------------

def accident_alert(r: PositionReport, accidents: list[Accident]) -> Row | None:
    """Rule 9: an alert naming the nearest active accident ahead whose zone has the report."""
    ahead = accidents_ahead(accidents, (r.xway, r.dir, r.seg), minute(r.time))
    if not ahead:
        return None
    nearest = min(ahead, key=lambda a: abs(a.seg - r.seg))
    return {"vid": r.vid, "time": r.time, "xway": r.xway, "dir": r.dir, "seg": nearest.seg}


# Rule 10: toll assessments --------------------------------------------------------------------

def toll_assessments(triggering: list[Step], notifications: list[Row]) -> list[Row]:
    """Rule 10: at a triggering report that does not start a trip, the car is charged the
    toll of its previous toll notification. `notifications[i]` is `triggering[i]`'s."""
    last_toll: dict[int, int] = {}
    charges = []
    for step, notification in zip(triggering, notifications, strict=True):
        r = step.report
        if not step.new_trip and r.vid in last_toll:
            charges.append({"vid": r.vid, "time": r.time, "xway": r.xway,
                            "toll": last_toll[r.vid]})
        last_toll[r.vid] = notification["toll"]
    return charges


# Rule 11: account balances --------------------------------------------------------------------

def charges_by_vid(charges: list[Row]) -> dict[int, list[Row]]:
    grouped: dict[int, list[Row]] = defaultdict(list)
    for charge in charges:
        grouped[charge["vid"]].append(charge)
    return dict(grouped)


def balance(charges: list[Row], vid: int, second: int) -> int:
    """The sum of the car's charges with time <= second."""
    return sum(c["toll"] for c in charges if c["vid"] == vid and c["time"] <= second)


def account_balance(q: AccountBalanceQuery, charges: list[Row]) -> Row:
    """Rule 11: the car's balance at the query's own second."""
    return {"qid": q.qid, "vid": q.vid, "time": q.time, "result_time": q.time,
            "balance": balance(charges, q.vid, q.time)}


# Rule 12: daily expenditures ------------------------------------------------------------------

def daily_expenditure(q: DailyExpenditureQuery,
                      history: dict[tuple[int, int], tuple[int, ...]]) -> Row:
    """Rule 12: `tolls[day - 1]` of the car's historical row for the xway (0 without one)."""
    tolls = history.get((q.vid, q.xway), ())
    spent = tolls[q.day - 1] if 1 <= q.day <= len(tolls) else 0
    return {"qid": q.qid, "vid": q.vid, "time": q.time, "xway": q.xway, "day": q.day,
            "expenditure": spent}


# All rules ------------------------------------------------------------------------------------

def _sorted(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda row: tuple(row.values()))


def compute(records: Iterable[Record]) -> ReferenceOutput:
    """Every rule over the whole input."""
    ordered = processing_order(records)
    reports = [r for r in ordered if isinstance(r, PositionReport)]
    stats = segment_statistics(reports)
    steps = car_steps(reports)
    found = accidents(steps)
    triggering = [step for step in steps if triggers(step)]
    notifications = [toll_notification(step.report, stats, found) for step in triggering]
    alerts = [alert for step in triggering
              if (alert := accident_alert(step.report, found)) is not None]
    charges = toll_assessments(triggering, notifications)
    charged = charges_by_vid(charges)

    history: dict[tuple[int, int], tuple[int, ...]] = {}
    balances, expenditures = [], []
    for record in ordered:
        if isinstance(record, HistoricalTolls):
            history[(record.vid, record.xway)] = record.tolls
        elif isinstance(record, AccountBalanceQuery):
            balances.append(account_balance(record, charged.get(record.vid, [])))
        elif isinstance(record, DailyExpenditureQuery):
            expenditures.append(daily_expenditure(record, history))

    statistics = [{"xway": xway, "dir": direction, "seg": seg, "minute": m,
                   "car_count": row.cars, "avg_speed": float(row.avg_speed)}
                  for (xway, direction, seg, m), row in stats.items()]
    return ReferenceOutput(
        toll_notifications=_sorted(notifications),
        accident_alerts=_sorted(alerts),
        account_balances=_sorted(balances),
        daily_expenditures=_sorted(expenditures),
        toll_assessments=_sorted(charges),
        segment_statistics=_sorted(statistics),
    )
