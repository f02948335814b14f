import itertools
import statistics
from collections import Counter, defaultdict

import pytest
from fastavro.validation import validate

from medusa.linear_road.records import (
    ENTRANCE_LANE,
    EXIT_LANE,
    FEET_PER_SEGMENT,
    HISTORY_DAYS,
    AccountBalanceQuery,
    DailyExpenditureQuery,
    HistoricalTolls,
    LinearRoadRecord,
    PositionReport,
    to_dict,
)
from medusa.linear_road.traffic import TrafficProfile, TrafficSimulation
from medusa.linear_road.traffic_stats import traffic_stats
from medusa.schemas import schema_for_topic

pytestmark = pytest.mark.unit

Seconds = list[tuple[int, list[LinearRoadRecord]]]


def _run(**overrides: object) -> Seconds:
    profile = TrafficProfile(**{"xways": 2, "duration_s": 240, "peak_rate": 200, **overrides})
    return list(TrafficSimulation(profile).run())


def _records(seconds: Seconds) -> list[LinearRoadRecord]:
    return [r for _, rs in seconds for r in rs]


def _reports(seconds: Seconds) -> list[PositionReport]:
    return [r for _, rs in seconds for r in rs if isinstance(r, PositionReport)]


def _trips(reports: list[PositionReport]) -> list[list[PositionReport]]:
    """Each car's reports cut into trips (a trip ends with its exit-lane report)."""
    by_vid: dict[int, list[PositionReport]] = defaultdict(list)
    for r in reports:
        by_vid[r.vid].append(r)
    trips = []
    for car in by_vid.values():
        trip: list[PositionReport] = []
        for r in car:
            trip.append(r)
            if r.lane == EXIT_LANE:
                trips.append(trip)
                trip = []
        if trip:
            trips.append(trip)
    return trips


@pytest.fixture(scope="module")
def small() -> Seconds:
    """Two expressways ramping up to 200 reports/s each, with the default knobs."""
    return _run(duration_s=600)


@pytest.fixture(scope="module")
def busy() -> Seconds:
    """One expressway rising to the benchmark's peak, 1,700 reports/s: congested."""
    return _run(xways=1, duration_s=720, peak_rate=1700, start_rate=500, ramp_s=300, seed=2)


def test_rate_ramps_towards_the_peak() -> None:
    seconds = _run()
    per_second = Counter(r.time for r in _reports(seconds))
    early = sum(per_second[t] for t in range(30, 60))
    late = sum(per_second[t] for t in range(210, 240))
    assert late > 3 * early
    # Two expressways at about 200 reports/s each at the end of the ramp.
    assert 2 * 200 * 0.8 * 30 < late < 2 * 200 * 1.2 * 30


def test_cars_report_every_30_seconds_within_a_trip(small: Seconds) -> None:
    trips = _trips(_reports(small))
    assert trips
    for trip in trips:
        assert all(b.time - a.time == 30 for a, b in itertools.pairwise(trip))


