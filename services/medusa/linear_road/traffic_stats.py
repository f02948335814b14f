"""What a Linear Road input looks like through the benchmark's own rules: its rate over
time, cars per segment-minute, how often and how much the toll rule charges, accidents
per hour and the query mix. The same figures for the project's traffic simulation and
for a file of the benchmark's generator say whether the two are alike
(``medusa linear-road traffic-stats``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from medusa.latency_stats import percentile
from medusa.linear_road.records import (
    AccountBalanceQuery,
    DailyExpenditureQuery,
    LinearRoadRecord,
    PositionReport,
)
from medusa.linear_road.reference import (
    TOLL_MAX_LAV,
    accidents,
    car_steps,
    lav,
    segment_statistics,
    toll,
)


@dataclass
class TrafficStats:
    """Figures of one input, over the minutes it covers (``first_minute`` on: earlier ones
    only warm the rules up, as statistics need the five minutes before)."""

    minutes: int = 0
    reports: int = 0
    rate_per_minute: list[float] = field(default_factory=list)
    """Position reports per second, the mean of each minute."""
    cars: list[int] = field(default_factory=list)
    """Distinct cars of every segment-minute (one direction) that had a report."""
    lav_below_40: int = 0
    """Segment-minutes whose latest average velocity is below 40 mph."""
    tolls: list[int] = field(default_factory=list)
    """The toll of every segment-minute in which the rule charges one."""
    tolled_along: list[int] = field(default_factory=list)
    """Where each of those segment-minutes is: its segment counted along its direction
    (0 where cars of that direction enter the road, 99 where they leave it)."""
    accidents: int = 0
    balance_queries: int = 0
    expenditure_queries: int = 0

    @property
    def segment_minutes(self) -> int:
        return len(self.cars)

    def as_dict(self) -> dict[str, Any]:
        def quantiles(values: list[int]) -> dict[str, float | None]:
            floats = [float(v) for v in values]
            return {"p50": percentile(floats, 0.5), "p90": percentile(floats, 0.9),
                    "max": max(floats, default=None)}

        def ratio(count: int, whole: int) -> float | None:
            return count / whole if whole else None

        hours = self.minutes / 60 if self.minutes else None
        return {
            "minutes": self.minutes, "reports": self.reports,
            "rate_per_s": {"first_minute": self.rate_per_minute[0] if self.rate_per_minute
                           else None,
                           "peak_minute": max(self.rate_per_minute, default=None)},
            "cars_per_segment_minute": quantiles(self.cars),
            "segment_minutes": self.segment_minutes,
            "lav_below_40_share": ratio(self.lav_below_40, self.segment_minutes),
            "tolled_share": ratio(len(self.tolls), self.segment_minutes),
            "toll": quantiles(self.tolls),
            "tolled_near_the_ends_share": ratio(
                sum(1 for d in self.tolled_along if d < 15 or d >= 85), len(self.tolls)),
            "accidents_per_hour": self.accidents / hours if hours else None,
            "balance_query_share": ratio(self.balance_queries, self.reports),
            "expenditure_query_share": ratio(self.expenditure_queries, self.reports),
        }


def traffic_stats(records: Iterable[LinearRoadRecord], first_minute: int = 1) -> TrafficStats:
    """The figures of ``records`` (in time order), counting minutes ``first_minute`` on
    (minutes count from 1, as the benchmark's do)."""
    reports: list[PositionReport] = []
    queries: Counter[type] = Counter()
    per_second: Counter[int] = Counter()
    for record in records:
        if isinstance(record, PositionReport):
            reports.append(record)
            per_second[record.time] += 1
        elif (isinstance(record, AccountBalanceQuery | DailyExpenditureQuery)
              and record.time // 60 + 1 >= first_minute):
            queries[type(record)] += 1
    stats = segment_statistics(reports)
    found = accidents(car_steps(reports))
    result = TrafficStats(balance_queries=queries[AccountBalanceQuery],
                          expenditure_queries=queries[DailyExpenditureQuery])
    last_minute = max((m for (_, _, _, m) in stats), default=0)
    result.minutes = max(0, last_minute - first_minute + 1)
    for m in range(first_minute, last_minute + 1):
        seconds = range((m - 1) * 60, m * 60)
        result.rate_per_minute.append(sum(per_second[s] for s in seconds) / 60)
    result.reports = sum(n for s, n in per_second.items() if s // 60 + 1 >= first_minute)
    for (xway, direction, seg, m), minute_stats in stats.items():
        if m < first_minute:
            continue
        result.cars.append(minute_stats.cars)
        segment = (xway, direction, seg)
        # The toll charged in minute m + 1 rests on minute m's cars and its LAV.
        average = lav(stats, segment, m + 1)
        if average is not None and average < TOLL_MAX_LAV:
            result.lav_below_40 += 1
        charged = toll(stats, found, segment, m + 1)
        if charged:
            result.tolls.append(charged)
            result.tolled_along.append(seg if direction == 0 else 99 - seg)
    result.accidents = sum(1 for accident in found if accident.detected >= first_minute)
    return result
