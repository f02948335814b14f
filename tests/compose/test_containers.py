"""The testcontainers path (`MEDUSA_TEST_USE_CONTAINERS=always`) on the images built here:
its brokers take a record and give it back, and its registry keeps a schema."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Message, Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from medusa.settings import REPO_ROOT
from tests.containers import container_federation
from tests.waiting import wait_for

pytestmark = pytest.mark.compose


def _record(message: Message | None) -> Message | None:
    """The message when it is a record (not nothing, nor an error)."""
    return message if message is not None and message.error() is None else None


def test_the_container_federation_carries_records_and_keeps_schemas() -> None:
    with container_federation(participants=2) as endpoints:
        for participant, bootstrap in endpoints.kafka.items():
            topic = f"containers.{participant}.{uuid.uuid4().hex[:6]}"
            producer = Producer({"bootstrap.servers": bootstrap})
            producer.produce(topic, value=participant.encode())
            assert producer.flush(30) == 0, participant
            consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                                 "auto.offset.reset": "earliest"})
            consumer.subscribe([topic])
            try:
                message = wait_for(f"the record back from {participant}'s broker",
                                   lambda c=consumer: _record(c.poll(1.0)), 60,
                                   interval_s=0)
                assert message.value() == participant.encode()
            finally:
                consumer.close()
        registry = SchemaRegistryClient({"url": endpoints.registry_url})
        text = (REPO_ROOT / "schemas" / "sensor_reading.avsc").read_text()
        subject = f"containers-{uuid.uuid4().hex[:6]}-value"
        schema_id = registry.register_schema(subject, Schema(text, "AVRO"))
        assert registry.get_latest_version(subject).schema_id == schema_id
