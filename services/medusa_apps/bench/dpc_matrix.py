"""DPC's availability bound over where the fragment runs and what fails: the pair network
(two sensor streams, one per participant, averaged per sensor and 10 s window, output on
beta's cluster, X = 4 s so D = 3 s) with its fragment on a node of alpha, on a node of
beta, or deployed on alpha and moved to beta under a contract (as BPM moves load), each
through a partition both ways, one way in each direction, and a slow link, each shorter
and longer than D; and two cells where beta's node dies (kill -9) and its secondary on
beta takes the fragment over: before a long partition (the bound as everywhere), and 3 s
into it (the bound then counts from the takeover, whose detection and start are HA's).

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
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind
from medusa.endpoints import Endpoints
from medusa.envelope import TupleType
from medusa.faults import Links
from medusa.stable_view import stable_view
from medusa_apps.bench.dpc_partition import (
    Fault,
    ScenarioRun,
    deployed,
    run_scenario,
    wait_running,
)
from medusa_apps.bench.nodes import bench_nodes, start_node
from medusa_spark.networks import pair_network_yaml

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
"""On beta's node, killed (kill -9) once the fragment runs: its secondary on beta has
taken it over when the input and the fault come."""
KILLED_WHILE_CUT = "killed while cut off"
"""On beta's node, killed 3 s into a long partition: its secondary takes it over while
alpha is still cut off."""
KILL_PLACEMENTS = (TAKEN_OVER, KILLED_WHILE_CUT)
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
    takeover_s: float | None = None
    """From the kill to the fragment running on the secondary (the cells that kill)."""

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
        bound = D_S + TRIGGER_S + SLACK_S
        if cell.placement == KILLED_WHILE_CUT:  # the bound counts from the takeover
            bound += self.takeover_s if self.takeover_s is not None else 0.0
        return {
            **base,
            "fault_s": round((fault.ended_ms - fault.began_ms) / 1000, 1),
            **({"takeover_s": None if self.takeover_s is None else round(self.takeover_s, 2)}
               if cell.placement in KILL_PLACEMENTS else {}),
            "longest_extra_delay_s": round(gap, 2),
            "first_tentative_after_s": round((min(tentative_at) - fault.began_ms) / 1000, 2)
            if tentative_at else None,
            "tentative_results": len(run.of(TupleType.TENTATIVE)),
            "uncorrected_tentative": len(view.tentative),
            "stable_equals_fault_free": not (lost or duplicated or run.wrong_values()),
            "bound_s": round(bound, 2),
            "bound_held": gap <= bound,
        }


def cells() -> list[Cell]:
    return [Cell(p, f, length) for p in PLACEMENTS for f in FAULTS for length in LENGTHS] + [
        Cell(placement, "partition", "long") for placement in KILL_PLACEMENTS]


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


class _Takeover:
    """Kills beta's node (kill -9) and times until its secondary runs the fragment."""

    def __init__(self, kill: Callable[[], None], catalog_url: str,
                 say: Callable[[str], None]) -> None:
        self._kill = kill
        self._catalog_url = catalog_url
        self._say = say
        self.seconds: float | None = None

    def kill_and_wait(self, network: str, timeout_s: float = 120.0) -> None:
        from medusa_apps.failover import wait_placed

        self._kill()
        killed = time.monotonic()
        with CatalogClient(self._catalog_url) as catalog:
            try:
                wait_placed(catalog, network, NODES["secondary"], None, timeout_s,
                            interval_s=0.2)
            except TimeoutError:
                self._say(f"  not taken over within {timeout_s:.0f}s of the kill")
                return
        self.seconds = time.monotonic() - killed
        self._say(f"  {NODES['secondary']} runs it {self.seconds:.1f}s after the kill")


def _run_cell(endpoints: Endpoints, registry: SchemaRegistryClient, spark: Any,
              catalog: CatalogClient, links: Links, cell: Cell,
              say: Callable[[str], None], takeover: _Takeover) -> ScenarioRun:
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
        kill_while_cut = None
        if cell.placement == TAKEN_OVER:
            wait_running(catalog, network)
            takeover.kill_and_wait(network)
        elif cell.placement == KILLED_WHILE_CUT:
            def kill_while_cut() -> None:
                takeover.kill_and_wait(network)
        try:
            return run_scenario(endpoints, registry, endpoints.catalog_url, network, topic,
                                INPUT_S, [_fault(links, cell, kill_while_cut)], say)
        finally:
            links.heal()


def measure(endpoints: Endpoints, registry: SchemaRegistryClient, spark: Any, layout: Any,
            say: Callable[[str], None], only: list[Cell] | None = None) -> list[CellOutcome]:
    """Every cell (or ``only`` those), one after the other, on the nodes started for it;
    a node a cell kills is started again for the next."""
    from medusa_spark.deploy import wait_for_node

    outcomes = []
    chosen = sorted(only or cells(), key=lambda c: c.placement in KILL_PLACEMENTS)
    beta = NODES["beta"]
    with CatalogClient(endpoints.catalog_url) as catalog, \
            bench_nodes(layout, catalog, list(NODES.values()), secondaries=SECONDARIES) as \
            processes, Links(endpoints.toxiproxy_url) as links:
        def kill_beta() -> None:
            say(f"  kill -9 {beta}")
            os.killpg(processes[beta].pid, signal.SIGKILL)
        for number, cell in enumerate(chosen, start=1):
            say(f"DPC matrix {number}/{len(chosen)}: {cell.label}")
            if number > 1 and chosen[number - 2].placement in KILL_PLACEMENTS:
                say(f"  starting {beta} again")
                processes[beta] = start_node(layout, beta, secondary=SECONDARIES[beta])
                wait_for_node(catalog, beta, timeout_s=240)
            takeover = _Takeover(kill_beta, endpoints.catalog_url, say)
            try:
                outcome = CellOutcome(cell, _run_cell(
                    endpoints, registry, spark, catalog, links, cell, say, takeover))
            except Exception as error:  # one cell's failure is a figure, not the end
                outcome = CellOutcome(cell, None, f"{type(error).__name__}: {error}")
            outcome.takeover_s = takeover.seconds
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
