"""The pure-Python Linear Road reference (medusa.linear_road.reference) against SEMANTICS.md.

Small hand-written scenarios check one rule each with exact expected output; a simulated
run checks invariants that tie the outputs together.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest

from medusa.linear_road import reference
from medusa.linear_road.records import (
    EXIT_LANE,
    FEET_PER_SEGMENT,
    AccountBalanceQuery,
    LinearRoadRecord,
    PositionReport,
)
from medusa.linear_road.reference import ReferenceOutput, compute
from medusa.linear_road.traffic import TrafficProfile, TrafficSimulation

pytestmark = pytest.mark.unit


def report(time: int, vid: int, pos: int, *, speed: int = 50, xway: int = 0, lane: int = 1,
           direction: int = 0) -> PositionReport:
    return PositionReport(time, vid, speed, xway, lane, direction, pos // FEET_PER_SEGMENT, pos)


def at(seg: int, offset: int = 100) -> int:
    """A position `offset` feet into segment `seg`."""
    return seg * FEET_PER_SEGMENT + offset


def crowd(first_vid: int, seg: int, minute: int, cars: int = 60, speed: int = 10,
          direction: int = 0) -> list[PositionReport]:
    """`cars` distinct cars, one report each, spread over the seconds of `minute`."""
    return [report((minute - 1) * 60 + i % 60, first_vid + i, at(seg, 10 + i), speed=speed,
                   direction=direction) for i in range(cars)]


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


# Rule 1: segment statistics -----------------------------------------------------------------

def test_segment_statistics_count_distinct_cars_and_average_all_reports() -> None:
    records: list[LinearRoadRecord] = [
        report(60, 1, at(3), speed=55),                 # minute 2, a new segment
        report(0, 1, at(2), speed=40),
        report(30, 1, at(2, 540), speed=60),            # car 1 again in minute 1: counted once
        report(10, 2, at(2, 50), speed=20),
        report(59, 3, at(2, 10), speed=35, lane=EXIT_LANE),  # the exit lane counts
        report(20, 4, at(2), speed=70, direction=1),    # the other direction: its own row
        report(0, 5, at(2), speed=10, xway=1),          # another expressway: its own row
        AccountBalanceQuery(5, 1, 77),                  # queries are ignored
    ]
    assert compute(records).segment_statistics == [
        {"xway": 0, "dir": 0, "seg": 2, "minute": 1, "car_count": 3, "avg_speed": 38.75},
        {"xway": 0, "dir": 0, "seg": 3, "minute": 2, "car_count": 1, "avg_speed": 55.0},
        {"xway": 0, "dir": 1, "seg": 2, "minute": 1, "car_count": 1, "avg_speed": 70.0},
        {"xway": 1, "dir": 0, "seg": 2, "minute": 1, "car_count": 1, "avg_speed": 10.0},
    ]


def test_segment_statistics_types() -> None:
    rows = compute([report(0, 1, at(0), speed=40), report(1, 2, at(0), speed=42)])
    [row] = rows.segment_statistics
    assert row["avg_speed"] == 41.0
    assert type(row["avg_speed"]) is float
    assert all(type(row[k]) is int for k in ("xway", "dir", "seg", "minute", "car_count"))


def test_minute_boundaries() -> None:
    out = compute([report(59, 1, at(0)), report(60, 2, at(0)), report(119, 3, at(0)),
                   report(120, 4, at(0))])
    assert [(r["minute"], r["car_count"]) for r in out.segment_statistics] == [
        (1, 1), (2, 2), (3, 1)]


# Rule 2 and 9: LAV --------------------------------------------------------------------------

def test_lav_averages_minutes_m_minus_5_to_m_minus_1_skipping_missing_ones() -> None:
    seg = 3
    records = [
        report(0, 10, at(seg), speed=30),    # minute 1: avg 30
        report(60, 11, at(seg), speed=50),   # minute 2: avg 50
        report(180, 12, at(seg), speed=41),  # minute 4: avg 41 (minute 3 has no row)
        report(240, 30, at(seg), speed=99, direction=1),  # other direction: never counts
        report(300, 20, at(seg), speed=21),  # minute 6: LAV over 1..5 = (30+50+41)/3
        report(360, 21, at(seg), speed=21),  # minute 7: LAV over 2..6 = (50+41+21)/3
        report(720, 22, at(seg), speed=21),  # minute 13: no row in 8..12, no LAV
    ]
    lav = {n["vid"]: n["lav"] for n in compute(records).toll_notifications}
    assert lav == {
        10: 0,   # minute 1: never a LAV
        11: 30,  # minute 2: minute 1 only
        12: 0,   # minute 4: LAV (30 + 50) / 2, but no row for minute 3: no toll row
        30: 0,   # minute 5 of direction 1: no rows there
        20: 0,   # minute 6: LAV 121 / 3, but no row for minute 5: no toll row
        21: 37,  # 112 / 3 = 37.33, truncated
        22: 0,
    }
    assert all(type(v) is int for v in lav.values())
    stats = {(r.xway, r.dir, r.seg, r.minute): r for r in map(
        lambda row: SimpleNamespace(**row), compute(records).segment_statistics)}
    assert reference.latest_average_velocity(stats, (0, 0, seg), 4) == 40.0
    assert reference.latest_average_velocity(stats, (0, 0, seg), 6) == 121 / 3


# Rule 7 and 9: tolls ------------------------------------------------------------------------

def test_toll_needs_more_than_50_cars_in_the_previous_minute_and_lav_below_40() -> None:
    records = [
        *crowd(1000, seg=10, minute=1),                        # 60 cars at 10 mph
        *crowd(2000, seg=20, minute=1, cars=50),               # exactly 50 cars
        *crowd(3000, seg=30, minute=1, speed=40),              # LAV exactly 40
        *crowd(4000, seg=40, minute=1, cars=30, speed=39),
        *crowd(4100, seg=40, minute=1, cars=30, speed=40),     # with the above: LAV 39.5
        report(60, 1, at(10, 5000), speed=10),
        report(60, 2, at(20, 5000), speed=10),
        report(60, 3, at(30, 5000), speed=10),
        report(60, 4, at(40, 5000), speed=10),
        report(120, 5, at(10, 5000), speed=10),  # minute 3: minute 2 had only car 1 there
    ]
    notes = by_vid(compute(records).toll_notifications)
    assert notes[1] == [{"vid": 1, "time": 60, "xway": 0, "seg": 10, "dir": 0, "lav": 10,
                         "toll": 200}]
    assert notes[2] == [{"vid": 2, "time": 60, "xway": 0, "seg": 20, "dir": 0, "lav": 10,
                         "toll": 0}]
    assert notes[3] == [{"vid": 3, "time": 60, "xway": 0, "seg": 30, "dir": 0, "lav": 40,
                         "toll": 0}]
    assert notes[4] == [{"vid": 4, "time": 60, "xway": 0, "seg": 40, "dir": 0, "lav": 39,
                         "toll": 200}]
    assert notes[5] == [{"vid": 5, "time": 120, "xway": 0, "seg": 10, "dir": 0, "lav": 10,
                         "toll": 0}]
    # Minute 1 never has a toll nor a LAV.
    assert notes[1000] == [{"vid": 1000, "time": 0, "xway": 0, "seg": 10, "dir": 0, "lav": 0,
                            "toll": 0}]


def test_toll_grows_with_the_square_of_the_excess() -> None:
    records = [*crowd(1000, seg=10, minute=4, cars=73, speed=20),
               report(180 + 59, 1, at(10, 5000), speed=20),  # 74 cars in minute 4
               report(240, 2, at(10, 5000), speed=20)]
    [note] = by_vid(compute(records).toll_notifications)[2]
    assert (note["lav"], note["toll"]) == (20, 2 * 24 * 24)


@pytest.mark.parametrize(("direction", "segs"), [
    # [last zone segment, accident segment, just upstream of the zone, just downstream]
    (0, [46, 50, 45, 51]),
    (1, [54, 50, 55, 49]),
])
def test_accident_zone_zeroes_the_toll_in_the_next_minute_only(
        direction: int, segs: list[int]) -> None:
    # Cars 1 and 2 stop together in segment 50: stop events at t=90, an accident in minute 2,
    # so a zone in minute 3 (segments 46..50 in direction 0, 50..54 in direction 1).
    records = [*stopped(1, at(50, 200), range(0, 120, 30), direction=direction),
               *stopped(2, at(50, 200), range(0, 120, 30), direction=direction)]
    observers: dict[tuple[int, int], int] = {}  # (seg, minute) -> vid
    vid = 10_000
    for seg in segs:
        for minute in (1, 2, 3):
            records += crowd(vid, seg, minute, direction=direction)
            vid += 100
        for minute in (2, 3, 4):
            observers[(seg, minute)] = vid
            records.append(report((minute - 1) * 60 + 5, vid, at(seg, 5000), speed=10,
                                  direction=direction))
            vid += 1
    out = compute(records)
    tolls = {v: n["toll"] for v, [n] in by_vid(out.toll_notifications).items()}
    expected = {
        # cars(1) = 60 crowd, + the 2 stopped cars in the accident segment
        2: [200, 288, 200, 200],
        # cars(2) = 60 crowd + the minute-2 observer (+ 2 stopped cars): zoned segments 0
        3: [0, 0, 242, 242],
        # cars(3) = 60 crowd + the minute-3 observer; the zone has expired
        4: [242, 242, 242, 242],
    }
    for minute, row in expected.items():
        assert [tolls[observers[(seg, minute)]] for seg in segs] == row, f"minute {minute}"
    alerts = by_vid(out.accident_alerts)
    for seg in segs[:2]:
        vid = observers[(seg, 3)]
        assert alerts[vid] == [{"vid": vid, "time": 125, "xway": 0, "dir": direction,
                                "seg": 50}]
    # The minute-3 crowds of both zoned segments are alerted as well, nobody else.
    assert len(out.accident_alerts) == 2 * 60 + 2


# Rules 3 and 4: stopped cars and tow-truck dispatches ---------------------------------------

def test_tow_truck_dispatched_once_per_stop_at_the_fourth_identical_report() -> None:
    records = [
        *stopped(1, at(5, 1), range(0, 90, 30)),    # three identical reports: not stopped
        *stopped(2, at(5, 2), range(0, 120, 30)),   # four: dispatch at t=90
        *stopped(3, at(5, 3), range(0, 180, 30)),   # six: still one dispatch, at t=90
        *stopped(4, at(5, 4), [0, 30, 60]),
        *stopped(4, at(5, 4), [90], lane=3),        # the lane differs: not identical
        *stopped(5, at(6, 5), [0, 30, 60, 120]),    # no report at t=90: not stopped
        *stopped(6, at(7, 6), range(0, 120, 30)),   # stops, moves on, stops again:
        *stopped(6, at(8, 6), range(120, 240, 30), lane=1),  # two dispatches
        *stopped(7, at(9, 7), range(15, 135, 30), xway=2, direction=1),  # another phase
    ]
    assert compute(records).tow_truck_dispatches == [
        {"vid": 2, "time": 90, "xway": 0, "dir": 0, "lane": 2, "seg": 5, "pos": at(5, 2)},
        {"vid": 3, "time": 90, "xway": 0, "dir": 0, "lane": 2, "seg": 5, "pos": at(5, 3)},
        {"vid": 6, "time": 90, "xway": 0, "dir": 0, "lane": 2, "seg": 7, "pos": at(7, 6)},
        {"vid": 6, "time": 210, "xway": 0, "dir": 0, "lane": 1, "seg": 8, "pos": at(8, 6)},
        {"vid": 7, "time": 105, "xway": 2, "dir": 1, "lane": 2, "seg": 9, "pos": at(9, 7)},
    ]


def test_a_stop_needs_the_same_position_not_zero_speed() -> None:
    records = [report(t, 1, at(5), speed=t // 30) for t in range(0, 120, 30)]
    [dispatch] = compute(records).tow_truck_dispatches
    assert dispatch["time"] == 90


# Rules 5, 6 and 10: accidents and accident alerts -------------------------------------------

def test_accident_needs_two_cars_stopped_at_one_place_in_one_slot() -> None:
    place = at(10, 300)
    records = [
        # xway 0: two cars with different report phases; stop events at t=90 and t=95 share
        # slot 3 (minute 2): an accident.
        *stopped(1, place, range(0, 120, 30)),
        *stopped(2, place, range(5, 125, 30)),
        # xway 1: same position, different lanes: no accident.
        *stopped(3, place, range(0, 120, 30), xway=1, lane=1),
        *stopped(4, place, range(0, 120, 30), xway=1, lane=2),
        # xway 2: stop events at t=115 (slot 3) and t=125 (slot 4): no accident.
        *stopped(5, place, range(25, 145, 30), xway=2),
        *stopped(6, place, range(35, 155, 30), xway=2),
        # xway 3: one car stopped for long: no accident.
        *stopped(7, place, range(0, 600, 30), xway=3),
    ]
    for xway in range(4):  # observers entering segment 9 in minutes 2, 3 (both ends) and 4
        for vid, time in ((100, 119), (101, 120), (102, 179), (103, 180)):
            records.append(report(time, vid + 10 * xway, at(9), xway=xway))
    assert compute(records).accident_alerts == [
        {"vid": 101, "time": 120, "xway": 0, "dir": 0, "seg": 10},
        {"vid": 102, "time": 179, "xway": 0, "dir": 0, "seg": 10},
    ]


def test_one_alert_per_accident_segment() -> None:
    records = [
        *stopped(1, at(10, 100), range(0, 120, 30), lane=1),  # accident in segment 10
        *stopped(2, at(10, 100), range(0, 120, 30), lane=1),
        *stopped(3, at(10, 900), range(0, 120, 30), lane=3),  # another in segment 10
        *stopped(4, at(10, 900), range(0, 120, 30), lane=3),
        *stopped(5, at(12, 100), range(0, 120, 30)),          # one in segment 12
        *stopped(6, at(12, 100), range(0, 120, 30)),
        report(130, 20, at(9)),                      # zones of 10 (6..10) and 12 (8..12)
        report(130, 21, at(11)),                     # zone of 12 only
        report(130, 22, at(13)),                     # downstream of both
        report(130, 23, at(5)),                      # upstream of both zones
        report(130, 24, at(10), direction=1),        # the other direction
        report(130, 25, at(9), xway=1),              # another expressway
        report(100, 26, at(11)),                     # a new segment in minute 2
        report(130, 26, at(11)),                     # still segment 11: no new segment
    ]
    assert compute(records).accident_alerts == [
        {"vid": 20, "time": 130, "xway": 0, "dir": 0, "seg": 10},
        {"vid": 20, "time": 130, "xway": 0, "dir": 0, "seg": 12},
        {"vid": 21, "time": 130, "xway": 0, "dir": 0, "seg": 12},
    ]


def test_accident_zone_is_clipped_to_the_road() -> None:
    records = [*stopped(1, at(1), range(0, 120, 30)), *stopped(2, at(1), range(0, 120, 30)),
               *stopped(3, at(98), range(0, 120, 30), direction=1),
               *stopped(4, at(98), range(0, 120, 30), direction=1),
               report(130, 10, at(0)), report(130, 11, at(99), direction=1)]
    assert [(a["vid"], a["seg"]) for a in compute(records).accident_alerts] == [(10, 1), (11, 98)]


# Rules 8 and 9: new-segment reports and toll notifications ----------------------------------

def test_new_segment_reports() -> None:
    records = [
        report(0, 1, at(5), lane=0),            # first report: new
        report(30, 1, at(5, 600)),              # same segment: nothing
        report(60, 1, at(6)),                   # next segment: new
        report(90, 1, at(7), lane=EXIT_LANE),   # exit lane: nothing
        report(0, 2, at(5)),                    # new
        report(60, 2, at(5, 200)),              # no report at t-30: new
        report(0, 3, at(5)),                    # new
        report(30, 3, at(5), direction=1),      # same segment, other direction: new
        report(0, 4, at(5)),                    # new
        report(30, 4, at(5), xway=1),           # the report at t-30 is on another xway: new
        report(0, 5, at(5), lane=EXIT_LANE),    # exit lane: nothing
    ]

    def note(vid: int, time: int, seg: int, *, xway: int = 0, direction: int = 0,
             lav: int = 0) -> dict[str, Any]:
        return {"vid": vid, "time": time, "xway": xway, "seg": seg, "dir": direction,
                "lav": lav, "toll": 0}

    assert compute(records).toll_notifications == [
        note(1, 0, 5), note(1, 60, 6),
        note(2, 0, 5), note(2, 60, 5, lav=50),  # minute-1 average speed of segment 5 is 50
        note(3, 0, 5), note(3, 30, 5, direction=1),
        note(4, 0, 5), note(4, 30, 5, xway=1),
    ]


def test_only_position_reports_matter_and_input_order_does_not() -> None:
    records = [*crowd(1000, seg=10, minute=1), report(60, 1, at(10, 5000), speed=10),
               *stopped(2, at(3), range(0, 150, 30)), *stopped(3, at(3), range(0, 150, 30)),
               report(130, 4, at(2))]
    with_queries: list[LinearRoadRecord] = [*records, AccountBalanceQuery(3, 1, 1),
                                            AccountBalanceQuery(70, 4, 2)]
    out = compute(records)
    assert compute(reversed(with_queries)) == out
    assert compute([]) == ReferenceOutput([], [], [], [])


# A simulated run: invariants ----------------------------------------------------------------

@pytest.fixture(scope="module")
def simulated() -> tuple[list[LinearRoadRecord], ReferenceOutput]:
    profile = TrafficProfile(duration_s=600, peak_rate=400, breakdown_probability=0.002,
                             accident_probability=0.3, seed=11)
    records = [r for _, rs in TrafficSimulation(profile).run() for r in rs]
    return records, compute(records)


def test_simulation_outputs_are_non_trivial(
        simulated: tuple[list[LinearRoadRecord], ReferenceOutput]) -> None:
    records, out = simulated
    assert any(not isinstance(r, PositionReport) for r in records)
    assert len(records) > 100_000
    assert sum(1 for n in out.toll_notifications if n["toll"] > 0) > 10
    assert len(out.accident_alerts) > 10
    assert len(out.tow_truck_dispatches) > 10


def test_simulation_is_deterministic_and_order_independent(
        simulated: tuple[list[LinearRoadRecord], ReferenceOutput]) -> None:
    records, out = simulated
    assert compute(records) == out
    assert compute(list(reversed(records))) == out


def test_simulation_toll_notifications_are_exactly_the_new_segment_reports(
        simulated: tuple[list[LinearRoadRecord], ReferenceOutput]) -> None:
    records, out = simulated
    reports = {(r.vid, r.time): r for r in records if isinstance(r, PositionReport)}
    expected = []
    for r in reports.values():
        before = reports.get((r.vid, r.time - 30))
        moved = before is None or (before.xway, before.seg, before.dir) != (r.xway, r.seg, r.dir)
        if r.lane != EXIT_LANE and moved:
            expected.append((r.vid, r.time, r.xway, r.seg, r.dir))
    got = [(n["vid"], n["time"], n["xway"], n["seg"], n["dir"]) for n in out.toll_notifications]
    assert sorted(got) == sorted(expected)


def test_simulation_tolls_only_for_slow_crowded_segments_outside_accident_zones(
        simulated: tuple[list[LinearRoadRecord], ReferenceOutput]) -> None:
    _, out = simulated
    cars = {(s["xway"], s["dir"], s["seg"], s["minute"]): s["car_count"]
            for s in out.segment_statistics}
    alerted = {(a["vid"], a["time"]) for a in out.accident_alerts}
    for n in out.toll_notifications:
        assert n["toll"] >= 0 and n["lav"] >= 0
        if n["toll"] > 0:
            count = cars[(n["xway"], n["dir"], n["seg"], n["time"] // 60)]  # previous minute
            assert n["lav"] < 40 and count > 50
            assert n["toll"] == 2 * (count - 50) ** 2
            assert (n["vid"], n["time"]) not in alerted
        if n["time"] < 60:
            assert (n["lav"], n["toll"]) == (0, 0)


def test_simulation_dispatches_and_alerts_match_the_stopped_cars(
        simulated: tuple[list[LinearRoadRecord], ReferenceOutput]) -> None:
    records, out = simulated
    # Runs of consecutive identical reports per car, found by walking its reports in order;
    # a run of four or more gets one dispatch, at its fourth report. (A breakdown often
    # starts at the car's last moving report: stopping does not move it.)
    history: dict[int, list[PositionReport]] = defaultdict(list)
    for r in records:
        if isinstance(r, PositionReport):
            history[r.vid].append(r)
    expected = []
    for reports in history.values():
        run: list[PositionReport] = []
        for r in sorted(reports, key=lambda r: r.time):
            if not (run and r.time - run[-1].time == 30
                    and (r.xway, r.dir, r.lane, r.pos) == (run[-1].xway, run[-1].dir,
                                                           run[-1].lane, run[-1].pos)):
                run = []
            run.append(r)
            if len(run) == 4:
                expected.append((r.vid, r.time, r.xway, r.dir, r.lane, r.seg, r.pos))
    got = [tuple(d.values()) for d in out.tow_truck_dispatches]
    assert got == sorted(expected)
    # Every car with four reports at speed 0 (stopped in the simulation) got a tow truck.
    stopped_vids = {vid for vid, rs in history.items() if sum(r.speed == 0 for r in rs) >= 4}
    assert stopped_vids and stopped_vids <= {vid for vid, *_ in got}
    notified = {(n["vid"], n["time"]): n for n in out.toll_notifications}
    for a in out.accident_alerts:
        n = notified[(a["vid"], a["time"])]
        assert (n["xway"], n["dir"]) == (a["xway"], a["dir"])
        ahead = a["seg"] - n["seg"] if a["dir"] == 0 else n["seg"] - a["seg"]
        assert 0 <= ahead <= 4
        assert n["toll"] == 0


def test_simulation_segment_statistics_are_sane(
        simulated: tuple[list[LinearRoadRecord], ReferenceOutput]) -> None:
    records, out = simulated
    reports = [r for r in records if isinstance(r, PositionReport)]
    assert len(out.segment_statistics) == len(
        {(r.xway, r.dir, r.seg, r.time // 60 + 1) for r in reports})
    for s in out.segment_statistics:
        assert s["car_count"] >= 1 and 0.0 <= s["avg_speed"] <= 100.0
