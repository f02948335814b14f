"""Deploying a network through the catalog, withdrawing it, and moving one of its boxes.

Deploying validates the network (with Spark's analyzer), creates its topics and
registers its schemas once, then writes the network, its streams and one entry
per box with the node that runs it. The nodes do the rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from pyspark.sql import SparkSession

from medusa.catalog.client import CatalogClient, CatalogError
from medusa.catalog.model import Entry, Kind
from medusa.placement import NodeSlot, PlacementError, place
from medusa.stack.endpoints import Endpoints
from medusa_spark.network.model import parse_network
from medusa_spark.network.validate import validate
from medusa_spark.runner import wire

Report = Callable[[str], None]


def running_nodes(catalog: CatalogClient) -> list[NodeSlot]:
    boxes_per_node: dict[str, int] = {}
    for box in catalog.list(Kind.BOXES):
        boxes_per_node[box.spec["node"]] = boxes_per_node.get(box.spec["node"], 0) + 1
    return [NodeSlot(e.name, float(e.spec.get("capacity", 1.0)), boxes_per_node.get(e.name, 0))
            for e in catalog.list(Kind.NODES) if e.spec.get("status") == "up"]


def _placed_on(node: str) -> Callable[[dict[str, Any] | None], dict[str, Any] | None]:
    def change(spec: dict[str, Any] | None) -> dict[str, Any] | None:
        if spec is None:
            return None
        return retarget(spec, node)
    return change


def _set_to(wanted: dict[str, Any]) -> Callable[[dict[str, Any] | None], dict[str, Any] | None]:
    def change(spec: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if spec == wanted else wanted
    return change


def _high_availability(ha: str, replica: str | None
                       ) -> Callable[[dict[str, Any] | None], dict[str, Any] | None]:
    def change(spec: dict[str, Any] | None) -> dict[str, Any] | None:
        if spec is None or (spec.get("ha", "passive"), spec.get("replica")) == (ha, replica):
            return None
        return {**spec, "ha": ha, "replica": replica, "replica_ready": False}
    return change


def retarget(spec: dict[str, Any], node: str) -> dict[str, Any] | None:
    """The box's spec once placed on ``node``; None when it is there already."""
    if spec["node"] == node:
        return None
    if spec.get("phase") == "moving":
        raise CatalogError(f"the box is being moved to {spec['node']} already; "
                           "wait until it runs there")
    # A running box is handed over by its node first; one never run starts afresh.
    phase = {"running": "moving", "released": "released"}.get(spec.get("phase", ""), "placed")
    return {**spec, "node": node, "phase": phase}


