"""The SUnion service: a fragment's inputs merged bucket by bucket into one topic.

It reads the fragment's input topics (on whichever cluster each lives), holds the
tuples in buckets by stime (``buckets.Buckets``), and writes each release (one or
more consecutive buckets whose every input partition's BOUNDARY has passed them)
as ONE Kafka transaction to ``output_topic`` on the node's own cluster: the tuples
in (stime, input, partition, offset) order, then one BOUNDARY per output partition
that carries the resume positions (``POSITIONS_HEADER``). Spark reads that topic
with read_committed, so it never sees a tuple of an older bucket after a newer one.

Exactly once, also under kill -9: the input positions ride in the same transaction
as the bucket (also for a remote input, as MirrorMaker 2's exactly-once mode keeps
them on the target). There is no consumer group and no offset commit. A new
instance uses the same transactional id, which aborts the old one's open
transaction and fences it; it then reads the last committed positions back from
``output_topic`` and seeks every input partition to its resume offset. The positions:

    {"released_through": stime, "inputs": {name: {"topic": t, "partitions":
        {"<p>": {"resume": offset, "boundary": stime, "read": offset}}}}}

``resume`` is the smallest offset still held (else the next to read); re-reading
from it rebuilds the held buckets, skipping the tuples below ``released_through``.
``read`` is the next offset to read when the release was taken: a re-read record
below it that is not held again was handled then (written, or dead-lettered).
Without positions, ``start_positions`` apply, else the earliest offsets.

A tuple whose stime is below ``released_through`` (its producer broke a BOUNDARY
promise) is dead-lettered, as are records without a valid envelope or a Confluent
wire-format value.

DPC (``max_delay_ms``, see ``buckets``): a TENTATIVE release writes its tuples as
TENTATIVE and every record of it with ``medusa.tentative: <epoch>``; the REDO writes the
corrected buckets as STABLE and its BOUNDARY records with ``medusa.redo: <epoch>``, which
asks the fragment's query to reconcile (the REC_REQUEST). From an upstream fragment, a
TENTATIVE tuple is held as tentative, a marked BOUNDARY advances only the partition's
tentative boundary, an UNDO withdraws the partition's tentative tuples, and a REC_DONE
needs nothing (the stable boundaries that follow it say the rest).
Each UP_FAILURE period is one trace (``failure_trace``); the REDO's BOUNDARY records carry
its root's ``traceparent``, so the query's reconciliation joins it.

Dead letters go to ``<input topic>.dlq`` on the input's cluster: inside the
release's transaction when that is the output's cluster (exactly once); otherwise
through a separate idempotent producer, flushed before each commit, so a replay
after a crash may repeat them but never loses one.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from medusa import dead_letters
from medusa.consuming import take
from medusa.dead_letters import DeadLetter, Header, dead_letter_topic
from medusa.envelope import (
    ID_HEADER,
    REDO_HEADER,
    STIME_HEADER,
    TENTATIVE_HEADER,
    TRACEPARENT_HEADER,
    TYPE_HEADER,
    boundary,
)
from medusa.errors import MedusaError
from medusa.settings import END_OF_LOG_FETCH_WAIT_MS, KafkaClientSettings
from medusa.sunion.buckets import (
    Buckets,
    HeldTuple,
    Outcome,
    Release,
    ReleaseKind,
    restored_partitions,
)
from medusa.sunion.config import SUnionConfig, SUnionInput
from medusa.sunion.failure_trace import UpFailureTracer
from medusa.topics import ensure_topics

INPUT_HEADER = "medusa.input"
"""On every tuple written: the name of the input it came from."""
POSITIONS_HEADER = "medusa.sunion.positions"
"""On the SUnion's BOUNDARY records: the resume state as compact JSON."""

log = logging.getLogger("medusa.sunion")

CONSUME_BATCH = 2000
POLL_TIMEOUT_S = 0.05
STATE_EVERY_S = 1.0
METADATA_EVERY_S = 5.0
"""How often the input topics are listed for partitions added since."""
TRANSACTION_TIMEOUT_S = 60.0
RESTORED_METADATA_WAIT_S = 1.0
"""How long an input cluster may take to list a topic's partitions when they are known."""
REANNOUNCEMENTS = 3
"""Times the last boundary is written again once input stops: a fragment's writer passes
a boundary on one or two batches after it read it (see fragment_writer)."""
TAIL_WINDOW = 500
"""Records read back per output partition at first when looking for the last positions."""

