"""What the console shows besides the catalog: the nodes' load reports, BPM's ledger and the
federation's recent traces, each kept up to date by background threads, so that a snapshot
every second costs no I/O (``medusa status`` reads them afresh, waiting seconds per cluster).

A Kafka feed reads its topic on every participant's cluster with a consumer of its own,
assigned to every partition (no group membership, nothing committed), and looks at the
topic's metadata again every ``recheck_s``: a topic created later, or partitions added, are
picked up, and a cluster that does not answer is tried again while the feed keeps what it
read. The traces are polled from Jaeger's query API (``medusa.jaeger_client``).
"""

from __future__ import annotations

import bisect
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, Self

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from medusa.envelope import EnvelopeError, parse_headers
from medusa.federation_status import RECENT_REPORTS
from medusa.jaeger_client import Trace, TracedSpan, fetch_trace
from medusa.registry import SERDE_CONFIG, registry_unavailable
from medusa.schemas import LEDGER_TOPIC, NODE_LOAD_TOPIC, epoch_ms
from medusa.settings import kafka_config
from medusa.trace_view import KINDS, recent, roots, timeline

log = logging.getLogger("medusa.console")

GROUP_ID = "medusa-console"
"""The feeds' consumer group: required by the client, never joined (partitions are assigned)."""
RECHECK_S = 10.0
"""How often a Kafka feed reads its topic's metadata again."""
KAFKA_TIMEOUT_S = 5.0
POLL_S = 0.5
RETRY_S = 2.0
"""How long a record waits before it is decoded again while the registry does not answer."""
MAX_ENTRIES = 10_000
"""Ledger entries kept for listing (the balances count every entry ever read)."""
MAX_ENTRY_IDS = 1_000_000
"""Entry ids remembered so that a payment written twice is counted once (~100 bytes each)."""
NEWEST_PAYMENTS = 20
TRACE_LOOKBACK_S = 1800
TRACE_INTERVAL_S = 5.0
TRACE_LIMIT = 50
TRACES_PER_KIND = 12

_TRACE_ID = re.compile(r"[0-9a-fA-F]{1,32}")

Decode = Callable[[bytes, str], Any]
"""A record's value and its topic -> the decoded value."""
Start = Callable[[int, int], int]
"""A partition's (low, high) watermarks -> the offset to read it from."""


class TopicConsumer(Protocol):
    """What a feed uses of a confluent-kafka ``Consumer`` (so tests can pass another)."""

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any: ...

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float = -1,
                              cached: bool = False) -> tuple[int, int]: ...

    def incremental_assign(self, partitions: list[TopicPartition]) -> None: ...

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]: ...

    def poll(self, timeout: float = -1) -> Message | None: ...

    def close(self) -> None: ...


ConsumerFactory = Callable[[dict[str, Any]], TopicConsumer]


def avro_decoder(registry: SchemaRegistryClient) -> Decode:
    """Values written through the registry, decoded as ``latest_load_reports`` does."""
    deserializer = AvroDeserializer(registry, conf=SERDE_CONFIG)

    def decode(raw: bytes, topic: str) -> Any:
        return deserializer(raw, SerializationContext(topic, MessageField.VALUE))
    return decode


def _tuple_id(message: Message) -> str | None:
    try:
        return parse_headers(message.headers()).tuple_id
    except EnvelopeError:
        return None


