"""The pure-Python Linear Road reference (medusa.linear_road.reference) against SEMANTICS.md.

Small hand-written scenarios check one rule each with exact expected output; a short
simulated run checks invariants that tie the outputs together.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from typing import Any

import pytest

from medusa.linear_road.records import (
    ENTRANCE_LANE,
    EXIT_LANE,
    FEET_PER_SEGMENT,
    AccountBalanceQuery,
    DailyExpenditureQuery,
    HistoricalTolls,
    LinearRoadRecord,
    PositionReport,
    TravelTimeQuery,
)
from medusa.linear_road.reference import ReferenceOutput, compute, minute
from medusa.linear_road.traffic import TrafficProfile, TrafficSimulation

pytestmark = pytest.mark.unit

Record = LinearRoadRecord | HistoricalTolls


def report(time: int, vid: int, pos: int, *, speed: int = 50, xway: int = 0, lane: int = 1,
           direction: int = 0) -> PositionReport:
    return PositionReport(time, vid, speed, xway, lane, direction, pos // FEET_PER_SEGMENT, pos)


def at(seg: int, offset: int = 100) -> int:
    """A position `offset` feet into segment `seg`."""
    return seg * FEET_PER_SEGMENT + offset


def crowd(first_vid: int, seg: int, minute: int, cars: int = 60, speed: int = 10,
          direction: int = 0, xway: int = 0) -> list[PositionReport]:
    """`cars` distinct cars, one report each, spread over the seconds of `minute`."""
    return [report((minute - 1) * 60 + i % 60, first_vid + i, at(seg, 10 + i), speed=speed,
                   direction=direction, xway=xway) for i in range(cars)]


def stopped(vid: int, pos: int, times: range | list[int], *, lane: int = 2, xway: int = 0,
            direction: int = 0) -> list[PositionReport]:
    """Identical reports of a stopped car at each of `times`."""
    return [report(t, vid, pos, speed=0, xway=xway, lane=lane, direction=direction)
            for t in times]


def by_vid(rows: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    grouped: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        grouped[row["vid"]].append(row)
    return grouped


def note(vid: int, time: int, seg: int, *, xway: int = 0, direction: int = 0, lav: int = 0,
         toll: int = 0) -> dict[str, Any]:
    return {"vid": vid, "time": time, "xway": xway, "dir": direction, "seg": seg, "lav": lav,
            "toll": toll}


def alerted(out: ReferenceOutput) -> dict[tuple[int, int], int]:
    """(vid, time) -> the alert's accident segment."""
    return {(a["vid"], a["time"]): a["seg"] for a in out.accident_alerts}


# Rule 1: segment statistics -------------------------------------------------------------------

def test_statistics_count_distinct_cars_and_average_the_per_car_means() -> None:
    records: list[Record] = [
        report(0, 1, at(2), speed=10),
        report(30, 1, at(2, 2000), speed=20),          # car 1 again: mean 15, counted once
        report(10, 2, at(2, 50), speed=60),            # per-car mean (15+60)/2 = 37.5, not
                                                       # the per-report mean 30
        report(59, 3, at(2, 10), speed=36, lane=EXIT_LANE),         # the exit lane counts
        report(5, 4, at(2, 10), speed=54, lane=ENTRANCE_LANE),      # so does the entrance
        report(60, 1, at(3), speed=55),                # minute 2, another segment
        report(20, 5, at(2), speed=70, direction=1),   # the other direction: its own row
        report(0, 6, at(2), speed=10, xway=1),         # another expressway: its own row
        AccountBalanceQuery(5, 1, 77),                 # queries count for nothing here
        TravelTimeQuery(5, 1, 0, 78, 1, 5, 1, 1),
    ]
    out = compute(records)
    assert out.segment_statistics == [
        {"xway": 0, "dir": 0, "seg": 2, "minute": 1, "car_count": 4, "avg_speed": 41.25},
        {"xway": 0, "dir": 0, "seg": 3, "minute": 2, "car_count": 1, "avg_speed": 55.0},
        {"xway": 0, "dir": 1, "seg": 2, "minute": 1, "car_count": 1, "avg_speed": 70.0},
        {"xway": 1, "dir": 0, "seg": 2, "minute": 1, "car_count": 1, "avg_speed": 10.0},
    ]
    [row, *_] = out.segment_statistics
    assert type(row["avg_speed"]) is float
    assert all(type(row[k]) is int for k in ("xway", "dir", "seg", "minute", "car_count"))


