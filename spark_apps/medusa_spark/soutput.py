"""SOutput: a fragment's way out, where each result is written once whoever computes it.

Borealis's SOutput drops duplicates at a box's output by tuple id; here it also
fences. Every node that writes a fragment's outputs on one cluster uses the same
Kafka transactional id, so when a secondary takes the fragment over,
``init_transactions`` aborts what the failed node left half-written and fences
it: a node declared dead that comes back cannot write another record. Each
micro-batch is one transaction over all the fragment's output topics there.

Tuple ids are computed from the inputs, so a batch replayed from a checkpoint,
or computed by a standby replica, yields the same ids. At start the SOutput reads
the recent tail of its topic (committed records only) and remembers the ids, and
drops any result it is asked to write again. TENTATIVE results are not remembered:
after a reconciliation their corrected STABLE versions come with the same ids.

A standby SOutput (``ha: active``) writes nothing: it keeps its replica's recent
results until ``promote``, which fences the primary and writes those of them the
primary had not.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, cast

from confluent_kafka import (
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from opentelemetry import trace
from opentelemetry.context import Context

from medusa.envelope import ID_HEADER, TENTATIVE_HEADER, TYPE_HEADER
from medusa.errors import MedusaError
from medusa.settings import kafka_config

Header = tuple[str, str | bytes | None]


class OutRecord(NamedTuple):
    """One record to write (a tuple, cheaper to make than a dataclass: one per result)."""

    topic: str
    tuple_id: str
    value: bytes | None
    headers: list[Header]
    key: bytes | None = None
    partition: int | None = None
    """Set for BOUNDARY records, which go to every partition; else the key decides."""
    tentative: bool = False
    """A TENTATIVE result (or boundary): never a duplicate, since its corrected STABLE
    version carries the same id."""


@dataclass
class OutputStats:
    written: int = 0
    duplicates_dropped: int = 0
    first_write_at: float | None = None
    """Wall-clock time of the first record written by this SOutput."""
    recovered_ids: int = 0
    """Ids read back from the topic's tail at start."""
    first_write_listeners: list[Callable[[int], None]] = field(default_factory=list)


class OutputRefusedError(MedusaError, RuntimeError):
    """The cluster's ACLs refused this node's write (``medusa.access``); the fragment fails
    and its node tries again, rather than handing the output over as if fenced."""


_REFUSALS = frozenset({KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                       KafkaError.TOPIC_AUTHORIZATION_FAILED,
                       KafkaError.CLUSTER_AUTHORIZATION_FAILED})


class OutputFencedError(MedusaError, RuntimeError):
    """Another node has taken over this fragment's output; this one must stop writing."""


def transactional_id(owner: str) -> str:
    return f"medusa.soutput.{owner}"


