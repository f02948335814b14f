"""Reading tuples back: envelope plus Avro value; undecodable records go to a dead-letter topic.

A dead-lettered record is kept as ``medusa.dead_letters`` says (unchanged, plus
``medusa.dlq.*`` headers giving the reason, topic, partition and offset), so nothing
is lost. Offsets are stored only once a record is handled (decoded, or dead-lettered
and acknowledged by the broker).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from medusa import dead_letters
from medusa.dead_letters import DeadLetter, dead_letter_topic
from medusa.envelope import EnvelopeError, TupleRecord, TupleType, decode_record
from medusa.registry import SERDE_CONFIG
from medusa.settings import for_producer
from medusa.topics import ensure_topics
from medusa.tracing import context_of, header_traceparent, traceparent

_VALUELESS = {TupleType.BOUNDARY, TupleType.UNDO, TupleType.REC_DONE}


def take(consumer: Consumer, most: int, timeout_s: float) -> list[Message]:
    """Up to ``most`` records: waits up to ``timeout_s`` for the first, then takes what the
    client holds already. (``Consumer.consume(most, timeout_s)`` waits out the whole
    timeout unless ``most`` records come: a record that came alone would wait with it.)"""
    first = consumer.poll(timeout_s)
    if first is None:
        return []
    return [first, *consumer.consume(most - 1, 0)] if most > 1 else [first]


@dataclass(frozen=True)
class ConsumedTuple:
    record: TupleRecord
    topic: str
    partition: int
    offset: int
    key: bytes | None
    timestamp_ms: int = 0
    """The record's Kafka timestamp (when it was written, unless the writer set it)."""
    traceparent: str | None = None
    """The trace a sampled tuple carries; the consumer's span continues it."""


class TupleConsumer:
    def __init__(
        self,
        kafka_config: dict[str, Any],
        registry: SchemaRegistryClient,
        topics: Sequence[str],
        group_id: str,
        from_beginning: bool = True,
    ) -> None:
        self.dead_lettered = 0
        self._deserializer = AvroDeserializer(registry, conf=SERDE_CONFIG)
        self._consumer = Consumer({
            **kafka_config,
            "group.id": group_id,
            "auto.offset.reset": "earliest" if from_beginning else "latest",
            "enable.auto.commit": True,
            "enable.auto.offset.store": False,
        })
        self._dlq_producer = Producer({**for_producer(kafka_config), "enable.idempotence": True})
        ensure_topics(for_producer(kafka_config), [dead_letter_topic(t) for t in topics],
                      partitions=1)
        self._consumer.subscribe(list(topics))

    def __enter__(self) -> TupleConsumer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def poll(self, timeout_s: float = 1.0) -> ConsumedTuple | None:
        """The next decodable tuple, or None when nothing came within the timeout."""
        deadline = time.monotonic() + timeout_s
        while (remaining := deadline - time.monotonic()) > 0:
            message = self._consumer.poll(remaining)
            if message is None:
                return None
            error = message.error()
            if error is not None:
                if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART and not error.fatal():
                    # A subscribed topic its cluster does not show yet (one just made
                    # reaches every broker's metadata a moment later): it may still come.
                    continue
                raise KafkaException(error)
            try:
                consumed = self._decode(message)
            except Exception as error:  # any decoding failure is data, not a crash
                self._dead_letter(message, f"{type(error).__name__}: {error}")
                continue
            self._consumer.store_offsets(message)
            return consumed
        return None

    def take(self, count: int, timeout_s: float = 30.0) -> list[ConsumedTuple]:
        """Up to ``count`` tuples, waiting at most ``timeout_s`` in all."""
        taken: list[ConsumedTuple] = []
        deadline = time.monotonic() + timeout_s
        while len(taken) < count and (remaining := deadline - time.monotonic()) > 0:
            consumed = self.poll(min(remaining, 1.0))
            if consumed is not None:
                taken.append(consumed)
        return taken

    def drain(self, idle_s: float = 3.0, timeout_s: float = 300.0) -> list[ConsumedTuple]:
        """Everything there is: tuples until none came for ``idle_s`` seconds."""
        taken: list[ConsumedTuple] = []
        deadline = time.monotonic() + timeout_s
        last = time.monotonic()
        while time.monotonic() - last < idle_s and time.monotonic() < deadline:
            consumed = self.poll(0.5)
            if consumed is not None:
                taken.append(consumed)
                last = time.monotonic()
        return taken

    def _decode(self, message: Message) -> ConsumedTuple:
        topic = message.topic() or ""
        headers = message.headers()
        raw = message.value()
        envelope_only = decode_record(headers, None)
        if envelope_only.type in _VALUELESS:
            record = envelope_only
        else:
            if raw is None:
                raise EnvelopeError(f"{envelope_only.type} record has no value")
            value = self._deserializer(raw, SerializationContext(topic, MessageField.VALUE))
            record = TupleRecord(envelope_only.type, envelope_only.tuple_id, envelope_only.stime,
                                 value)
        parent = header_traceparent(headers if isinstance(headers, list) else None)
        if parent is not None:  # a sampled tuple: its journey ends at this sink
            span = trace.get_tracer("medusa").start_span(
                f"consume {topic}", context=context_of(parent), kind=SpanKind.CONSUMER,
                attributes={"medusa.id": record.tuple_id, "messaging.destination.name": topic})
            span.end()
            parent = traceparent(span)
        return ConsumedTuple(record, topic, message.partition() or 0, message.offset() or 0,
                             message.key(), message.timestamp()[1], parent)

    def _dead_letter(self, message: Message, reason: str) -> None:
        headers = message.headers() or []
        letter = DeadLetter(topic=message.topic() or "", reason=reason, value=message.value(),
                            key=message.key(),
                            headers=list(headers.items()) if isinstance(headers, dict) else headers,
                            partition=message.partition(), offset=message.offset())
        # Only once the dead letter is safely stored may the original's offset move on.
        dead_letters.send(self._dlq_producer, [letter])
        self.dead_lettered += 1
        self._consumer.store_offsets(message)

    def close(self) -> None:
        self._dlq_producer.flush(30.0)
        self._consumer.close()
