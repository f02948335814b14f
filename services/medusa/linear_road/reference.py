"""An independent, pure-Python reference for the Linear Road semantics in SEMANTICS.md.

It computes the four compared output streams from position reports alone, one small
function per numbered rule, so that the Spark query network's output can be checked
against it record for record (as multisets, without `emit_time`).

Readings of SEMANTICS.md chosen where it leaves room (the most literal one each time):
- Rules 1, 3, 8, 9 use the report's own `seg` field ("r's seg", "the report r's fields");
  rule 5 computes the accident's segment as `pos // 5280`, as it says. The two agree on
  valid input, where `seg == pos // 5280`.
- Rule 2: the LAV is the plain mean of the existing per-minute `avg_speed` values of
  minutes m-5 .. m-1 (not weighted by report counts), summed in minute order.
- Rule 3 looks for reports at exactly `time - 90/60/30`; speed plays no part.
- Rules 6, 7 and 10: an accident zone covers segments of the accident's own xway and dir.
- Rules 7 and 9: without a segment-statistics row for m-1 there is no toll row, so the
  notification carries toll 0 and lav 0 even where LAV(m) exists.
- Rule 8: with more than one report of a vid at `time - 30` on the xway (not produced by
  the simulation), a report is new-segment unless one of them has the same seg and dir.
- Rules 4 and 10 deduplicate: one dispatch per run, one alert per accident segment. Every
  other output is one record per qualifying report (a duplicated report counts twice).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from medusa.linear_road.records import (
    EXIT_LANE,
    FEET_PER_SEGMENT,
    SEGMENTS,
    LinearRoadRecord,
    PositionReport,
)

REPORT_INTERVAL_S = 30
ZONE_SEGMENTS = 4
TOLL_MAX_LAV = 40
TOLL_MIN_CARS = 50

SegmentKey = tuple[int, int, int]  # (xway, dir, seg)
SegmentMinute = tuple[int, int, int, int]  # (xway, dir, seg, minute)


@dataclass
class ReferenceOutput:
    segment_statistics: list[dict[str, Any]]  # {xway, dir, seg, minute, car_count, avg_speed}
    toll_notifications: list[dict[str, Any]]  # {vid, time, xway, seg, dir, lav, toll}
    accident_alerts: list[dict[str, Any]]  # {vid, time, xway, dir, seg}
    tow_truck_dispatches: list[dict[str, Any]]  # {vid, time, xway, dir, lane, seg, pos}


@dataclass(frozen=True)
class SegmentStatistics:
    car_count: int
    avg_speed: float


@dataclass(frozen=True)
class Accident:
    xway: int
    dir: int
    seg: int
    minute: int


def minute(time: int) -> int:
    """Time section: the simulation minute of a report second (minute 1 is 0..59)."""
    return time // 60 + 1


def _place(report: PositionReport) -> tuple[int, int, int, int]:
    return (report.xway, report.dir, report.lane, report.pos)


# Rule 1 -------------------------------------------------------------------------------------

def segment_statistics(reports: Iterable[PositionReport]) -> dict[SegmentMinute, SegmentStatistics]:
    """Rule 1: distinct vids and mean speed per (xway, dir, seg, minute), every lane."""
    vids: dict[SegmentMinute, set[int]] = defaultdict(set)
    speeds: dict[SegmentMinute, list[int]] = defaultdict(list)
    for r in reports:
        key = (r.xway, r.dir, r.seg, minute(r.time))
        vids[key].add(r.vid)
        speeds[key].append(r.speed)
    return {key: SegmentStatistics(len(vids[key]), sum(s) / len(s)) for key, s in speeds.items()}


# Rule 2 -------------------------------------------------------------------------------------

def latest_average_velocity(stats: dict[SegmentMinute, SegmentStatistics],
                            segment: SegmentKey, m: int) -> float | None:
    """Rule 2: mean avg_speed of the segment's rows of minutes m-5..m-1; None without rows."""
    xway, direction, seg = segment
    speeds = [row.avg_speed for prev in range(m - 5, m)
              if (row := stats.get((xway, direction, seg, prev))) is not None]
    return sum(speeds) / len(speeds) if speeds else None


# Rule 3 -------------------------------------------------------------------------------------

def stop_events(reports: list[PositionReport]) -> list[PositionReport]:
    """Rule 3: reports with identical (xway, dir, lane, pos) reports at -90, -60, -30 s."""
    seen = {(r.vid, r.time, *_place(r)) for r in reports}
    return [r for r in reports
            if all((r.vid, r.time - back, *_place(r)) in seen for back in (30, 60, 90))]


# Rule 4 -------------------------------------------------------------------------------------

def tow_truck_dispatches(stops: list[PositionReport]) -> list[dict[str, Any]]:
    """Rule 4: one dispatch per run of stop events 30 s apart: the run's first stop event."""
    stopped = {(s.vid, s.time, *_place(s)) for s in stops}
    dispatches = {
        (s.vid, s.time, s.xway, s.dir, s.lane, s.seg, s.pos) for s in stops
        if (s.vid, s.time - REPORT_INTERVAL_S, *_place(s)) not in stopped
    }
    fields = ("vid", "time", "xway", "dir", "lane", "seg", "pos")
    return [dict(zip(fields, row, strict=True)) for row in dispatches]


