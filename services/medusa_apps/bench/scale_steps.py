"""Scale steps under steady input: the gap they leave in the output, beyond its normal gap.

Two nodes of participant alpha run one keyed fragment: a sliding window per sensor whose
results come every slide (the output whose gaps are measured). After two minutes of
steady input it is scaled out to two instances (one per node), then, after a minute, back
in to one. A step's pause is the longest gap between bursts of results from its request
until 20 s after it is done, less the median gap of the two minutes before the first
step. Every result is counted by tuple id: lost (a sensor's window missing between the
first and last complete ones) and duplicated.
"""

from __future__ import annotations

import itertools
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import yaml
from confluent_kafka.schema_registry import SchemaRegistryClient
from pyspark.sql import SparkSession

from medusa.catalog.client import CatalogClient
from medusa.endpoints import Endpoints
from medusa.sensor_windows import OutputWatch
from medusa.sensors import SENSOR_READINGS
from medusa.settings import kafka_config
from medusa.stack import processes
from medusa.stack.layout import StackLayout
from medusa_apps.bench.state_migration import (
    NODES,
    BallastInput,
    _gaps,
    _wait_phase,
    _window_start,
    per_sensor_box,
    start_nodes,
)
from medusa_spark.deploy import deploy, resolve_fragment, undeploy
from medusa_spark.scaling import scale

SLIDE_S = 2
WINDOW_S = 10
BEFORE_S = 120
BETWEEN_S = 60
AFTER_S = 20


@dataclass(frozen=True)
class ScaleStep:
    label: str
    """``out`` (one instance to two) or ``in`` (two to one)."""
    step_s: float
    """From the request until the new instances ran (the command's own time)."""
    longest_gap_s: float | None
    """The longest gap between results from the request until ``AFTER_S`` after it."""
    normal_gap_s: float | None
    longest_gap_at_s: float | None = None
    """When the longest gap began, in seconds since the request (negative: before it):
    during the new instances' warming, or at the switch."""

    @property
    def pause_s(self) -> float | None:
        """The longest gap beyond the normal one: what the step cost the readers."""
        if self.longest_gap_s is None or self.normal_gap_s is None:
            return None
        return round(max(0.0, self.longest_gap_s - self.normal_gap_s), 2)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "pause_s": self.pause_s}


@dataclass(frozen=True)
class ScaleRun:
    steps: list[ScaleStep]
    results: int
    lost: int
    duplicated: int
    result_times_ms: list[int]
    """When each result was appended (for the plot)."""
    step_times_ms: list[tuple[str, int, int]]
    """Each step's label, request and end (wall clock, ms)."""

    def summary(self) -> dict[str, Any]:
        pauses = [s.pause_s for s in self.steps if s.pause_s is not None]
        return {"pause_s": max(pauses) if pauses else None,
                "steps": [s.as_dict() for s in self.steps],
                "results": self.results, "lost": self.lost, "duplicated": self.duplicated}


def network_yaml(name: str) -> str:
    """The measured fragment: a sliding window per sensor, keyed by sensor."""
    return yaml.safe_dump({
        "name": name, "participant": "alpha", "topic_prefix": f"{name}.", "partitions": 2,
        "trigger": "1 second",
        "streams": {"readings": {"topic": SENSOR_READINGS, "participant": "alpha",
                                 "schema": "sensor_reading"}},
        "boxes": {"per_sensor": per_sensor_box(WINDOW_S, SLIDE_S)},
        "arrows": [{"from": "readings", "to": "per_sensor"}],
    }, sort_keys=False)


