"""A Linear Road traffic simulation with the shape of the benchmark's input.

Every expressway is 100 one-mile segments long in each direction, with an entrance
ramp (lane 0) and an exit ramp (lane 4) in every segment and three travel lanes
(1..3) between them. The simulation keeps ``rate x 30`` cars on each expressway,
every car reporting its position every 30 seconds, so that the input rate follows
the profile: from ``start_rate`` up to ``peak_rate`` reports per second per
expressway over ``ramp_s`` (the benchmark's own rises to about 1,700 at the end of
its 3 hours, ``PEAK_REPORTS_PER_S_PER_XWAY``).

Trips, speeds and queries follow the benchmark's generator (LinearGenerator), so that
the benchmark's rules give tolls and alerts in the ranges they give on its data
(``medusa linear-road traffic-stats`` compares the two; the figures are in
docs/how-to/run-linear-road.md):

- **Trips.** A car enters at the upstream boundary of a segment on its entrance ramp
  (its first report: lane 0, 10 mph), drives on the travel lanes and leaves by the
  exit ramp of a segment at least two further on (its last report: lane 4, 10 mph).
  Entrances are spread evenly over the road; a car entering before the middle third
  ("downtown", segments 33..66 as seen from its direction) leaves there with
  probability 0.8, the others anywhere downstream. So the road is busiest in the
  middle and quiet at its ends, where the slow first and last reports weigh most in
  a segment's average speed: that is where tolls fall. A share of the cars that
  leave come back 1,000 to 2,000 s later (``reentry_probability``) for another trip,
  always on the same expressway: a vid is never on two expressways.
- **Speed.** On a travel lane a car drives at 70 mph, 10 less where its segment (one
  direction, all lanes) holds more than 72 cars and 20 less beyond 87, give or take
  10 mph at random per report.
- **Breakdowns and accidents.** A car on a travel lane breaks down with
  ``breakdown_probability`` per report: it stops on its way and sends identical
  reports (speed 0), ``stopped_reports`` of them (at least 4, so that it counts as
  stopped), then drives on. With ``accident_probability`` the breakdown is an
  accident instead: the next car of the same direction to reach the spot stops there
  too (same lane and position), and both stay until the accident clears,
  ``accident_clear_s`` after it happened (10 to 20 minutes by default, as in the
  benchmark), then drive on. The defaults make two or so accidents an hour per
  expressway at 1,700 reports/s, near the benchmark's one every 20 minutes.
- **Queries.** A report comes with an account balance query (type 2) by its car with
  probability 0.5%, and with a daily expenditure query (type 3) for the car's
  expressway and a day in 1..69 with probability 0.1%, as the benchmark's generator
  makes them (``query_probability``, ``balance_query_share``). qids are unique over
  the run. No travel-time queries (type 4): the benchmark's L-rating leaves them out
  and Medusa does not compute them.
- **Historical tolls.** A new car's ``HistoricalTolls`` (a random toll 0..99 for
  each of the 69 days, on its expressway) come in the second of its first report,
  ahead of the reports, so that they are published before it.

The run is deterministic for a seed. Each second costs work in proportion to the
reports of that second only (cars are kept by report phase and segment counts are
kept up to date), so that generating the benchmark's rate is cheap.
"""

from __future__ import annotations

import heapq
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
RAMP_SPEED = 10
"""The speed of a car's first report (entrance ramp) and last (exit ramp), mph."""
ENTRANCE_SPEEDS = (10, 15, 20, 25, 30, 35, 40)
"""A car's speeds on the entrance ramp, report by report, before it merges."""
TRAVEL_SPEED = 70
"""A car's speed on a travel lane of an uncrowded segment (mph)."""
CONGESTION_CUTS = ((87, 20), (72, 10))
"""(more than this many cars in the segment, mph less), the larger first."""
SPEED_NOISE = 10
"""A travel speed varies by up to this much either way, per report."""
MIN_TRIP_SEGMENTS = 2
"""A car leaves at least this many segments downstream of where it entered."""
DOWNTOWN = (33, 66)
"""The middle third of the road (segments, as seen in direction 0)."""
DOWNTOWN_SHARE = 0.8
"""Share of the cars entering before downtown that leave in it."""
LANE_CHANGE_PROBABILITY = 0.1
"""Chance per report that a car on a travel lane moves to a neighbouring lane."""
REENTRY_DELAY_S = (1000, 2000)
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
    breakdown_probability: float = 3.5e-6
    """Chance that a report of a car on a travel lane is a breakdown. With the default
    ``accident_probability``: two or so accidents an hour per expressway at 1,700
    reports/s (0, 4 and 2 for seeds 7 to 9), near the benchmark's one every 20 minutes."""
    accident_probability: float = 0.3
    """Chance that a breakdown is an accident (a second car stops at the same spot)."""
    stopped_reports: tuple[int, int] = (4, 10)
    """Identical reports of a broken-down car (not in an accident): at least 4."""
    accident_clear_s: tuple[int, int] = (600, 1200)
    """Seconds from an accident to its clearing (at least 150)."""
    query_probability: float = 0.006
    """Chance that a report comes with a query (type 2 or 3) by its car: the benchmark's
    generator makes one with 1% of the reports, 40% of them of type 4, left out here."""
    balance_query_share: float = 5 / 6
    """Share of the queries that are account balance queries (type 2); the rest are
    daily expenditure queries (type 3): 0.5% and 0.1% of the reports."""
    reentry_probability: float = 0.1
    """Chance that a car that leaves comes back later (1,000 to 2,000 s) for another
    trip, on the same expressway."""
    seed: int = 7


