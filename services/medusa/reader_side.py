"""Replicas on the reader's side of a cut: availability where a fragment's output is read.

A fragment with an availability bound that runs on one participant's node while its
output lives on another participant's cluster cannot reach its readers while the link
between them is cut, whatever DPC does. As in Borealis, a replica runs on the other side
too: a node of the output's participant runs the fragment beside its primary, with its
own SUnion on its own cluster, and writes nothing while the primary's output keeps
coming. When the output has been silent for the fragment's delay D while the replica's
boundaries have gone ``AHEAD_MS`` past the output's, the replica takes the output over
(the SOutput's transactional id fences the primary), with tentative results if it too has
lost an input, and with its own reconciliation after the heal. The primary, fenced, runs
on as a standby beside it (make before break): once it has caught up and is stable again
it takes the output back, fencing the replica in turn. Results already written are
dropped by tuple id, and tentative ones kept from a reconciled period are not written,
so readers see each result once, stable first.

The catalog keeps the replica's node in the fragment's ``reader_replica`` and, while it
writes the output, in ``serving``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from medusa.catalog.model import Entry
from medusa.placement import PlacementError


def output_sides(spec: Mapping[str, Any], node: str) -> list[str]:
    """The participants other than ``node``'s whose clusters hold the fragment's outputs,
    when the fragment has an availability bound (DPC's delay in ``dpc_delay_ms``)."""
    if spec.get("dpc_delay_ms") is None:
        return []
    here = node.split("/", 1)[0]
    return sorted({str(w["participant"]) for w in spec.get("writes") or []} - {here})


def reader_replica(name: str, spec: Mapping[str, Any], node: str, nodes: Iterable[Entry],
                   fragments: Iterable[Entry] = ()) -> str | None:
    """The node that runs the fragment's reader-side replica once it runs on ``node``
    (None: its outputs are read where it runs, or it has no availability bound).

    Keeps the current replica while its node is up; otherwise the running node of the
    output's participant with the fewest fragments. Refuses a placement that cannot keep
    the bound: no running node on the reader's side.
    """
    sides = output_sides(spec, node)
    if not sides:
        return None
    side = sides[0]  # one reader side: a fragment's outputs across three clusters share it
    up = sorted(e.name for e in nodes
                if e.participant == side and e.spec.get("status") == "up")
    current = spec.get("reader_replica")
    if current in up:
        return str(current)
    if not up:
        boxes = spec.get("boxes") or [name.rsplit("/", 1)[-1]]
        raise PlacementError(
            f"box {boxes[0]!r}: placed on {node}, its output is read on {side}'s cluster and "
            f"it has an availability bound, so a replica must run on {side} to keep the bound "
            f"while the link is cut; {side} has no running node (start one with `medusa node "
            f"--name NAME --participant {side}`, or place the fragment on {side})")
    load = {n: 0 for n in up}
    for fragment in fragments:
        for holder in (fragment.spec.get("node"), fragment.spec.get("reader_replica")):
            if holder in load:
                load[holder] += 1
    return min(up, key=lambda n: (load[n], n))


AHEAD_MS = 2000
"""How far the replica's boundaries must have gone past the output's: the primary promises
the same ones at about the same time, a trigger later at worst; cut off, it falls D
behind as soon as the replica releases tentatively."""


def should_serve(silent_s: float, delay_s: float, replica_promise_ms: int | None,
                 output_promise_ms: int | None) -> bool:
    """Whether a reader-side replica takes the output over: nothing has reached the output
    for D, and the replica's boundaries are ``AHEAD_MS`` past the output's. Not before the
    output has promised something since the replica began (its primary was writing)."""
    if replica_promise_ms is None or output_promise_ms is None:
        return False
    return silent_s >= delay_s and replica_promise_ms - output_promise_ms >= AHEAD_MS
