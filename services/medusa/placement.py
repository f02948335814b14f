"""Which node runs which box: a placement file, and the automatic placement for the rest.

A placement file maps box names to global node names::

    positions: alpha/node-1
    tolls: beta/node-1
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from medusa.errors import MedusaError


class PlacementError(MedusaError, ValueError):
    """A placement that cannot be followed; the message names the box and the node."""


@dataclass(frozen=True)
class NodeSlot:
    name: str
    """Global name: participant/node."""
    capacity: float = 1.0
    boxes: int = 0
    """Boxes the node already runs (of other networks)."""

    @property
    def participant(self) -> str:
        return self.name.split("/", 1)[0]


def parse_placement(text: str, origin: str = "<placement>") -> dict[str, str]:
    try:
        raw: Any = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise PlacementError(f"{origin}: not valid YAML: {error}") from None
    if isinstance(raw, dict) and set(raw) == {"boxes"}:
        raw = raw["boxes"]
    if not isinstance(raw, dict):
        raise PlacementError(f"{origin}: expected a mapping of box to node, "
                             "e.g. 'positions: alpha/node-1'")
    placement = {}
    for box, node in raw.items():
        if not isinstance(node, str) or node.count("/") != 1:
            raise PlacementError(f"{origin}: box {box!r}: expected a node as "
                                 f"participant/node, got {node!r}")
        placement[str(box)] = node
    return placement


def place(boxes: dict[str, str], nodes: list[NodeSlot], given: dict[str, str]) -> dict[str, str]:
    """A node for every box: the ``given`` ones as given, the others spread by load.

    ``boxes`` maps each box to the participant its output lives in; a box goes to a node of
    that participant when there is one, else to any node: the arrow then crosses
    participants. Among those, the node with the fewest boxes per unit of capacity wins.
    """
    known = {node.name: node for node in nodes}
    for box, node in given.items():
        if box not in boxes:
            raise PlacementError(f"box {box!r}: the network has no such box "
                                 f"(its boxes: {', '.join(boxes)})")
        if node not in known:
            raise PlacementError(f"box {box!r}: node {node!r} is not a running node in the "
                                 f"catalog (running: {', '.join(known) or 'none'})")
    if not nodes and len(given) < len(boxes):
        raise PlacementError("no node is running: start one with `medusa node` first")
    load = {node.name: float(node.boxes) for node in nodes}
    for node in given.values():
        load[node] += 1
    placement = dict(given)
    for box, participant in boxes.items():
        if box in placement:
            continue
        candidates = [n for n in nodes if n.participant == participant] or nodes
        chosen = min(candidates, key=lambda n: ((load[n.name] + 1) / n.capacity, n.name))
        placement[box] = chosen.name
        load[chosen.name] += 1
    return {box: placement[box] for box in boxes}
