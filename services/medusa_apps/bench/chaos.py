"""`medusa chaos`: the infrastructure's own faults under load, one after another, and what
each cost.

It starts a stack of its own (one participant whose Kafka cluster has three brokers, on
ports of its own, in ``<run_dir>/chaos``) and a node, and for each fault runs a fresh copy
of the sensor network under steady input: at ``FAULT_AT_S`` the component is killed -9,
after ``DOWN_S`` it is started again, and when the input is over every result is checked
against the reference. Per fault:

- input delay: how far the producer fell behind its schedule (the load held, or not);
- output stall and recovery: the longest gap between results from the kill on, next to
  the ordinary gap (the median); recovery is from the kill to the end of that gap, when
  results come at their pace again (0 when the gap is within 1.5 times the ordinary one);
- lost and duplicated results, against the reference.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from pyspark.sql import SparkSession

from medusa.catalog.client import CatalogClient
from medusa.endpoints import resolve
from medusa.faults import kill
from medusa.registry import registry_client
from medusa.sensor_windows import OutputWatch, SteadyInput, reference
from medusa.settings import EXTERNAL_ENDPOINT_FIELDS, StackSettings, kafka_config
from medusa.stack import launcher, processes
from medusa.stack.layout import StackLayout
from medusa.stack.quorum import active_controller
from medusa_apps.services import SERVICE_COMMANDS
from medusa_spark.deploy import deploy, undeploy, wait_for_node
from medusa_spark.networks import network_yaml

FAULTS = ("broker", "controller", "registry", "catalog", "detector")
"""broker: a broker that does not lead the KRaft quorum; controller: the one that does."""

SENSORS = 10
INPUT_S = 70
FAULT_AT_S = 20.0
DOWN_S = 10.0
NODE = "alpha/chaos-1"

PORT_SHIFT = 6000
"""The chaos stack's ports: the default ones plus this (Kafka from 25092)."""

PORT_FIELDS = ("kafka_base_port", "registry_port", "registry_management_port",
               "registry_internal_port", "jaeger_otlp_grpc_port", "jaeger_otlp_http_port",
               "jaeger_query_port", "jaeger_query_grpc_port", "jaeger_health_port",
               "jaeger_metrics_port", "toxiproxy_port", "catalog_port", "detector_port")


@dataclass(frozen=True)
class FaultOutcome:
    fault: str
    component: str
    input_rounds: int
    input_delay_s: float
    """The furthest a round of input went out behind its schedule."""
    stall_before_s: float
    """The ordinary gap between results: the median gap between bursts of them."""
    stall_s: float
    """The longest gap between results from the kill on."""
    recovery_s: float
    expected: int
    lost: int
    duplicated: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def chaos_settings(base: StackSettings) -> StackSettings:
    shifted = {name: getattr(base, name) + PORT_SHIFT for name in PORT_FIELDS}
    # Its own endpoints, whatever MEDUSA_EXTERNAL_* name.
    external = dict.fromkeys(EXTERNAL_ENDPOINT_FIELDS)
    return base.model_copy(update={**shifted, **external, "run_dir": base.run_dir / "chaos",
                                   "stack_participants": 1, "kafka_brokers": 3,
                                   "stack_bpm_agents": False, "stack_hdfs": False,
                                   "stack_s3": False,
                                   "credentials_file": None})


def _component(layout: StackLayout, fault: str) -> str:
    participant = layout.participants[0]
    if fault in ("broker", "controller"):
        leader = active_controller(layout, participant)
        if fault == "controller":
            return leader.component
        return next(b.component for b in participant.broker_layouts if b != leader)
    return fault


def _gaps(times_ms: list[int]) -> list[tuple[int, int]]:
    """The gaps between bursts of results: a window's results come in one transaction, so
    arrivals within a second of each other are one burst."""
    bursts: list[int] = []
    for at in sorted(times_ms):
        if not bursts or at - bursts[-1] > 1000:
            bursts.append(at)
    return list(itertools.pairwise(bursts))


