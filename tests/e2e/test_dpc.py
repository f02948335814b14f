"""DPC on the real stack: two sensor streams, one per participant, merged and averaged
per window by a fragment on beta with an availability bound. The link between alpha and
beta is cut twice (toxiproxy): once for less than D (nothing tentative may come of it),
then for much longer (tentative results while it lasts; after it heals, UNDO, the
corrected results and REC_DONE, and a stable view equal to the fault-free reference,
tuple for tuple). The long cut is one trace in Jaeger, from the SUnion's delay to the
writer's REC_DONE."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from medusa.catalog.client import CatalogClient
from medusa.envelope import TupleType
from medusa.faults import Links
from medusa.jaeger_client import Trace
from medusa.stable_view import stable_view
from medusa.trace_view import recent, roots
from medusa_apps.bench.dpc_partition import Fault, ScenarioRun, deployed_pair, run_scenario
from tests.federation_processes import NodeProcess, SharedNodes, federation_env

pytestmark = pytest.mark.e2e

SECONDS = 30
"""At least; the input goes on until the last failure has ended."""
BOUND = "4 seconds"
D_S = 3.0
"""The fragment's delay: (4 s - one 1 s trigger) / one fragment."""
SHORT_FAILURE = (8.0, 1.5)
"""(after, for) seconds: shorter than D."""
LONG_FAILURE = (22.0, 25.0)
"""Long enough that two 10-second windows close on tentative boundaries while it lasts,
however slow the machine's batches are."""


@pytest.fixture(scope="module")
def node(shared_nodes: SharedNodes) -> NodeProcess:
    return shared_nodes.ready()[SharedNodes.B1]


def partition(links: Links, at_s: float, for_s: float) -> Fault:
    return Fault("partition alpha-beta", at_s, for_s, lambda: links.partition("alpha", "beta"),
                 lambda: links.heal("alpha", "beta"))


@pytest.fixture(scope="module")
def dpc_run(federation, node, links, spark, registry_module) -> Iterator[ScenarioRun]:
    with CatalogClient(federation.catalog_url) as catalog, deployed_pair(
            federation, registry_module, spark, catalog, node.global_name, BOUND) as (
            network, topic):
        yield run_scenario(federation, registry_module, federation.catalog_url, network, topic,
                           SECONDS, [partition(links, *SHORT_FAILURE),
                                     partition(links, *LONG_FAILURE)])


def test_a_failure_shorter_than_d_gives_no_tentative_tuple(dpc_run: ScenarioRun) -> None:
    long_began = dpc_run.faults[1].began_ms
    early = [c for c in dpc_run.records if c.record.type is TupleType.TENTATIVE
             and c.timestamp_ms < long_began]
    assert early == [], f"{len(early)} tentative result(s) before the long failure"


def test_a_longer_failure_gives_tentative_results_while_it_lasts(dpc_run: ScenarioRun) -> None:
    began, healed = dpc_run.faults[1].began_ms, dpc_run.faults[1].ended_ms
    tentative = [c for c in dpc_run.records if c.record.type is TupleType.TENTATIVE]
    assert tentative, "no tentative result during a 25 s failure with D = 3 s"
    first = min(c.timestamp_ms for c in tentative)
    assert began < first < healed, (
        f"the first tentative result came {(first - began) / 1000:.1f}s after the failure "
        f"began, which lasted {(healed - began) / 1000:.1f}s")


def test_after_healing_undo_corrections_and_rec_done_come_in_order(dpc_run: ScenarioRun) -> None:
    by_partition: dict[int, list[TupleType]] = {}
    for consumed in dpc_run.records:
        if consumed.record.type is not TupleType.BOUNDARY:
            by_partition.setdefault(consumed.partition, []).append(consumed.record.type)
    for partition, types in by_partition.items():
        assert TupleType.UNDO in types and TupleType.REC_DONE in types, (partition, types)
        undo, done = types.index(TupleType.UNDO), types.index(TupleType.REC_DONE)
        assert undo < done
        assert TupleType.TENTATIVE not in types[undo:done], \
            "no tentative result between UNDO and REC_DONE"