def test_minute_boundaries() -> None:
    assert [minute(t) for t in (0, 59, 60, 119, 120)] == [1, 1, 2, 2, 3]
    out = compute([report(59, 1, at(0)), report(60, 2, at(0)), report(119, 3, at(0)),
                   report(120, 4, at(0))])
    assert [(r["minute"], r["car_count"]) for r in out.segment_statistics] == [
        (1, 1), (2, 2), (3, 1)]


# Rule 2: LAV ----------------------------------------------------------------------------------

def test_lav_averages_the_minutes_m_minus_5_to_m_minus_1_that_have_statistics() -> None:
    seg = 3
    records = [
        report(0, 10, at(seg), speed=30),    # minute 1: avg 30; no LAV yet
        report(60, 11, at(seg), speed=50),   # minute 2: LAV = 30
        report(180, 12, at(seg), speed=41),  # minute 4: (30 + 50) / 2 = 40, minute 3 empty
        report(240, 30, at(seg), speed=99, direction=1),  # other direction: no statistics
        report(300, 13, at(seg), speed=21),  # minute 6: (30 + 50 + 41) / 3 = 40.33 -> 40
        report(360, 14, at(seg), speed=21),  # minute 7: (50 + 41 + 21) / 3 = 37.33 -> 37
        report(720, 15, at(seg), speed=21),  # minute 13: nothing in 8..12, no LAV
    ]
    lav = {n["vid"]: n["lav"] for n in compute(records).toll_notifications}
    # The LAV is reported even without statistics for the previous minute (vids 12, 13).
    assert lav == {10: 0, 11: 30, 12: 40, 30: 0, 13: 40, 14: 37, 15: 0}
    assert all(type(v) is int for v in lav.values())


def test_lav_rounds_halves_up_exactly() -> None:
    # Minute averages 50.5, 40.67 and 27.33: their mean is exactly 39.5, but summed as
    # floats it comes out as 39.49999999999999.
    cars = [[54, 47], [24, 41, 57], [23, 24, 35]]
    naive = sum(sum(speeds) / len(speeds) for speeds in cars) / len(cars)
    assert math.floor(naive + 0.5) == 39  # the trap
    records = [report(60 * m + i, 100 * (m + 1) + i, at(7), speed=speed)
               for m, speeds in enumerate(cars) for i, speed in enumerate(speeds)]
    records.append(report(180, 1, at(7)))
    assert by_vid(compute(records).toll_notifications)[1] == [note(1, 180, 7, lav=40)]


def test_lav_uses_per_car_means() -> None:
    # 51 cars: 49 at 40, car 2 twice at 0 and car 3 once at 80. The mean of the per-car
    # means is 40 (no toll); the mean of the reports would be 39.23 (toll 2).
    records = [*crowd(1000, seg=5, minute=1, cars=49, speed=40),
               report(0, 2, at(5), speed=0), report(30, 2, at(5, 1000), speed=0),
               report(10, 3, at(5), speed=80)]
    records.append(report(60, 1, at(5)))
    out = compute(records)
    assert out.segment_statistics[0]["avg_speed"] == 40.0
    assert by_vid(out.toll_notifications)[1] == [note(1, 60, 5, lav=40)]


# Rule 3: tolls --------------------------------------------------------------------------------

def test_toll_needs_lav_below_40_and_more_than_50_cars_in_the_previous_minute() -> None:
    records = [
        *crowd(1000, seg=10, minute=1),                        # 60 cars at 10 mph
        *crowd(2000, seg=20, minute=1, cars=50),               # exactly 50 cars
        *crowd(3000, seg=30, minute=1, speed=40),              # LAV exactly 40
        *crowd(4000, seg=40, minute=1, cars=30, speed=39),
        *crowd(4100, seg=40, minute=1, cars=30, speed=40),     # with the above: 39.5 -> 40
        *crowd(5000, seg=50, minute=1, cars=31, speed=39),
        *crowd(5100, seg=50, minute=1, cars=30, speed=40),     # 39.49 -> 39, 61 cars
        report(60, 1, at(10, 5000), speed=10),
        report(60, 2, at(20, 5000), speed=10),
        report(60, 3, at(30, 5000), speed=10),
        report(60, 4, at(40, 5000), speed=10),
        report(60, 5, at(50, 5000), speed=10),
        report(120, 6, at(10, 5000), speed=10),  # minute 3: minute 2 had only car 1 there
        report(300, 7, at(10, 5000), speed=10),  # minute 6: LAV 10, no statistics in 5
    ]
    notes = by_vid(compute(records).toll_notifications)
    assert notes[1] == [note(1, 60, 10, lav=10, toll=2 * 10 ** 2)]
    assert notes[2] == [note(2, 60, 20, lav=10)]
    assert notes[3] == [note(3, 60, 30, lav=40)]
    assert notes[4] == [note(4, 60, 40, lav=40)]
    assert notes[5] == [note(5, 60, 50, lav=39, toll=2 * 11 ** 2)]
    assert notes[6] == [note(6, 120, 10, lav=10)]
    assert notes[7] == [note(7, 300, 10, lav=10)]
    assert notes[1000] == [note(1000, 0, 10)]  # minute 1: never a LAV nor a toll


