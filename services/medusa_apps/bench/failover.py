"""Failover under load: a node killed -9 mid-stream, for upstream backup and active
standby; and false failure declarations of a live node whose CPU is saturated.

Two nodes of participant alpha, each the other's secondary. For each HA mode the
sensor-windows network runs on one node and that node's process group is killed;
the figures come from the sink's view (Kafka timestamps of the results) and the
catalog (when the node was declared failed). The load part runs busy processes,
two per core, beside a node with a network running, and counts the detector's
suspicions and declarations of that node.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import httpx
from confluent_kafka.schema_registry import SchemaRegistryClient
from pyspark.sql import SparkSession

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind
from medusa.endpoints import Endpoints
from medusa.sensor_windows import SteadyInput
from medusa.settings import kafka_config
from medusa.stack import processes
from medusa.stack.layout import StackLayout
from medusa_apps.bench.nodes import start_node
from medusa_apps.failover import FailoverOutcome, run_failover, wait_placed
from medusa_spark.deploy import deploy, undeploy, wait_for_node
from medusa_spark.networks import network_yaml

NODES = ("alpha/bench-ha-1", "alpha/bench-ha-2")
LOAD_S = 60
INPUT_S = 100


@dataclass(frozen=True)
class FalsePositives:
    seconds: float
    busy_processes: int
    suspicions: int
    """Suspicions raised and cleared again, of any node, while the load ran."""
    declared_failed: bool
    acceptable_pause_s: float
    heartbeat_interval_s: float | None = None
    heartbeat_gaps: dict[str, float | int] | None = None
    """How far apart the loaded node's heartbeats arrived at the detector (p50, p99,
    longest): what the interval and the acceptable pause are chosen from."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _kill(process: processes.RunningProcess) -> Callable[[], None]:
    def kill() -> None:
        os.killpg(process.pid, signal.SIGKILL)  # the node and its JVM, as a machine dies
    return kill


def measure(endpoints: Endpoints, registry: SchemaRegistryClient, spark: SparkSession,
            layout: StackLayout, say: Callable[[str], None]
            ) -> tuple[list[FailoverOutcome], FalsePositives | None]:
    outcomes: list[FailoverOutcome] = []
    running: dict[str, processes.RunningProcess] = {}
    with CatalogClient(endpoints.catalog_url) as catalog:
        try:
            for node, other in (NODES, NODES[::-1]):
                running[node] = start_node(layout, node, secondary=other)
            for node in NODES:
                wait_for_node(catalog, node, timeout_s=240)
            for mode, primary, secondary in (("passive", *NODES), ("active", *NODES[::-1])):
                # Input goes on for a minute after the kill, to show the recovery's pace.
                outcomes.append(run_failover(endpoints, registry, spark, catalog, mode,
                                             primary, secondary, _kill(running[primary]),
                                             seconds=INPUT_S, say=say))
                _restart(layout, catalog, running, primary, secondary)
            load = _false_positives(endpoints, registry, spark, catalog, layout, say)
        finally:
            for process in running.values():
                processes.stop(process)
    return outcomes, load


def _restart(layout: StackLayout, catalog: CatalogClient,
             running: dict[str, processes.RunningProcess], node: str, secondary: str) -> None:
    before = catalog.get(Kind.NODES, node)
    processes.stop(running[node])
    running[node] = start_node(layout, node, secondary=secondary)
    wait_for_node(catalog, node, timeout_s=240,
                  since_incarnation=before.spec.get("incarnation") if before else None)


def _busy(stop_at: float) -> None:
    while time.time() < stop_at:
        pass


def _detector_view(layout: StackLayout) -> dict[str, Any]:
    response = httpx.get(f"{layout.detector_url}/nodes", timeout=5)
    response.raise_for_status()
    view: dict[str, Any] = response.json()
    return view


def _false_positives(endpoints: Endpoints, registry: SchemaRegistryClient,
                     spark: SparkSession, catalog: CatalogClient, layout: StackLayout,
                     say: Callable[[str], None]) -> FalsePositives | None:
    try:
        before = _detector_view(layout)
    except httpx.HTTPError:
        say("  the detector's /nodes does not answer; skipping the load measurement")
        return None
    node = NODES[0]
    known = catalog.get(Kind.NODES, node)
    if known is None:
        raise RuntimeError(f"node {node} is not in the catalog")
    incarnation = known.spec.get("incarnation")
    name = f"bench-load-{uuid.uuid4().hex[:6]}"
    deploy(network_yaml(name, f"{name}."), name, endpoints, registry, spark, catalog,
           {"plausible": node, "per_sensor": node}, report=lambda _: None)
    try:
        wait_placed(catalog, f"alpha/{name}", node, None)
        steady = SteadyInput(kafka_config(endpoints.bootstrap("alpha")), registry,
                             f"{name}.sensors.readings", 50, LOAD_S)
        steady.start()
        hogs = 2 * (os.cpu_count() or 1)
        say(f"  {hogs} busy processes for {LOAD_S} s beside {node}")
        stop_at = time.time() + LOAD_S
        workers = [multiprocessing.Process(target=_busy, args=(stop_at,)) for _ in range(hogs)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        steady.finished.wait(60)
        after = _detector_view(layout)
        entry = catalog.get(Kind.NODES, node)
    finally:
        undeploy(catalog, f"alpha/{name}", report=lambda _: None)
    result = FalsePositives(
        seconds=LOAD_S, busy_processes=hogs,
        suspicions=after["false_suspicions"] - before["false_suspicions"],
        # Declared failed, it would have rejoined as a new incarnation by now.
        declared_failed=entry is None or entry.spec.get("incarnation") != incarnation,
        acceptable_pause_s=after["acceptable_pause_s"],
        heartbeat_interval_s=after.get("heartbeat_interval_s"),
        heartbeat_gaps=after.get("watched", {}).get(node, {}).get("gaps"))
    say(f"  under load: {result.suspicions} suspicion(s) raised and cleared, node declared "
        f"failed: {'yes' if result.declared_failed else 'no'}; heartbeat gaps "
        f"{result.heartbeat_gaps}")
    return result