class _ClusterTail:
    """One cluster's copy of a topic, read by one consumer: each partition from where
    ``start`` says, then as it is written; each decoded value goes to ``accept``."""

    def __init__(self, participant: str, bootstrap: str, topic: str, start: Start,
                 accept: Callable[[Any, str | None], object], decode: Decode,
                 consumer_factory: ConsumerFactory, recheck_s: float = RECHECK_S,
                 retry_s: float = RETRY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.participant = participant
        self.bootstrap = bootstrap
        self.topic = topic
        self._start = start
        self._accept = accept
        self._decode = decode
        self._consumer_factory = consumer_factory
        self._recheck_s = recheck_s
        self._retry_s = retry_s
        self._clock = clock
        self._consumer: TopicConsumer | None = None
        self._assigned: set[int] = set()
        self._behind: dict[int, int] = {}
        """Partition -> its high watermark when assigned, until read that far."""
        self._checked_at: float | None = None
        self._held: Message | None = None
        """A record that waits for the registry to answer again."""
        self._waiting = False
        self._lock = threading.Lock()
        self._error: str | None = None
        self._answered = False
        self.skipped = 0
        """Records that could not be decoded or made no sense, and were passed over."""

    @property
    def error(self) -> str | None:
        """Why the cluster is not read (it does not answer); None while it is."""
        with self._lock:
            return self._error

    @property
    def caught_up(self) -> bool:
        """Whether the cluster answered and what its topic held then has been read."""
        with self._lock:
            return self._answered and self._error is None and not self._behind

    def run(self, stopped: threading.Event) -> None:
        """Reads until ``stopped``; nothing that goes wrong ends the thread."""
        failure: str | None = None
        try:
            while not stopped.is_set():
                try:
                    self.step(stopped)
                    failure = None
                except Exception as error:
                    if str(error) != failure:  # the same failure again says nothing new
                        log.exception("console: reading %s on %s's cluster failed",
                                      self.topic, self.participant)
                    failure = str(error)
                    stopped.wait(self._retry_s)
        finally:
            if self._consumer is not None:
                self._consumer.close()

    def step(self, stopped: threading.Event) -> None:
        """One round: the metadata when it is due, then one record (waiting a moment)."""
        if self._consumer is None:
            self._consumer = self._consumer_factory(kafka_config(
                self.bootstrap, {"log_level": 0}, group_id=GROUP_ID, enable_auto_commit=False,
                auto_offset_reset="earliest"))
        consumer = self._consumer
        now = self._clock()
        if self._checked_at is None or now - self._checked_at >= self._recheck_s:
            self._checked_at = now
            self._refresh(consumer)
        # (A Message's truth is its length: compared with None, not taken as a bool.)
        message = self._held if self._held is not None else consumer.poll(POLL_S)
        self._held = None
        if message is None:
            self._note_positions(consumer)
            return
        if message.error() is not None:  # librdkafka recovers by itself (a leader moving, say)
            log.debug("console: %s on %s's cluster: %s", self.topic, self.participant,
                      message.error())
            return
        if self._handle(message):
            self._passed(message.partition() or 0, message.offset() or 0)
        else:
            stopped.wait(self._retry_s)

    def _refresh(self, consumer: TopicConsumer) -> None:
        """Assigns the partitions not assigned yet; notes whether the cluster answers."""
        try:
            metadata = consumer.list_topics(self.topic, timeout=KAFKA_TIMEOUT_S)
            described = metadata.topics.get(self.topic)
            partitions = ([] if described is None or described.error is not None
                          else sorted(set(described.partitions) - self._assigned))
            starts, behind = [], {}
            for partition in partitions:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(self.topic, partition), timeout=KAFKA_TIMEOUT_S)
                offset = self._start(low, high)
                starts.append(TopicPartition(self.topic, partition, offset))
                if high > offset:
                    behind[partition] = high
            if starts:
                consumer.incremental_assign(starts)
        except KafkaException as error:
            cause = error.args[0] if error.args else None
            with self._lock:
                first = self._error is None
                self._error = cause.str() if isinstance(cause, KafkaError) else str(error)
            if first:  # once per outage: the feed keeps trying every recheck_s
                log.warning("console: %s's cluster (%s) does not answer (%s); the console "
                            "keeps what it read and tries again every %.0fs", self.participant,
                            self.bootstrap, self._error, self._recheck_s)
            return
        self._assigned.update(partitions)
        with self._lock:
            back, self._error = self._error is not None, None
            self._answered = True
            self._behind.update(behind)
        if back:
            log.info("console: %s's cluster answers again", self.participant)

    def _handle(self, message: Message) -> bool:
        """Decodes and accepts a record; False when it must wait for the registry."""
        raw = message.value()
        if raw is None:  # a BOUNDARY, UNDO or REC_DONE
            return True
        where = (f"{self.topic}[{message.partition()}]@{message.offset()} on "
                 f"{self.participant}'s cluster")
        try:
            value = self._decode(raw, self.topic)
        except Exception as error:
            if registry_unavailable(error):
                # Skipping it would lose it for good (a ledger entry, say): it waits.
                if not self._waiting:
                    log.warning("console: the schema registry does not answer (%s); %s "
                                "waits for it", error, where)
                self._held, self._waiting = message, True
                return False
            self.skipped += 1
            log.warning("console: %s skipped: cannot decode it: %s", where, error)
            return True
        if self._waiting:
            log.info("console: the schema registry answers again")
            self._waiting = False
        try:
            self._accept(value, _tuple_id(message))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            self.skipped += 1
            log.warning("console: %s skipped: %s: %s", where, type(error).__name__, error)
        return True

    def _passed(self, partition: int, offset: int) -> None:
        with self._lock:
            if partition in self._behind and offset + 1 >= self._behind[partition]:
                del self._behind[partition]

    def _note_positions(self, consumer: TopicConsumer) -> None:
        """Idle: the partitions read to where they were when assigned (their last records
        may be transaction markers, which are never delivered) are caught up."""
        with self._lock:
            behind = list(self._behind)
        if not behind:
            return
        for position in consumer.position([TopicPartition(self.topic, p) for p in behind]):
            if position.offset >= 0:
                self._passed(position.partition, position.offset - 1)


