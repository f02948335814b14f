"""DPC's availability bound over where the fragment runs and what fails: the pair network
(two sensor streams, one per participant, averaged per sensor and 10 s window, output on
beta's cluster, X = 4 s so D = 3 s) with its fragment on a node of alpha, on a node of
beta, or deployed on alpha and moved to beta under a contract (as BPM moves load), each
through a partition both ways, one way in each direction, and a slow link, each shorter
and longer than D; and one more cell, a long partition during which beta's node is
killed (kill -9) and its secondary takes the fragment over while still cut off.

Per cell: the longest extra delay of a result over the fault-free run (the output gap the
bound is about), when the first tentative output came after the fault began, how many
tentative results there were and how many were left uncorrected, and whether the stable
view equals the fault-free reference (nothing lost, duplicated or wrong). The bound is
checked here, not in a test: a result may come at most D (plus one trigger and a second of
slack for the machine) later than without the fault.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind
from medusa.envelope import TupleType
from medusa.faults import Links
from medusa.sensor_windows import pair_network_yaml
from medusa.stable_view import stable_view
from medusa.stack.endpoints import Endpoints
from medusa_apps.bench.dpc_partition import Fault, ScenarioRun, deployed, run_scenario
from medusa_apps.bench.nodes import bench_nodes

BOUND = "4 seconds"
D_S = 3.0
TRIGGER_S = 1.0
SLACK_S = 1.0
"""The machine's share of a result's delay (two cores shared by the whole federation)."""
FAULT_AT_S = 15.0
INPUT_S = 25
NODES = {"alpha": "alpha/bench-matrix-a", "beta": "beta/bench-matrix-b",
         "secondary": "beta/bench-matrix-b2"}
SECONDARIES = {NODES["beta"]: NODES["secondary"]}
PLACEMENTS = ("beta", "alpha", "moved")
TAKEN_OVER = "taken over"
"""On beta's node, which is killed (kill -9) 3 s into a long partition: its secondary on
beta takes it over while alpha is still cut off."""
KILL_AFTER_S = 3.0
FAULTS = ("partition", "one-way beta loses alpha", "one-way alpha loses beta", "slow link")
LENGTHS = {"short": 1.5, "long": 20.0}
"""How long a cut lasts, shorter and longer than D."""
SLOW_MS = {"short": 300, "long": 3000}
"""A slow link's added latency each way (for 20 s): a consumer pulls, so a record waits up
to about three times this (the fetch's way there and back, and the response's way)."""


@dataclass(frozen=True)
class Cell:
    placement: str
    fault: str
    length: str

    @property
    def label(self) -> str:
        return f"{self.placement} / {self.fault} / {self.length}"


@dataclass
class CellOutcome:
    cell: Cell
    run: ScenarioRun | None
    error: str | None = None

    def summary(self) -> dict[str, Any]:
        cell = self.cell
        base = {"placement": cell.placement, "fault": cell.fault, "length": cell.length}
        if self.run is None:
            return {**base, "error": self.error}
        run = self.run
        fault = run.faults[0]
        tentative_at = [ms for ms in run.tentative_output_ms() if ms >= fault.began_ms]
        lost, duplicated = run.lost_and_duplicated()
        view = stable_view(c.record for c in run.records)
        gap = run.largest_gap_s()
        return {
            **base,
            "fault_s": round((fault.ended_ms - fault.began_ms) / 1000, 1),
            "longest_extra_delay_s": round(gap, 2),
            "first_tentative_after_s": round((min(tentative_at) - fault.began_ms) / 1000, 2)
            if tentative_at else None,
            "tentative_results": len(run.of(TupleType.TENTATIVE)),
            "uncorrected_tentative": len(view.tentative),
            "stable_equals_fault_free": not (lost or duplicated or run.wrong_values()),
            "bound_held": gap <= D_S + TRIGGER_S + SLACK_S,
        }


def cells() -> list[Cell]:
    return [Cell(p, f, length) for p in PLACEMENTS for f in FAULTS for length in LENGTHS] + [
        Cell(TAKEN_OVER, "partition", "long")]


def _fault(links: Links, cell: Cell, kill: Callable[[], None] | None = None) -> Fault:
    if cell.fault == "slow link":
        latency = SLOW_MS[cell.length]
        return Fault(f"slow link +{latency} ms each way", FAULT_AT_S, LENGTHS["long"],
                     lambda: links.slow("alpha", "beta", latency),
                     lambda: links.heal("alpha", "beta"))
    first, second = ("beta", "alpha") if cell.fault == "one-way alpha loses beta" else \
        ("alpha", "beta")
    one_way = cell.fault.startswith("one-way")

    def begin() -> None:
        links.partition(first, second, one_way=one_way)
        if kill is not None:  # the node dies while cut off; its secondary takes over
            threading.Timer(KILL_AFTER_S, kill).start()
    return Fault(cell.fault, FAULT_AT_S, LENGTHS[cell.length], begin,
                 lambda: links.heal("alpha", "beta"))


def _run_cell(endpoints: Endpoints, registry: SchemaRegistryClient, spark: Any,
              catalog: CatalogClient, links: Links, cell: Cell,
              say: Callable[[str], None], kill: Callable[[], None] | None = None
              ) -> ScenarioRun:
    from medusa.contracts import hosting
    from medusa_spark.deploy import move

    first = NODES["alpha" if cell.placement in ("alpha", "moved") else "beta"]
    with deployed(endpoints, registry, spark, catalog, pair_network_yaml, BOUND,
                  {"merged": first, "per_sensor": first}, "per_sensor") as (network, topic):
        if cell.placement == "moved":
            contract = hosting(catalog, "alpha", "beta", network)
            name = catalog.list(Kind.FRAGMENTS, network=network)[0].name
            say(f"  moving {name} to {NODES['beta']} under contract {contract.name}")
            move(catalog, name, NODES["beta"], contract=contract.name, report=lambda _: None)
        try:
            return run_scenario(endpoints, registry, endpoints.catalog_url, network, topic,
                                INPUT_S, [_fault(links, cell, kill)], say)
        finally:
            links.heal()


def measure(endpoints: Endpoints, registry: SchemaRegistryClient, spark: Any, layout: Any,
            say: Callable[[str], None], only: list[Cell] | None = None) -> list[CellOutcome]:
    """Every cell (or ``only`` those), one after the other, on two nodes started for it."""
    outcomes = []
    chosen = only or cells()
    # Cells whose node dies go last: the node is not started again.
    chosen = sorted(chosen, key=lambda c: c.placement == TAKEN_OVER)
    with CatalogClient(endpoints.catalog_url) as catalog, \
            bench_nodes(layout, catalog, list(NODES.values()), secondaries=SECONDARIES) as \
            processes, Links(endpoints.toxiproxy_url) as links:
        def kill_beta() -> None:
            say(f"  kill -9 {NODES['beta']} while cut off")
            os.killpg(processes[NODES["beta"]].pid, signal.SIGKILL)
        for number, cell in enumerate(chosen, start=1):
            say(f"DPC matrix {number}/{len(chosen)}: {cell.label}")
            try:
                outcome = CellOutcome(cell, _run_cell(
                    endpoints, registry, spark, catalog, links, cell, say,
                    kill_beta if cell.placement == TAKEN_OVER else None))
            except Exception as error:  # one cell's failure is a figure, not the end
                outcome = CellOutcome(cell, None, f"{type(error).__name__}: {error}")
            figures = outcome.summary()
            say(f"  {cell.label}: " + ", ".join(
                f"{k} {v}" for k, v in figures.items()
                if k not in ("placement", "fault", "length")))
            outcomes.append(outcome)
    return outcomes


def summary(outcomes: list[CellOutcome]) -> dict[str, Any]:
    rows = [outcome.summary() for outcome in outcomes]
    return {
        "delay_s": D_S,
        "bound_s": D_S + TRIGGER_S + SLACK_S,
        "cells": rows,
        "bound_held_everywhere": bool(rows) and all(r.get("bound_held") for r in rows),
        "uncorrected_anywhere": sum(r.get("uncorrected_tentative") or 0 for r in rows),
    }