def test_cars_enter_by_the_entrance_ramp_and_leave_by_the_exit_ramp(small: Seconds) -> None:
    trips = _trips(_reports(small))
    ended = [trip for trip in trips if trip[-1].lane == EXIT_LANE]
    assert len(ended) > 1000
    for trip in trips:
        first, last = trip[0], trip[-1]
        assert first.lane == ENTRANCE_LANE and first.speed == 10
        # On the entrance ramp for a few reports, speeding up, then on the travel lanes.
        ramp = list(itertools.takewhile(lambda r: r.lane == ENTRANCE_LANE, trip))
        assert [r.speed for r in ramp] == [10, 15, 20, 25, 30, 35, 40][:len(ramp)]
        assert all(r.lane in (1, 2, 3) for r in trip[len(ramp):-1])
        assert all(r.seg == r.pos // FEET_PER_SEGMENT for r in trip)
        assert len({(r.xway, r.dir) for r in trip}) == 1
        steps = [b.pos - a.pos for a, b in itertools.pairwise(trip)]
        assert all(step >= 0 for step in steps) if first.dir == 0 else all(
            step <= 0 for step in steps)
    for trip in ended:
        first, last = trip[0], trip[-1]
        assert len(trip) >= 2
        assert (last.seg > first.seg) if first.dir == 0 else (last.seg < first.seg)


def test_a_vid_stays_on_one_expressway_also_when_it_comes_back() -> None:
    seconds = _run(duration_s=1500, reentry_probability=1.0)
    reports = _reports(seconds)
    xways: dict[int, set[int]] = defaultdict(set)
    for r in reports:
        xways[r.vid].add(r.xway)
    assert len({x for values in xways.values() for x in values}) == 2
    assert all(len(values) == 1 for values in xways.values())
    by_vid: dict[int, list[PositionReport]] = defaultdict(list)
    for r in reports:
        by_vid[r.vid].append(r)
    returns = 0
    for car in by_vid.values():
        for a, b in itertools.pairwise(car):
            if a.lane == EXIT_LANE:  # came back for another trip
                returns += 1
                assert b.lane == ENTRANCE_LANE
                assert b.time - a.time >= 1000
    assert returns > 50
    histories = Counter(r.vid for r in _records(seconds) if isinstance(r, HistoricalTolls))
    assert set(histories.values()) == {1}, "one history per car, not per trip"


def test_runs_are_deterministic_for_a_seed() -> None:
    first = _run(seed=3)
    assert first == _run(seed=3)
    assert first != _run(seed=4)


def test_each_car_has_its_historical_tolls_before_its_first_report(small: Seconds) -> None:
    seen_history: dict[int, HistoricalTolls] = {}
    reported: set[int] = set()
    for t, records in small:
        kinds = [0 if isinstance(r, HistoricalTolls) else 1 if isinstance(r, PositionReport)
                 else 2 for r in records]
        assert kinds == sorted(kinds), "history, then reports, then queries"
        for r in records:
            if isinstance(r, HistoricalTolls):
                assert r.time == t
                assert r.vid not in seen_history and r.vid not in reported
                seen_history[r.vid] = r
            elif isinstance(r, PositionReport) and r.vid not in reported:
                reported.add(r.vid)
                history = seen_history[r.vid]
                assert (history.time, history.xway) == (r.time, r.xway)
    assert reported == set(seen_history)
    tolls = [toll for h in seen_history.values() for toll in h.tolls]
    assert all(len(h.tolls) == HISTORY_DAYS for h in seen_history.values())
    assert min(tolls) == 0 and max(tolls) == 99
    assert 45 < sum(tolls) / len(tolls) < 54


def test_speed_falls_with_congestion_and_tolls_fall_where_cars_enter_and_leave(
        busy: Seconds) -> None:
    """Travel speeds drop in crowded segments; the benchmark's toll condition (more than
    50 cars in a minute, and an average speed over the five minutes before below 40)
    holds where the slow first and last reports of trips weigh most: near the road's
    ends, as on the benchmark's generator's data, not all over the road."""
    cars: dict[tuple[int, int, int, int], set[int]] = defaultdict(set)
    travel: dict[bool, list[int]] = defaultdict(list)
    reports = _reports(busy)
    for r in reports:
        cars[(r.xway, r.dir, r.seg, r.time // 60 + 1)].add(r.vid)
    for r in reports:
        if r.lane in (1, 2, 3) and r.speed > 0:
            count = len(cars[(r.xway, r.dir, r.seg, r.time // 60 + 1)])
            if count > 120 or count < 60:
                travel[count > 120].append(r.speed)
    assert travel[True] and travel[False]
    assert all(40 <= s <= 80 for s in travel[True] + travel[False])
    assert sum(travel[True]) / len(travel[True]) < sum(travel[False]) / len(travel[False]) - 5
    assert {r.speed for r in reports if r.lane == 4} == {10}
    assert max(r.speed for r in reports if r.lane == 0) == 40
    # Through the benchmark's rules, once the road has filled (from minute 9 on).
    stats = traffic_stats(_records(busy), first_minute=9)
    assert 0.005 < len(stats.tolls) / stats.segment_minutes < 0.1, "some segments, not all"
    assert sum(1 for d in stats.tolled_along if d < 15 or d >= 85) > len(stats.tolls) / 2
    assert 5_000 < statistics.median(stats.tolls) < 100_000


def test_breakdowns_stop_cars_and_accidents_clear() -> None:
    seconds = _run(xways=1, duration_s=900, peak_rate=150, breakdown_probability=0.003,
                   accident_probability=0.5, accident_clear_s=(200, 300), seed=5)
    by_vid: dict[int, list[PositionReport]] = defaultdict(list)
    for r in _reports(seconds):
        by_vid[r.vid].append(r)
    # Stops: runs of identical reports (speed 0), at least 4, then the car drives on.
    stops = []  # (vid, place, first time, last time)
    for vid, car in by_vid.items():
        for place, run in itertools.groupby(car, key=lambda r: (r.xway, r.dir, r.lane, r.pos)):
            same = list(run)
            if len(same) > 1:
                assert all(r.speed == 0 for r in same)
                stops.append((vid, place, same[0].time, same[-1].time, car[-1].time))
    assert len(stops) > 20
    resumed = [s for s in stops if s[4] > s[3]]
    assert len(resumed) > 10
    assert all(last - first >= 90 for _, _, first, last, _ in resumed), "at least 4 reports"
    # Accidents: two cars stopped (4th identical report on) at one place at one time,
    # and both drive on once it clears.
    at_place: dict[tuple[int, int, int], list[tuple[int, int, int, int]]] = defaultdict(list)
    for vid, (xway, direction, _lane, pos), first, last, end in stops:
        at_place[(xway, direction, pos)].append((vid, first + 90, last, end))
    accidents = [cars for cars in at_place.values() if len(cars) >= 2
                 and max(c[1] for c in cars) <= min(c[2] for c in cars)]
    assert len(accidents) >= 3
    cleared = [cars for cars in accidents if all(end > last for _, _, last, end in cars)]
    assert cleared, "an accident clears and both cars drive on"
    for cars in cleared:
        assert all(last - first_stopped < 300 for _, first_stopped, last, _ in cars)


def test_the_query_mix_is_the_benchmark_generators(busy: Seconds) -> None:
    """0.5% of reports come with an account balance query, 0.1% with a daily expenditure
    query (the generator's 1%, less its 0.4% of travel-time queries)."""
    records = _records(busy)
    reports = [r for r in records if isinstance(r, PositionReport)]
    queries = [r for r in records if not isinstance(r, PositionReport | HistoricalTolls)]
    assert all(isinstance(q, AccountBalanceQuery | DailyExpenditureQuery) for q in queries)
    kinds = Counter(type(q) for q in queries)
    assert 0.004 < kinds[AccountBalanceQuery] / len(reports) < 0.006
    assert 0.0006 < kinds[DailyExpenditureQuery] / len(reports) < 0.0014
    assert len({q.qid for q in queries}) == len(queries)
    first_report = {}
    xway_of = {}
    for r in reports:
        first_report.setdefault(r.vid, r.time)
        xway_of[r.vid] = r.xway
    for q in queries:
        assert first_report[q.vid] <= q.time, "a car that has driven"
        if isinstance(q, DailyExpenditureQuery):
            assert q.xway == xway_of[q.vid]
            assert 1 <= q.day <= HISTORY_DAYS


def test_every_record_fits_the_schema_of_its_topic(small: Seconds) -> None:
    examples = {}
    for r in _records(small):
        examples.setdefault(type(r), r)
    assert set(examples) == {HistoricalTolls, PositionReport, AccountBalanceQuery,
                             DailyExpenditureQuery}
    for record in examples.values():
        assert validate(to_dict(record), schema_for_topic(record.TOPIC).parsed,
                        raise_errors=True)
