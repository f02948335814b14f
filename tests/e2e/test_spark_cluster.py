"""A node on a real Spark standalone cluster (master and worker started from the pyspark
installation) runs the sensor-windows network, which then moves to a node in local mode
under continuous input; every result arrives once and equals the reference."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind
from medusa.contracts import hosting
from medusa.sensor_windows import Arrival, OutputWatch, SteadyInput
from medusa.settings import kafka_config
from medusa_spark.deploy import deploy, move, undeploy
from medusa_spark.networks import network_yaml
from tests.federation_processes import NodeProcess, SharedNodes, running
from tests.fragment_checks import wait_network_running
from tests.spark_cluster import SparkStandalone
from tests.waiting import wait_until

# A long scenario (a standalone cluster's master and worker, a node on it, a move off it):
# `make test-scenarios` runs it; the how-to it follows is docs/how-to/run-on-a-spark-cluster.md.
pytestmark = [pytest.mark.e2e, pytest.mark.scenario]

SENSORS = 4
ON_CLUSTER, LOCAL = "beta/sc-b1", SharedNodes.B1
"""The node on the cluster, and the session's shared beta node in local mode."""
WAIT_S = 300.0
"""Upper bound of every wait; a wait ends as soon as what it waits for is observed."""

# What is specific to the network and to today's placement unit (the fragment), in one
# place: its boxes, the topics checked, where its boxes run and how they move.
BOXES = ("plausible", "per_sensor")
RESULTS, PASSED = "per_sensor", "plausible"
FRAGMENTS = {"plausible": "check", "per_sensor": "windows"}
"""Two fragments, so that the boxes' results both leave on topics the test reads."""


def _wait_running_on(catalog: CatalogClient, network: str, node: str) -> None:
    wait_network_running(catalog, network, dict.fromkeys(BOXES, node), WAIT_S)


def _move_all(catalog: CatalogClient, network: str, target: str) -> None:
    for entry in catalog.list(Kind.FRAGMENTS, network=network):
        if entry.spec["node"] != target:
            move(catalog, entry.name, target, timeout_s=WAIT_S, report=lambda _: None)
    _wait_running_on(catalog, network, target)


def _until(condition: Callable[[], Any], what: str, steady: SteadyInput) -> None:
    """Until ``condition()`` holds; the input keeps flowing meanwhile."""
    def observed() -> bool:
        if condition():
            return True
        assert steady.error is None, steady.error
        return False

    wait_until(what, observed, WAIT_S)


@dataclass
class ClusterRun:
    app: dict[str, Any]
    """The node's application, as the cluster's master listed it while the node ran it."""
    executor_jars: list[str]
    """Jars the worker fetched into the folders of that application's executors."""
    sent_ids: list[str]
    expected: dict[str, dict[str, Any]]
    results: list[Arrival]
    passed: list[str]
    move_started_ms: int
    moved_ms: int
    """When every box ran on the local node (the cluster node had released them)."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[SparkStandalone]:
    with SparkStandalone(tmp_path_factory.mktemp("spark-standalone"), cores=2,
                         memory="2g") as standalone:
        yield standalone


@pytest.fixture(scope="module")
def nodes(federation, cluster, shared_nodes, tmp_path_factory
          ) -> Iterator[dict[str, NodeProcess]]:
    run_dir = tmp_path_factory.mktemp("sc-nodes")
    local = shared_nodes.ready()[LOCAL]
    started = {ON_CLUSTER: NodeProcess("sc-b1", "beta", federation, run_dir,
                                       master=cluster.master_url)}
    with running(started):
        yield {**started, LOCAL: local}


@pytest.fixture(scope="module")
def run(federation, cluster, nodes, spark) -> Iterator[ClusterRun]:
    from medusa.registry import registry_client

    registry = registry_client(federation.registry_url)
    name = f"sc-{uuid.uuid4().hex[:6]}"
    network, prefix = f"alpha/{name}", f"{name}."
    topics = {box: f"{prefix}medusa.{name}.{box}" for box in (RESULTS, PASSED)}
    with CatalogClient(federation.catalog_url) as catalog:
        hosting(catalog, "alpha", "beta", network)  # beta's nodes run alpha's network
        deploy(network_yaml(name, prefix, fragments=FRAGMENTS), name, federation, registry,
               spark, catalog, dict.fromkeys(BOXES, ON_CLUSTER), report=lambda _: None)
        try:
            _wait_running_on(catalog, network, ON_CLUSTER)
            watch = OutputWatch(kafka_config(federation.bootstrap("beta")), registry,
                                list(topics.values())).start()
            done = threading.Event()
            steady = SteadyInput(kafka_config(federation.bootstrap("alpha")), registry,
                                 f"{prefix}sensors.readings", SENSORS, 0,
                                 keep_going=lambda: not done.is_set())
            steady.start()
            _until(lambda: watch.ids(topics[RESULTS]), "results from the cluster node", steady)
            apps = [a for a in cluster.master_state()["activeapps"]
                    if a["name"].endswith(nodes[ON_CLUSTER].name)]
            assert apps, f"the master lists no application of {ON_CLUSTER}"
            jars = sorted(p.name for p in cluster.work_dir.glob(f"{apps[0]['id']}/*/*.jar"))

            move_started_ms = int(time.time() * 1000)
            _move_all(catalog, network, LOCAL)
            moved_ms = int(time.time() * 1000)
            _until(lambda: any(a.appended_ms > moved_ms for a in watch.arrived(topics[RESULTS])),
                   "results from the local node after the move", steady)
            done.set()
            assert steady.finished.wait(60) and steady.error is None, steady.error
            expected = steady.expected()
            watch.wait_for(topics[RESULTS], set(expected), timeout_s=WAIT_S)
            watch.wait_for(topics[PASSED], {r.tuple_id for r in steady.sent}, timeout_s=WAIT_S)
            watch.stop()
            yield ClusterRun(apps[0], jars, [r.tuple_id for r in steady.sent], expected,
                             watch.arrived(topics[RESULTS]), watch.ids(topics[PASSED]),
                             move_started_ms, moved_ms)
        finally:
            undeploy(catalog, network, report=lambda _: None)


def test_the_cluster_ran_the_node_and_its_executors_got_the_connectors(run) -> None:
    assert run.app["state"] == "RUNNING" and run.app["cores"] >= 1, run.app
    assert any(jar.startswith("spark-sql-kafka") for jar in run.executor_jars), run.executor_jars


def test_results_came_from_the_cluster_node_then_from_the_local_one(run) -> None:
    assert any(a.appended_ms < run.move_started_ms for a in run.results), "none before the move"
    assert any(a.appended_ms > run.moved_ms for a in run.results), "none after the move"


def test_every_result_once_and_equal_to_the_reference(run) -> None:
    counts = Counter(a.tuple_id for a in run.results)
    assert not [i for i, n in counts.items() if n > 1], "results written twice"
    assert set(counts) == set(run.expected), (
        f"missing {sorted(set(run.expected) - set(counts))[:5]}, "
        f"unexpected {sorted(set(counts) - set(run.expected))[:5]}")
    for arrival in run.results:
        assert arrival.value == run.expected[arrival.tuple_id], arrival.tuple_id
    passed, sent = Counter(run.passed), Counter(run.sent_ids)
    assert passed == sent, (
        f"readings lost {list(sent - passed)[:5]}, extra {list(passed - sent)[:5]}")
