"""A Linear Road traffic simulation with the shape of the benchmark's input.

Every expressway is 100 one-mile segments long in each direction, with an entrance
ramp (lane 0) and an exit ramp (lane 4) in every segment and three travel lanes
(1..3) between them. The simulation keeps ``rate x 30`` cars on each expressway,
every car reporting its position every 30 seconds, so that the input rate follows
the profile: from ``start_rate`` up to ``peak_rate`` reports per second per
expressway over ``ramp_s`` (the benchmark's own rises to about 1,700 at the end of
its 3 hours, ``PEAK_REPORTS_PER_S_PER_XWAY``).

- **Trips.** A car enters on the entrance ramp of a segment (its first report is on
  lane 0 there), drives on the travel lanes and leaves by the exit ramp of a later
  segment (its last report is on lane 4 in that segment). Most trips end at one of a
  few busy exits of the expressway ("downtowns"), the rest anywhere; a trip is 1 to
  ``MAX_TRIP_SEGMENTS`` segments long. A share of the cars that leave come back
  later (``reentry_probability``, after 61 to 1,061 s, as the benchmark's data
  preparation does) for another trip, always on the same expressway: a vid is never
  on two expressways.
- **Congestion.** A car drives at its own free speed (45..80 mph) while its segment
  (one direction, all lanes) has at most ``FREE_FLOW_CARS`` (50) cars; beyond, at
  ``free * sqrt(50 / cars)`` (never below ``MIN_SPEED``, so that a moving car never
  repeats a report), and at half that in the segment of an accident. Slow segments
  keep their cars longer, so traffic piles up towards the busy exits: some segments
  pass 50 cars with an average speed below 40 mph (the toll condition) while others
  flow freely: from about 500 reports/s per expressway on, and on 100 to 130 of the
  200 segments at the benchmark's peak (51,000 cars on 100 miles of three-lane road).
- **Breakdowns and accidents.** A car on a travel lane breaks down with
  ``breakdown_probability`` per report: it stops on its way and sends identical
  reports (speed 0), ``stopped_reports`` of them (at least 4, so that it counts as
  stopped), then drives on. With ``accident_probability`` the breakdown is an
  accident instead: the next car of the same direction to reach the spot stops there
  too (same lane and position), and both stay until the accident clears,
  ``accident_clear_s`` after it happened (10 to 20 minutes by default, as in the
  benchmark), then drive on. The defaults make an accident every 11 minutes or so
  per expressway at 1,700 reports/s, about 8 over a 3-hour ramp (the benchmark: one
  every 20 minutes).
- **Queries.** With ``query_probability`` (1%) a report comes with a query by its
  car: an account balance query (type 2; ``balance_query_share`` of them) or a
  daily expenditure query (type 3) for the car's expressway and a day in 1..69.
  qids are unique over the run. No travel-time queries (type 4): the benchmark's
  L-rating leaves them out and Medusa does not compute them.
- **Historical tolls.** A new car's ``HistoricalTolls`` (a random toll 0..99 for
  each of the 69 days, on its expressway) come in the second of its first report,
  ahead of the reports, so that they are published before it.

The run is deterministic for a seed. Each second costs work in proportion to the
reports of that second only (cars are kept by report phase and segment counts are
kept up to date), so that generating the benchmark's rate is cheap.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from medusa.linear_road.records import (
    ENTRANCE_LANE,
    EXIT_LANE,
    FEET_PER_SEGMENT,
    HISTORY_DAYS,
    SEGMENTS,
    AccountBalanceQuery,
    DailyExpenditureQuery,
    HistoricalTolls,
    LinearRoadRecord,
    PositionReport,
)

REPORT_INTERVAL_S = 30
PEAK_REPORTS_PER_S_PER_XWAY = 1700
FEET_PER_REPORT_PER_MPH = 5280 * REPORT_INTERVAL_S // 3600
"""Feet a car covers between two reports per mph of speed (44)."""
FREE_SPEEDS = (45, 80)
"""A car's speed on an empty road is drawn from this range (mph)."""
MIN_SPEED = 3
"""Cars in a queue still creep: no moving car sends two identical reports."""
FREE_FLOW_CARS = 50
"""Up to this many cars in a segment (one direction), cars drive at their free speed;
beyond, speed falls as the square root of the crowding: ``free * sqrt(50 / cars)``."""
LANE_CHANGE_PROBABILITY = 0.1
"""Chance per report that a car on a travel lane moves to a neighbouring lane."""
ACCIDENT_SLOWDOWN = 0.5
"""Speed factor in the segment of an accident."""
BUSY_EXITS = 3
"""Busy exits ("downtowns") per expressway."""
BUSY_EXIT_SHARE = 0.5
"""Share of trips that end at a busy exit (or the segment before or after it)."""
MAX_TRIP_SEGMENTS = 40
REENTRY_DELAY_S = (61, 1061)
MAX_HISTORICAL_TOLL = 99
FIRST_VID = 100
_TOLLS = range(MAX_HISTORICAL_TOLL + 1)


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
    breakdown_probability: float = 3e-6
    """Chance that a report of a car on a travel lane is a breakdown. With the default
    ``accident_probability``: an accident every 11 minutes or so per expressway at 1,700
    reports/s, as many as the benchmark's one per 20 minutes over its 3-hour ramp."""
    accident_probability: float = 0.3
    """Chance that a breakdown is an accident (a second car stops at the same spot)."""
    stopped_reports: tuple[int, int] = (4, 10)
    """Identical reports of a broken-down car (not in an accident): at least 4."""
    accident_clear_s: tuple[int, int] = (600, 1200)
    """Seconds from an accident to its clearing (at least 150)."""
    query_probability: float = 0.01
    """Chance that a report comes with a query (type 2 or 3) by its car."""
    balance_query_share: float = 0.8
    """Share of the queries that are account balance queries (type 2); the rest are
    daily expenditure queries (type 3)."""
    reentry_probability: float = 0.05
    """Chance that a car that leaves comes back later (61 to 1,061 s) for another trip,
    on the same expressway."""
    seed: int = 7