def run_fault(layout: StackLayout, spark: SparkSession, fault: str,
              say: Callable[[str], None]) -> FaultOutcome:
    endpoints = resolve(layout.settings)
    registry = registry_client(endpoints.registry_url)
    name = f"chaos-{fault[:4]}-{uuid.uuid4().hex[:6]}"
    prefix = f"{name}."
    results_topic = f"{prefix}medusa.{name}.per_sensor"
    alpha = kafka_config(endpoints.bootstrap("alpha"))
    with CatalogClient(endpoints.catalog_url) as catalog:
        deploy(network_yaml(name, prefix, box_participant="alpha"), name, endpoints, registry,
               spark, catalog, {"plausible": NODE, "per_sensor": NODE}, report=lambda _: None)
    watch = OutputWatch(alpha, registry, [results_topic]).start()
    steady = SteadyInput(alpha, registry, f"{prefix}sensors.readings", SENSORS, INPUT_S)
    expected = reference(steady.readings())
    steady.start()
    time.sleep(FAULT_AT_S)
    component = _component(layout, fault)
    say(f"  {fault}: kill -9 {component}, down {DOWN_S:g}s")
    killed_ms = int(time.time() * 1000)
    kill(launcher.running_processes(layout)[component].pid)
    time.sleep(DOWN_S)
    launcher.up(layout, SERVICE_COMMANDS, report=lambda _: None)
    if not steady.finished.wait(INPUT_S + 300):
        say(f"  {fault}: the input did not finish")
    watch.wait_for(results_topic, set(expected), timeout_s=240)
    watch.stop()
    arrivals = watch.arrived(results_topic)
    counts = Counter(a.tuple_id for a in arrivals)
    gaps = _gaps([a.appended_ms for a in arrivals])
    # The pace without the fault: the median gap between bursts (a window's length).
    ordinary = sorted(b - a for a, b in gaps)
    before = ordinary[len(ordinary) // 2] if ordinary else 0
    after = [(a, b) for a, b in gaps if b > killed_ms]
    worst = max(after, key=lambda gap: gap[1] - gap[0], default=(killed_ms, killed_ms))
    stall = worst[1] - worst[0]
    recovery = max(0, worst[1] - killed_ms) if stall > 1.5 * before else 0
    schedule = steady.sent_at_ms
    first = min(schedule.values(), default=0)
    first_stime = min(schedule, default=0)
    delay = max(((sent - first) - (stime - first_stime) for stime, sent in schedule.items()),
                default=0)
    with CatalogClient(endpoints.catalog_url) as catalog:
        undeploy(catalog, f"alpha/{name}", report=lambda _: None)
    return FaultOutcome(
        fault, component, len(schedule), round(delay / 1000, 2), round(before / 1000, 2),
        round(stall / 1000, 2), round(recovery / 1000, 2), len(expected),
        len(set(expected) - set(counts)), sum(n - 1 for n in counts.values() if n > 1))


def measure(base: StackSettings, spark: SparkSession, say: Callable[[str], None],
            faults: tuple[str, ...] = FAULTS) -> list[FaultOutcome]:
    """Starts the chaos stack and its node, runs each fault, and stops them all."""
    settings = chaos_settings(base)
    layout = StackLayout.from_settings(settings)
    # This process's own clients (and the node) use the chaos stack and its credentials.
    os.environ["MEDUSA_RUN_DIR"] = str(settings.run_dir)
    os.environ.pop("MEDUSA_CREDENTIALS_FILE", None)
    say(f"chaos: a stack of 3 brokers in {settings.run_dir}, Kafka from "
        f"{settings.kafka_base_port}")
    outcomes: list[FaultOutcome] = []
    node_process: processes.RunningProcess | None = None
    try:
        launcher.up(layout, SERVICE_COMMANDS, report=lambda _: None)
        endpoints = resolve(settings)
        participant, node = NODE.split("/")
        node_process = processes.start(f"node-{participant}-{node}",
                        [sys.executable, "-m", "medusa_apps", "node", "--name", node,
                         "--participant", participant, "--master", "local[1]"],
                        layout.logs_dir / f"node-{participant}-{node}.log",
                        endpoints.environment(settings.run_dir))
        with CatalogClient(endpoints.catalog_url) as catalog:
            wait_for_node(catalog, NODE, timeout_s=240)
        for fault in faults:
            outcome = run_fault(layout, spark, fault, say)
            say(f"  {fault}: stall {outcome.stall_s:g}s (before {outcome.stall_before_s:g}s), "
                f"recovery {outcome.recovery_s:g}s, lost {outcome.lost}, duplicated "
                f"{outcome.duplicated} of {outcome.expected}")
            outcomes.append(outcome)
    finally:
        if node_process is not None:
            processes.stop(node_process)
        launcher.down(layout, purge=True, report=lambda _: None)
    return outcomes