def deploy(text: str, origin: str, endpoints: Endpoints, registry: SchemaRegistryClient,
           spark: SparkSession, catalog: CatalogClient, given: dict[str, str] | None = None,
           report: Report = print) -> dict[str, str]:
    """Deploys (or redeploys) a network; returns where each box runs."""
    network = parse_network(text, origin)
    plan = validate(network, spark)
    prefix = network.participant
    network_name = f"{prefix}/{network.name}"
    box_participants = {box: spec.participant or network.participant
                        for box, spec in network.boxes.items()}
    existing = {e.name.rsplit("/", 1)[1]: e for e in
                catalog.list(Kind.BOXES, network=network_name)}
    given = given or {}
    for box in given:
        if box not in box_participants:
            raise PlacementError(f"box {box!r}: the network has no such box "
                                 f"(its boxes: {', '.join(box_participants)})")
    nodes = running_nodes(catalog)
    unplaced = {b: p for b, p in box_participants.items() if b not in existing}
    placement = place(unplaced, nodes, {b: n for b, n in given.items() if b in unplaced})
    running = {node.name for node in nodes}
    for box, node in given.items():
        if box in existing:  # placed before: a new node here is a move
            if node not in running:
                raise PlacementError(f"box {box!r}: node {node!r} is not a running node in "
                                     "the catalog")
            placement[box] = node
    wire(plan, endpoints, registry)
    def definition(spec: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if spec and spec["definition"] == text else {"definition": text}
    catalog.update(Kind.NETWORKS, network_name, definition)
    for stream, spec in network.streams.items():
        stream_spec = {"topic": network.topic_prefix + spec.topic,
                       "schema_subject": f"{network.topic_prefix}{spec.topic}-value",
                       "network": network_name}
        catalog.update(Kind.STREAMS, f"{spec.participant}/{stream}", _set_to(stream_spec))
    secondaries = {e.name: e.spec.get("secondary") for e in catalog.list(Kind.NODES)}
    for box, node in placement.items():
        name = f"{network_name}/{box}"
        ha = network.boxes[box].ha
        replica = secondaries.get(node) if ha == "active" else None
        if replica is not None and replica not in running:
            replica = None
        if box in existing:
            catalog.update(Kind.BOXES, name, _placed_on(node))
            catalog.update(Kind.BOXES, name, _high_availability(ha, replica))
        else:
            catalog.put(Kind.BOXES, name, {"network": network_name, "node": node, "ha": ha,
                                           "replica": replica})
        standby = f" (replica on {replica})" if replica else ""
        if ha == "active" and replica is None:
            standby = " (ha: active, but its node has no live secondary for a replica)"
        report(f"  {name:<40} -> {node}{standby}")
    for box, entry in existing.items():
        if box not in box_participants:  # gone from the definition
            catalog.delete(Kind.BOXES, entry.name)
            report(f"  {entry.name:<40} withdrawn")
    return {box: placement.get(box) or existing[box].spec["node"] for box in box_participants}


def undeploy(catalog: CatalogClient, network_name: str, report: Report = print) -> int:
    """Withdraws a network's boxes (their nodes stop them), then the network."""
    boxes = catalog.list(Kind.BOXES, network=network_name)
    for box in boxes:
        catalog.delete(Kind.BOXES, box.name)
        report(f"  {box.name} withdrawn")
    if catalog.delete(Kind.NETWORKS, network_name) is None and not boxes:
        raise CatalogError(f"no network {network_name} in the catalog")
    return len(boxes)


def resolve_box(catalog: CatalogClient, name: str) -> Entry:
    """``participant/network/box``, or ``participant/box`` when only one network has it."""
    parts = name.split("/")
    if len(parts) == 3:
        entry = catalog.get(Kind.BOXES, name)
        if entry is None:
            raise CatalogError(f"no box {name} in the catalog")
        return entry
    if len(parts) != 2:
        raise CatalogError(f"box: expected participant/box or participant/network/box, "
                           f"got {name!r}")
    participant, box = parts
    found = [e for e in catalog.list(Kind.BOXES, participant=participant)
             if e.name.rsplit("/", 1)[1] == box]
    if not found:
        raise CatalogError(f"no box {box!r} in participant {participant}")
    if len(found) > 1:
        raise CatalogError(f"box {name} is ambiguous: {', '.join(e.name for e in found)}")
    return found[0]


def wait_for_node(catalog: CatalogClient, node: str, timeout_s: float = 180.0,
                  since_incarnation: str | None = None) -> Entry:
    """Waits until ``node`` is up in the catalog (with another incarnation than given)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        entry = catalog.get(Kind.NODES, node)
        if entry is not None and entry.spec.get("status") == "up" and (
                since_incarnation is None or entry.spec.get("incarnation") != since_incarnation):
            return entry
        time.sleep(0.5)
    raise TimeoutError(f"node {node} did not register in the catalog within {timeout_s:.0f}s")


@dataclass(frozen=True)
class MoveResult:
    box: str
    source: str
    target: str
    seconds: float
    """From the move's request to the box running on the target."""


def move(catalog: CatalogClient, name: str, target: str, timeout_s: float = 300.0,
         report: Report = print) -> MoveResult:
    """Moves a box, with its state, to ``target``, and waits until it runs there."""
    entry = resolve_box(catalog, name)
    node = catalog.get(Kind.NODES, target)
    if node is None or node.spec.get("status") != "up":
        raise CatalogError(f"--to: {target} is not a running node in the catalog")
    source = entry.spec["node"]
    if source == target:
        raise CatalogError(f"box {entry.name} runs on {target} already")
    started = time.monotonic()
    catalog.update(Kind.BOXES, entry.name, _placed_on(target))
    report(f"  {entry.name}: handing over from {source} to {target}")
    deadline = started + timeout_s
    last_phase = ""
    while time.monotonic() < deadline:
        current = catalog.get(Kind.BOXES, entry.name)
        if current is None:
            raise CatalogError(f"box {entry.name} was withdrawn during the move")
        phase = current.spec.get("phase", "")
        if phase != last_phase:
            report(f"  {entry.name}: {phase} on {current.spec['node']}")
            last_phase = phase
        if current.spec["node"] == target and phase == "running":
            return MoveResult(entry.name, source, target, time.monotonic() - started)
        time.sleep(0.2)
    raise TimeoutError(f"box {entry.name} did not run on {target} within {timeout_s:.0f}s "
                       f"(phase {last_phase}); see the nodes' logs")