class _Car:
    __slots__ = ("base_speed", "entering", "exit_seg", "lane", "pos", "resume_at", "road",
                 "speed", "vid", "xway")

    def __init__(self, vid: int, xway: int, base_speed: int) -> None:
        self.vid = vid
        self.xway = xway
        self.base_speed = base_speed
        self.road = 2 * xway
        """2 * xway + direction: indexes the segment counts."""
        self.pos = 0
        self.lane = ENTRANCE_LANE
        self.speed = 0
        self.exit_seg = 0
        self.entering = True
        """Its next report is its first of a trip (on the entrance ramp)."""
        self.resume_at = 0
        """Stopped (identical reports, speed 0) at reports before this second."""

    @property
    def cell(self) -> int:
        return self.road * SEGMENTS + self.pos // FEET_PER_SEGMENT


@dataclass
class _Spot:
    """Where an accident's first car stopped, waiting for the second."""

    lane: int
    pos: int
    clear_at: int
    open_until: int


class TrafficSimulation:
    def __init__(self, profile: TrafficProfile) -> None:
        self.profile = profile
        self._random = random.Random(profile.seed)
        self._slots: list[list[_Car]] = [[] for _ in range(REPORT_INTERVAL_S)]
        """Cars on the road by report phase (the second of the minute modulo 30)."""
        self._cars_in: list[int] = [0] * (2 * profile.xways * SEGMENTS)
        """Cars per (xway, direction, segment): index ``(2 * xway + dir) * 100 + seg``."""
        self._accidents_in: list[int] = [0] * (2 * profile.xways * SEGMENTS)
        self._on_road = [0] * profile.xways
        self._returning: list[list[tuple[int, int, _Car]]] = [[] for _ in range(profile.xways)]
        """Per xway, a heap of (second due, vid, car) of the cars that will come back."""
        self._spots: dict[int, list[_Spot]] = {}
        """Per road (2 * xway + dir), accidents waiting for their second car."""
        self._clearing: dict[int, list[int]] = {}
        """Per second, the accident cells that clear then."""
        self._busy_exits = [sorted(self._random.sample(range(5, SEGMENTS - 5), BUSY_EXITS))
                            for _ in range(profile.xways)]
        self._next_vid = FIRST_VID
        self._next_qid = 1
        low, high = profile.stopped_reports
        self._stopped_reports = (max(4, low), max(4, low, high))
        low, high = profile.accident_clear_s
        self._accident_clear_s = (max(150, low), max(150, low, high))

    @property
    def busy_exits(self) -> list[list[int]]:
        """Per expressway, the segments where most trips end."""
        return [list(exits) for exits in self._busy_exits]

    def target_rate(self, t: int) -> float:
        profile = self.profile
        ramp = profile.ramp_s or profile.duration_s
        share = min(1.0, t / ramp) if ramp > 0 else 1.0
        return profile.start_rate + (profile.peak_rate - profile.start_rate) * share

    def run(self) -> Iterator[tuple[int, list[LinearRoadRecord]]]:
        """(second, records of that second) for every simulated second: historical
        tolls first, then position reports, then queries."""
        for t in range(self.profile.duration_s):
            yield t, self.tick(t)

    def tick(self, t: int) -> list[LinearRoadRecord]:
        accidents_in = self._accidents_in
        for cell in self._clearing.pop(t, ()):
            accidents_in[cell] -= 1
        history: list[LinearRoadRecord] = []
        self._enter(t, history)
        reports: list[LinearRoadRecord] = []
        queries: list[LinearRoadRecord] = []
        staying: list[_Car] = []
        query_probability = self.profile.query_probability
        next_random = self._random.random
        drive = self._drive
        slot = t % REPORT_INTERVAL_S
        for car in self._slots[slot]:
            if car.entering:
                car.entering = False
            elif car.resume_at <= t:  # else stopped: the same report again
                drive(car, t)
            pos = car.pos
            reports.append(PositionReport(t, car.vid, car.speed, car.xway, car.lane,
                                          car.road & 1, pos // FEET_PER_SEGMENT, pos))
            if next_random() < query_probability:
                queries.append(self._query(t, car))
            if car.lane == EXIT_LANE:
                self._leave(t, car)
            else:
                staying.append(car)
        self._slots[slot] = staying
        return history + reports + queries

    # -- entering and leaving -------------------------------------------------------------

    def _enter(self, t: int, history: list[LinearRoadRecord]) -> None:
        wanted = int(self.target_rate(t) * REPORT_INTERVAL_S)
        slot = self._slots[t % REPORT_INTERVAL_S]
        rnd = self._random
        for xway in range(self.profile.xways):
            # At most a thirtieth of the cars per second, so the phases fill evenly.
            room = min(wanted - self._on_road[xway], wanted // REPORT_INTERVAL_S + 1)
            returning = self._returning[xway]
            for _ in range(max(0, room)):
                if returning and returning[0][0] <= t:
                    car = heapq.heappop(returning)[2]
                else:
                    self._next_vid += 1
                    car = _Car(self._next_vid, xway, rnd.randint(*FREE_SPEEDS))
                    history.append(HistoricalTolls(t, car.vid, xway, tuple(
                        rnd.choices(_TOLLS, k=HISTORY_DAYS))))
                self._plan_trip(car)
                self._on_road[xway] += 1
                self._cars_in[car.cell] += 1
                slot.append(car)

    def _plan_trip(self, car: _Car) -> None:
        """A new trip: direction, entrance and exit segments, the first report's place."""
        rnd = self._random
        if rnd.random() < BUSY_EXIT_SHARE:
            exit_seg = rnd.choice(self._busy_exits[car.xway]) + rnd.randint(-1, 1)
        else:
            exit_seg = rnd.randrange(SEGMENTS)
        direction = rnd.randrange(2)
        if exit_seg == 0:
            direction = 1
        elif exit_seg == SEGMENTS - 1:
            direction = 0
        room = exit_seg if direction == 0 else SEGMENTS - 1 - exit_seg
        length = rnd.randint(1, min(MAX_TRIP_SEGMENTS, room))
        entry_seg = exit_seg - length if direction == 0 else exit_seg + length
        car.road = 2 * car.xway + direction
        car.exit_seg = exit_seg
        car.pos = entry_seg * FEET_PER_SEGMENT + rnd.randrange(FEET_PER_SEGMENT)
        car.lane = ENTRANCE_LANE
        car.entering = True
        car.resume_at = 0
        car.speed = self._speed(car, car.cell)

    def _leave(self, t: int, car: _Car) -> None:
        self._on_road[car.xway] -= 1
        self._cars_in[car.cell] -= 1
        rnd = self._random
        if rnd.random() < self.profile.reentry_probability:
            due = t + rnd.randint(*REENTRY_DELAY_S)
            heapq.heappush(self._returning[car.xway], (due, car.vid, car))

    # -- driving --------------------------------------------------------------------------

    def _speed(self, car: _Car, cell: int) -> int:
        """The car's speed through its segment (``cell``): its free speed, less in a
        crowded segment and in the segment of an accident, with a little noise."""
        cars = self._cars_in[cell]
        speed: float = car.base_speed
        if cars > FREE_FLOW_CARS:
            speed *= math.sqrt(FREE_FLOW_CARS / cars)
        if self._accidents_in[cell]:
            speed *= ACCIDENT_SLOWDOWN
        return max(MIN_SPEED, min(100, int(speed + 5 * self._random.random()) - 2))

    def _drive(self, car: _Car, t: int) -> None:
        """Moves the car to where it is at this report, at the speed of the segment it
        drove through; it may break down, run into an accident or reach its exit."""
        rnd = self._random
        road = car.road
        start = car.pos
        old_cell = road * SEGMENTS + start // FEET_PER_SEGMENT
        speed = self._speed(car, old_cell)
        step = speed * FEET_PER_REPORT_PER_MPH
        forward = not road & 1
        pos = start + step if forward else start - step
        exit_start = car.exit_seg * FEET_PER_SEGMENT
        exit_end = exit_start + FEET_PER_SEGMENT - 1
        reaches_exit = pos >= exit_start if forward else pos <= exit_end
        spots = self._spots.get(road)
        if spots:
            spot = self._spot_ahead(spots, start, pos, t, forward)
            if spot is not None and (spot.pos < exit_start if forward else spot.pos > exit_end):
                # Runs into the accident: the second car, stopped at the same place.
                spots.remove(spot)
                car.pos, car.lane, car.speed, car.resume_at = spot.pos, spot.lane, 0, spot.clear_at
                cell = self._moved(car, old_cell)
                self._accidents_in[cell] += 1
                self._clearing.setdefault(spot.clear_at, []).append(cell)
                return
        if (car.lane != ENTRANCE_LANE and not reaches_exit
                and rnd.random() < self.profile.breakdown_probability):
            partial = 1 + int(rnd.random() * step)  # stops on the way: 1..step feet on
            car.pos = start + partial if forward else start - partial
            self._break_down(car, t, old_cell)
            return
        car.speed = speed
        if reaches_exit:
            car.pos = min(pos, exit_end) if forward else max(pos, exit_start)
            car.lane = EXIT_LANE
        else:
            car.pos = pos
            if car.lane == ENTRANCE_LANE:
                car.lane = 1 + int(rnd.random() * 3)
            elif rnd.random() < LANE_CHANGE_PROBABILITY:
                car.lane = 2 if car.lane != 2 else 1 + 2 * int(rnd.random() * 2)
        self._moved(car, old_cell)

    def _spot_ahead(self, spots: list[_Spot], start: int, end: int, t: int,
                    forward: bool) -> _Spot | None:
        spots[:] = [spot for spot in spots if spot.open_until >= t]
        ahead = [spot for spot in spots
                 if (start < spot.pos <= end if forward else end <= spot.pos < start)]
        if not ahead:
            return None
        return min(ahead, key=lambda spot: abs(spot.pos - start))

    def _break_down(self, car: _Car, t: int, old_cell: int) -> None:
        """The car stops where it is: a breakdown, or the first car of an accident."""
        rnd = self._random
        car.speed = 0
        cell = self._moved(car, old_cell)
        if rnd.random() < self.profile.accident_probability:
            clear_at = t + rnd.randint(*self._accident_clear_s)
            car.resume_at = clear_at
            # The second car must make its 4 identical reports before the clearing.
            self._spots.setdefault(car.road, []).append(
                _Spot(car.lane, car.pos, clear_at, clear_at - 3 * REPORT_INTERVAL_S - 1))
            self._accidents_in[cell] += 1
            self._clearing.setdefault(clear_at, []).append(cell)
        else:
            reports = rnd.randint(*self._stopped_reports)
            car.resume_at = t + (reports - 1) * REPORT_INTERVAL_S + 1

    def _moved(self, car: _Car, old_cell: int) -> int:
        """Keeps the segment counts up to date; the car's cell."""
        cell = car.road * SEGMENTS + car.pos // FEET_PER_SEGMENT
        if cell != old_cell:
            self._cars_in[old_cell] -= 1
            self._cars_in[cell] += 1
        return cell

    # -- queries --------------------------------------------------------------------------

    def _query(self, t: int, car: _Car) -> LinearRoadRecord:
        rnd = self._random
        qid = self._next_qid
        self._next_qid += 1
        if rnd.random() < self.profile.balance_query_share:
            return AccountBalanceQuery(t, car.vid, qid)
        return DailyExpenditureQuery(t, car.vid, car.xway, qid, rnd.randint(1, HISTORY_DAYS))