_STABLE = b"STABLE"
_TENTATIVE = b"TENTATIVE"
_BOUNDARY = b"BOUNDARY"
_UNDO = b"UNDO"
_REC_DONE = b"REC_DONE"
_FENCED_CODES = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


class SUnionError(MedusaError, RuntimeError):
    """The SUnion cannot go on (a missing input topic, a failed transaction)."""


class SUnionFencedError(SUnionError):
    """Another SUnion instance writes this output now; this one must stop."""


FENCED_EXIT = 3
"""The exit status of a fenced SUnion process: its node must not start it again."""


def _retyped(headers: Sequence[Header]) -> list[Header]:
    """A tuple's headers with its type TENTATIVE (and no older tentative mark)."""
    kept: list[Header] = [(name, raw) for name, raw in headers
                          if name != TYPE_HEADER and name != TENTATIVE_HEADER]
    kept.append((TYPE_HEADER, _TENTATIVE))
    return kept


def transactional_id(output_topic: str) -> str:
    return f"medusa.sunion.{output_topic}"


def output_partition(key: bytes | None, tuple_id: str, partitions: int) -> int:
    """A stable hash of the key (of the id when there is no key)."""
    return zlib.crc32(key if key is not None else tuple_id.encode()) % partitions


@dataclass
class _Cluster:
    """One consumer per cluster, for all the inputs that live on it."""

    bootstrap: str
    consumer: Consumer
    inputs: dict[str, SUnionInput]
    """Topic -> input."""
    dead_letter_producer: Producer | None = None
    """For dead letters when this is not the output's cluster (created when needed)."""
    unflushed_letters: int = 0


@dataclass
class _Counters:
    records_in: int = 0
    records_out: int = 0
    dead_lettered: int = 0
    transactions: int = 0
    tentative_releases: int = 0
    tentative_tuples: int = 0
    redos: int = 0
    undos_received: int = 0


