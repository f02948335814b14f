"""Publishing tuples: Avro values through the registry, envelope headers, BOUNDARY punctuation.

The hot path is lean on purpose, as users feed their sensors through it: the value is
written by fastavro against the schema parsed once, in the registry's wire format (magic
byte, schema id, body), and delivery reports come back only for failures, so no Python
callback runs per delivered record.
"""

from __future__ import annotations

import io
import json
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro import parse_schema, schemaless_writer
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from medusa.envelope import TRACEPARENT_HEADER, Headers, TupleType, boundary, envelope_headers
from medusa.registry import register
from medusa.schemas import AvroSchema
from medusa.topics import partition_count
from medusa.tracing import Sampler, traceparent

_MAGIC_BYTE = b"\x00"
_POLL_EVERY = 100
"""Records between two polls for delivery reports (only failures report)."""


@dataclass
class DeliveryStats:
    sent: int = 0
    """Data records handed to Kafka and not reported failed (delivered once flushed)."""
    failed: int = 0
    boundaries: int = 0
    errors: list[str] = field(default_factory=list)
    """The first few delivery errors, verbatim, for the summary."""

    def record_error(self, message: str, count: int = 1, keep: int = 10) -> None:
        self.failed += count
        if len(self.errors) < keep:
            self.errors.append(message)


class TupleProducer:
    """Publishes one stream: every record carries the envelope, BOUNDARY records are
    emitted to each partition at least every ``boundary_interval_s`` seconds.

    The caller promises that stimes do not decrease (per source), so the last stime
    produced is a valid boundary for every partition.
    """

    def __init__(
        self,
        kafka_config: dict[str, Any],
        registry: SchemaRegistryClient,
        topic: str,
        schema: AvroSchema,
        source_id: str,
        to_dict: Callable[[Any, SerializationContext], dict[str, Any]] | None = None,
        boundary_interval_s: float = 1.0,
        stats: DeliveryStats | None = None,
        trace_every: int = 0,
    ) -> None:
        self.topic = topic
        self.source_id = source_id
        self.stats = stats or DeliveryStats()
        self._boundary_interval_s = boundary_interval_s
        self._sampled = Sampler(trace_every)
        registration = register(registry, topic, schema)
        self._wire_prefix = _MAGIC_BYTE + struct.pack(">I", registration.schema_id)
        self._parsed = parse_schema(json.loads(schema.text))
        self._to_dict = to_dict
        self._context = SerializationContext(topic, MessageField.VALUE)
        self._producer = Producer({
            "enable.idempotence": True, "acks": "all", **kafka_config,
            # Reports for failed records only: a delivered one costs no Python call.
            "delivery.report.only.error": True, "on_delivery": self._on_failure})
        self._partitions = partition_count(kafka_config, topic)
        self._last_stime: int | None = None
        self._unpolled = 0
        self._next_boundary_at = time.monotonic() + boundary_interval_s

    def __enter__(self) -> TupleProducer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def produce(
        self,
        value: Any,
        tuple_id: str,
        stime: int,
        key: str | None = None,
        tuple_type: TupleType = TupleType.STABLE,
        extra_headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        payload = self.serialize(value)
        headers = envelope_headers(tuple_type, tuple_id, stime, extra_headers or ())
        if self._sampled():  # this tuple's way through the boxes to the sink is traced
            span = trace.get_tracer("medusa").start_span(
                f"produce {self.topic}", kind=SpanKind.PRODUCER,
                attributes={"medusa.id": tuple_id, "messaging.destination.name": self.topic})
            span.end()
            parent = traceparent(span)
            if parent is not None:
                headers.append((TRACEPARENT_HEADER, parent.encode()))
        self._send(key, payload, headers, None)
        if self._last_stime is None or stime > self._last_stime:
            self._last_stime = stime
        if time.monotonic() >= self._next_boundary_at:
            self.emit_boundaries()

    def serialize(self, value: Any) -> bytes:
        """The value in the registry's wire format, as it goes on the topic."""
        buffer = io.BytesIO(self._wire_prefix)
        buffer.seek(len(self._wire_prefix))
        try:
            record = value if self._to_dict is None else self._to_dict(value, self._context)
            schemaless_writer(buffer, self._parsed, record)
        except (TypeError, ValueError, KeyError, AttributeError) as error:
            raise ValueError(f"{self.topic}: {value!r} does not fit the topic's schema: "
                             f"{error}") from error
        return buffer.getvalue()

    def emit_boundaries(self, stime: int | None = None) -> None:
        """One BOUNDARY per partition: nothing later on it has a smaller stime."""
        stime = self._last_stime if stime is None else stime
        self._next_boundary_at = time.monotonic() + self._boundary_interval_s
        if stime is None:
            return
        for partition in range(self._partitions):
            self._send(None, None, boundary(self.source_id, partition, stime).headers(), partition)
            self.stats.boundaries += 1

    def _send(
        self, key: str | None, value: bytes | None, headers: Headers, partition: int | None,
    ) -> None:
        while True:
            try:
                if partition is None:
                    self._producer.produce(self.topic, value, key, headers=headers)
                else:
                    self._producer.produce(self.topic, value, key, partition, headers=headers)
                break
            except BufferError:
                self._producer.poll(0.1)  # queue full: let deliveries drain, then retry
        if value is not None:
            self.stats.sent += 1  # taken back if its delivery fails
        self._unpolled += 1
        if self._unpolled >= _POLL_EVERY:  # serves the (failure) reports now and then
            self._unpolled = 0
            self._producer.poll(0)

    def _on_failure(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            return
        self.stats.record_error(f"{message.topic()}: {error.str()}")
        if message.value() is not None:
            self.stats.sent -= 1

    def poll(self) -> None:
        self._producer.poll(0)

    def flush(self, timeout_s: float = 30.0) -> int:
        """Wait for outstanding deliveries; returns how many are still undelivered."""
        return self._producer.flush(timeout_s)

    def close(self, timeout_s: float = 30.0) -> None:
        self.emit_boundaries()
        remaining = self.flush(timeout_s)
        if remaining:
            self.stats.sent -= remaining
            self.stats.record_error(
                f"{self.topic}: {remaining} record(s) undelivered at close", count=remaining
            )
