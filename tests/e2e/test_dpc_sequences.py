"""DPC through harder sequences on the real stack (toxiproxy on the alpha-beta link): two
failures in a row, the second beginning while the fragment stabilizes from the first, then
a third during which the node is killed with kill -9 and started again while still cut
off. Each failure is corrected, and the stable view equals the fault-free run."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind
from medusa.envelope import TupleType
from medusa_apps.bench.dpc_partition import (
    Fault,
    OutputLog,
    ScenarioRun,
    deployed_pair,
    run_scenario,
)

# A long scenario (three failures, a node killed and started again while cut off): the
# DPC paths it goes through are in `make test` one at a time (test_dpc, test_readme_dpc,
# test_dpc_chain, test_dpc_realtime); `make test-scenarios` runs it.
pytestmark = [pytest.mark.e2e, pytest.mark.scenario]

SECONDS = 30
"""At least; the input goes on until the last failure has ended."""
BOUND = "4 seconds"
FIRST = (10.0, 12.0)
SECOND_FOR_S = 15.0
"""Begins once the catalog shows the fragment stabilizing from the first."""
THIRD = (50.0, 75.0)
"""At most: it ends once the restarted node has written tentative output."""
KILL_AFTER_S = 3.0
"""Into the third failure: the node dies, and starts again (Spark's start takes a while)."""


@pytest.fixture(scope="module")
def restarts() -> list[int]:
    return []


@pytest.fixture(scope="module")
def sequence_run(federation, beta_node, links, spark, registry_module,
                 restarts) -> Iterator[ScenarioRun]:
    def cut() -> None:
        links.partition("alpha", "beta")

    def heal() -> None:
        links.heal("alpha", "beta")

    def cut_and_kill() -> None:
        cut()

        def kill_and_restart() -> None:
            beta_node.kill()
            beta_node.start()
            restarts.append(_now_ms())

        threading.Timer(KILL_AFTER_S, kill_and_restart).start()

    with CatalogClient(federation.catalog_url) as catalog, deployed_pair(
            federation, registry_module, spark, catalog, beta_node.global_name, BOUND) as (
            network, topic):
        fragments = [e.name for e in catalog.list(Kind.FRAGMENTS, network=network)]

        def stabilizing(_: OutputLog) -> bool:
            entries = [catalog.get(Kind.FRAGMENTS, name) for name in fragments]
            return any(e is not None and e.spec.get("dpc_state") == "STABILIZATION"
                       for e in entries)

        faults = [Fault("partition 1", *FIRST, cut, heal),
                  Fault("partition 2, while stabilizing", FIRST[0] + FIRST[1], SECOND_FOR_S,
                        cut, heal, once=stabilizing),
                  Fault("partition 3, kill -9 of the node", *THIRD, cut_and_kill, heal,
                        until=lambda log: _tentative_after_restart(log, restarts))]
        yield run_scenario(federation, registry_module, federation.catalog_url, network, topic,
                           SECONDS, faults, settle_timeout_s=300)


def _tentative_after_restart(log: OutputLog, restarts: list[int]) -> bool:
    """The restarted node has written tentative output (a few seconds' worth)."""
    return bool(restarts) and len([
        c for c in list(log.records) if c.timestamp_ms > restarts[0] and (
            c.record.type is TupleType.TENTATIVE or "/tentative/" in c.record.tuple_id)]) >= 3


def _now_ms() -> int:
    import time

    return time.time_ns() // 1_000_000


def _epochs(run: ScenarioRun, kind: TupleType) -> set[str]:
    """The UP_FAILURE periods that UNDO or REC_DONE records name (``.../<epoch>/<p>``)."""
    return {c.record.tuple_id.rsplit("/", 2)[-2] for c in run.of(kind)}


def test_the_second_failure_began_while_the_first_was_stabilizing(
        sequence_run: ScenarioRun) -> None:
    first, second, _ = sequence_run.faults
    between = [state for at, state in sequence_run.dpc_states
               if first.ended_ms <= at <= second.began_ms + 1000]
    assert "STABILIZATION" in between and "STABLE" not in between, sequence_run.dpc_states


def test_every_failure_gave_tentative_output_and_was_corrected(
        sequence_run: ScenarioRun) -> None:
    tentative = sequence_run.tentative_output_ms()
    done = sorted(c.timestamp_ms for c in sequence_run.of(TupleType.REC_DONE))
    for fault in sequence_run.faults:
        # While it lasts, or (a failure that began as the query restarted to reconcile)
        # before the REC_DONE that corrects it.
        corrected_by = next((t for t in done if t > fault.ended_ms), fault.ended_ms)
        assert any(fault.began_ms < t < corrected_by for t in tentative), fault.label
    # A failure that begins before the REDO of the one before belongs to its period.
    assert len(_epochs(sequence_run, TupleType.REC_DONE)) >= 2
    assert _epochs(sequence_run, TupleType.UNDO) == _epochs(sequence_run, TupleType.REC_DONE)
    assert sequence_run.dpc_states[-1][1] == "STABLE"


def test_the_node_killed_while_cut_off_went_on_tentatively(sequence_run: ScenarioRun,
                                                           restarts: list[int]) -> None:
    assert len(restarts) == 1, "the node was killed and started again"
    third = sequence_run.faults[2]
    after_restart = [t for t in sequence_run.tentative_output_ms()
                     if restarts[0] < t < third.ended_ms]
    assert after_restart, ("no tentative output from the restarted node while the link was "
                           f"still cut ({(third.ended_ms - restarts[0]) / 1000:.0f}s)")


def test_the_stable_view_equals_the_fault_free_run(sequence_run: ScenarioRun) -> None:
    lost, duplicated = sequence_run.lost_and_duplicated()
    assert not lost and not duplicated, f"lost {lost[:5]}, duplicated {duplicated[:5]}"
    wrong = sequence_run.wrong_values()
    assert not wrong, f"{len(wrong)} corrected result(s) differ, e.g. {list(wrong.items())[:2]}"
