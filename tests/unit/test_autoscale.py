"""The autoscale policy: out on a lasting bottleneck with a node to spare, in when every
instance idles for long enough, nothing during a cooldown (the hysteresis)."""

from __future__ import annotations

from typing import Any

import pytest

from medusa.autoscale import AutoscalePolicy, AutoscaleState, base_fragment, decide

pytestmark = pytest.mark.unit

FRAGMENT = "alpha/sw/main"
ONE = {FRAGMENT: {FRAGMENT}}
TWO = {FRAGMENT: {f"{FRAGMENT}--g1-0", f"{FRAGMENT}--g1-1"}}
POLICY = AutoscalePolicy(out_after_s=30, in_below_load=0.25, in_after_s=120, cooldown_s=90,
                         max_instances=3)


def _report(node: str, utilisation: float, *fragments: tuple[str, float, float]
            ) -> dict[str, Any]:
    return {"node": node, "utilisation": utilisation,
            "fragments": [{"fragment": name, "state": "running", "load": load,
                           "bottleneck_s": bottleneck} for name, load, bottleneck in fragments]}


def test_a_lasting_bottleneck_scales_out_onto_a_node_with_spare_capacity() -> None:
    reports = [_report("alpha/n1", 1.0, (FRAGMENT, 1.2, 45.0)), _report("alpha/n2", 0.1),
               _report("beta/n1", 0.0)]
    [decision] = decide(POLICY, reports, ONE, AutoscaleState(), now=1000.0)
    assert (decision.instances, decision.to) == (1, 2)
    assert decision.nodes == ["alpha/n1", "alpha/n2"]  # its own participant's node
    assert "bottleneck for 45s" in decision.reason


def test_a_short_bottleneck_or_no_spare_node_changes_nothing() -> None:
    short = [_report("alpha/n1", 1.0, (FRAGMENT, 1.2, 10.0)), _report("alpha/n2", 0.1)]
    busy = [_report("alpha/n1", 1.0, (FRAGMENT, 1.2, 60.0)), _report("alpha/n2", 0.9)]
    assert decide(POLICY, short, ONE, AutoscaleState(), now=1000.0) == []
    assert decide(POLICY, busy, ONE, AutoscaleState(), now=1000.0) == []


def test_a_fragment_that_cannot_be_split_is_left_alone() -> None:
    reports = [_report("alpha/n1", 1.0, (FRAGMENT, 1.2, 60.0)), _report("alpha/n2", 0.1)]
    assert decide(POLICY, reports, {}, AutoscaleState(), now=1000.0) == []


def test_idle_instances_scale_in_only_after_the_wait() -> None:
    reports = [_report("alpha/n1", 0.1, (f"{FRAGMENT}--g1-0", 0.1, 0.0)),
               _report("alpha/n2", 0.1, (f"{FRAGMENT}--g1-1", 0.05, 0.0))]
    state = AutoscaleState()
    assert decide(POLICY, reports, TWO, state, now=1000.0) == []
    assert decide(POLICY, reports, TWO, state, now=1100.0) == []
    [decision] = decide(POLICY, reports, TWO, state, now=1121.0)
    assert (decision.instances, decision.to, decision.nodes) == (2, 1, ["alpha/n1"])


def test_one_busy_instance_restarts_the_wait_for_scale_in() -> None:
    idle = [_report("alpha/n1", 0.1, (f"{FRAGMENT}--g1-0", 0.1, 0.0)),
            _report("alpha/n2", 0.1, (f"{FRAGMENT}--g1-1", 0.05, 0.0))]
    busy = [_report("alpha/n1", 0.5, (f"{FRAGMENT}--g1-0", 0.5, 0.0)),
            _report("alpha/n2", 0.1, (f"{FRAGMENT}--g1-1", 0.05, 0.0))]
    state = AutoscaleState()
    decide(POLICY, idle, TWO, state, now=1000.0)
    decide(POLICY, busy, TWO, state, now=1100.0)
    assert decide(POLICY, idle, TWO, state, now=1130.0) == []


def test_no_step_during_the_cooldown_nor_beyond_the_largest_count() -> None:
    reports = [_report("alpha/n1", 1.0, (FRAGMENT, 1.2, 60.0)), _report("alpha/n2", 0.1)]
    state = AutoscaleState(last_step={FRAGMENT: 950.0})
    assert decide(POLICY, reports, ONE, state, now=1000.0) == []
    full = [_report(f"alpha/n{i}", 1.0, (f"{FRAGMENT}--g1-{i}", 1.2, 60.0)) for i in range(3)]
    three = {FRAGMENT: {f"{FRAGMENT}--g1-{i}" for i in range(3)}}
    assert decide(POLICY, [*full, _report("alpha/n9", 0.0)], three, AutoscaleState(),
                  now=1000.0) == []


def test_only_the_instances_the_catalog_lists_count() -> None:
    """A node's report older than the last step still lists the instance it retired: it
    does not count (counted, a 1 -> 2 step read as 3 instances and stepped again)."""
    stale = [_report("alpha/n1", 0.1, (FRAGMENT, 0.1, 0.0), (f"{FRAGMENT}--g1-0", 0.1, 0.0)),
             _report("alpha/n2", 0.1, (f"{FRAGMENT}--g1-1", 0.05, 0.0))]
    policy = POLICY.model_copy(update={"in_after_s": 0})
    [decision] = decide(policy, stale, TWO, AutoscaleState(), now=1000.0)
    assert (decision.instances, decision.to, decision.nodes) == (2, 1, ["alpha/n1"])
    # Until a report lists every new instance, the fragment is left alone.
    assert decide(policy, stale[:1], TWO, AutoscaleState(), now=1000.0) == []


def test_an_instance_belongs_to_its_fragment() -> None:
    assert base_fragment(f"{FRAGMENT}--g3-1") == FRAGMENT
    assert base_fragment(FRAGMENT) == FRAGMENT