# Rules 4 and 7: trips and triggering reports --------------------------------------------------

def test_triggering_reports() -> None:
    records = [
        report(0, 1, at(5), lane=ENTRANCE_LANE),    # first report: triggers
        report(30, 1, at(5, 600)),                  # same segment: nothing
        report(60, 1, at(6)),                       # next segment: triggers
        report(90, 1, at(6, 900), direction=1),     # same seg, another dir: nothing
        report(120, 1, at(7), lane=EXIT_LANE),      # exit lane: nothing
        report(150, 1, at(7), lane=ENTRANCE_LANE),  # after the exit: a new trip, triggers
        report(0, 2, at(5)),
        report(90, 2, at(5, 200)),                  # same segment, whatever the gap: nothing
        report(120, 2, at(5, 300), xway=1),         # another xway: a new trip, triggers
        report(0, 3, at(5), lane=EXIT_LANE),        # a first report on the exit lane: nothing
        report(30, 3, at(5), lane=EXIT_LANE),       # a new trip, but on the exit lane
        report(60, 3, at(5)),                       # a new trip: triggers
    ]
    got = [(n["vid"], n["time"]) for n in compute(records).toll_notifications]
    assert got == [(1, 0), (1, 60), (1, 150), (2, 0), (2, 120), (3, 60)]


# Rules 5 and 6: stopped cars and accidents ----------------------------------------------------

def test_stopped_at_the_fourth_identical_report_whatever_the_spacing() -> None:
    place = at(10, 300)
    records = [
        *stopped(1, place, [0, 7, 100, 101]),       # stopped at t=101 (minute 2)
        *stopped(2, place, [0, 30, 60, 90]),        # stopped at t=90
        report(119, 50, at(9)),                     # minute 2: detected, not yet active
        report(120, 51, at(9)),                     # minute 3: alerted
    ]
    assert alerted(compute(records)) == {(51, 120): 10}


@pytest.mark.parametrize(("second_car", "accident"), [
    (stopped(2, at(10, 300), [0, 30, 60]), False),                    # three reports only
    (stopped(2, at(10, 300), [0, 30, 60, 90], lane=3), True),         # another lane, same pos
    (stopped(2, at(10, 301), [0, 30, 60, 90]), False),                # another pos
    (stopped(2, at(10, 300), [0, 30, 60, 90], direction=1), False),   # another dir
    (stopped(2, at(10, 300), [0, 30, 60, 90], xway=1), False),        # another xway
    ([*stopped(2, at(10, 300), [0, 30], lane=1),
      *stopped(2, at(10, 300), [60, 90])], False),                    # changed lanes at t=60
    ([report(t, 2, at(10, 300), speed=t) for t in (0, 30, 60, 90)], True),  # speed: no matter
])
def test_an_accident_needs_two_cars_stopped_at_one_xway_dir_pos(
        second_car: list[PositionReport], accident: bool) -> None:
    records = [*stopped(1, at(10, 300), range(0, 120, 30)), *second_car, report(130, 50, at(9))]
    assert bool(compute(records).accident_alerts) is accident


def test_accident_is_active_from_the_minute_after_detection_through_the_clearing_one() -> None:
    place = at(20, 700)
    records = [
        *stopped(1, place, range(0, 270, 30)),      # stopped from t=90 until t=240
        report(270, 1, at(21)),                     # moves on at t=270 (minute 5): cleared
        *stopped(2, place, range(0, 600, 30)),      # stays: accident detected at t=90, min 2
    ]
    observers = {vid: t for vid, t in enumerate((100, 119, 120, 241, 299, 300), start=10)}
    records += [report(t, vid, at(18)) for vid, t in observers.items()]
    # Minutes 3 .. 5, before (241) and after (299) the clearing report alike.
    assert alerted(compute(records)) == {(12, 120): 20, (13, 241): 20, (14, 299): 20}