# Rule 5 -------------------------------------------------------------------------------------

def accidents(stops: list[PositionReport]) -> set[Accident]:
    """Rule 5: 2+ distinct vids stopped at one (xway, dir, lane, pos) in one 30 s slot."""
    vids: dict[tuple[int, int, int, int, int], set[int]] = defaultdict(set)
    for s in stops:
        vids[(*_place(s), s.time // REPORT_INTERVAL_S)].add(s.vid)
    return {
        Accident(xway, direction, pos // FEET_PER_SEGMENT, minute(slot * REPORT_INTERVAL_S))
        for (xway, direction, _lane, pos, slot), cars in vids.items() if len(cars) >= 2
    }


# Rule 6 -------------------------------------------------------------------------------------

def accident_zones(found: Iterable[Accident]) -> dict[SegmentMinute, set[int]]:
    """Rule 6: (xway, dir, seg, m+1) upstream of each accident -> the accidents' segments."""
    zones: dict[SegmentMinute, set[int]] = defaultdict(set)
    for a in found:
        upstream = (range(a.seg - ZONE_SEGMENTS, a.seg + 1) if a.dir == 0
                    else range(a.seg, a.seg + ZONE_SEGMENTS + 1))
        for seg in upstream:
            if 0 <= seg < SEGMENTS:
                zones[(a.xway, a.dir, seg, a.minute + 1)].add(a.seg)
    return dict(zones)


# Rule 7 -------------------------------------------------------------------------------------

def segment_toll(stats: dict[SegmentMinute, SegmentStatistics],
                 zones: dict[SegmentMinute, set[int]], segment: SegmentKey, m: int) -> int:
    """Rule 7: 2*(cars-50)^2 if m >= 2, LAV(m) < 40, cars(m-1) > 50 and no zone; else 0."""
    if m < 2 or (*segment, m) in zones:
        return 0
    lav = latest_average_velocity(stats, segment, m)
    row = stats.get((*segment, m - 1))
    cars = row.car_count if row is not None else 0
    if lav is not None and lav < TOLL_MAX_LAV and cars > TOLL_MIN_CARS:
        return 2 * (cars - TOLL_MIN_CARS) ** 2
    return 0


# Rule 8 -------------------------------------------------------------------------------------

def new_segment_reports(reports: list[PositionReport]) -> list[PositionReport]:
    """Rule 8: off the exit lane, and no report at -30 s on the xway with the same seg and dir."""
    where: dict[tuple[int, int, int], set[tuple[int, int]]] = defaultdict(set)
    for r in reports:
        where[(r.vid, r.time, r.xway)].add((r.seg, r.dir))
    return [r for r in reports if r.lane != EXIT_LANE
            and (r.seg, r.dir) not in where.get((r.vid, r.time - REPORT_INTERVAL_S, r.xway), ())]


# Rule 9 -------------------------------------------------------------------------------------

def toll_notifications(new_reports: list[PositionReport],
                       stats: dict[SegmentMinute, SegmentStatistics],
                       zones: dict[SegmentMinute, set[int]]) -> list[dict[str, Any]]:
    """Rule 9: per new-segment report, the toll row's toll and int(LAV), or zeros."""
    notifications = []
    for r in new_reports:
        segment, m = (r.xway, r.dir, r.seg), minute(r.time)
        lav = latest_average_velocity(stats, segment, m)
        has_toll_row = lav is not None and (*segment, m - 1) in stats
        notifications.append({
            "vid": r.vid, "time": r.time, "xway": r.xway, "seg": r.seg, "dir": r.dir,
            "lav": int(lav) if has_toll_row and lav is not None else 0,
            "toll": segment_toll(stats, zones, segment, m),
        })
    return notifications


# Rule 10 ------------------------------------------------------------------------------------

def accident_alerts(new_reports: list[PositionReport],
                    zones: dict[SegmentMinute, set[int]]) -> list[dict[str, Any]]:
    """Rule 10: per new-segment report in a zone, one alert per accident segment."""
    return [{"vid": r.vid, "time": r.time, "xway": r.xway, "dir": r.dir, "seg": accident_seg}
            for r in new_reports
            for accident_seg in sorted(zones.get((r.xway, r.dir, r.seg, minute(r.time)), ()))]


# All rules ----------------------------------------------------------------------------------

def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda row: tuple(row.values()))


def compute(records: Iterable[LinearRoadRecord]) -> ReferenceOutput:
    """All rules: the four output streams of the position reports among `records`."""
    reports = [r for r in records if isinstance(r, PositionReport)]
    stats = segment_statistics(reports)
    stops = stop_events(reports)
    zones = accident_zones(accidents(stops))
    new_reports = new_segment_reports(reports)
    statistics_rows = [
        {"xway": xway, "dir": direction, "seg": seg, "minute": m,
         "car_count": row.car_count, "avg_speed": row.avg_speed}
        for (xway, direction, seg, m), row in stats.items()
    ]
    return ReferenceOutput(
        segment_statistics=_sorted(statistics_rows),
        toll_notifications=_sorted(toll_notifications(new_reports, stats, zones)),
        accident_alerts=_sorted(accident_alerts(new_reports, zones)),
        tow_truck_dispatches=_sorted(tow_truck_dispatches(stops)),
    )
