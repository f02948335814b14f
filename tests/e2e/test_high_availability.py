"""A node killed -9 mid-stream: its fragments continue on its secondary, from the
checkpoint (ha: passive) or from a running replica (ha: active), and the sink sees every
result once; a node paused past its detection and resumed is fenced. Checked by tuple id
against the reference."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind
from medusa.jaeger_client import wait_for_trace
from medusa_apps.failover import FailoverOutcome, run_failover
from tests.federation_processes import NodeProcess, SharedNodes, federation_env
from tests.fragment_checks import runs
from tests.waiting import first_within

pytestmark = pytest.mark.e2e

A1, A2 = SharedNodes.A1, SharedNodes.A2
TRACE_EVERY = 25
SECONDS = 20
"""At least; the input goes on until the outputs have recovered from the failure."""
QUICK = {"seconds": SECONDS, "fail_after_first_s": 3.0, "after_recovery_s": 6.0}
"""The failure soon after the first output; input for a few seconds past the recovery."""


@pytest.fixture(scope="module")
def nodes(shared_nodes: SharedNodes) -> dict[str, NodeProcess]:
    return shared_nodes.ready()


def _restart(node: NodeProcess) -> None:
    node.start()
    node.wait_registered()


def _failover(federation, nodes, spark, registry_module, mode: str, primary: str,
              secondary: str, execution: str = "micro-batch",
              sunion: str = "process") -> FailoverOutcome:
    with CatalogClient(federation.catalog_url) as catalog:
        outcome = run_failover(federation, registry_module, spark, catalog, mode, primary,
                               secondary, nodes[primary].kill, trace_every=TRACE_EVERY,
                               execution=execution, sunion=sunion, **QUICK)
    _restart(nodes[primary])  # rejoins as a new incarnation, with no fragments
    return outcome


def _assert_exactly_once(outcome: FailoverOutcome) -> None:
    assert outcome.declared_ms is not None, "the detector never declared the node failed"
    assert outcome.placement_after == dict.fromkeys(("plausible", "per_sensor"),
                                                    outcome.secondary)
    assert not outcome.lost(), f"lost: {outcome.lost()[:5]}"
    assert not outcome.duplicated(), f"duplicated: {outcome.duplicated()[:5]}"
    assert not outcome.wrong(), f"differ from the reference: {outcome.wrong()[:5]}"
    assert outcome.first_after_kill_s is not None, "no output after the kill"


def test_a_real_time_fragment_resumes_on_the_secondary_exactly_once(
        federation, nodes, spark, registry_module) -> None:
    """``execution: real-time``: the stateless check fragment runs in Spark's Real-time
    Mode, its rows relayed through its SOutput; killed -9 with its node, it resumes on the
    secondary from its checkpoint and the relay's committed position, and the sink sees
    every result once (the windows fragment, stateful, stays on micro-batches)."""
    outcome = _failover(federation, nodes, spark, registry_module, "passive", A2, A1,
                        execution="real-time")
    assert outcome.executions == {"check": "real-time", "windows": "micro-batch"}, \
        outcome.executions
    _assert_exactly_once(outcome)


@pytest.mark.scenario  # `make test-scenarios`: another full failover, the suite's time
def test_a_fragment_with_its_sunion_in_the_query_resumes_exactly_once(
        federation, nodes, spark, registry_module) -> None:
    """``sunion: in-query``: the fragments' SUnions are their queries' sources, with the
    input positions in the checkpoints; killed -9 with their node, they resume on the
    secondary from those checkpoints (no SUnion process started there), every result once."""
    outcome = _failover(federation, nodes, spark, registry_module, "passive", A2, A1,
                        sunion="in-query")
    _assert_exactly_once(outcome)


@pytest.fixture(scope="module")
def passive(federation, nodes, spark, registry_module, test_tracing) -> FailoverOutcome:
    return _failover(federation, nodes, spark, registry_module, "passive", A1, A2)


def test_upstream_backup_restores_on_the_secondary_exactly_once(passive) -> None:
    _assert_exactly_once(passive)


def test_the_secondary_said_it_had_rehearsed_the_fragments_before_the_kill(passive) -> None:
    """A passive standby compiles the queries it would take over, and says so in the
    catalog (``rehearsed``), which the failover waits for before it kills."""
    assert passive.rehearsed_s is not None, "the secondary never listed its rehearsals"


def test_the_failure_is_one_trace_in_jaeger(federation, passive) -> None:
    failure = wait_for_trace(
        federation.jaeger_query_url, "medusa-detector", f"node failure {A1}",
        has=["heartbeats missed", "suspicion", "declaration", "placement", "placement",
             "takeover", "takeover", "first output", "first output"])  # two fragments
    root = failure.one("node failure")
    assert root.parent_id is None and root.service == "medusa-detector"
    for stage in ("heartbeats missed", "suspicion", "declaration"):
        assert failure.parent(failure.one(stage)) == root, stage
    declaration = failure.one("declaration")
    placements = failure.named("placement")
    assert {s.attributes["medusa.fragment"].rsplit("/", 1)[1] for s in placements} == {
        "check", "windows"}
    assert all(failure.parent(s) == declaration for s in placements)
    takeovers = failure.named("takeover")
    assert len(takeovers) == 2
    for takeover in takeovers:
        assert takeover.service == f"medusa-node {A2}"
        assert failure.parent(takeover) == root
        assert takeover.attributes["medusa.failed_node"] == A1
        assert "medusa.checkpoint.batch_restored" in takeover.attributes
        assert "medusa.checkpoint.offsets_replayed_from" in takeover.attributes
        firsts = [s for s in failure.named("first output") if s.parent_id == takeover.span_id]
        assert len(firsts) == 1, f"{takeover.name}: no first output after recovery"
    # The stages follow each other in time.
    missed, suspicion = failure.one("heartbeats missed"), failure.one("suspicion")
    assert missed.start_us <= suspicion.start_us <= declaration.start_us
    assert all(t.start_us >= declaration.start_us for t in takeovers)


def test_medusa_trace_shows_the_failure_as_a_timeline(federation, passive, tmp_path) -> None:
    failure = wait_for_trace(
        federation.jaeger_query_url, "medusa-detector", f"node failure {A1}",
        has=["declaration", "takeover", "takeover", "first output", "first output"])
    png = tmp_path / "failure.png"
    result = subprocess.run(
        [sys.executable, "-m", "medusa_apps", "trace", "--last", "5", "--png", str(png)],
        capture_output=True, text=True, timeout=120, check=False,
        env={**federation_env(federation, tmp_path), "COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    shown = result.stdout.split(f"node failure {A1} (trace {failure.trace_id})", 1)
    assert len(shown) == 2, result.stdout
    lines = shown[1].split("(trace ")[0].splitlines()
    for stage in ("heartbeats missed", "suspicion", "declaration", "placement", "takeover",
                  "first output"):
        assert any(stage in line for line in lines), f"{stage} not shown:\n{result.stdout}"
    assert any("[medusa-node " in line for line in lines)
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_sampled_tuples_carry_their_trace_from_producer_to_sink(
        federation, passive, test_tracing) -> None:
    test_tracing.force_flush()
    found = wait_for_trace(federation.jaeger_query_url, "medusa-tests", None,
                           has=["produce", "box plausible", "consume"])
    produced, boxed, consumed = (found.one(n) for n in ("produce", "box plausible", "consume"))
    assert produced.parent_id is None
    assert found.parent(boxed) == produced and boxed.service.startswith("medusa-node ")
    assert found.parent(consumed) == boxed
    assert produced.attributes["medusa.id"] == boxed.attributes["medusa.id"] == \
        consumed.attributes["medusa.id"]


def test_an_active_replica_takes_over_exactly_once(
        federation, nodes, spark, registry_module) -> None:
    outcome = _failover(federation, nodes, spark, registry_module, "active", A2, A1)
    _assert_exactly_once(outcome)


def test_a_node_declared_dead_that_comes_back_is_fenced(
        federation, nodes, spark, registry_module) -> None:
    paused = nodes[A1]
    with CatalogClient(federation.catalog_url) as catalog:
        incarnation = catalog.get(Kind.NODES, A1).spec["incarnation"]

        def pause_until_replaced() -> None:
            paused.signal(signal.SIGSTOP)
            first_within(lambda: len([e for e in catalog.list(Kind.FRAGMENTS)
                                      if e.name.startswith("alpha/ha-pas")
                                      and runs(e, on=A2)]) == 2, 120)
            paused.signal(signal.SIGCONT)  # back, with its queries mid-batch

        outcome = run_failover(federation, registry_module, spark, catalog, "passive", A1,
                               A2, pause_until_replaced, **QUICK)
        rejoined = catalog.get(Kind.NODES, A1)
    _assert_exactly_once(outcome)
    # It stopped its fragments without taking them back, and rejoined as a new incarnation.
    assert rejoined.spec["status"] == "up"
    assert rejoined.spec["incarnation"] != incarnation