class _KafkaFeed:
    """A topic read on every cluster, one thread and one consumer each."""

    def __init__(self, name: str, topic: str, clusters: Mapping[str, str], decode: Decode,
                 start: Start, consumer_factory: ConsumerFactory, recheck_s: float,
                 retry_s: float) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self._tails = {participant: _ClusterTail(participant, bootstrap, topic, start,
                                                 self.accept, decode, consumer_factory,
                                                 recheck_s, retry_s)
                       for participant, bootstrap in clusters.items()}

    def accept(self, value: Any, tuple_id: str | None = None) -> bool:
        raise NotImplementedError

    def start(self) -> Self:
        if not self._threads:
            self._threads = [threading.Thread(target=tail.run, args=(self._stopped,),
                                              name=f"console-{self.name}-{participant}",
                                              daemon=True)
                             for participant, tail in self._tails.items()]
            for thread in self._threads:
                thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopped.set()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def unreachable(self) -> dict[str, str]:
        """Participant -> why its cluster is not read, for the clusters that do not answer."""
        return {participant: error for participant, tail in self._tails.items()
                if (error := tail.error) is not None}

    def partial(self) -> list[str]:
        """The participants whose records are not all read yet (or whose cluster is away)."""
        return sorted(participant for participant, tail in self._tails.items()
                      if not tail.caught_up)


class NodeLoadFeed(_KafkaFeed):
    """Each node's newest load report, from every participant's ``medusa.node-load``: each
    partition read from its last ``recent`` records on, then as nodes report."""

    def __init__(self, clusters: Mapping[str, str], decode: Decode, *,
                 recent: int = RECENT_REPORTS, recheck_s: float = RECHECK_S,
                 retry_s: float = RETRY_S, consumer_factory: ConsumerFactory = Consumer) -> None:
        super().__init__("loads", NODE_LOAD_TOPIC, clusters, decode,
                         lambda low, high: max(low, high - recent), consumer_factory,
                         recheck_s, retry_s)
        self._reports: dict[str, dict[str, Any]] = {}

    def accept(self, value: Any, tuple_id: str | None = None) -> bool:
        """Keeps the report if it is its node's newest; whether it was kept."""
        if not isinstance(value, dict):
            return False
        node, at = str(value["node"]), epoch_ms(value["reported_at"])
        with self._lock:
            known = self._reports.get(node)
            if known is not None and at < epoch_ms(known["reported_at"]):
                return False
            self._reports[node] = value
        return True

    def reports(self) -> dict[str, dict[str, Any]]:
        """Node -> its newest report, as decoded (``reported_at`` a datetime), as
        ``latest_load_reports`` gives them; a copy."""
        with self._lock:
            return {node: dict(report) for node, report in self._reports.items()}


