"""A reader-side replica on the real stack: the pair network's fragment runs on a node of
alpha while its output lives on beta's cluster (availability bound 4 s, so D = 3 s). The
deploy places a replica on beta's node; when the link is cut for longer than D, nothing the
primary computes can reach beta, so the replica takes the output over with tentative
results, the catalog says it serves, and after the heal the output is corrected and the
primary writes it again. The stable view equals the fault-free run, nothing duplicated,
nothing tentative left. (How soon the tentative results come is measured by the DPC
matrix bench, `dpc.matrix`, not asserted here.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from medusa.catalog.client import CatalogClient, CatalogError
from medusa.catalog.model import Kind
from medusa.envelope import TupleType
from medusa_apps.bench.dpc_partition import (
    Fault,
    OutputLog,
    ScenarioRun,
    deployed_pair,
    run_scenario,
)
from tests.federation_processes import SharedNodes
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e

SECONDS = 25
"""At least; the input goes on until the fragment has reconciled from the cut."""
BOUND = "4 seconds"
CUT = (10.0, 12.0)
"""(after, for) seconds: longer than D. It begins once the primary's output flows (a
replica serves only an output its primary has written since the replica began), whenever
that is after this."""


def output_flows(log: OutputLog) -> bool:
    """The primary's first batch has promised a BOUNDARY on the output (the deploy's own,
    at stime 0, announces the topic only)."""
    return any(c.record.stime > 0 for c in log.of(TupleType.BOUNDARY))


class ServingLog:
    """Who the catalog says serves the fragment's output, sampled while the scenario runs."""

    def __init__(self, catalog_url: str, network: str) -> None:
        self.catalog_url = catalog_url
        self.network = network
        self.seen: list[str | None] = []
        self.reader_replica: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> ServingLog:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _sample(self) -> None:
        with CatalogClient(self.catalog_url) as catalog:
            while not self._stop.wait(0.3):
                try:
                    entries = catalog.list(Kind.FRAGMENTS, network=self.network)
                except CatalogError:  # slow under load: the next sample tells
                    continue
                for entry in entries:
                    self.reader_replica = entry.spec.get("reader_replica")
                    serving = entry.spec.get("serving")
                    if not self.seen or self.seen[-1] != serving:
                        self.seen.append(serving)


@pytest.fixture(scope="module")
def nodes(shared_nodes: SharedNodes) -> dict[str, str]:
    ready = shared_nodes.ready()
    return {"primary": ready[SharedNodes.A1].global_name,
            "reader": ready[SharedNodes.B1].global_name}


@pytest.fixture(scope="module")
def cut_run(federation, nodes, links, spark,
            registry_module) -> Iterator[tuple[ScenarioRun, ServingLog]]:
    cut = Fault("partition alpha-beta", *CUT, lambda: links.partition("alpha", "beta"),
                lambda: links.heal("alpha", "beta"), once=output_flows)
    with CatalogClient(federation.catalog_url) as catalog, deployed_pair(
            federation, registry_module, spark, catalog, nodes["primary"], BOUND) as (
            network, topic):
        with ServingLog(federation.catalog_url, network) as serving:
            run = run_scenario(federation, registry_module, federation.catalog_url, network,
                               topic, SECONDS, [cut])
            # Once reconciled, the primary takes its output back.
            wait_until(lambda: f"the primary to write its output again (serving {serving.seen}; "
                       f"DPC states {run.dpc_states})",
                       lambda: bool(serving.seen) and serving.seen[-1] is None, 180)
        yield run, serving


def test_the_deploy_places_a_replica_where_the_output_is_read(cut_run, nodes) -> None:
    _, serving = cut_run
    assert serving.reader_replica == nodes["reader"]


def test_the_replica_serves_tentative_results_during_the_cut(cut_run, nodes) -> None:
    run, serving = cut_run
    fault = run.faults[0]
    boundaries = [(c.timestamp_ms, c.record.stime) for c in run.of(TupleType.BOUNDARY)]
    assert nodes["reader"] in serving.seen, (
        f"serving {serving.seen}; cut {fault.began_ms}..{fault.ended_ms}; the output's first "
        f"boundaries (written at, stime): {boundaries[:6]}")
    during = [ms for ms in run.tentative_output_ms() if fault.began_ms <= ms <= fault.ended_ms]
    assert during, "no tentative output reached beta's readers while the link was cut"


def test_after_the_heal_the_output_is_corrected_and_equals_the_fault_free_run(cut_run) -> None:
    run, _ = cut_run
    assert run.unlike_fault_free() is None, run.unlike_fault_free()