class _PartitionWatcher:
    """Lists the input topics every METADATA_EVERY_S in a thread of its own (a remote
    cluster that does not answer must not hold the loop) and hands over the partitions
    it had not seen."""

    def __init__(self, clusters: dict[str, tuple[dict[str, Any], list[str]]],
                 known: set[tuple[str, str, int]], fragment: str) -> None:
        self._clusters = clusters
        """Bootstrap -> (client config, topics)."""
        self._known = set(known)
        self._fragment = fragment
        self._new: list[tuple[str, str, int]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"sunion-metadata-{fragment}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def take_new(self) -> list[tuple[str, str, int]]:
        """(bootstrap, topic, partition) of each partition found since the last call."""
        with self._lock:
            new, self._new = self._new, []
        return new

    def _watch(self) -> None:
        admins = {bootstrap: AdminClient(config)
                  for bootstrap, (config, _) in self._clusters.items()}
        while not self._stop.wait(METADATA_EVERY_S):
            for bootstrap, (_, topics) in self._clusters.items():
                for topic in topics:
                    try:
                        metadata = admins[bootstrap].list_topics(topic, timeout=5)
                    except KafkaException as failure:
                        log.debug("%s: metadata of %s: %s", self._fragment, topic,
                                  failure.args[0].str())
                        continue
                    described = metadata.topics.get(topic)
                    if described is None or described.error is not None:
                        continue
                    found = {(bootstrap, topic, p) for p in described.partitions} - self._known
                    if found:
                        self._known |= found
                        with self._lock:
                            self._new.extend(sorted(found))


def positions_before(bootstrap: str, topic: str, offsets: dict[int, int],
                     kafka: KafkaClientSettings | None = None) -> dict[str, Any] | None:
    """The positions of the last release a reader of ``topic`` had read whole when it
    stood at ``offsets`` (partition -> next offset): where a SUnion on another cluster
    resumes for a fragment whose query stopped there."""
    config = SUnionConfig(fragment=f"positions of {topic}", output_topic=topic,
                          output_bootstrap=bootstrap,
                          inputs=[SUnionInput(name="-", topic=topic, bootstrap=bootstrap)])
    reader = SUnion(config, kafka)
    reader._output_partition_count = max(offsets, default=0) + 1
    return reader._read_last_positions(before=offsets)


class SUnion:
    """The SUnion of one fragment. Use as a context manager; ``run`` until ``stop``.

    No transaction stays open between two turns of the loop: ``run`` returns after its
    current transaction committed, or raises after aborting it. After an error the
    instance is spent: close it; a new one resumes from the last committed positions.
    """

    def __init__(self, config: SUnionConfig, kafka: KafkaClientSettings | None = None) -> None:
        self.config = config
        self._kafka = kafka or KafkaClientSettings()
        self._lock = threading.Lock()
        self.counters = _Counters()
        self._producer: Producer | None = None
        self._prepared: Producer | None = None
        """Made by ``prepare``: the producer that ``open`` fences the older instance with."""
        self._restore_consumer: Consumer | None = None
        self._opened_at: float | None = None
        """When it fenced the older instance and took the output over (wall clock)."""
        self._clusters: list[_Cluster] = []
        self._buckets: Buckets | None = None
        self._restored: dict[str, Any] | None = None
        self._output_partition_count = config.output_partitions
        self._pending_letters: list[DeadLetter] = []
        """Dead letters for the output's cluster, written in the next release."""
        self._input_name_bytes = {i.name: i.name.encode() for i in config.inputs}
        self._quiet_until: dict[str, float] = {}
        self._fenced = False
        self._failure_trace = UpFailureTracer(config.fragment, config.max_delay_ms)

    # -- life cycle ----------------------------------------------------------------------

    def __enter__(self) -> SUnion:
        self.open()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def open(self) -> None:
        """Creates what is missing, fences an older instance, restores the positions."""
        if self._producer is not None:
            return
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    def prepare(self) -> None:
        """Everything opening takes that does not touch an older instance: topics, clients
        and their connections. A SUnion waiting to take over (``--go-file``) does this
        first, so that its ``open`` is only the fencing and the reading back."""
        if self._prepared is not None or self._producer is not None:
            return
        config = self.config
        output_admin = self._client_config(config.output_bootstrap)
        ensure_topics(output_admin, [config.output_topic], partitions=config.output_partitions)
        # A deployed network's dead-letter topics exist already; creating them must not
        # hold up a takeover while an input's cluster is cut off.
        threading.Thread(target=self._ensure_dead_letter_topics, daemon=True,
                         name="sunion-dead-letter-topics").start()
        self._prepared = Producer(self._client_config(
            config.output_bootstrap,
            **{"transactional.id": transactional_id(config.output_topic),
               "linger.ms": 5,
               "queue.buffering.max.messages": 500_000,
               "transaction.timeout.ms": int(TRANSACTION_TIMEOUT_S * 1000)}))
        self._output_partition_count = self._partition_count(
            config.output_bootstrap, config.output_topic)
        self._restore_consumer = self._new_restore_consumer()
        by_bootstrap: dict[str, dict[str, SUnionInput]] = {}
        for spec in config.inputs:
            by_bootstrap.setdefault(spec.bootstrap, {})[spec.topic] = spec
        for bootstrap, inputs in by_bootstrap.items():
            # The client requires a group id; with assign() it never joins a group and
            # nothing is committed: the positions ride in the output's transactions.
            consumer = Consumer(self._client_config(
                bootstrap, **{"group.id": f"medusa.sunion.{config.output_topic}",
                              "enable.auto.commit": False,
                              "enable.auto.offset.store": False,
                              "isolation.level": "read_committed",
                              # a resume offset retention removed: re-read what is left
                              "auto.offset.reset": "earliest",
                              "fetch.wait.max.ms": 100}))
            self._clusters.append(_Cluster(bootstrap, consumer, inputs))

    def _open(self) -> None:
        config = self.config
        self.prepare()
        producer, self._prepared = self._prepared, None
        assert producer is not None
        # Aborts what an older instance left open and fences it from now on.
        producer.init_transactions(TRANSACTION_TIMEOUT_S)
        self._producer = producer
        self._opened_at = time.time()
        # A fragment moved from another cluster brings the positions its last batch read.
        self._restored = config.resume_from or self._read_last_positions()
        restored = self._restored or {}
        released = restored.get("released_through")
        self._buckets = Buckets(config.bucket_ms, {i.name: i.topic for i in config.inputs},
                                released_through=released, max_delay_ms=config.max_delay_ms,
                                tentative_through=restored.get("tentative_through"),
                                epoch=int(restored.get("epoch") or 0))
        for cluster in self._clusters:
            self._assign_partitions(cluster)
        log.info("%s: SUnion open, %s; %d input partition(s), output %s (%d partition(s))",
                 config.fragment,
                 f"resuming after stime {released}" if self._restored else "no earlier state",
                 len(self._buckets.partitions), config.output_topic, self._output_partition_count)

    def _ensure_dead_letter_topics(self) -> None:
        for spec in self.config.inputs:
            try:
                ensure_topics(self._client_config(spec.bootstrap),
                              [dead_letter_topic(spec.topic)], partitions=1, timeout_s=10)
            except RuntimeError as failure:  # cut off: the first dead letter creates it
                log.warning("%s: input %s: %s", self.config.fragment, spec.name, failure)

    def close(self) -> None:
        """Stops reading; held tuples are not written (a restart re-reads them)."""
        if self._buckets is not None:
            self._write_state_file()  # while the consumers still know the lag
        for cluster in self._clusters:
            if cluster.dead_letter_producer is not None:
                cluster.dead_letter_producer.flush(30)
            cluster.consumer.close()
        self._clusters = []
        self._prepared = None
        if self._restore_consumer is not None:
            self._restore_consumer.close()
            self._restore_consumer = None
        if self._producer is not None:
            if not self._fenced:  # a fenced producer has nothing it may still deliver
                self._producer.flush(30)
            self._producer = None

    # -- the loop ------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Merges until ``stop`` is set; raises SUnionFencedError when fenced."""
        self.open()
        buckets = self._buckets
        assert buckets is not None
        specs = {spec.name: spec for spec in self.config.inputs}
        watcher = _PartitionWatcher(
            {c.bootstrap: (self._client_config(c.bootstrap), list(c.inputs))
             for c in self._clusters},
            {(specs[name].bootstrap, specs[name].topic, partition)
             for name, partition in buckets.partitions},
            self.config.fragment)
        watcher.start()
        next_state_at = time.monotonic()
        idle_every_s = max(0.2, self.config.bucket_ms / 1000)
        next_reannounce_at = time.monotonic() + idle_every_s
        reannounced = 0
        busy = False
        try:
            while not stop.is_set():
                wait = 0.0 if busy else POLL_TIMEOUT_S / len(self._clusters)
                busy = False
                for cluster in self._clusters:
                    messages = take(cluster.consumer, CONSUME_BATCH, wait)
                    if messages:
                        busy = True
                        with self._lock:
                            self._take(cluster, messages)
                with self._lock:
                    self._failure_trace.observe(buckets)
                    release = buckets.release()
                    if release is not None:
                        reannounced = 0
                    elif reannounced < REANNOUNCEMENTS and \
                            time.monotonic() >= next_reannounce_at:
                        # Idle: the same boundary again, a few times. A query reads it as new
                        # input, so it runs the batches that pass its newest boundaries on.
                        release = buckets.reannouncement()
                        reannounced += release is not None
                    if release is not None:
                        self._write(release)
                        next_reannounce_at = time.monotonic() + idle_every_s
                    for bootstrap, topic, partition in watcher.take_new():
                        self._follow_new_partition(bootstrap, topic, partition)
                now = time.monotonic()
                if now >= next_state_at:
                    next_state_at = now + STATE_EVERY_S
                    for cluster in self._clusters:
                        if cluster.dead_letter_producer is not None:
                            cluster.dead_letter_producer.poll(0)
                    self._write_state_file()
        finally:
            watcher.stop()

    def _take(self, cluster: _Cluster, messages: Sequence[Message]) -> None:
        """Sorts consumed records into buckets, boundaries and dead letters (hot path)."""
        buckets = self._buckets
        assert buckets is not None
        inputs = cluster.inputs
        self.counters.records_in += len(messages)
        for message in messages:
            if message.error() is not None:
                self._consume_error(message)
                continue
            spec = inputs[message.topic()]  # type: ignore[index]
            partition: int = message.partition()  # type: ignore[assignment]
            offset: int = message.offset()  # type: ignore[assignment]
            kind = tuple_id = stime_raw = tentative_mark = None
            headers = cast(list[Header], message.headers() or [])
            for name, raw in headers:
                if name == TYPE_HEADER:
                    kind = raw
                elif name == ID_HEADER:
                    tuple_id = raw
                elif name == STIME_HEADER:
                    stime_raw = raw
                elif name == TENTATIVE_HEADER:
                    tentative_mark = raw
            try:
                stime = int(stime_raw)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                stime = None
            if stime is None or tuple_id is None or kind is None:
                reason = "record lacks a valid envelope (medusa.type, medusa.id, medusa.stime)"
            elif kind in (_STABLE, _TENTATIVE):
                value = message.value()
                if not value:
                    reason = f"{kind.decode()} tuple without a value"
                elif value[0] != 0:
                    reason = "value does not start with the Confluent wire format's magic byte 0"
                else:
                    identifier = tuple_id.decode() if isinstance(tuple_id, bytes) else tuple_id
                    outcome = buckets.add_tuple(HeldTuple(
                        stime, spec.name, partition, offset, message.key(), value,
                        headers, identifier, kind == _TENTATIVE))
                    if outcome is not Outcome.LATE:
                        continue
                    reason = (f"stime {stime} came after the boundary: everything below "
                              f"{buckets.released_through} was already released")
            elif kind == _BOUNDARY:
                buckets.add_boundary(spec.name, partition, offset, stime,
                                     tentative=tentative_mark is not None)
                continue
            elif kind == _UNDO:
                dropped = buckets.undo(spec.name, partition, offset)
                self.counters.undos_received += 1
                log.info("%s: UNDO from %s [%d]: %d tentative tuple(s) withdrawn",
                         self.config.fragment, spec.name, partition, dropped)
                continue
            elif kind == _REC_DONE:
                buckets.pass_over(spec.name, partition, offset)
                continue
            else:
                shown = kind.decode(errors="replace") if isinstance(kind, bytes) else kind
                reason = f"{shown} records are not merged by the SUnion"
            if buckets.pass_over(spec.name, partition, offset):
                self._dead_letter(cluster, message, spec, reason)

    def _consume_error(self, message: Message) -> None:
        error = message.error()
        assert error is not None
        if error.fatal():
            raise SUnionError(f"{self.config.fragment}: consumer failed: {error.str()}")
        if error.code() == KafkaError._PARTITION_EOF:
            return
        # A cluster that is cut off reports the same error again and again: once a minute.
        now = time.monotonic()
        if now >= self._quiet_until.get(error.str(), 0.0):
            self._quiet_until[error.str()] = now + 60.0
            log.warning("%s: %s [%s]: %s", self.config.fragment, message.topic(),
                        message.partition(), error.str())

    def _dead_letter(self, cluster: _Cluster, message: Message, spec: SUnionInput,
                     reason: str) -> None:
        self._send_dead_letter(cluster, DeadLetter(
            topic=spec.topic, reason=reason, value=message.value(), key=message.key(),
            headers=cast(list[Header], message.headers() or []),
            partition=message.partition(), offset=message.offset(),
            box=self.config.fragment))

    def _dead_letter_uncorrected(self, held: HeldTuple) -> None:
        """A TENTATIVE tuple that its input's stable boundary passed without an UNDO: the
        upstream broke the DPC protocol; the tuple is kept aside, not merged as stable."""
        spec = next(i for i in self.config.inputs if i.name == held.input)
        cluster = next(c for c in self._clusters if c.bootstrap == spec.bootstrap)
        self._send_dead_letter(cluster, DeadLetter(
            topic=spec.topic, value=held.value, key=held.key, headers=list(held.headers),
            partition=held.partition, offset=held.offset, box=self.config.fragment,
            reason="TENTATIVE tuple never corrected: its input's stable BOUNDARY passed it "
                   "without an UNDO"))

    def _send_dead_letter(self, cluster: _Cluster, letter: DeadLetter) -> None:
        self.counters.dead_lettered += 1
        log.warning("%s: dead letter from %s [%s] @%s: %s", self.config.fragment,
                    letter.topic, letter.partition, letter.offset, letter.reason)
        if cluster.bootstrap == self.config.output_bootstrap:
            self._pending_letters.append(letter)
            return
        if cluster.dead_letter_producer is None:
            cluster.dead_letter_producer = Producer(self._client_config(
                cluster.bootstrap, **{"enable.idempotence": True, "acks": "all"}))
        dead_letters.produce(cluster.dead_letter_producer, letter)
        cluster.unflushed_letters += 1

    # -- writing -------------------------------------------------------------------------

    def _write(self, release: Release) -> None:
        """Writes one release as one transaction: tuples, dead letters, boundaries."""
        for held in release.uncorrected:
            self._dead_letter_uncorrected(held)
        self._flush_remote_dead_letters()
        letters = self._pending_letters
        self._pending_letters = []
        positions = json.dumps(release.positions, separators=(",", ":")).encode()
        redo_trace = self._failure_trace.taken(release)
        for attempt in range(1, 4):
            try:
                self._transaction(release, letters, positions, redo_trace)
                break
            except KafkaException as failure:
                error = failure.args[0]
                if error.fatal() or error.code() in _FENCED_CODES:
                    self._fenced = True
                    raise SUnionFencedError(
                        f"{self.config.fragment}: output {self.config.output_topic} is "
                        f"written by another SUnion now ({error.str()})") from None
                self._abort()
                if not (error.retriable() or error.txn_requires_abort()) or attempt == 3:
                    raise SUnionError(
                        f"{self.config.fragment}: could not write the release through stime "
                        f"{release.through} to {self.config.output_topic}: {error.str()}"
                    ) from None
                log.warning("%s: transaction failed (%s), writing it again",
                            self.config.fragment, error.str())
        self.counters.transactions += 1
        self.counters.records_out += len(release.tuples)
        assert self._buckets is not None
        self._failure_trace.written(release, self._buckets)
        if release.kind is ReleaseKind.TENTATIVE:
            self.counters.tentative_releases += 1
            self.counters.tentative_tuples += len(release.tuples)
        elif release.kind is ReleaseKind.REDO:
            self.counters.redos += 1
            log.info("%s: every input is back: REDO of UP_FAILURE period %d through stime "
                     "%d (%d tuple(s))", self.config.fragment, release.epoch, release.through,
                     len(release.tuples))
        log.debug("%s: released through %d: %d tuple(s)", self.config.fragment,
                  release.through, len(release.tuples))

    def _transaction(self, release: Release, letters: Sequence[DeadLetter],
                     positions: bytes, redo_trace: str | None = None) -> None:
        """``redo_trace``: the traceparent of the period a REDO ends, on its boundaries."""
        producer = self._producer
        assert producer is not None
        topic = self.config.output_topic
        partitions = self._output_partition_count
        by_hash = self.config.output_partitions > 1
        input_names = self._input_name_bytes
        produce = producer.produce
        tentative = release.kind is ReleaseKind.TENTATIVE
        redo = release.kind is ReleaseKind.REDO
        epoch = str(release.epoch).encode()
        producer.begin_transaction()
        for held in release.tuples:
            if tentative:
                headers = [*_retyped(held.headers), (TENTATIVE_HEADER, epoch),
                           (INPUT_HEADER, input_names[held.input])]
            elif redo:  # read only by a query that redoes the period (``without_redone``)
                headers = [*held.headers, (REDO_HEADER, epoch),
                           (INPUT_HEADER, input_names[held.input])]
            else:
                headers = [*held.headers, (INPUT_HEADER, input_names[held.input])]
            partition = output_partition(held.key, held.tuple_id, partitions) if by_hash else 0
            while True:
                try:
                    produce(topic, held.value, held.key, partition, headers=headers)
                    break
                except BufferError:
                    producer.poll(0.1)  # the queue is full: let deliveries drain
        for letter in letters:
            dead_letters.produce(producer, letter)
        source = f"{self.config.fragment}/sunion"
        extra: list[Header] = [(POSITIONS_HEADER, positions)]
        if tentative:
            extra.append((TENTATIVE_HEADER, epoch))
        elif release.kind is ReleaseKind.REDO:
            extra.append((REDO_HEADER, epoch))
            if redo_trace is not None:
                extra.append((TRACEPARENT_HEADER, redo_trace.encode()))
        for partition in range(partitions):
            envelope = boundary(source, partition, release.through)
            produce(topic, None, None, partition, headers=envelope.headers(extra))
        producer.commit_transaction(TRANSACTION_TIMEOUT_S)

    def _abort(self) -> None:
        assert self._producer is not None
        try:
            self._producer.abort_transaction(TRANSACTION_TIMEOUT_S)
        except KafkaException as failure:
            log.warning("%s: abort failed: %s", self.config.fragment, failure.args[0].str())

    def _flush_remote_dead_letters(self) -> None:
        """Dead letters on other clusters are delivered before the positions move past
        them, so a crash may repeat them but never loses one."""
        for cluster in self._clusters:
            producer = cluster.dead_letter_producer
            if producer is None or not cluster.unflushed_letters:
                continue
            if producer.flush(30) != 0:
                raise SUnionError(f"{self.config.fragment}: dead letters for "
                                  f"{cluster.bootstrap} undelivered after 30s")
            cluster.unflushed_letters = 0

    # -- positions -----------------------------------------------------------------------

    def _assign_partitions(self, cluster: _Cluster) -> None:
        """Assigns every partition of the cluster's inputs, each from its restored resume
        offset, else ``start_positions`` (only when the output holds no state), else the
        earliest. Every partition must be known before the first release."""
        buckets = self._buckets
        assert buckets is not None
        assigned: list[TopicPartition] = []
        for topic, spec in cluster.inputs.items():
            restored = restored_partitions(self._restored, spec.name)
            try:
                # Restored, the partitions are known: a cut-off cluster costs one second
                # (partitions added since are followed as they appear), not a takeover's D.
                metadata = cluster.consumer.list_topics(
                    topic, timeout=RESTORED_METADATA_WAIT_S if restored else 30).topics.get(topic)
            except KafkaException as failure:
                if not restored:
                    raise SUnionError(f"{self.config.fragment}: input {spec.name}: no "
                                      f"metadata for {topic} on {cluster.bootstrap}: "
                                      f"{failure.args[0].str()}") from None
                # Cut off (a partition): go on from the last positions, so the fragment
                # keeps answering (tentatively) instead of waiting for the link.
                log.warning("%s: input %s: %s unreachable (%s); resuming its %d partition(s) "
                            "from the last positions", self.config.fragment, spec.name,
                            cluster.bootstrap, failure.args[0].str(), len(restored))
                partitions = sorted(restored)
            else:
                if metadata is None or metadata.error is not None or not metadata.partitions:
                    raise SUnionError(f"{self.config.fragment}: input {spec.name}: topic "
                                      f"{topic} does not exist on {cluster.bootstrap}")
                partitions = sorted(metadata.partitions)
            for partition in [p for p in partitions if self._owns(p)]:
                if partition in restored:
                    state = buckets.add_partition(spec.name, partition,
                                                  restored[partition].resume, restored[partition])
                else:
                    offset = self._start_position(spec.name, partition)
                    if offset is None:
                        offset, _ = cluster.consumer.get_watermark_offsets(
                            TopicPartition(topic, partition), timeout=30)
                    state = buckets.add_partition(spec.name, partition, offset)
                assigned.append(TopicPartition(topic, partition, state.next_offset))
        cluster.consumer.assign(assigned)

    def _follow_new_partition(self, bootstrap: str, topic: str, partition: int) -> None:
        """A partition added to an input topic while running: read from its start."""
        buckets = self._buckets
        assert buckets is not None
        cluster = next(c for c in self._clusters if c.bootstrap == bootstrap)
        spec = cluster.inputs[topic]
        if (spec.name, partition) in buckets.partitions or not self._owns(partition):
            return
        # Offset 0 of a new partition; auto.offset.reset=earliest covers retention.
        offset = self._start_position(spec.name, partition) or 0
        buckets.add_partition(spec.name, partition, offset)
        cluster.consumer.incremental_assign([TopicPartition(topic, partition, offset)])
        log.info("%s: new partition %s [%d], from offset %d", self.config.fragment, topic,
                 partition, offset)

    def _owns(self, partition: int) -> bool:
        """Whether this SUnion reads the partition (all, unless ``partition_share``)."""
        share = self.config.partition_share
        return share is None or partition % share[1] == share[0]

    def _start_position(self, input_name: str, partition: int) -> int | None:
        """The configured start offset; it applies only when the output holds no state."""
        if self._restored is not None or not self.config.start_positions:
            return None
        return self.config.start_positions.get(input_name, {}).get(partition)

    def _read_last_positions(self, timeout_s: float = 60.0,
                             before: dict[int, int] | None = None) -> dict[str, Any] | None:
        """The positions of the last committed release in ``output_topic``, or None;
        ``before`` limits the search per partition to the offsets below the one given.

        Reads back from the end of each partition (committed records only), in widening
        windows, since an aborted transaction may fill the log's tail.
        """
        topic = self.config.output_topic
        consumer, self._restore_consumer = \
            self._restore_consumer or self._new_restore_consumer(), None
        best: dict[str, Any] | None = None
        try:
            for partition in range(self._output_partition_count):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                           timeout=10)
                if before is not None:
                    if partition not in before:
                        continue
                    high = min(high, before[partition])
                end, window = high, TAIL_WINDOW
                found = None
                while found is None and end > low:
                    start = max(low, end - window)
                    found = self._last_positions_between(consumer, partition, start, end,
                                                         timeout_s)
                    end, window = start, window * 8
                if found is not None and (best is None or (found["released_through"] or 0)
                                          > (best["released_through"] or 0)):
                    best = found
        finally:
            consumer.close()
        return best

    def _new_restore_consumer(self) -> Consumer:
        return Consumer(self._client_config(
            self.config.output_bootstrap,
            **{"group.id": f"medusa.sunion.restore.{self.config.output_topic}",
               "enable.auto.commit": False, "isolation.level": "read_committed",
               "enable.partition.eof": True, "fetch.wait.max.ms": END_OF_LOG_FETCH_WAIT_MS}))

    def _last_positions_between(self, consumer: Consumer, partition: int, start: int,
                                end: int, timeout_s: float) -> dict[str, Any] | None:
        topic = self.config.output_topic
        consumer.assign([TopicPartition(topic, partition, start)])
        found = None
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                if time.monotonic() > deadline:
                    raise SUnionError(f"{self.config.fragment}: could not read back "
                                      f"{topic} [{partition}] within {timeout_s:.0f}s")
                message = consumer.poll(0.5)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        return found
                    continue
                offset = message.offset()
                assert offset is not None
                if offset >= end:
                    return found
                for name, raw in cast(list[Header], message.headers() or []):
                    if name == POSITIONS_HEADER and raw is not None:
                        found = json.loads(raw)
                if offset >= end - 1:
                    return found
        finally:
            consumer.unassign()

    # -- state ---------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """What ``medusa status`` shows: held work, positions and lag per input partition."""
        with self._lock:
            buckets = self._buckets
            inputs: dict[str, Any] = {
                i.name: {"topic": i.topic, "partitions": {}} for i in self.config.inputs}
            if buckets is not None:
                consumers = {topic: c.consumer for c in self._clusters for topic in c.inputs}
                for (name, partition), part in sorted(buckets.partitions.items()):
                    topic = buckets.topics[name]
                    lag = None
                    consumer = consumers.get(topic)
                    if consumer is not None:
                        _, high = consumer.get_watermark_offsets(
                            TopicPartition(topic, partition), cached=True) or (-1, -1)
                        if high >= 0:
                            lag = max(0, high - part.next_offset)
                    inputs[name]["partitions"][partition] = {
                        "boundary": part.boundary, "position": part.next_offset, "lag": lag}
            return {
                "fragment": self.config.fragment,
                "held_buckets": buckets.held_buckets if buckets else 0,
                "held_tuples": buckets.held_tuples if buckets else 0,
                "released_through": buckets.stable_through if buckets else None,
                "tentative_through": (buckets.released_through
                                      if buckets and buckets.tentative else None),
                "dpc_state": buckets.dpc_state.value if buckets else "STABLE",
                "epoch": buckets.epoch if buckets else 0,
                "failed_inputs": sorted(f"{name}[{partition}]" for name, partition in
                                        (buckets.failed if buckets else ())),
                "max_delay_ms": self.config.max_delay_ms,
                "opened_at": self._opened_at,
                "tentative_releases": self.counters.tentative_releases,
                "tentative_tuples": self.counters.tentative_tuples,
                "redos": self.counters.redos,
                "undos_received": self.counters.undos_received,
                "inputs": inputs,
                "records_in": self.counters.records_in,
                "records_out": self.counters.records_out,
                "dead_lettered": self.counters.dead_lettered,
                "transactions": self.counters.transactions,
            }

    def _write_state_file(self) -> None:
        if not self.config.state_file:
            return
        path = Path(self.config.state_file)
        temporary = path.with_name(path.name + ".tmp")
        try:
            temporary.write_text(json.dumps(self.state()))
            os.replace(temporary, path)  # readers see the old file or the new one, whole
        except OSError as error:
            log.warning("%s: could not write %s: %s", self.config.fragment, path, error)

    # -- helpers -------------------------------------------------------------------------

    def _client_config(self, bootstrap: str, **overrides: Any) -> dict[str, Any]:
        # Reconnects within half a second of a link healing (librdkafka's default backs off
        # up to 10 s, which would turn a short partition into a long one).
        return self._kafka.librdkafka(bootstrap_servers=bootstrap,
                                      client_id=f"medusa.sunion.{self.config.fragment}",
                                      **{"reconnect.backoff.max.ms": 500, **overrides})

    def _partition_count(self, bootstrap: str, topic: str) -> int:
        producer = self._producer or self._prepared
        assert producer is not None
        metadata = producer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            raise SUnionError(f"{self.config.fragment}: output topic {topic} is missing on "
                              f"{bootstrap}")
        return len(metadata.partitions)
