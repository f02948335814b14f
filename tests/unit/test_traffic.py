import itertools
from collections import Counter, defaultdict

import pytest

from medusa.linear_road.records import EXIT_LANE, PositionReport
from medusa.linear_road.traffic import TrafficProfile, TrafficSimulation

pytestmark = pytest.mark.unit


def _run(**overrides: object) -> list[tuple[int, list]]:
    profile = TrafficProfile(**{"xways": 2, "duration_s": 240, "peak_rate": 200, **overrides})
    return list(TrafficSimulation(profile).run())


def test_rate_ramps_towards_the_peak() -> None:
    seconds = _run()
    early = sum(len(r) for t, r in seconds if 30 <= t < 60)
    late = sum(len(r) for t, r in seconds if 210 <= t < 240)
    assert late > 3 * early
    # Two expressways at about 200 reports/s each at the end of the ramp.
    assert 2 * 200 * 0.8 * 30 < late < 2 * 200 * 1.2 * 30 * 1.1


def test_every_car_reports_every_30_seconds() -> None:
    times: dict[int, list[int]] = defaultdict(list)
    for _, records in _run():
        for r in records:
            if isinstance(r, PositionReport):
                times[r.vid].append(r.time)
    assert times
    for reports in times.values():
        assert all(b - a == 30 for a, b in itertools.pairwise(reports))


def test_runs_are_deterministic_for_a_seed() -> None:
    assert _run(seed=3) == _run(seed=3)
    assert _run(seed=3) != _run(seed=4)


def test_stopped_cars_and_accidents_occur() -> None:
    seconds = _run(breakdown_probability=0.01, accident_probability=1.0, duration_s=300)
    reports = [r for _, rs in seconds for r in rs if isinstance(r, PositionReport)]
    stopped = Counter((r.vid, r.xway, r.dir, r.lane, r.pos) for r in reports if r.speed == 0)
    assert any(n >= 4 for n in stopped.values()), "a car stopped for four reports"
    spots = Counter((r.xway, r.dir, r.lane, r.pos, r.time) for r in reports if r.speed == 0)
    assert any(n >= 2 for n in spots.values()), "two cars stopped at one spot"


def test_cars_leave_on_the_exit_lane_and_queries_occur() -> None:
    seconds = _run(query_probability=0.05)
    records = [r for _, rs in seconds for r in rs]
    assert any(isinstance(r, PositionReport) and r.lane == EXIT_LANE for r in records)
    assert any(not isinstance(r, PositionReport) for r in records)
