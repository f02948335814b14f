"""A Medusa node: one long-lived SparkSession hosting the boxes deployed to it.

Deployments arrive on the control topic ``medusa.deployments`` of the node's
participant (key: network name; value: JSON with the network's YAML and the node
it is for; an empty value withdraws the network). The topic is compacted and read
from the start, so a restarted node picks up what it should run. Every few
seconds the node publishes each box's progress (input and processing rates,
batch duration, consumer lag) as a NodeLoadReport to ``medusa.node-load``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from medusa.producing import TupleProducer
from medusa.schemas import schema_for_topic
from medusa.stack.endpoints import Endpoints
from medusa.topics import ensure_topics
from medusa_spark.network.model import NetworkError, parse_network
from medusa_spark.network.validate import Plan, validate
from medusa_spark.runner import start_box, wire

DEPLOYMENTS_TOPIC = "medusa.deployments"
LOAD_TOPIC = "medusa.node-load"

log = logging.getLogger("medusa.node")


def ensure_control_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(DEPLOYMENTS_TOPIC, num_partitions=1, replication_factor=1,
                     config={"cleanup.policy": "compact"})
    for future in admin.create_topics([topic]).values():
        try:
            future.result(30)
        except Exception as error:  # already there is fine
            if "TOPIC_ALREADY_EXISTS" not in str(error):
                raise


def publish_deployment(bootstrap: str, network_yaml: str | None, name: str,
                       node: str | None) -> None:
    """Ask ``node`` (any node of the participant when None) to run a network, or to stop it."""
    ensure_control_topic(bootstrap)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    value = None if network_yaml is None else json.dumps(
        {"network": network_yaml, "node": node}).encode()
    producer.produce(DEPLOYMENTS_TOPIC, key=name.encode(), value=value)
    if producer.flush(30) != 0:
        raise RuntimeError(f"could not publish the deployment of {name} to {bootstrap}")


@dataclass
class Deployed:
    plan: Plan
    queries: dict[str, StreamingQuery] = field(default_factory=dict)


class Node:
    def __init__(self, name: str, participant: str, endpoints: Endpoints,
                 registry: SchemaRegistryClient, spark: SparkSession, checkpoint_root: str,
                 metrics_interval_s: float = 5.0) -> None:
        self.name = name
        self.participant = participant
        self.endpoints = endpoints
        self.registry = registry
        self.spark = spark
        self.checkpoint_root = checkpoint_root
        self.metrics_interval_s = metrics_interval_s
        self.networks: dict[str, Deployed] = {}
        self.errors: dict[str, str] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()

    @property
    def global_name(self) -> str:
        return f"{self.participant}/{self.name}"

    @property
    def bootstrap(self) -> str:
        return self.endpoints.bootstrap(self.participant)

    def deploy(self, network_yaml: str, boxes: list[str] | None = None) -> Deployed:
        network = parse_network(network_yaml)
        self.undeploy(network.name)
        plan = validate(network, self.spark)
        wiring = wire(plan, self.endpoints, self.registry)
        deployed = Deployed(plan)
        for box in plan.order:
            if boxes is None or box in boxes:
                deployed.queries[box] = start_box(self.spark, plan, wiring[box],
                                                  self.checkpoint_root)
        with self._lock:
            self.networks[network.name] = deployed
        log.info("%s: running %s (%d boxes)", self.global_name, network.name,
                 len(deployed.queries))
        return deployed

    def undeploy(self, name: str) -> None:
        with self._lock:
            deployed = self.networks.pop(name, None)
        if deployed is None:
            return
        for query in deployed.queries.values():
            query.stop()
        log.info("%s: stopped %s", self.global_name, name)

    def apply_control(self, key: str, value: bytes | None) -> None:
        """One record of the deployments topic."""
        if value is None:
            self.undeploy(key)
            return
        request = json.loads(value)
        target = request.get("node")
        if target not in (None, self.name, self.global_name):
            self.undeploy(key)  # moved elsewhere
            return
        try:
            self.deploy(request["network"])
            self.errors.pop(key, None)
        except NetworkError as error:
            self.errors[key] = str(error)
            log.error("%s: network %s rejected: %s", self.global_name, key, error)

    def box_loads(self) -> list[dict[str, Any]]:
        loads = []
        with self._lock:
            items = [(n, b, q) for n, d in self.networks.items() for b, q in d.queries.items()]
        for network, box, query in items:
            progress: dict[str, Any] = query.lastProgress or {}
            lag = 0
            for source in progress.get("sources", []):
                metrics = source.get("metrics") or {}
                lag += int(float(metrics.get("maxOffsetsBehindLatest", 0) or 0))
            loads.append({
                "box": f"{self.participant}/{network}/{box}",
                "input_rate": float(progress.get("inputRowsPerSecond") or 0.0),
                "processing_rate": float(progress.get("processedRowsPerSecond") or 0.0),
                "batch_duration_ms": int(progress.get("batchDuration") or 0),
                "lag": lag,
                "active": query.isActive,
                "error": str(query.exception()) if query.exception() else None,
            })
        return loads

    def _report_loop(self) -> None:
        ensure_topics({"bootstrap.servers": self.bootstrap}, [LOAD_TOPIC], partitions=1)
        with TupleProducer({"bootstrap.servers": self.bootstrap}, self.registry, LOAD_TOPIC,
                           schema_for_topic(LOAD_TOPIC), self.global_name,
                           boundary_interval_s=self.metrics_interval_s) as producer:
            while not self._stop.wait(self.metrics_interval_s):
                loads = self.box_loads()
                busy_ms = sum(load["batch_duration_ms"] for load in loads)
                now = int(time.time() * 1000)
                report = {
                    "node": self.global_name, "participant": self.participant,
                    "reported_at": now,
                    "utilisation": min(1.0, busy_ms / (self.metrics_interval_s * 1000)),
                    "boxes": [{k: load[k] for k in ("box", "input_rate", "processing_rate",
                                                    "batch_duration_ms", "lag")}
                              for load in loads],
                }
                producer.produce(report, f"{self.global_name}/load/{now}", now,
                                 key=self.global_name)

    def run(self) -> None:
        """Follow the deployments topic until ``stop``."""
        ensure_control_topic(self.bootstrap)
        reporter = threading.Thread(target=self._report_loop, name="load-reports", daemon=True)
        reporter.start()
        consumer = Consumer({"bootstrap.servers": self.bootstrap,
                             "group.id": f"medusa-node-{self.name}-{uuid.uuid4()}",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([DEPLOYMENTS_TOPIC])
        try:
            while not self._stop.is_set():
                message = consumer.poll(1.0)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        log.warning("deployments topic: %s", error.str())
                    continue
                key = (message.key() or b"").decode()
                self.apply_control(key, message.value())
        finally:
            consumer.close()
            for name in list(self.networks):
                self.undeploy(name)

    def stop(self) -> None:
        self._stop.set()
