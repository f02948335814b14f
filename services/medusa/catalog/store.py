"""The catalog's state: a compacted Kafka topic, replayed into memory at start.

Every write is one Kafka transaction that is committed before the write is
acknowledged, so an acknowledged write survives a kill -9. The producer's fixed
transactional id fences an older instance: a second catalog that starts on the
same topic makes the first one's writes fail instead of interleaving with them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from opentelemetry import trace
from pydantic import ValidationError

from medusa.catalog.model import Entry, Kind, key_of
from medusa.errors import MedusaError
from medusa.settings import END_OF_LOG_FETCH_WAIT_MS, kafka_config
from medusa.topics import ensure_topics

CATALOG_TOPIC = "medusa.catalog"

log = logging.getLogger("medusa.catalog")


class VersionConflictError(MedusaError):
    """The entity is not at the version the writer read."""

    def __init__(self, kind: Kind, name: str, expected: int | None, actual: int | None) -> None:
        self.kind, self.name, self.expected, self.actual = kind, name, expected, actual
        what = f"{kind.singular} {name}"
        if actual is None:
            message = f"{what} does not exist (the update expected version {expected})"
        elif expected is None:
            message = (f"{what} already exists at version {actual}; send that version "
                       "to update it")
        else:
            message = f"{what} is at version {actual}, not {expected}: read it again and retry"
        super().__init__(message)


class CatalogUnavailableError(MedusaError):
    """The catalog cannot write: Kafka is unreachable, or a newer instance fenced this one."""


class CatalogStore:
    def __init__(self, bootstrap: str, topic: str = CATALOG_TOPIC,
                 transactional_id: str | None = None, timeout_s: float = 30.0) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.transactional_id = transactional_id or f"medusa-catalog-{topic}"
        self.timeout_s = timeout_s
        self._entries: dict[str, Entry] = {}
        self._lock = threading.Lock()
        self._producer: Producer | None = None
        self.revision = 0
        """Counts the changes this instance has applied, replayed ones included."""

    def start(self) -> CatalogStore:
        ensure_topics(kafka_config(self.bootstrap), [self.topic], partitions=1,
                      config={"cleanup.policy": "compact", "min.compaction.lag.ms": "60000"})
        producer = Producer(kafka_config(self.bootstrap, transactional_id=self.transactional_id,
                                         enable_idempotence=True, acks="all", linger_ms=0))
        # Fences an older instance and aborts its open transaction before we read.
        producer.init_transactions(self.timeout_s)
        self._producer = producer
        self._replay()
        log.info("catalog: %d entries replayed from %s on %s", len(self._entries), self.topic,
                 self.bootstrap)
        return self

    def _replay(self) -> None:
        consumer = Consumer(kafka_config(self.bootstrap,
                                         group_id=f"{self.transactional_id}-replay",
                                         isolation_level="read_committed",
                                         enable_partition_eof=True, enable_auto_commit=False,
                                         fetch_wait_max_ms=END_OF_LOG_FETCH_WAIT_MS))
        consumer.assign([TopicPartition(self.topic, 0, 0)])
        deadline = time.monotonic() + self.timeout_s
        try:
            while True:
                if time.monotonic() > deadline:
                    raise CatalogUnavailableError(
                        f"could not read {self.topic} on {self.bootstrap} to the end "
                        f"within {self.timeout_s:.0f}s")
                message = consumer.poll(1.0)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        return
                    raise CatalogUnavailableError(f"reading {self.topic}: {error.str()}")
                self._apply((message.key() or b"").decode(), message.value())
        finally:
            consumer.close()

    def _apply(self, key: str, value: bytes | None) -> None:
        self.revision += 1
        if value is None:
            self._entries.pop(key, None)
            return
        try:
            self._entries[key] = Entry.model_validate_json(value)
        except ValidationError as error:
            # Written by an older version (per-box placement, say): it cannot be served,
            # and a redeploy writes what replaces it.
            log.warning("catalog entry %s skipped: %s", key, error.errors()[0]["msg"])

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(self.timeout_s)
            self._producer = None

    def get(self, kind: Kind, name: str) -> Entry | None:
        return self._entries.get(key_of(kind, name))

    def entries(self, kind: Kind, prefix: str = "") -> list[Entry]:
        start = key_of(kind, prefix)
        with self._lock:
            entries = [e for k, e in self._entries.items() if k.startswith(start)]
        return sorted(entries, key=lambda e: e.name)

    def put(self, kind: Kind, name: str, spec: dict[str, Any], expected: int | None) -> Entry:
        """Create (``expected`` None) or update (``expected``: the version read) an entity."""
        key = key_of(kind, name)
        with self._lock:
            current = self._entries.get(key)
            actual = current.version if current else None
            if actual != expected:
                raise VersionConflictError(kind, name, expected, actual)
            entry = Entry(kind=kind, name=name, version=(actual or 0) + 1,
                          updated_at=int(time.time() * 1000), spec=spec)
            self._write(key, entry.model_dump_json().encode())
            self._apply(key, entry.model_dump_json().encode())
            return entry

    def delete(self, kind: Kind, name: str, expected: int | None) -> Entry:
        """Remove an entity; with ``expected``, only if it is still at that version."""
        key = key_of(kind, name)
        with self._lock:
            current = self._entries.get(key)
            if current is None or (expected is not None and current.version != expected):
                raise VersionConflictError(kind, name, expected,
                                           current.version if current else None)
            self._write(key, None)
            self._apply(key, None)
            return current

    def _write(self, key: str, value: bytes | None) -> None:
        producer = self._producer
        if producer is None:
            raise CatalogUnavailableError("the catalog store is not started")
        span = trace.get_tracer("medusa").start_span(
            f"catalog {'delete' if value is None else 'write'}", attributes={"medusa.key": key})
        try:
            with trace.use_span(span, end_on_exit=True):
                producer.begin_transaction()
                producer.produce(self.topic, key=key.encode(), value=value, partition=0)
                producer.commit_transaction(self.timeout_s)
        except KafkaException as error:
            kafka_error = error.args[0]
            if kafka_error.txn_requires_abort():
                with contextlib.suppress(KafkaException):
                    producer.abort_transaction(self.timeout_s)
            reason = kafka_error.str()
            if kafka_error.fatal():
                self._producer = None
                reason += " (fenced by a newer catalog instance, or fatal; restart this one)"
            raise CatalogUnavailableError(f"could not write {key} to {self.topic}: "
                                          f"{reason}") from None

    @property
    def size(self) -> int:
        return len(self._entries)
