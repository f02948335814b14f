"""Membership: the node's own catalog entry (up with an incarnation, down, rejoining after
being declared failed) and its heartbeats to ``medusa.heartbeats``, which the failure
detector watches."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from medusa.catalog.model import Entry, Kind
from medusa.producing import TupleProducer
from medusa.schemas import HEARTBEAT_TOPIC, schema_for_topic
from medusa.settings import kafka_config
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
                    "spark_ui": self.node.spark_ui}
        return self.node.catalog.update(Kind.NODES, self.node.global_name, change)

    def mark_down(self) -> Entry | None:
        """Marks this node down, as it stops. Its Spark UI stops with it, and the UI's port
        may go to another node's: its URL goes too."""
        return self.node.catalog.update(Kind.NODES, self.node.global_name,
                                        lambda spec: {**spec, "status": "down", "spark_ui": None}
                                        if spec else None)

    def beat(self) -> None:
        """Beats until ``stop``, on a thread of its own so slow fragments do not delay it."""
        config = kafka_config(self.node.bootstrap, **{"linger.ms": 0})
        with TupleProducer(config, self.node.registry, HEARTBEAT_TOPIC,
                           schema_for_topic(HEARTBEAT_TOPIC), self.node.global_name,
                           boundary_interval_s=60.0) as producer:
            seq = 0
            while not self.node.stopping.is_set():
                now = int(time.time() * 1000)
                seq += 1
                producer.produce({"node": self.node.global_name,
                                  "participant": self.node.participant,
                                  "seq": seq, "incarnation": self.node.incarnation, "sent_at": now,
                                  "boxes": sorted(self.node.hosted)},
                                 f"{self.node.global_name}/heartbeat/{self.node.incarnation}/{seq}",
                                 now, key=self.node.global_name)
                producer.poll()
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