def test_the_stable_view_equals_the_fault_free_run(dpc_run: ScenarioRun) -> None:
    view = stable_view(c.record for c in dpc_run.records)
    got = {r.tuple_id: r.value for r in view.stable}
    missing = sorted(set(dpc_run.expected) - set(got))
    extra = sorted(set(got) - set(dpc_run.expected))
    assert not missing and not extra, f"missing {missing[:5]}, extra {extra[:5]}"
    wrong = {i: (got[i], v) for i, v in dpc_run.expected.items()
             if {k: got[i][k] for k in v} != v}
    assert not wrong, f"{len(wrong)} corrected result(s) differ, e.g. {list(wrong.items())[:2]}"
    assert view.tentative == [] and not view.reconciling


def test_the_catalog_shows_the_fragment_fail_stabilize_and_come_back(dpc_run: ScenarioRun) -> None:
    states = [state for _, state in dpc_run.dpc_states]
    assert "UP_FAILURE" in states and "STABILIZATION" in states, states
    assert states.index("UP_FAILURE") < len(states) - 1 - states[::-1].index("STABILIZATION")
    assert states[-1] == "STABLE", states


def test_medusa_verify_finds_the_output_equal_to_the_reference(dpc_run: ScenarioRun, federation,
                                                                 tmp_path) -> None:
    reference = tmp_path / "fault-free.jsonl"
    reference.write_text("".join(json.dumps({"type": "STABLE", "id": i, "stime": 0, "value": v})
                                 + "\n" for i, v in dpc_run.expected.items()))
    command = [sys.executable, "-m", "medusa_apps", "verify", dpc_run.topic, "--against",
               str(reference), "--participant", "beta", "--idle", "3"]
    env = federation_env(federation, tmp_path)
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "equal" in done.stdout
    # One result changed in the reference: the difference is found and named.
    changed = next(iter(dpc_run.expected))
    wrong = {**dpc_run.expected, changed: {**dpc_run.expected[changed], "readings": -1}}
    reference.write_text("".join(json.dumps({"type": "STABLE", "id": i, "value": v}) + "\n"
                                 for i, v in wrong.items()))
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1 and changed in done.stdout + done.stderr


def _partition_trace(query_url: str, network: str, spans: list[str],
                     timeout_s: float = 90.0) -> Trace:
    """The newest partition trace of a fragment of ``network`` with every span named."""
    deadline = time.monotonic() + timeout_s
    seen: list[list[str]] = []
    while time.monotonic() < deadline:
        found = [t for t in recent(query_url, "partition", 10, 3600)
                 if any(r.name.startswith(f"up-failure {network}/") for r in roots(t))]
        seen = [sorted(s.name.split(" ")[0] for s in t.spans) for t in found]
        complete = [t for t in found if all(t.named(name) for name in spans)]
        if complete:
            return complete[0]
        time.sleep(2)
    raise AssertionError(f"no partition trace of {network} with {spans}; found {seen}")


def test_the_long_failure_is_one_trace_from_the_delay_to_rec_done(dpc_run: ScenarioRun,
                                                                   federation, node) -> None:
    network = "alpha/" + dpc_run.topic.split(".", 1)[0]  # as deployed_pair names it
    stages = ["delay", "tentative release", "heal", "stabilization", "reconcile", "REC_DONE"]
    found = _partition_trace(federation.jaeger_query_url, network, stages)
    [root] = roots(found)
    assert root.service == "medusa-sunion"
    for stage in stages:
        assert found.parent(found.one(stage)) == root, stage
    heal, reconcile, rec_done = (found.one(n) for n in ("heal", "reconcile", "REC_DONE"))
    for span in (reconcile, rec_done):
        assert span.service == f"medusa-node {node.global_name}"
    assert heal.start_us <= reconcile.start_us <= rec_done.start_us
    epoch = found.one("tentative release").attributes["medusa.dpc.epoch"]
    assert rec_done.attributes["medusa.dpc.epoch"] == epoch
    assert rec_done.attributes["medusa.dpc.rolled_back_batches"] >= 1
