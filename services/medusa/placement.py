"""Which node runs which fragment: a placement file, and the automatic placement for the rest.

A placement file maps names of the network's boxes (or of its fragments) to global node
names; the boxes a file puts on one node run there as one fragment::

    positions: alpha/node-1
    tolls: beta/node-1

The automatic placement places whole fragments (each one Spark query), one node each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from medusa.errors import MedusaError


class PlacementError(MedusaError, ValueError):
    """A placement that cannot be followed; the message names the box or fragment, and the
    node."""


@dataclass(frozen=True)
class NodeSlot:
    name: str
    """Global name: participant/node."""
    capacity: float = 1.0
    fragments: int = 0
    """Fragments the node already runs (of other networks, or placed before)."""

    @property
    def participant(self) -> str:
        return self.name.split("/", 1)[0]


def parse_placement(text: str, origin: str = "<placement>") -> dict[str, str]:
    """A placement file's mapping of box (or fragment) names to nodes; an optional top-level
    ``boxes:`` or ``fragments:`` key holds the mapping."""
    try:
        raw: Any = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise PlacementError(f"{origin}: not valid YAML: {error}") from None
    if (isinstance(raw, dict) and len(raw) == 1 and set(raw) <= {"boxes", "fragments"}
            and isinstance(next(iter(raw.values())), dict | None)):
        raw = next(iter(raw.values())) or {}
    if not isinstance(raw, dict):
        raise PlacementError(f"{origin}: expected a mapping of box (or fragment) to node, "
                             "e.g. 'positions: alpha/node-1'")
    placement = {}
    for name, node in raw.items():
        if not isinstance(node, str) or node.count("/") != 1:
            raise PlacementError(f"{origin}: {name!r}: expected a node as "
                                 f"participant/node, got {node!r}")
        placement[str(name)] = node
    return placement


def place(unplaced: dict[str, str], nodes: list[NodeSlot],
          given: dict[str, str]) -> dict[str, str]:
    """A node for every fragment of ``unplaced``: the ``given`` ones as given, the others
    spread by load.

    ``unplaced`` maps each fragment to its participant (the one its boxes' outputs live
    in); a fragment goes to a node of that participant when there is one, else to any
    node: its arrows then cross participants. Among those, the node with the fewest
    fragments per unit of capacity wins (ties: the first name).
    """
    known = {node.name: node for node in nodes}
    for fragment, node in given.items():
        if fragment not in unplaced:
            raise PlacementError(f"fragment {fragment!r}: the network has no such fragment "
                                 f"to place (its fragments: {', '.join(unplaced) or 'none'})")
        if node not in known:
            raise PlacementError(f"fragment {fragment!r}: node {node!r} is not a running node "
                                 f"in the catalog (running: {', '.join(known) or 'none'})")
    if not nodes and len(given) < len(unplaced):
        raise PlacementError("no node is running: start one with `medusa node` first")
    load = {node.name: float(node.fragments) for node in nodes}
    for node in given.values():
        load[node] += 1
    placement = dict(given)
    for fragment, participant in unplaced.items():
        if fragment in placement:
            continue
        candidates = [n for n in nodes if n.participant == participant] or nodes
        chosen = min(candidates, key=lambda n: ((load[n.name] + 1) / n.capacity, n.name))
        placement[fragment] = chosen.name
        load[chosen.name] += 1
    return {fragment: placement[fragment] for fragment in unplaced}
