"""Moving a stateful box under steady input: the pause in its output against its state size.

Two nodes of participant alpha; the sensor-windows network with a sliding window
(so results come every slide), moved from one node to the other halfway through
the input. The pause is the time between the last result written before the move
was asked for and the first one after; the slide is the gap without a move.
"""

from __future__ import annotations

import itertools
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import yaml
from confluent_kafka.schema_registry import SchemaRegistryClient
from pyspark.sql import SparkSession

from medusa.catalog.client import CatalogClient, CatalogError
from medusa.catalog.model import Entry
from medusa.sensor_windows import OutputWatch, SteadyInput, network_yaml
from medusa.settings import kafka_config
from medusa.stack import launcher, processes
from medusa.stack.endpoints import Endpoints
from medusa.stack.layout import StackLayout
from medusa_spark.checkpoints import checkpoint_size
from medusa_spark.deploy import deploy, move, resolve_fragment, undeploy, wait_for_node

SLIDE_S = 2
WINDOW_S = 30
INPUT_S = 80
MOVE_AFTER_S = 40
NODES = ("alpha/bench-move-1", "alpha/bench-move-2")


@dataclass(frozen=True)
class MovePause:
    sensors: int
    state_rows: int
    """Open windows times sensors, when the move began."""
    state_bytes: int
    """Size of the box's checkpointed state (all retained versions) when the move began."""
    hand_over_s: float
    """From the move's request to the box running on the new node."""
    pause_s: float | None
    """Last result before the move's request to the first one after it."""
    gap_before_s: float | None
    """Median gap between results before the move (the slide, when nothing moves)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _network(name: str) -> str:
    raw = yaml.safe_load(network_yaml(name, f"{name}."))
    for box in raw["boxes"].values():
        box["participant"] = "alpha"
    raw["boxes"]["per_sensor"]["params"]["window"] = {
        "type": "sliding", "size": f"{WINDOW_S} seconds", "slide": f"{SLIDE_S} seconds"}
    return yaml.safe_dump(raw, sort_keys=False)


def _start_nodes(layout: StackLayout, catalog: CatalogClient) -> list[processes.RunningProcess]:
    started = []
    for node in NODES:
        participant, name = node.split("/")
        started.append(launcher.start_service(
            layout, f"node-{participant}-{name}",
            [sys.executable, "-m", "medusa_apps", "node", "--name", name, "--participant",
             participant, "--master", "local[1]"], report=lambda _: None))
    for node in NODES:
        wait_for_node(catalog, node, timeout_s=240)
    return started


def _fragment_of(catalog: CatalogClient, box: str) -> Entry | None:
    try:
        return resolve_fragment(catalog, box)
    except CatalogError:
        return None


def _gaps(times_ms: list[int], within_ms: int = 500) -> list[float]:
    """Gaps between bursts of results: the writes of one batch, closer than ``within_ms``."""
    return [(b - a) / 1000 for a, b in itertools.pairwise(sorted(times_ms)) if b - a > within_ms]


def measure(endpoints: Endpoints, registry: SchemaRegistryClient, spark: SparkSession,
            layout: StackLayout, sizes: list[int], say: Callable[[str], None]
            ) -> list[MovePause]:
    results = []
    with CatalogClient(endpoints.catalog_url) as catalog:
        say(f"  starting nodes {', '.join(NODES)}")
        nodes = _start_nodes(layout, catalog)
        try:
            for sensors in sizes:
                results.append(_one(endpoints, registry, spark, catalog, sensors, say))
        finally:
            for process in nodes:
                processes.stop(process)
    return results


def _one(endpoints: Endpoints, registry: SchemaRegistryClient, spark: SparkSession,
         catalog: CatalogClient, sensors: int, say: Callable[[str], None]) -> MovePause:
    name = f"bench-move-{uuid.uuid4().hex[:6]}"
    network = f"alpha/{name}"
    config = kafka_config(endpoints.bootstrap("alpha"))
    deploy(_network(name), name, endpoints, registry, spark, catalog,
           {"plausible": NODES[0], "per_sensor": NODES[0]}, report=lambda _: None)
    box = f"{network}/per_sensor"
    try:
        while (entry := _fragment_of(catalog, box)) is None or \
                entry.spec["phase"] != "running":
            time.sleep(0.5)
        output = f"{name}.medusa.{name}.per_sensor"
        watch = OutputWatch(config, registry, [output]).start()
        steady = SteadyInput(config, registry, f"{name}.sensors.readings", sensors, INPUT_S)
        steady.start()
        time.sleep(MOVE_AFTER_S)
        state_bytes = checkpoint_size(f"{entry.spec['checkpoint']}/state")
        asked_ms = int(time.time() * 1000)
        moved = move(catalog, box, NODES[1], report=lambda _: None)
        steady.finished.wait(INPUT_S + 120)
        time.sleep(15)
        watch.stop()
        written = sorted(a.appended_ms for a in watch.arrivals[output])
        before = [t for t in written if t <= asked_ms]
        after = [t for t in written if t > asked_ms]
        pause = (after[0] - before[-1]) / 1000 if before and after else None
        gaps = _gaps(before[len(before) // 3:])
        result = MovePause(sensors, sensors * WINDOW_S // SLIDE_S, state_bytes,
                           round(moved.seconds, 2), pause,
                           round(statistics.median(gaps), 2) if gaps else None)
        say(f"  {sensors:>6} sensors: state {state_bytes / 1e6:7.1f} MB, hand-over "
            f"{moved.seconds:5.1f} s, output pause {pause if pause is not None else '-'} s "
            f"(gap without a move {result.gap_before_s} s)")
        return result
    finally:
        undeploy(catalog, network, report=lambda _: None)
