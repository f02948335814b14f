"""What the catalog says once a node is declared failed: who runs each of its fragments now.

A fragment with ``ha: passive`` goes to the failed node's secondary (or, when that is
not up, to the least loaded live node of the same participant) in phase ``released``
with its checkpoint where the failed node left it: the new node copies it, restores
the fragment's query and replays its inputs from Kafka. A fragment with ``ha: active``
goes to the node running its replica, which promotes the replica instead of
restarting. A fragment whose replica ran on the failed node gets the next replica.

A fragment in phase ``failed`` (its query kept failing on the failed node) is taken
over too, with its error cleared and its restarts back to 0: a fresh node may succeed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Entry, Kind
from medusa.contracts import covering
from medusa.placement import PlacementError
from medusa.reader_side import reader_replica


@dataclass(frozen=True)
class Takeover:
    fragment: str
    """The fragment's global name, ``participant/network/fragment``."""
    source: str
    target: str | None
    """None: no live node could take the fragment; it waits on the failed node."""
    mode: str
    """passive (restore from the checkpoint) or active (promote the replica)."""


def live_nodes(catalog: CatalogClient) -> dict[str, Entry]:
    return {e.name: e for e in catalog.list(Kind.NODES) if e.spec.get("status") == "up"}


def choose_target(failed: Entry, fragment: Entry, live: dict[str, Entry],
                  fragments_per_node: dict[str, int],
                  may_host: Callable[[str], bool] = lambda _: True
                  ) -> tuple[str | None, str]:
    """``may_host``: whether a node may run the fragment (a partner's, only under a
    contract in force that covers it)."""
    replica = fragment.spec.get("replica")
    if fragment.spec.get("ha") == "active" and replica in live and may_host(replica):
        return replica, "active"
    secondary = failed.spec.get("secondary")
    if secondary in live and may_host(secondary):
        return secondary, "passive"
    same_participant = [name for name in live if name.split("/")[0] == failed.participant]
    if not same_participant:
        return None, "passive"
    return min(same_participant, key=lambda n: (fragments_per_node.get(n, 0), n)), "passive"


def next_replica(target: str, failed: str, live: dict[str, Entry]) -> str | None:
    """The new primary's secondary hosts the next replica, when it is up and not itself."""
    entry = live.get(target)
    secondary = entry.spec.get("secondary") if entry else None
    return secondary if secondary in live and secondary not in (target, failed) else None


def take_over(catalog: CatalogClient, failed: Entry, trace_parent: str | None,
              on_fragment: Callable[[Takeover], None] | None = None) -> list[Takeover]:
    """Places every fragment of ``failed`` on a live node; returns what went where."""
    live = {name: e for name, e in live_nodes(catalog).items() if name != failed.name}
    fragments = catalog.list(Kind.FRAGMENTS)
    fragments_per_node: dict[str, int] = {}
    for fragment in fragments:
        node = fragment.spec["node"]
        fragments_per_node[node] = fragments_per_node.get(node, 0) + 1
    done = []
    for fragment in fragments:
        if fragment.spec["node"] != failed.name:
            if fragment.spec.get("replica") == failed.name:  # lost its standby; a new one follows
                catalog.update(Kind.FRAGMENTS, fragment.name, _replica_lost(failed.name, live))
            if fragment.spec.get("reader_replica") == failed.name:
                catalog.update(Kind.FRAGMENTS, fragment.name, _reader_lost(fragment.name, live))
            continue
        target, mode = choose_target(failed, fragment, live, fragments_per_node,
                                     _may_host(catalog, fragment.name))
        if target is not None:
            catalog.update(Kind.FRAGMENTS, fragment.name,
                           _moved_to(fragment.name, failed.name, target, mode, trace_parent,
                                     live))
            fragments_per_node[target] = fragments_per_node.get(target, 0) + 1
        takeover = Takeover(fragment.name, failed.name, target, mode)
        done.append(takeover)
        if on_fragment is not None:
            on_fragment(takeover)
    return done


def _moved_to(name: str, failed: str, target: str, mode: str, trace_parent: str | None,
              live: dict[str, Entry]) -> Callable[[dict[str, Any] | None], dict[str, Any] | None]:
    def change(spec: dict[str, Any] | None) -> dict[str, Any] | None:
        if spec is None or spec["node"] != failed:
            return None  # withdrawn or moved meanwhile
        replica = spec.get("replica")
        if spec.get("ha") == "active":
            replica = next_replica(target, failed, live) if mode == "active" or replica in (
                target, failed) else replica
        return {**spec, "node": target, "phase": "released", "released_by": failed,
                "replica": replica, "replica_ready": False, "takeover_trace": trace_parent,
                "error": None, "restarts": 0,
                "reader_replica": _reader_on(name, spec, target, live), "serving": None}
    return change


def _may_host(catalog: CatalogClient, fragment: str) -> Callable[[str], bool]:
    """A node of the fragment's origin may run it; a partner's only under a contract in
    force that covers it (as for a deploy or a move)."""
    origin = fragment.split("/", 1)[0]

    def may(node: str) -> bool:
        host = node.split("/", 1)[0]
        return host == origin or covering(catalog, origin, host, fragment) is not None
    return may


def _reader_on(name: str, spec: dict[str, Any], node: str, live: dict[str, Entry]
               ) -> str | None:
    """The reader-side replica once the fragment runs on ``node``; None when no node of
    the reader's side is up (it gets one when the fragment is redeployed or moved)."""
    try:
        return reader_replica(name, spec, node, live.values())
    except PlacementError:
        return None


def _reader_lost(name: str, live: dict[str, Entry]
                 ) -> Callable[[dict[str, Any] | None], dict[str, Any] | None]:
    def change(spec: dict[str, Any] | None) -> dict[str, Any] | None:
        if spec is None or spec.get("reader_replica") in live:
            return None
        lost = {**spec, "reader_replica": None, "serving": None}
        return {**lost, "reader_replica": _reader_on(name, lost, spec["node"], live)}
    return change


def _replica_lost(failed: str, live: dict[str, Entry]
                  ) -> Callable[[dict[str, Any] | None], dict[str, Any] | None]:
    def change(spec: dict[str, Any] | None) -> dict[str, Any] | None:
        if spec is None or spec.get("replica") != failed:
            return None
        return {**spec, "replica": next_replica(spec["node"], failed, live),
                "replica_ready": False}
    return change
