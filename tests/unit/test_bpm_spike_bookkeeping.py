"""The BPM spike's bookkeeping, from made-up samples: moves, the acceptable allocation,
latency per phase, lost and duplicated results."""

import pytest

from medusa.sensor_windows import Arrival
from medusa_apps.bench.bpm_spike import Sample, SpikePlan, SpikeRun, utilisation_of

pytestmark = pytest.mark.unit

START, SPIKE = 1_000_000, 1_060_000


def _run(**fields) -> SpikeRun:
    return SpikeRun(SpikePlan(), {"alpha": "alpha/a1", "beta": "beta/b1"},
                    ["alpha/n0/f", "alpha/n1/f"],
                    {"beta": "c-beta"}, started_ms=START, spike_ms=SPIKE, **fields)


def _sample(at_s: float, alpha: float, beta: float = 0.0) -> Sample:
    return Sample(START + int(at_s * 1000), {"alpha": alpha, "beta": beta}, {})


def test_moves_are_the_changes_of_a_fragments_node() -> None:
    run = _run(placements=[(1, "alpha/n1/f", "alpha/a1", "running"),
                           (2, "alpha/n1/f", "beta/b1", "moving"),
                           (3, "alpha/n1/f", "beta/b1", "running"),
                           (4, "alpha/n0/f", "alpha/a1", "running")])
    [move] = run.moves
    assert (move.at_ms, move.fragment, move.source, move.target) == (
        2, "alpha/n1/f", "alpha/a1", "beta/b1")


def test_acceptable_is_from_the_last_move_on_with_no_participant_over_capacity() -> None:
    moved = [(START + 75_000, "alpha/n1/f", "beta/b1", "moving"),
             (START + 82_000, "alpha/n1/f", "beta/b1", "running")]
    run = _run(placements=moved,
               samples=[_sample(30, 0.4), _sample(70, 1.3), _sample(80, 1.1, 0.2),
                        _sample(85, 1.05, 0.5), _sample(90, 0.8, 0.5), _sample(100, 0.7, 0.5)])
    assert run.acceptable_ms == START + 90_000
    assert run.seconds_to_acceptable == 30.0
    # Moved before alpha's load showed the spike: acceptable once the move is done.
    early = _run(placements=moved, samples=[_sample(70, 0.9), _sample(85, 0.6, 0.4)])
    assert early.acceptable_ms == START + 85_000
    assert _run(samples=[_sample(70, 1.2), _sample(80, 1.3)]).acceptable_ms is None
    # Moves home after the spike's end do not count.
    ended = _run(placements=[*moved, (START + 200_000, "alpha/n1/f", "alpha/a1", "moving")],
                 samples=[_sample(70, 1.2), _sample(90, 0.8), _sample(210, 0.2)],
                 spike_end_ms=START + 150_000)
    assert ended.acceptable_ms == START + 90_000


def test_demand_is_what_alpha_would_carry_if_nothing_moved() -> None:
    run = _run()
    sample = Sample(SPIKE, {}, {}, {"alpha/n0/f": 1.0, "alpha/n1/f": 1.5, "other": 9.0})
    assert run.demand(sample) == pytest.approx(2.5 / 2.0)  # alpha's capacity: 2 slots


def test_latency_runs_from_the_input_closing_the_window_to_the_result() -> None:
    window = 1_800_000_000_000
    run = _run(samples=[_sample(70, 1.5), _sample(90, 0.5)], ended_ms=START + 120_000)
    run.sent_at_ms = {"alpha/n0/f": {window + 10_000: START + 40_000,
                                     window + 20_000: START + 70_000,
                                     window + 30_000: START + 100_000},
                      "alpha/n1/f": {}}
    run.results = {"alpha/n0/f": [
        Arrival("a", {"window_start_ms": window}, START + 41_500),
        Arrival("b", {"window_start_ms": window + 10_000}, START + 75_000),
        Arrival("c", {"window_start_ms": window + 20_000}, START + 101_000),
        Arrival("d", {"window_start_ms": window + 50_000}, START + 130_000),  # no input
    ], "alpha/n1/f": []}
    assert run.latencies() == [(START + 41_500, 1.5), (START + 75_000, 5.0),
                               (START + 101_000, 1.0)]
    assert run.latency_phases() == {"before": 1.5, "during": 5.0, "after": 1.0}
    assert run.seconds_to_latency_back() == pytest.approx(11.0)


def test_lost_and_duplicated_results_are_counted_by_tuple_id() -> None:
    run = _run()
    run.expected = {"alpha/n0/f": {"x": {}, "y": {}}, "alpha/n1/f": {"z": {}}}
    run.results = {"alpha/n0/f": [Arrival("x", {}, 1), Arrival("x", {}, 2)],
                   "alpha/n1/f": [Arrival("z", {}, 3)]}
    lost, duplicated = run.lost_and_duplicated()
    assert lost == {"alpha/n0/f": ["y"], "alpha/n1/f": []}
    assert duplicated == {"alpha/n0/f": ["x"], "alpha/n1/f": []}


def test_utilisation_counts_only_fresh_reports_of_the_scenarios_nodes() -> None:
    now = 2_000_000
    reports = {
        "alpha/a1": {"reported_at": now - 1_000, "capacity": 0.5, "load": 0.75,
                     "fragments": [{"fragment": "alpha/n0/f", "state": "running"},
                                   {"fragment": "alpha/n1/f", "state": "standby"}]},
        "beta/b1": {"reported_at": now - 60_000, "capacity": 1.0, "load": 0.1,
                    "fragments": []},  # stale
        "gamma/other": {"reported_at": now, "capacity": 1.0, "load": 0.9, "fragments": []},
    }
    sample = utilisation_of(reports, {"alpha": "alpha/a1", "beta": "beta/b1"}, now)
    assert sample.utilisation == {"alpha": 1.5}
    assert sample.running == {"alpha/a1": ["alpha/n0/f"]}
    assert sample.loads == {"alpha/n0/f": 0.0, "alpha/n1/f": 0.0}
