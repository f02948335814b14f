"""DPC over a fragment in Spark's Real-time Mode, on the real stack: the pair network made
stateless (alpha's and beta's readings merged on beta and filtered, ``execution:
real-time``, X = 4 s so D = 3 s). The link between alpha and beta is cut for longer than D:
beta's readings go on as tentative results while it lasts; once it heals, the fragment's
writer reconciles in the stream (UNDO, the corrections, REC_DONE) without its query being
rolled back or restarted, and the stable view equals the fault-free run, each result once."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from medusa.catalog.client import CatalogClient
from medusa.envelope import TupleType
from medusa.federation_status import federation_status
from medusa.sensors import SensorReading, to_dict
from medusa.stable_view import stable_view
from medusa_apps.bench.dpc_partition import Fault, ScenarioRun, deployed, run_scenario
from medusa_spark.networks import realtime_pair_network_yaml

pytestmark = pytest.mark.e2e

SECONDS = 16
BOUND = "4 seconds"
CUT = (5.0, 7.0)
"""(after, for) seconds: longer than D."""
SENSOR_PREFIXES = {"alpha": "a", "beta": "b"}
"""The two inputs' readings have tuple ids of their own (a filter keeps its input's id)."""


def _reference(readings: list[SensorReading]) -> dict[str, dict[str, Any]]:
    """Result id -> result: every reading the filter keeps (``REALTIME_PAIR_PREDICATE``),
    its time as the output's schema gives it back (a timestamp)."""
    return {r.tuple_id: {**to_dict(r), "measured_at": datetime.fromtimestamp(
                r.measured_at / 1000, tz=UTC)}
            for r in readings if r.kind != "vibration"}


@pytest.fixture(scope="module")
def realtime_dpc(federation, beta_node, links, spark, registry_module
                 ) -> Iterator[tuple[ScenarioRun, dict[str, str | None]]]:
    fault = Fault("partition alpha-beta", *CUT, lambda: links.partition("alpha", "beta"),
                  lambda: links.heal("alpha", "beta"))
    placement = {"merged": beta_node.global_name, "kept": beta_node.global_name}
    with CatalogClient(federation.catalog_url) as catalog, deployed(
            federation, registry_module, spark, catalog, realtime_pair_network_yaml, BOUND,
            placement, "kept") as (network, topic):
        run = run_scenario(federation, registry_module, federation.catalog_url, network,
                           topic, SECONDS, [fault], reference=_reference,
                           sensor_prefixes=SENSOR_PREFIXES)
        executions = {f.name: f"{f.execution}: {f.execution_why}" for f in
                      federation_status(federation, registry_module).fragments
                      if f.network == network}
        yield run, executions


def test_the_fragment_runs_in_real_time_mode_with_dpc(realtime_dpc) -> None:
    _, executions = realtime_dpc
    assert [shown.split(":")[0] for shown in executions.values()] == ["real-time"], executions


def test_beta_answers_tentatively_while_cut_off_then_corrects_in_the_stream(
        realtime_dpc) -> None:
    run, _ = realtime_dpc
    assert run.tentative_output_ms(), "no tentative result while alpha was cut off"
    kinds = [c.record.type for c in run.records]
    undo = kinds.index(TupleType.UNDO)
    assert TupleType.TENTATIVE in kinds[:undo], "UNDO before any tentative result"
    assert TupleType.REC_DONE in kinds[undo:], "no REC_DONE after the UNDO"
    rec_done = undo + kinds[undo:].index(TupleType.REC_DONE)
    assert TupleType.TENTATIVE not in kinds[undo:rec_done], \
        "a tentative result of the period after its UNDO (it was superseded)"
    states = [state for _, state in run.dpc_states]
    assert "UP_FAILURE" in states and states[-1] == "STABLE", states


def test_the_stable_view_equals_the_fault_free_run_exactly_once(realtime_dpc) -> None:
    run, _ = realtime_dpc
    view = stable_view(c.record for c in run.records)
    assert not view.reconciling and view.tentative == []
    stable = [c.record.tuple_id for c in run.of(TupleType.STABLE)]
    assert len(stable) == len(set(stable)), "a stable result written twice"
    lost, duplicated = run.lost_and_duplicated()
    assert not lost and not duplicated, f"lost {lost[:5]}, duplicated {duplicated[:5]}"
    wrong = run.wrong_values()
    example = next(iter(wrong), None)
    assert not wrong, (f"{len(wrong)} result(s) differ from the reference, e.g. {example}: "
                       f"written {wrong[example][0]}, expected {wrong[example][1]}"
                       if example else "")