class LedgerFeed(_KafkaFeed):
    """BPM's ledger: every participant's ``medusa.ledger`` read from its beginning, each
    payment counted once (by its entry id), as ``medusa ledger`` reads it."""

    def __init__(self, clusters: Mapping[str, str], decode: Decode, *,
                 keep: int = MAX_ENTRIES, newest: int = NEWEST_PAYMENTS,
                 max_ids: int = MAX_ENTRY_IDS, recheck_s: float = RECHECK_S,
                 retry_s: float = RETRY_S, consumer_factory: ConsumerFactory = Consumer) -> None:
        super().__init__("ledger", LEDGER_TOPIC, clusters, decode, lambda low, high: low,
                         consumer_factory, recheck_s, retry_s)
        self._participants = list(clusters)
        self._keep, self._newest, self._max_ids = keep, newest, max_ids
        self._ids: dict[str, None] = {}
        """Every entry id counted, oldest first (a dict keeps the order)."""
        self._entries: list[tuple[int, str, str, dict[str, Any]]] = []
        """(to_ms, contract, id, entry), in that order: the newest last."""
        self._balances: dict[str, float] = {}
        self._contracts: dict[str, float] = {}

    def accept(self, value: Any, tuple_id: str | None = None) -> bool:
        """Counts the entry unless it was counted already; whether it was."""
        if not isinstance(value, dict):
            return False
        entry = dict(value)
        entry.update(from_ms=epoch_ms(entry["from_ms"]), to_ms=epoch_ms(entry["to_ms"]))
        amount = float(entry["amount"])
        origin, host, contract = str(entry["origin"]), str(entry["host"]), str(entry["contract"])
        # The ledger writes each entry with its payment's id (``Payment.entry_id``).
        entry_id = tuple_id or (f"ledger/{contract}/{entry['fragment']}/{entry['kind']}/"
                                f"{entry['from_ms']}")
        with self._lock:
            if entry_id in self._ids:
                return False
            self._ids[entry_id] = None
            if len(self._ids) > self._max_ids:
                del self._ids[next(iter(self._ids))]
            self._balances[origin] = self._balances.get(origin, 0.0) - amount
            self._balances[host] = self._balances.get(host, 0.0) + amount
            self._contracts[contract] = self._contracts.get(contract, 0.0) + amount
            bisect.insort(self._entries, (entry["to_ms"], contract, entry_id, entry),
                          key=lambda item: item[:3])
            if len(self._entries) > self._keep:
                del self._entries[:len(self._entries) - self._keep]
        return True

    def view(self) -> dict[str, Any]:
        """The balances (received minus paid) of every participant, what was paid under
        each contract, and the newest payments first; JSON-able."""
        unreachable = self.unreachable()
        partial = self.partial()
        with self._lock:
            participants = {name: self._balances.get(name, 0.0)
                            for name in sorted({*self._participants, *self._balances})}
            contracts = dict(sorted(self._contracts.items()))
            payments = [{"id": entry_id, **entry} for _, _, entry_id, entry
                        in reversed(self._entries[-self._newest:])] if self._newest else []
            counted = len(self._ids)
        error = None
        if unreachable:
            error = "; ".join(f"{name}'s cluster does not answer: {reason}"
                              for name, reason in sorted(unreachable.items()))
        return {"participants": participants, "contracts": contracts, "payments": payments,
                "entries": counted, "partial": partial, "error": error}


# --- traces --------------------------------------------------------------------------------

Fetch = Callable[[str, int, int], list[Trace]]
"""(kind, how many, lookback in seconds) -> the newest traces of that kind."""
FetchOne = Callable[[str], Trace | None]
"""A trace id -> the trace, or None when Jaeger has none by that id."""


def kind_of(trace: Trace) -> str | None:
    """Which of ``KINDS`` the trace is, by its roots' names."""
    names = [root.name for root in roots(trace)]
    return next((kind for kind, (_, prefix) in KINDS.items()
                 if any(name.startswith(prefix) for name in names)), None)


def trace_summary(kind: str | None, trace: Trace) -> dict[str, Any]:
    """A trace as the console lists it; JSON-able."""
    spans = trace.spans
    start_us = min((s.start_us for s in spans), default=0)
    end_us = max((s.start_us + s.duration_us for s in spans), default=0)
    first = sorted(roots(trace), key=lambda s: s.start_us)
    return {"kind": kind, "trace_id": trace.trace_id,
            "title": first[0].name if first else "trace",
            "started_ms": start_us // 1000 if spans else None,
            "duration_ms": round((end_us - start_us) / 1000, 3) if spans else None,
            "spans": len(spans), "services": sorted({s.service for s in spans if s.service})}


def _jsonable(value: Any) -> Any:
    return value if value is None or isinstance(value, str | int | float | bool) else str(value)


def _row(span: TracedSpan, depth: int, offset_s: float) -> dict[str, Any]:
    return {"span_id": span.span_id, "parent_id": span.parent_id, "name": span.name,
            "service": span.service, "depth": depth, "offset_s": round(offset_s, 6),
            "duration_s": span.duration_us / 1e6,
            "attributes": {key: _jsonable(value) for key, value in span.attributes.items()}}


