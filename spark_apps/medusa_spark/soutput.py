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

A standby SOutput (``ha: active``, a warm move's replica) writes nothing: it keeps its
replica's recent results until ``promote``, which fences the primary and writes those of
them the primary had not. While it waits it follows the ids the primary commits
(``follow``), so that the promotion reads back only the last moments' instead of the
whole horizon's: the read-back is off the takeover's path.
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

from medusa.envelope import (
    ID_HEADER,
    STIME_HEADER,
    TENTATIVE_HEADER,
    TYPE_HEADER,
    TupleType,
    header_text,
)
from medusa.errors import MedusaError
from medusa.settings import END_OF_LOG_FETCH_WAIT_MS, kafka_config

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
    fence_s: float | None = None
    """How long ``init_transactions`` took when it opened (fencing the previous writer)."""
    read_back_s: float | None = None
    """How long reading back the written ids took after that."""
    transaction_commit_ms: float = 0.0
    """The time its transactions' commits have taken, summed (the rest of a write is
    handing the records to the producer)."""
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
        self._follower: _TailFollower | None = None
        self._producer_ahead: Producer | None = None
        self._drop_below_once: int | None = None
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
            below, self._drop_below_once = self._drop_below_once, None
            if below is not None:  # the batch that ran across the promotion
                records = [r for r in records if not _result_below(r, below)]
            return self._transaction(records)

    def promote(self, keep_tentative: bool = True, from_stime_ms: int | None = None) -> int:
        """The standby becomes the writer: fences the primary, then writes what it missed.

        A tentative result whose stable version is written already is stale, and so is
        every tentative record when ``keep_tentative`` is off (its writer is past the
        failure period they belong to): written now, no UNDO would follow them. A result
        below ``from_stime_ms`` is another writer's (a scale step's old instances).
        """
        with self._lock:
            if not self.standby:
                return 0
            self.standby = False
            self._open()
            kept = [record for _, batch in self._buffer for record in batch
                    if (not record.tentative or (
                        keep_tentative and (record.topic, record.tuple_id) not in self._seen))
                    and (from_stime_ms is None or not _result_below(record, from_stime_ms))]
            # A batch in progress may have left out results below an older bound: its
            # write, the first after this one, is held to the new bound too.
            self._drop_below_once = from_stime_ms
            self._buffer.clear()
            return self._transaction(kept) if kept else 0

    def follow(self) -> None:
        """On a standby: reads the ids the primary commits as they come (see the module)."""
        with self._lock:
            if not self.standby or self._follower is not None:
                return
            self._follower = _TailFollower(self.owner, self.bootstrap, self.topics,
                                           self.horizon_s, self._max_ids)
            # Connected ahead of the promotion, which then only fences.
            self._producer_ahead = self._new_producer()
        self._follower.start()

    def is_ahead(self) -> bool:
        """On a following standby: whether its newest result is one the primary has not
        committed yet, so that, promoted now, its results come before the primary's
        would have (a warm move takes over then, whatever else it waits for)."""
        follower = self._follower
        if follower is None:
            return False
        with self._lock:
            newest = next((record for _, batch in reversed(self._buffer)
                           for record in reversed(batch)
                           if record.value is not None and not record.tentative), None)
        return newest is not None and (newest.topic, newest.tuple_id) not in follower.ids

    def primary_wrote_at(self) -> float | None:
        """On a following standby: when it read the newest result its primary committed
        (wall clock; None before the first)."""
        follower = self._follower
        return None if follower is None else follower.newest_at

    def close(self) -> None:
        if self._follower is not None:
            self._follower.stop()
        with self._lock:
            self._producer_ahead = None
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

    def _new_producer(self) -> Producer:
        return Producer(kafka_config(self.bootstrap, **{
            "transactional.id": transactional_id(self.owner),
            # Java's default for keyed records, so a key's results keep one partition.
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            "queue.buffering.max.messages": 1_000_000,
            "transaction.timeout.ms": 60_000,
        }))

    def _open_producer(self) -> None:
        producer, self._producer_ahead = self._producer_ahead or self._new_producer(), None
        started = time.monotonic()
        # Aborts the previous writer's open transaction and fences it from now on.
        producer.init_transactions(60)
        self._producer = producer
        fenced = time.monotonic()
        self.stats.fence_s = fenced - started
        follower, self._follower = self._follower, None
        followed = follower.finish() if follower is not None else None
        if followed is not None:
            self._seen = followed  # a standby has written nothing: nothing else is in it
            self.stats.recovered_ids = len(followed)
        else:
            recovered = [(topic, tuple_id) for topic in self.topics
                         for tuple_id in self._read_tail(topic)]
            self.stats.recovered_ids = len(recovered)
            for topic, tuple_id in recovered:
                self._remember(topic, tuple_id)
        self.stats.read_back_s = time.monotonic() - fenced

    def _transaction(self, records: Iterable[OutRecord]) -> int:
        producer = self._producer
        assert producer is not None
        fresh = []
        seen = self._seen
        # A relayed batch can hold a result twice: staged by a failed node's query and
        # again by its successor's, both read after the last write. Kept in order, to be
        # remembered once the transaction commits.
        fresh_ids: dict[tuple[str, str], None] = {}
        for record in records:
            if record.tuple_id and not record.tentative:
                written = (record.topic, record.tuple_id)
                if written in seen or written in fresh_ids:
                    self.stats.duplicates_dropped += 1
                    continue
                fresh_ids[written] = None
            fresh.append(record)
        if not fresh:
            return 0
        try:
            producer.begin_transaction()
            produce, poll = producer.produce, producer.poll
            # Positional arguments, -1 leaving the partition to the partitioner: a few
            # hundred nanoseconds less per record than keywords.
            for index, (topic, _, value, headers, key, partition, _) in enumerate(fresh):
                produce(topic, value, key, -1 if partition is None else partition,
                        headers=headers)
                if index % 10_000 == 9_999:
                    poll(0)
            committing = time.perf_counter()
            producer.commit_transaction(60)
            self.stats.transaction_commit_ms += (time.perf_counter() - committing) * 1000
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
        seen.update(fresh_ids)
        while len(seen) > self._max_ids:
            seen.popitem(last=False)
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
            "fetch.wait.max.ms": END_OF_LOG_FETCH_WAIT_MS,
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


class _TailFollower(threading.Thread):
    """A standby output's reader of the ids its primary commits (``read_committed``), from
    the horizon's start on; ``finish``, called once the primary is fenced, reads on to
    the end and hands them over."""

    FINISH_TIMEOUT_S = 30.0

    def __init__(self, owner: str, bootstrap: str, topics: Sequence[str], horizon_s: float,
                 max_ids: int) -> None:
        super().__init__(name=f"soutput-follower {owner}", daemon=True)
        self._kafka = bootstrap
        self._topics = topics
        self._horizon_s = horizon_s
        self._max_ids = max_ids
        self.ids: OrderedDict[tuple[str, str], None] = OrderedDict()
        self.newest_at: float | None = None
        """When it read the newest result, a STABLE tuple (wall clock)."""
        self._finishing = threading.Event()
        self._stopping = threading.Event()
        self._finished = threading.Event()
        self.error: str | None = None

    def finish(self) -> OrderedDict[tuple[str, str], None] | None:
        """Every id committed up to now, or None if it could not tell (read back instead)."""
        self._finishing.set()
        if not self._finished.wait(self.FINISH_TIMEOUT_S) or self.error is not None:
            self._stopping.set()
            return None
        return self.ids

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        try:
            self._follow()
        except KafkaException as error:
            self.error = str(error)
        finally:
            self._finished.set()

    def _follow(self) -> None:
        consumer = Consumer(kafka_config(self._kafka, **{
            "group.id": f"medusa.soutput.follower.{self._topics[0]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 50,
        }))
        try:
            next_offset = self._assign(consumer)
            waiting: set[tuple[str, int]] | None = None
            while not self._stopping.is_set():
                if waiting is None and self._finishing.is_set():
                    # Fetched again from where it is, so each partition says its end anew.
                    waiting = set(next_offset)
                    for (topic, partition), offset in next_offset.items():
                        consumer.seek(TopicPartition(topic, partition, offset))
                    if not waiting:
                        return
                message = consumer.poll(0.1)
                if message is None:
                    continue
                key = (message.topic() or "", message.partition() or 0)
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(error)
                    if waiting is not None:
                        waiting.discard(key)
                        if not waiting:
                            return
                    continue
                next_offset[key] = (message.offset() or 0) + 1
                headers = cast(list[Header], message.headers() or [])
                tuple_id = record_id(headers)
                if tuple_id and not is_tentative(headers):
                    self.ids[(key[0], tuple_id)] = None
                    if header_text(headers, TYPE_HEADER) == TupleType.STABLE:
                        # A result: the BOUNDARY each batch writes says nothing of when
                        # the next result comes.
                        self.newest_at = time.time()
                    if len(self.ids) > self._max_ids:
                        self.ids.popitem(last=False)
            self.error = "stopped"
        finally:
            consumer.close()

    def _assign(self, consumer: Consumer) -> dict[tuple[str, int], int]:
        """From the first record of the horizon (or the end, if none is that recent)."""
        since_ms = int((time.time() - self._horizon_s) * 1000)
        starts: dict[tuple[str, int], int] = {}
        for topic in self._topics:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            found = consumer.offsets_for_times(
                [TopicPartition(topic, p, since_ms) for p in partitions], timeout=10)
            for start in found:
                offset = start.offset
                if offset < 0:
                    offset = consumer.get_watermark_offsets(
                        TopicPartition(topic, start.partition), timeout=10)[1]
                starts[(topic, start.partition)] = offset
        consumer.assign([TopicPartition(t, p, o) for (t, p), o in starts.items()])
        return starts


def _result_below(record: OutRecord, stime_ms: int) -> bool:
    """A result (not a control record) whose stime is below ``stime_ms``."""
    if record.partition is not None:  # BOUNDARY, UNDO, REC_DONE: on every partition
        return False
    stime = next((v for k, v in record.headers if k == STIME_HEADER), None)
    if stime is None:
        return False
    return int(stime.decode() if isinstance(stime, bytes) else stime) < stime_ms


def record_id(headers: Sequence[Header] | dict[str, str | bytes | None]) -> str:
    # "": not a Medusa tuple, nothing to deduplicate it against
    return header_text(headers, ID_HEADER) or ""


def is_tentative(headers: Sequence[Header]) -> bool:
    """A TENTATIVE tuple, or a BOUNDARY of an UP_FAILURE period."""
    for key, value in headers:
        if key == TENTATIVE_HEADER or (key == TYPE_HEADER and value in (b"TENTATIVE",
                                                                       "TENTATIVE")):
            return True
    return False