def test_accident_lasts_while_two_cars_are_stopped_and_a_new_one_may_follow() -> None:
    place = at(20, 700)
    records = [
        *stopped(1, place, range(0, 120, 30)), report(150, 1, at(21)),      # leaves, minute 3
        *stopped(2, place, range(0, 240, 30)), report(240, 2, at(21)),      # leaves, minute 5
        *stopped(3, place, range(0, 360, 30)),                              # stays
        # Car 4 stops at t=290 (minute 5): a new accident there, active from minute 6. Its
        # first report (t=200, minute 4) is alerted of the first accident.
        *stopped(4, place, range(200, 320, 30)),
        report(245, 50, at(19)),   # minute 5: the first is active through its clearing minute
        report(300, 51, at(19)),   # minute 6: the first is over, the second is active
        report(310, 52, at(20, 5000), lane=EXIT_LANE),  # the exit lane: no alert
    ]
    assert alerted(compute(records)) == {(4, 200): 20, (50, 245): 20, (51, 300): 20}


def test_identical_reports_on_the_exit_lane_never_make_a_stopped_car() -> None:
    # Each report after an exit-lane report starts a new trip, which restarts the count.
    records = [*stopped(1, at(10, 300), range(0, 180, 30), lane=EXIT_LANE),
               *stopped(2, at(10, 300), range(0, 180, 30), lane=EXIT_LANE),
               report(190, 50, at(9))]
    assert compute(records).accident_alerts == []


@pytest.mark.parametrize("clearing", [
    report(150, 1, at(10, 300), lane=EXIT_LANE),   # the stopped car's next report: exit lane
    report(150, 1, at(10, 300), xway=1),           # another xway (a new trip)
])
def test_a_stopped_cars_report_elsewhere_clears_the_accident(clearing: PositionReport) -> None:
    records = [*stopped(1, at(10, 300), range(0, 120, 30)),
               *stopped(2, at(10, 300), range(0, 600, 30)), clearing,
               report(170, 50, at(9)), report(185, 51, at(9))]
    assert alerted(compute(records)) == {(50, 170): 10}  # minute 3 only


@pytest.mark.parametrize(("direction", "zone", "outside"), [
    (0, [46, 47, 48, 49, 50], [45, 51]),
    (1, [50, 51, 52, 53, 54], [49, 55]),
])
def test_accident_zone_is_the_segment_and_four_upstream(
        direction: int, zone: list[int], outside: list[int]) -> None:
    records = [*stopped(1, at(50, 200), range(0, 120, 30), direction=direction),
               *stopped(2, at(50, 200), range(0, 120, 30), direction=direction)]
    records += [report(130, 100 + seg, at(seg), direction=direction) for seg in zone + outside]
    records += [report(130, 300 + seg, at(seg), direction=1 - direction) for seg in zone]
    records += [report(130, 400 + seg, at(seg), xway=1, direction=direction) for seg in zone]
    assert compute(records).accident_alerts == [
        {"vid": 100 + seg, "time": 130, "xway": 0, "dir": direction, "seg": 50} for seg in zone]


def test_accident_zone_is_clipped_to_the_road() -> None:
    records = [*stopped(1, at(1), range(0, 120, 30)), *stopped(2, at(1), range(0, 120, 30)),
               *stopped(3, at(98), range(0, 120, 30), direction=1),
               *stopped(4, at(98), range(0, 120, 30), direction=1),
               report(130, 10, at(0)), report(130, 11, at(99), direction=1),
               report(130, 12, at(2)), report(130, 13, at(97), direction=1)]
    assert alerted(compute(records)) == {(10, 130): 1, (11, 130): 98}


@pytest.mark.parametrize(("direction", "observer_seg", "nearest"), [
    (0, 9, 10), (0, 11, 12), (0, 10, 10), (0, 8, 10),
    (1, 13, 12), (1, 11, 10), (1, 12, 12), (1, 14, 12),
])
def test_alert_names_the_nearest_active_accident_ahead(
        direction: int, observer_seg: int, nearest: int) -> None:
    records = [
        *stopped(1, at(10, 100), range(0, 120, 30), direction=direction),
        *stopped(2, at(10, 100), range(0, 120, 30), direction=direction, lane=3),
        *stopped(3, at(12, 100), range(0, 120, 30), direction=direction),
        *stopped(4, at(12, 100), range(0, 120, 30), direction=direction),
        report(130, 50, at(observer_seg), direction=direction),
    ]
    assert compute(records).accident_alerts == [
        {"vid": 50, "time": 130, "xway": 0, "dir": direction, "seg": nearest}]


