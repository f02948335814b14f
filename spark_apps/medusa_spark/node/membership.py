"""Membership: the node's own catalog entry (up with an incarnation, down, rejoining after
being declared failed) and its heartbeats to ``medusa.heartbeats``, which the failure
detector watches."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from medusa.catalog.client import CatalogError
from medusa.catalog.model import Entry, Kind
from medusa.heartbeats import HeartbeatSender, SenderConfig, Tick
from medusa_spark.node.state import NodeState

log = logging.getLogger("medusa.node")


class Membership:
    """What the catalog and the failure detector know of this node itself."""

    def __init__(self, node: NodeState) -> None:
        self.node = node

    def register(self) -> Entry | None:
        """Adds this node to the catalog, or marks it up again with a new incarnation (and
        the URL of its Spark UI, whose port may differ from its last start's)."""
        def change(spec: dict[str, Any] | None) -> dict[str, Any]:
            return {**(spec or {}), "status": "up", "incarnation": self.node.incarnation,
                    "checkpoint_root": self.node.checkpoint_root,
                    "secondary": self.node.secondary or (spec or {}).get("secondary"),
                    "spark_ui": self.node.spark_ui, "rehearsed": []}
        return self.node.catalog.update(Kind.NODES, self.node.global_name, change)

    def rehearsed(self, fragment: str) -> None:
        """Says in the catalog that ``fragment``'s query was rehearsed here (its takeover
        here is pre-warmed): ``medusa status`` shows it, the failover benchmark waits for it."""
        def change(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None or spec.get("incarnation") != self.node.incarnation:
                return None
            return {**spec, "rehearsed": sorted({*spec.get("rehearsed", []), fragment})}
        try:
            self.node.catalog.update(Kind.NODES, self.node.global_name, change)
        except CatalogError as error:  # only what the catalog shows is late
            log.warning("%s: %s", self.node.global_name, error)

    def mark_down(self) -> Entry | None:
        """Marks this node down, as it stops. Its Spark UI stops with it, and the UI's port
        may go to another node's: its URL goes too."""
        return self.node.catalog.update(Kind.NODES, self.node.global_name,
                                        lambda spec: {**spec, "status": "down", "spark_ui": None}
                                        if spec else None)

    def beat(self) -> None:
        """Ticks its heartbeat sender until ``stop``: the heartbeats go from a process of
        their own (``medusa.heartbeats``), which no thread of this busy process delays."""
        config = SenderConfig(self.node.bootstrap, self.node.endpoints.registry_url,
                              self.node.global_name, self.node.participant,
                              self.node.heartbeat_interval_s)
        with HeartbeatSender(config) as sender:
            while not self.node.stopping.is_set():
                sender.tick(Tick(self.node.incarnation, sorted(self.node.hosted)))
                self.node.stopping.wait(self.node.heartbeat_interval_s)

    def rejoin(self, stop_all: Callable[[], None]) -> None:
        """Declared failed while alive: stop everything (``stop_all``), write nothing, rejoin
        as a new node."""
        log.warning("%s: the failure detector declared incarnation %s failed and its "
                    "fragments run elsewhere; stopping them and rejoining", self.node.global_name,
                    self.node.incarnation)
        stop_all()
        self.node.incarnation = uuid.uuid4().hex
        self.register()

