"""Load from Spark's batch reports over a sliding window, and BPM's cost D(u) = u/(1-u)
with the marginal cost of removing or adding a fragment."""

from __future__ import annotations

import pytest

from medusa.load import (
    MAX_UTILISATION,
    BatchSample,
    ParticipantLoad,
    cost,
    cost_of_adding,
    cost_of_removing,
    fragment_load,
    participant_loads,
)

pytestmark = pytest.mark.unit

NOW = 100_000


def test_a_sample_is_read_from_a_spark_progress_report() -> None:
    progress = {"timestamp": "1970-01-01T00:01:30.000Z", "batchDuration": 800,
                "numInputRows": 120, "sources": [
                    {"metrics": {"maxOffsetsBehindLatest": "40"}}, {"metrics": {}}]}
    assert BatchSample.of(progress) == BatchSample(90_800, 800, 120, 40)
    assert BatchSample.of({"batchDuration": 5}) is None


def test_a_fragment_that_keeps_up_loads_what_it_is_busy() -> None:
    # A 200 ms batch every second for the last 30 s, nothing waiting behind.
    samples = [BatchSample(NOW - i * 1000, 200, 100) for i in range(40)]
    load = fragment_load(samples, NOW, window_s=30)
    assert load.busy == pytest.approx(0.2)
    assert load.load == pytest.approx(0.2)


def test_a_fragment_falling_behind_shows_the_load_it_asks_for() -> None:
    # Busy all the time, and the backlog grew by as many rows again as it read.
    samples = [BatchSample(NOW - 30_000 + i * 3000, 3000, 300, behind=i * 300)
               for i in range(1, 11)]
    load = fragment_load(samples, NOW, window_s=30)
    assert load.busy == pytest.approx(1.0)
    assert load.demand == pytest.approx(1.9)
    assert load.load == pytest.approx(1.9)


def test_idle_batches_and_batches_outside_the_window_do_not_count() -> None:
    samples = [BatchSample(NOW - 60_000, 5000, 1000), BatchSample(NOW - 1000, 10, 0)]
    load = fragment_load(samples, NOW, window_s=30)
    assert load.demand == 0.0 and load.busy == pytest.approx(10 / 30_000)


def test_cost_is_u_over_one_minus_u_and_finite_but_still_rising_beyond_one() -> None:
    assert cost(0.0) == 0.0
    assert cost(0.5) == pytest.approx(1.0)
    assert cost(0.75) == pytest.approx(3.0)
    assert cost(MAX_UTILISATION) == pytest.approx(99.0)
    # Past the cap, along the tangent: finite, and more load on an overloaded participant
    # still costs more, so that nothing is brought back into an overload as if it were free.
    assert cost(1.0) == pytest.approx(99.0 + 0.01 * 10_000)
    assert cost(1.5) > cost(1.0) > cost(MAX_UTILISATION)
    assert cost_of_adding(3.0, 1.0, 0.5) == pytest.approx(5_000.0)


def test_marginal_costs_of_removing_and_adding() -> None:
    # Two slots, 1.5 in use: removing a 0.5 fragment takes u from 0.75 to 0.5.
    assert cost_of_removing(1.5, 2.0, 0.5) == pytest.approx(3.0 - 1.0)
    # Taking it on a partner with 0.5 of 2 in use: u from 0.25 to 0.5.
    assert cost_of_adding(0.5, 2.0, 0.5) == pytest.approx(1.0 - 1 / 3)
    assert cost_of_removing(0.2, 2.0, 0.5) == pytest.approx(cost(0.1))


def test_participant_loads_sum_their_nodes() -> None:
    reports = [
        {"node": "alpha/n1", "participant": "alpha", "capacity": 2.0,
         "fragments": [{"fragment": "alpha/lr/f1", "load": 1.0, "running_s": 600.0},
                       {"fragment": "alpha/lr/f2", "load": 0.5, "running_s": 12.0}]},
        {"node": "alpha/n2", "participant": "alpha", "capacity": 2.0, "fragments": []},
        {"node": "beta/n1", "participant": "beta", "capacity": 1.0,
         "fragments": [{"fragment": "alpha/lr/f3", "load": 0.25}]},
        {"node": "gamma/old", "participant": "gamma", "fragments": []},  # no capacity
    ]
    loads = participant_loads(reports)
    assert set(loads) == {"alpha", "beta"}
    alpha = loads["alpha"]
    assert (alpha.capacity, alpha.load, alpha.utilisation) == (4.0, 1.5, 0.375)
    # f2 started 12 s ago: its window still holds its start; f3's age is not reported.
    assert alpha.unsettled == {"alpha/lr/f2"} and loads["beta"].unsettled == frozenset()
    assert alpha.marginal_cost("alpha/lr/f1") == pytest.approx(cost(0.375) - cost(0.125))
    assert loads["beta"].cost_of_taking(0.5) == pytest.approx(cost(0.75) - cost(0.25))
    assert ParticipantLoad("x", 1.0, 0.0, {}).marginal_cost("none") == 0.0
