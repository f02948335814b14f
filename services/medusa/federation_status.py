"""What the federation is doing: the catalog's participants, nodes and boxes, with each
box's rates and lag from the nodes' latest load reports."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from medusa.catalog.client import CatalogClient, CatalogError
from medusa.catalog.model import Kind
from medusa.registry import SERDE_CONFIG
from medusa.schemas import NODE_LOAD_TOPIC
from medusa.settings import kafka_config
from medusa.stack.endpoints import Endpoints

RECENT_REPORTS = 200
"""How far back each participant's load topic is read for the latest report per node."""


@dataclass
class BoxStatus:
    name: str
    node: str
    phase: str
    input_rate: float | None = None
    processing_rate: float | None = None
    lag: int | None = None
    ha: str = "passive"
    replica: str | None = None
    """ha: active only: where the standby replica runs (None: none yet)."""


@dataclass
class NodeStatus:
    name: str
    status: str
    secondary: str | None
    boxes: int
    utilisation: float | None = None
    report_age_s: float | None = None


@dataclass
class FederationStatus:
    participants: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[NodeStatus] = field(default_factory=list)
    boxes: list[BoxStatus] = field(default_factory=list)
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def latest_load_reports(endpoints: Endpoints, registry: SchemaRegistryClient,
                        timeout_s: float = 5.0) -> dict[str, dict[str, Any]]:
    """Node -> its newest load report, over every participant's load topic."""
    deserialize = AvroDeserializer(registry, conf=SERDE_CONFIG)
    latest: dict[str, dict[str, Any]] = {}
    for bootstrap in endpoints.kafka.values():
        consumer = Consumer(kafka_config(bootstrap, {"log_level": 0}, group_id="medusa-status",
                                         enable_auto_commit=False, enable_partition_eof=True))
        try:
            metadata = consumer.list_topics(NODE_LOAD_TOPIC, timeout=timeout_s)
            described = metadata.topics.get(NODE_LOAD_TOPIC)
            if described is None or described.error is not None:
                continue
            partitions = []
            for partition in described.partitions:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(NODE_LOAD_TOPIC, partition), timeout=timeout_s)
                if high > low:
                    partitions.append(TopicPartition(NODE_LOAD_TOPIC, partition,
                                                     max(low, high - RECENT_REPORTS)))
            consumer.assign(partitions)
            pending, deadline = len(partitions), time.monotonic() + timeout_s
            while pending and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    pending -= error.code() == KafkaError._PARTITION_EOF
                    continue
                if message.value() is None:  # a BOUNDARY
                    continue
                report = deserialize(message.value(),
                                     SerializationContext(NODE_LOAD_TOPIC, MessageField.VALUE))
                if not isinstance(report, dict):
                    continue
                known = latest.get(report["node"])
                if known is None or report["reported_at"] >= known["reported_at"]:
                    latest[report["node"]] = report
        finally:
            consumer.close()
    return latest


def _millis(value: Any) -> float:
    return value.timestamp() * 1000 if hasattr(value, "timestamp") else float(value)


def federation_status(endpoints: Endpoints, registry: SchemaRegistryClient) -> FederationStatus:
    status = FederationStatus()
    try:
        with CatalogClient(endpoints.catalog_url, timeout_s=5) as catalog:
            participants = catalog.list(Kind.PARTICIPANTS)
            nodes = catalog.list(Kind.NODES)
            boxes = catalog.list(Kind.BOXES)
    except CatalogError as error:
        status.error = str(error)
        return status
    reports = latest_load_reports(endpoints, registry)
    loads = {load["box"]: load for report in reports.values() for load in report["boxes"]}
    now_ms = time.time() * 1000
    status.participants = [{"name": p.name, **p.spec} for p in participants]
    for node in nodes:
        report = reports.get(node.name)
        status.nodes.append(NodeStatus(
            node.name, node.spec.get("status", "?"), node.spec.get("secondary"),
            sum(b.spec["node"] == node.name for b in boxes),
            report["utilisation"] if report else None,
            round((now_ms - _millis(report["reported_at"])) / 1000, 1) if report else None))
    for box in boxes:
        load = loads.get(box.name) if box.spec.get("phase") == "running" else None
        status.boxes.append(BoxStatus(
            box.name, box.spec["node"], box.spec.get("phase", "?"),
            load["input_rate"] if load else None, load["processing_rate"] if load else None,
            load["lag"] if load else None, box.spec.get("ha", "passive"),
            box.spec.get("replica") if box.spec.get("replica_ready") else None))
    return status