def test_accident_zone_zeroes_the_toll_while_active() -> None:
    # An accident in segment 50 detected in minute 2; crowds make segment 48 tollable.
    records = [*stopped(1, at(50, 200), range(0, 120, 30)),
               *stopped(2, at(50, 200), range(0, 120, 30))]
    for m in (1, 2, 3):
        records += crowd(1000 * m, 48, m)
        records += crowd(1000 * m + 500, 44, m)  # outside the zone
    records += [report(70, 10, at(48, 5000)), report(130, 11, at(48, 5000)),
                report(130, 12, at(44, 5000)), report(190, 13, at(48, 5000))]
    out = compute(records)
    tolls = {vid: n["toll"] for vid, [n, *_] in by_vid(out.toll_notifications).items()}
    # Minute 2 is before the accident is active; minutes 3 and 4 are in it, segment 44 is
    # outside the zone.
    assert [tolls[vid] for vid in (10, 11, 12, 13)] == [200, 0, 200, 0]
    assert set(alerted(out)) >= {(11, 130), (13, 190)}


# Rules 8 and 9: output shapes -----------------------------------------------------------------

def test_output_rows_have_the_documented_fields_in_order() -> None:
    records: list[Record] = [
        HistoricalTolls(0, 1, 0, (5,) * 69),
        *stopped(8, at(3), range(0, 120, 30)), *stopped(9, at(3), range(0, 120, 30)),
        report(0, 1, at(1)), report(130, 1, at(2)),
        AccountBalanceQuery(130, 1, 1), DailyExpenditureQuery(130, 1, 0, 2, 1),
    ]
    out = compute(records)
    fields = {
        "toll_notifications": ["vid", "time", "xway", "dir", "seg", "lav", "toll"],
        "accident_alerts": ["vid", "time", "xway", "dir", "seg"],
        "account_balances": ["qid", "vid", "time", "result_time", "balance"],
        "daily_expenditures": ["qid", "vid", "time", "xway", "day", "expenditure"],
        "toll_assessments": ["vid", "time", "xway", "toll"],
        "segment_statistics": ["xway", "dir", "seg", "minute", "car_count", "avg_speed"],
    }
    for name, keys in fields.items():
        rows = getattr(out, name)
        assert rows and all(list(row) == keys for row in rows), name
        assert rows == sorted(rows, key=lambda row: tuple(row.values())), name
        assert all(type(v) is int for row in rows for k, v in row.items() if k != "avg_speed")
    assert compute([]) == ReferenceOutput([], [], [], [], [], [])


# Rule 10: toll assessments --------------------------------------------------------------------

def test_charges_the_previous_notifications_toll_at_the_next_trigger() -> None:
    records = [
        *crowd(1000, seg=10, minute=1), *crowd(2000, seg=12, minute=2, cars=62),
        report(40, 1, at(9)),                               # toll 0 (minute 1)
        report(70, 1, at(10)),                              # charged 0; toll 200
        report(100, 1, at(10, 3000)),                       # same segment: nothing
        report(130, 1, at(11)),                             # charged 200; toll 0
        report(160, 1, at(12)),                             # charged 0; toll 2*12^2 = 288
        report(190, 1, at(13), lane=EXIT_LANE),             # exit: not charged for 12
        report(220, 1, at(13), lane=ENTRANCE_LANE),         # new trip: no charge; toll 0
        report(250, 1, at(14)),                             # charged 0
        report(280, 1, at(14), xway=2),                     # another xway: no charge
    ]
    out = compute(records)
    assert [n["toll"] for n in by_vid(out.toll_notifications)[1]] == [0, 200, 0, 288, 0, 0, 0]
    assert by_vid(out.toll_assessments)[1] == [
        {"vid": 1, "time": 70, "xway": 0, "toll": 0},
        {"vid": 1, "time": 130, "xway": 0, "toll": 200},
        {"vid": 1, "time": 160, "xway": 0, "toll": 0},
        {"vid": 1, "time": 250, "xway": 0, "toll": 0},
    ]
    assert [out.balance_at(1, t) for t in (0, 129, 130, 159, 160, 10_000)] == [
        0, 0, 200, 200, 200, 200]
    assert out.balance_at(999_999, 10_000) == 0