class _Car:
    __slots__ = ("entering", "exit_seg", "lane", "pos", "ramp", "resume_at", "road", "speed",
                 "vid", "xway")

    def __init__(self, vid: int, xway: int) -> None:
        self.vid = vid
        self.xway = xway
        self.road = 2 * xway
        """2 * xway + direction: indexes the segment counts."""
        self.pos = 0
        self.lane = ENTRANCE_LANE
        self.speed = 0
        self.exit_seg = 0
        self.entering = True
        """Its next report is its first of a trip (on the entrance ramp)."""
        self.ramp = 0
        """Reports made on the entrance ramp this trip."""
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
        self._on_road = [0] * profile.xways
        self._returning: list[list[tuple[int, int, _Car]]] = [[] for _ in range(profile.xways)]
        """Per xway, a heap of (second due, vid, car) of the cars that will come back."""
        self._spots: dict[int, list[_Spot]] = {}
        """Per road (2 * xway + dir), accidents waiting for their second car."""
        self._next_vid = FIRST_VID
        self._next_qid = 1
        low, high = profile.stopped_reports
        self._stopped_reports = (max(4, low), max(4, low, high))
        low, high = profile.accident_clear_s
        self._accident_clear_s = (max(150, low), max(150, low, high))

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
                    car = _Car(self._next_vid, xway)
                    history.append(HistoricalTolls(t, car.vid, xway, tuple(
                        rnd.choices(_TOLLS, k=HISTORY_DAYS))))
                self._plan_trip(car)
                self._on_road[xway] += 1
                self._cars_in[car.cell] += 1
                slot.append(car)

    def _plan_trip(self, car: _Car) -> None:
        """A new trip: direction, entrance and exit segments, the first report's place."""
        rnd = self._random
        direction = rnd.randrange(2)
        # Segments counted along the car's direction: d = seg in direction 0, 99 - seg in 1.
        entry = rnd.randrange(SEGMENTS - MIN_TRIP_SEGMENTS)
        first_exit = entry + MIN_TRIP_SEGMENTS
        low, high = DOWNTOWN
        if entry < low and rnd.random() < DOWNTOWN_SHARE:
            exit_along = rnd.randint(max(first_exit, low), high)
        else:
            exit_along = rnd.randint(first_exit, SEGMENTS - 1)
        if direction == 0:
            entry_seg, exit_seg = entry, exit_along
            pos = entry_seg * FEET_PER_SEGMENT
        else:
            entry_seg, exit_seg = SEGMENTS - 1 - entry, SEGMENTS - 1 - exit_along
            pos = entry_seg * FEET_PER_SEGMENT + FEET_PER_SEGMENT - 1
        car.road = 2 * car.xway + direction
        car.exit_seg = exit_seg
        car.pos = pos
        car.lane = ENTRANCE_LANE
        car.entering = True
        car.ramp = 1
        car.resume_at = 0
        car.speed = ENTRANCE_SPEEDS[0]

    def _leave(self, t: int, car: _Car) -> None:
        self._on_road[car.xway] -= 1
        self._cars_in[car.cell] -= 1
        rnd = self._random
        if rnd.random() < self.profile.reentry_probability:
            due = t + rnd.randint(*REENTRY_DELAY_S)
            heapq.heappush(self._returning[car.xway], (due, car.vid, car))

    # -- driving --------------------------------------------------------------------------

    def _speed(self, cell: int) -> int:
        """A travel speed through the segment ``cell``: less where it is crowded."""
        cars = self._cars_in[cell]
        speed = TRAVEL_SPEED
        for crowd, cut in CONGESTION_CUTS:
            if cars > crowd:
                speed -= cut
                break
        return speed + self._random.randint(-SPEED_NOISE, SPEED_NOISE)

    def _drive(self, car: _Car, t: int) -> None:
        """Moves the car to where it is at this report, at the speed of the segment it
        drove through; it may break down, run into an accident or reach its exit."""
        rnd = self._random
        road = car.road
        start = car.pos
        old_cell = road * SEGMENTS + start // FEET_PER_SEGMENT
        on_ramp = car.lane == ENTRANCE_LANE and car.ramp < len(ENTRANCE_SPEEDS)
        speed = ENTRANCE_SPEEDS[car.ramp] if on_ramp else self._speed(old_cell)
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
                self._moved(car, old_cell)
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
            car.speed = RAMP_SPEED
        else:
            car.pos = pos
            if on_ramp:
                car.ramp += 1
            elif car.lane == ENTRANCE_LANE:
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
        self._moved(car, old_cell)
        if rnd.random() < self.profile.accident_probability:
            clear_at = t + rnd.randint(*self._accident_clear_s)
            car.resume_at = clear_at
            # The second car must make its 4 identical reports before the clearing.
            self._spots.setdefault(car.road, []).append(
                _Spot(car.lane, car.pos, clear_at, clear_at - 3 * REPORT_INTERVAL_S - 1))
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