def trace_detail(trace: Trace) -> dict[str, Any]:
    """A trace with its timeline (``trace_view.timeline``): each span under its parent."""
    rows = [_row(row.span, row.depth, row.offset_s) for row in timeline(trace)]
    return {**trace_summary(kind_of(trace), trace), "rows": rows, "error": None}


def merge_traces(found: Mapping[str, Iterable[Trace]], limit: int) -> list[dict[str, Any]]:
    """The traces of every kind as listed, newest first, each once, at most ``limit``."""
    merged: dict[str, dict[str, Any]] = {}
    for kind, traces in found.items():
        for trace in traces:
            if trace.spans and trace.trace_id not in merged:
                merged[trace.trace_id] = trace_summary(kind, trace)
    newest = sorted(merged.values(), key=lambda t: (t["started_ms"], t["trace_id"]),
                    reverse=True)
    return newest[:limit]


class TraceFeed:
    """The recent traces of each kind in ``trace_view.KINDS`` (failures, partitions, moves,
    autoscale decisions), polled from Jaeger every ``interval_s``."""

    def __init__(self, query_url: str, *, lookback_s: int = TRACE_LOOKBACK_S,
                 interval_s: float = TRACE_INTERVAL_S, limit: int = TRACE_LIMIT,
                 fetch: Fetch | None = None, fetch_one: FetchOne | None = None,
                 wanted: Callable[[], bool] = lambda: True) -> None:
        self.query_url = query_url.rstrip("/")
        self._wanted = wanted
        """Polls only while this holds (a page is open): Jaeger is not asked for nothing."""
        self._lookback_s, self._interval_s, self._limit = lookback_s, interval_s, limit
        self._fetch: Fetch = fetch or (lambda kind, last, lookback_s: recent(
            self.query_url, kind, last, lookback_s))
        self._fetch_one: FetchOne = fetch_one or (lambda trace_id: fetch_trace(
            self.query_url, trace_id))
        self._lock = threading.Lock()
        self._found: dict[str, list[Trace]] = {}
        self._traces: list[dict[str, Any]] = []
        self._error: str | None = None
        self._updated_ms: int | None = None
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="console-traces",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 15.0) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                if self._wanted():
                    self.poll()
            except Exception:  # whatever it was, the next round tries again
                log.exception("console: polling Jaeger failed")
            self._stopped.wait(self._interval_s)

    def poll(self) -> None:
        """One round over the kinds; a kind Jaeger does not answer for keeps its last list."""
        errors: dict[str, str] = {}
        for kind in KINDS:
            try:
                # A few per kind: Jaeger is asked for several times as many to find them.
                found = self._fetch(kind, TRACES_PER_KIND, self._lookback_s)
            except Exception as error:  # Jaeger away, or answering nonsense
                errors[kind] = f"{type(error).__name__}: {error}"
                continue
            with self._lock:
                self._found[kind] = list(found)
        reasons = list(dict.fromkeys(errors.values()))
        problem = (f"{', '.join(errors)} traces unknown: {'; '.join(reasons)}"
                   if errors else None)
        with self._lock:
            self._traces = merge_traces(self._found, self._limit)
            before, self._error = self._error, problem
            if len(errors) < len(KINDS):
                self._updated_ms = time.time_ns() // 1_000_000
        if problem is not None and before is None:
            log.warning("console: Jaeger at %s: %s", self.query_url, problem)
        elif problem is None and before is not None:
            log.info("console: Jaeger at %s answers again", self.query_url)

    def view(self) -> dict[str, Any]:
        """The recent traces, newest first, and why they may be stale; JSON-able."""
        with self._lock:
            return {"traces": [dict(t, services=list(t["services"])) for t in self._traces],
                    "error": self._error, "updated_ms": self._updated_ms}

    def trace(self, trace_id: str) -> dict[str, Any] | None:
        """One trace with its timeline, read from Jaeger now; None when Jaeger has no such
        trace (or the id is not one); a trace with only an ``error`` when Jaeger fails."""
        if not _TRACE_ID.fullmatch(trace_id):
            return None
        try:
            found = self._fetch_one(trace_id)
        except Exception as error:
            return {"kind": None, "trace_id": trace_id, "title": None, "started_ms": None,
                    "duration_ms": None, "spans": 0, "services": [], "rows": [],
                    "error": f"Jaeger at {self.query_url}: {type(error).__name__}: {error}"}
        return trace_detail(found) if found is not None else None