def measure(endpoints: Endpoints, registry: SchemaRegistryClient, spark: SparkSession,
            layout: StackLayout, say: Callable[[str], None]) -> ScaleRun:
    name = f"bench-scale-{uuid.uuid4().hex[:6]}"
    network = f"alpha/{name}"
    config = kafka_config(endpoints.bootstrap("alpha"))
    output = f"{name}.medusa.{name}.per_sensor"
    with CatalogClient(endpoints.catalog_url) as catalog:
        say(f"  starting nodes {', '.join(NODES)}")
        nodes = start_nodes(layout, catalog)
        source = BallastInput(config, registry, f"{name}.{SENSOR_READINGS}", 0)
        watch: OutputWatch | None = None
        try:
            deploy(network_yaml(name), name, endpoints, registry, spark, catalog,
                   {"per_sensor": NODES[0]}, report=lambda _: None)
            box = f"{network}/per_sensor"
            _wait_phase(catalog, box, "running", 300)
            fragment = resolve_fragment(catalog, box).name
            watch = OutputWatch(config, registry, [output]).start()
            source.start()
            say(f"  steady input; {BEFORE_S} s before the first step")
            time.sleep(BEFORE_S)
            timeline = []
            for label, count, on, wait_s in (("out", 2, list(NODES), BETWEEN_S),
                                             ("in", 1, [NODES[0]], AFTER_S)):
                asked_ms = int(time.time() * 1000)
                done = scale(catalog, endpoints, fragment, count, on, timeout_s=600,
                             report=lambda line: say(f"  {line.strip()}"))
                timeline.append((label, asked_ms, int(time.time() * 1000), done.seconds))
                time.sleep(wait_s)
            source.stop.set()
            time.sleep(5)
        finally:
            source.stop.set()
            if watch is not None:
                watch.stop()
            try:
                undeploy(catalog, network, report=lambda _: None)
            finally:
                for process in nodes:
                    processes.stop(process)
    arrivals = watch.arrived(output)
    times = sorted(a.appended_ms for a in arrivals)
    first_ms = timeline[0][1]
    before = _gaps([t for t in times if first_ms - BEFORE_S * 1000 + 20_000 <= t < first_ms])
    normal = round(statistics.median(before), 2) if before else None
    steps = []
    for label, asked_ms, done_ms, seconds in timeline:
        around = [t for t in times if t < asked_ms][-1:] + \
            [t for t in times if asked_ms <= t <= done_ms + AFTER_S * 1000]
        gaps = _gaps(around)
        began = max(itertools.pairwise(around), key=lambda pair: pair[1] - pair[0],
                    default=None)
        steps.append(ScaleStep(label, round(seconds, 2),
                               round(max(gaps), 2) if gaps else None, normal,
                               round((began[0] - asked_ms) / 1000, 1) if began else None))
        say(f"  scale {label}: {seconds:.1f} s; longest gap {steps[-1].longest_gap_s} s "
            f"({steps[-1].longest_gap_at_s} s after the request) against a normal "
            f"{normal} s: {steps[-1].pause_s} s beyond")
    lost, duplicated = _lost_and_duplicated([a.tuple_id for a in arrivals])
    say(f"  {len(arrivals)} results, {lost} lost, {duplicated} duplicated")
    return ScaleRun(steps, len(arrivals), lost, duplicated, times,
                    [(label, asked, done) for label, asked, done, _ in timeline])


def _lost_and_duplicated(ids: list[str]) -> tuple[int, int]:
    """Every sensor has a result for every slide between the first and last complete
    windows (the input sends each sensor every second)."""
    counts = Counter(ids)
    duplicated = sum(n - 1 for n in counts.values())
    by_start: dict[int, set[str]] = {}
    for tuple_id in counts:
        by_start.setdefault(_window_start(tuple_id), set()).add(tuple_id)
    sensors = max((len(s) for s in by_start.values()), default=0)
    starts = sorted(s for s, found in by_start.items() if len(found) == sensors)
    if not starts:
        return 0, duplicated
    step = SLIDE_S * 1000
    lost = sum(sensors - len(by_start.get(start, ()))
               for start in range(starts[0], starts[-1] + 1, step))
    return lost, duplicated