class SOutput:
    def __init__(self, owner: str, topics: Sequence[str], bootstrap: str,
                 standby: bool = False, horizon_s: float = 300.0,
                 max_ids: int = 1_000_000) -> None:
        """``owner`` names the writer (a fragment, with its topic prefix); every node that
        writes its ``topics`` on the cluster at ``bootstrap`` shares its transactional id."""
        self.owner = owner
        self.topics = sorted(topics)
        self.bootstrap = bootstrap
        self.standby = standby
        self.horizon_s = horizon_s
        self.stats = OutputStats()
        self._max_ids = max_ids
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._producer: Producer | None = None
        self._buffer: deque[tuple[float, list[OutRecord]]] = deque()
        self._lock = threading.Lock()
        self.trace_context: Context | None = None
        """Set for a takeover: opening the output is then a span of the failure's trace."""

    # -- writing ----------------------------------------------------------------------

    def write(self, records: Sequence[OutRecord]) -> int:
        """Writes the records not written before, as one transaction; returns how many.

        On a standby, keeps them for ``promote`` instead.
        """
        with self._lock:
            if self.standby:
                now = time.time()
                self._buffer.append((now, list(records)))
                while self._buffer and self._buffer[0][0] < now - self.horizon_s:
                    self._buffer.popleft()
                return 0
            if self._producer is None:
                self._open()
            return self._transaction(records)

    def promote(self, keep_tentative: bool = True) -> int:
        """The standby becomes the writer: fences the primary, then writes what it missed.

        A tentative result whose stable version is written already is stale, and so is
        every tentative record when ``keep_tentative`` is off (its writer is past the
        failure period they belong to): written now, no UNDO would follow them.
        """
        with self._lock:
            if not self.standby:
                return 0
            self.standby = False
            self._open()
            kept = [record for _, batch in self._buffer for record in batch
                    if not record.tentative or (
                        keep_tentative and (record.topic, record.tuple_id) not in self._seen)]
            self._buffer.clear()
            return self._transaction(kept) if kept else 0

    def close(self) -> None:
        with self._lock:
            if self._producer is not None:
                self._producer.flush(10)
                self._producer = None

    def _open(self) -> None:
        span = (trace.get_tracer("medusa").start_span(
            f"open output {self.owner}", context=self.trace_context)
            if self.trace_context is not None else None)
        try:
            self._open_producer()
        finally:
            if span is not None:
                span.set_attribute("medusa.output.recovered_ids", self.stats.recovered_ids)
                span.end()

    def _open_producer(self) -> None:
        producer = Producer(kafka_config(self.bootstrap, **{
            "transactional.id": transactional_id(self.owner),
            # Java's default for keyed records, so a key's results keep one partition.
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000,
            "transaction.timeout.ms": 60_000,
        }))
        # Aborts the previous writer's open transaction and fences it from now on.
        producer.init_transactions(60)
        self._producer = producer
        recovered = [(topic, tuple_id) for topic in self.topics
                     for tuple_id in self._read_tail(topic)]
        self.stats.recovered_ids = len(recovered)
        for topic, tuple_id in recovered:
            self._remember(topic, tuple_id)

    def _transaction(self, records: Iterable[OutRecord]) -> int:
        producer = self._producer
        assert producer is not None
        fresh = []
        seen = self._seen
        for record in records:
            if record.tuple_id and not record.tentative and \
                    (record.topic, record.tuple_id) in seen:
                self.stats.duplicates_dropped += 1
                continue
            fresh.append(record)
        if not fresh:
            return 0
        try:
            producer.begin_transaction()
            produce = producer.produce
            for index, record in enumerate(fresh):
                if record.partition is None:
                    produce(record.topic, value=record.value, key=record.key,
                            headers=record.headers)
                else:
                    produce(record.topic, value=record.value, key=record.key,
                            headers=record.headers, partition=record.partition)
                if index % 1000 == 999:
                    producer.poll(0)
            producer.commit_transaction(60)
        except KafkaException as error:
            kafka_error = error.args[0]
            self._producer = None
            if kafka_error.code() in _REFUSALS:  # fatal too, but no other node's doing
                raise OutputRefusedError(
                    f"output {self.owner}: the cluster's ACLs refused the write "
                    f"({kafka_error.str()})") from None
            if kafka_error.fatal() or "fenced" in kafka_error.str().lower():
                raise OutputFencedError(
                    f"output {self.owner}: another node has taken over this fragment "
                    f"({kafka_error.str()})") from None
            raise
        for record in fresh:
            if not record.tentative:
                self._remember(record.topic, record.tuple_id)
        first = self.stats.first_write_at is None
        self.stats.written += len(fresh)
        if first:
            self.stats.first_write_at = time.time()
            for listener in self.stats.first_write_listeners:
                listener(len(fresh))
        return len(fresh)

    def _remember(self, topic: str, tuple_id: str) -> None:
        if not tuple_id:  # a record without id is never a duplicate of another
            return
        self._seen[(topic, tuple_id)] = None
        if len(self._seen) > self._max_ids:
            self._seen.popitem(last=False)

    # -- what is written already ----------------------------------------------------------

    def _read_tail(self, topic: str, timeout_s: float = 60.0) -> list[str]:
        """The ids of the committed records of the last ``horizon_s`` seconds."""
        consumer = Consumer(kafka_config(self.bootstrap, **{
            "group.id": f"medusa.soutput.tail.{topic}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }))
        try:
            metadata = consumer.list_topics(topic, timeout=10).topics[topic]
            since_ms = int((time.time() - self.horizon_s) * 1000)
            wanted = [TopicPartition(topic, p, since_ms) for p in metadata.partitions]
            starts = consumer.offsets_for_times(wanted, timeout=10)
            ends: dict[int, int] = {}
            assigned = []
            for start in starts:
                _, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, start.partition), timeout=10)
                offset = start.offset if start.offset >= 0 else OFFSET_END
                if offset == OFFSET_END or offset >= high:
                    continue
                ends[start.partition] = high
                assigned.append(TopicPartition(topic, start.partition, offset))
            if not assigned:
                return []
            consumer.assign(assigned)
            ids: list[str] = []
            remaining = set(ends)
            deadline = time.monotonic() + timeout_s
            while remaining and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        remaining.discard(message.partition())
                    continue
                headers = cast(list[Header], message.headers() or [])
                if not is_tentative(headers):
                    ids.append(record_id(headers))
                partition, at = message.partition(), message.offset()
                if partition is not None and at is not None and at + 1 >= ends[partition]:
                    remaining.discard(partition)
            if remaining:
                raise RuntimeError(f"output {topic}: could not read back the recent "
                                   f"results of partitions {sorted(remaining)} within "
                                   f"{timeout_s:.0f}s")
            return ids
        finally:
            consumer.close()


def record_id(headers: Sequence[Header] | dict[str, str | bytes | None]) -> str:
    pairs = headers.items() if isinstance(headers, dict) else headers
    for key, value in pairs:
        if key == ID_HEADER and value is not None:
            return value.decode() if isinstance(value, bytes) else value
    return ""  # not a Medusa tuple: nothing to deduplicate it against


def is_tentative(headers: Sequence[Header]) -> bool:
    """A TENTATIVE tuple, or a BOUNDARY of an UP_FAILURE period."""
    for key, value in headers:
        if key == TENTATIVE_HEADER or (key == TYPE_HEADER and value in (b"TENTATIVE",
                                                                       "TENTATIVE")):
            return True
    return False