# Rule 11: account balances --------------------------------------------------------------------

def test_account_balance_at_the_query_second_includes_that_seconds_charges() -> None:
    records: list[Record] = [
        AccountBalanceQuery(130, 1, 3),   # listed first, but reports come before queries
        *crowd(1000, seg=10, minute=1),
        report(70, 1, at(10)), report(130, 1, at(11)), report(160, 1, at(12)),
        AccountBalanceQuery(129, 1, 2), AccountBalanceQuery(10, 7, 1),
        AccountBalanceQuery(400, 1, 4),
    ]
    out = compute(records)
    assert out.account_balances == [
        {"qid": 1, "vid": 7, "time": 10, "result_time": 10, "balance": 0},
        {"qid": 2, "vid": 1, "time": 129, "result_time": 129, "balance": 0},
        {"qid": 3, "vid": 1, "time": 130, "result_time": 130, "balance": 200},
        {"qid": 4, "vid": 1, "time": 400, "result_time": 400, "balance": 200},
    ]
    assert all(row["balance"] == out.balance_at(row["vid"], row["result_time"])
               for row in out.account_balances)


# Rule 12: daily expenditures ------------------------------------------------------------------

def test_daily_expenditure_comes_from_the_historical_row() -> None:
    tolls = tuple(range(10, 10 + 69))
    records: list[Record] = [
        DailyExpenditureQuery(5, 1, 0, 1, 1),          # same second as the row: row first
        HistoricalTolls(5, 1, 0, tolls),
        HistoricalTolls(0, 1, 1, (7,) * 69),
        DailyExpenditureQuery(6, 1, 0, 2, 69),
        DailyExpenditureQuery(6, 1, 1, 3, 3),          # the row of xway 1
        DailyExpenditureQuery(6, 1, 2, 4, 3),          # no row for xway 2: 0
        DailyExpenditureQuery(6, 2, 0, 5, 3),          # no row for car 2: 0
        DailyExpenditureQuery(4, 3, 0, 6, 1),          # car 3's row comes later: 0
        HistoricalTolls(20, 3, 0, tolls),
    ]
    assert [(r["qid"], r["expenditure"]) for r in compute(records).daily_expenditures] == [
        (1, 10), (2, 78), (3, 7), (4, 0), (5, 0), (6, 0)]


# Whole input ----------------------------------------------------------------------------------

def test_shuffled_input_gives_the_same_output() -> None:
    # Only the order of one car's reports within one second could matter; there is none.
    records: list[Record] = [
        HistoricalTolls(0, 1, 0, (3,) * 69), *crowd(1000, seg=10, minute=1),
        report(70, 1, at(10)), report(130, 1, at(11)),
        *stopped(2, at(3), range(0, 150, 30)), *stopped(3, at(3), range(0, 150, 30)),
        report(130, 4, at(2)), AccountBalanceQuery(131, 1, 1),
        DailyExpenditureQuery(131, 1, 0, 2, 4),
    ]
    shuffled = list(records)
    random.Random(5).shuffle(shuffled)
    assert compute(shuffled) == compute(records)


def test_simulated_run_invariants() -> None:
    profile = TrafficProfile(duration_s=300, peak_rate=150, seed=3)
    records = [r for _, rs in TrafficSimulation(profile).run() for r in rs]
    out = compute(records)
    assert out.toll_notifications and out.account_balances
    cars = {(s["xway"], s["dir"], s["seg"], s["minute"]): s["car_count"]
            for s in out.segment_statistics}
    alerts = alerted(out)
    notified = {(n["vid"], n["time"]): n for n in out.toll_notifications}
    for n in out.toll_notifications:
        if n["toll"] > 0:
            count = cars[(n["xway"], n["dir"], n["seg"], minute(n["time"]) - 1)]
            assert n["lav"] < 40 and n["toll"] == 2 * (count - 50) ** 2
            assert (n["vid"], n["time"]) not in alerts
    for (vid, time), seg in alerts.items():
        n = notified[(vid, time)]
        assert 0 <= (seg - n["seg"] if n["dir"] == 0 else n["seg"] - seg) <= 4
    for row in out.account_balances:
        assert row["balance"] == out.balance_at(row["vid"], row["time"])
    assert sum(c["toll"] for c in out.toll_assessments) <= sum(
        n["toll"] for n in out.toll_notifications)
