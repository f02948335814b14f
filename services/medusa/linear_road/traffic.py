"""A Linear Road traffic simulation in the spirit of the benchmark's generator.

Each expressway has cars that enter on the entrance ramp, drive at a speed that
falls as their segment fills up, and leave on the exit ramp; every car reports
every 30 seconds. The number of cars ramps up linearly to the peak over the run,
as the benchmark's input rate does (about 1,700 reports/s per expressway at the
end). Some cars break down (identical reports until towed) and some breakdowns
are accidents (two cars stopped at the same position). About 1% of reports come
with a historical query.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from medusa.linear_road.records import (
    ENTRANCE_LANE,
    EXIT_LANE,
    FEET_PER_SEGMENT,
    SEGMENTS,
    AccountBalanceQuery,
    DailyExpenditureQuery,
    LinearRoadRecord,
    PositionReport,
    TravelTimeQuery,
)

REPORT_INTERVAL_S = 30
PEAK_REPORTS_PER_S_PER_XWAY = 1700


@dataclass
class TrafficProfile:
    xways: int = 1
    duration_s: int = 600
    """Simulated seconds."""
    peak_rate: float = PEAK_REPORTS_PER_S_PER_XWAY
    """Position reports per second per expressway at the end of the ramp."""
    start_rate: float = 15.0
    ramp_s: int | None = None
    """Seconds to reach the peak; the whole run by default."""
    breakdown_probability: float = 0.0005
    accident_probability: float = 0.3
    """Chance that a breakdown is an accident (a second car stops at the same spot)."""
    stopped_reports: tuple[int, int] = (4, 10)
    query_probability: float = 0.01
    seed: int = 7


@dataclass
class _Car:
    vid: int
    xway: int
    direction: int
    pos: int
    lane: int
    speed: int
    base_speed: int
    exit_seg: int
    phase: int
    stopped_for: int = 0
    """Reports left to stay stopped; >0 means broken down."""
    leaving: bool = False

    @property
    def seg(self) -> int:
        return self.pos // FEET_PER_SEGMENT


class TrafficSimulation:
    def __init__(self, profile: TrafficProfile) -> None:
        self.profile = profile
        self._random = random.Random(profile.seed)
        self._cars: list[_Car] = []
        self._next_vid = 100
        self._next_qid = 1
        self._segment_load: Counter[tuple[int, int, int]] = Counter()

    def target_rate(self, t: int) -> float:
        profile = self.profile
        ramp = profile.ramp_s or profile.duration_s
        share = min(1.0, t / ramp) if ramp > 0 else 1.0
        return profile.start_rate + (profile.peak_rate - profile.start_rate) * share

    def run(self) -> Iterator[tuple[int, list[LinearRoadRecord]]]:
        """(second, records of that second) for every simulated second."""
        for t in range(self.profile.duration_s):
            yield t, self.tick(t)

    def tick(self, t: int) -> list[LinearRoadRecord]:
        self._spawn(t)
        reporting = [car for car in self._cars if car.phase == t % REPORT_INTERVAL_S]
        load = Counter((car.xway, car.direction, car.seg) for car in self._cars)
        records: list[LinearRoadRecord] = []
        gone: set[int] = set()
        for car in reporting:
            self._advance(car, load)
            records.append(PositionReport(t, car.vid, car.speed, car.xway, car.lane,
                                          car.direction, car.seg, car.pos))
            query = self._maybe_query(t, car)
            if query is not None:
                records.append(query)
            if car.leaving or (car.stopped_for == 0 and car.speed == 0):
                gone.add(car.vid)
        if gone:
            self._cars = [car for car in self._cars if car.vid not in gone]
        return records

    def _spawn(self, t: int) -> None:
        wanted_per_xway = int(self.target_rate(t) * REPORT_INTERVAL_S)
        per_xway = Counter(car.xway for car in self._cars)
        for xway in range(self.profile.xways):
            # Spread entries over the report phases so the rate is smooth.
            missing = wanted_per_xway - per_xway[xway]
            for _ in range(max(0, min(missing, wanted_per_xway // REPORT_INTERVAL_S + 1))):
                self._cars.append(self._new_car(t, xway))

    def _new_car(self, t: int, xway: int) -> _Car:
        rnd = self._random
        direction = rnd.randrange(2)
        entry_seg = rnd.randrange(SEGMENTS - 1)
        trip = rnd.randint(1, 30)
        if direction == 0:
            exit_seg = min(SEGMENTS - 1, entry_seg + trip)
            pos = entry_seg * FEET_PER_SEGMENT + rnd.randrange(FEET_PER_SEGMENT // 2)
        else:
            exit_seg = max(0, entry_seg - trip)
            pos = entry_seg * FEET_PER_SEGMENT + FEET_PER_SEGMENT // 2 + rnd.randrange(
                FEET_PER_SEGMENT // 2)
        base_speed = rnd.randint(45, 80)
        self._next_vid += 1
        return _Car(vid=self._next_vid, xway=xway, direction=direction, pos=pos,
                    lane=ENTRANCE_LANE, speed=base_speed, base_speed=base_speed,
                    exit_seg=exit_seg, phase=t % REPORT_INTERVAL_S, stopped_for=-1)

    def _advance(self, car: _Car, load: Counter[tuple[int, int, int]]) -> None:
        """Move the car to its position at this report."""
        rnd = self._random
        if car.stopped_for == -1:  # first report: on the entrance ramp where it entered
            car.stopped_for = 0
            return
        if car.stopped_for > 0:  # broken down: identical report until towed
            car.stopped_for -= 1
            return
        if rnd.random() < self.profile.breakdown_probability:
            self._break_down(car)
            return
        cars_here = load[(car.xway, car.direction, car.seg)]
        car.speed = max(5, min(100, car.base_speed - cars_here // 2 + rnd.randint(-5, 5)))
        step = car.speed * 5280 * REPORT_INTERVAL_S // 3600
        limit = SEGMENTS * FEET_PER_SEGMENT - 1
        car.pos = min(limit, car.pos + step) if car.direction == 0 else max(0, car.pos - step)
        reached = car.seg >= car.exit_seg if car.direction == 0 else car.seg <= car.exit_seg
        if reached:
            car.lane = EXIT_LANE
            car.leaving = True
        else:
            car.lane = rnd.randint(1, 3) if car.lane == ENTRANCE_LANE else car.lane

    def _break_down(self, car: _Car) -> None:
        rnd = self._random
        low, high = self.profile.stopped_reports
        car.speed = 0
        car.lane = rnd.randint(1, 3)
        car.stopped_for = rnd.randint(low, high)
        if rnd.random() >= self.profile.accident_probability:
            return
        # An accident: a second car on the same road and direction stops at the same spot.
        others = [c for c in self._cars if c.xway == car.xway and c.direction == car.direction
                  and c.vid != car.vid and c.stopped_for == 0 and not c.leaving]
        if others:
            other = rnd.choice(others)
            other.pos, other.lane, other.speed = car.pos, car.lane, 0
            other.stopped_for = rnd.randint(low, high)

    def _maybe_query(self, t: int, car: _Car) -> LinearRoadRecord | None:
        rnd = self._random
        if rnd.random() >= self.profile.query_probability:
            return None
        qid = self._next_qid
        self._next_qid += 1
        kind = rnd.random()
        if kind < 0.7:
            return AccountBalanceQuery(t, car.vid, qid)
        if kind < 0.9:
            return DailyExpenditureQuery(t, car.vid, car.xway, qid, rnd.randint(1, 69))
        s_init = rnd.randrange(SEGMENTS)
        return TravelTimeQuery(t, car.vid, car.xway, qid, s_init, rnd.randrange(SEGMENTS),
                               rnd.randint(1, 7), rnd.randint(1, 1440))
