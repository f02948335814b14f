"""Real-time Mode: a stateless fragment's query in Spark's Real-time Mode, its rows relayed
through the fragment's writer.

Spark's Real-time Mode (in Python from Spark 4.2) keeps a long-running task per source
partition and passes each record on as it is read, in milliseconds, where a micro-batch
waits for its batch to be planned and run. It runs stateless queries only, writes to
Kafka or a ``foreach`` writer, and has no ``foreachBatch``; a Python ``foreach`` writer
gets its rows only as each (long) batch ends. So the query writes through Spark's Kafka
sink to the fragment's *staged* topic (beside its SUnion's, on the node's cluster), each
row's envelope in headers, and the relay, a thread of the node, reads that topic as the
records arrive and hands them to the ``FragmentWriter`` as a micro-batch's rows: the
SOutput's fencing, tuple-id deduplication and transactions, the dead letters and the
outputs' BOUNDARY records are the same as on micro-batches.

Exactly once: Spark's Kafka sink writes at least once (rows of a batch cut short are
written again from the checkpoint) and the relay commits its position (a consumer group)
only after the rows are written; a row written twice has the same tuple id, which the
SOutput drops.

Boundaries: the query reads its source once per input each output's boxes read, plus
once for the INVALID records (Real-time Mode unions distinct sources only), and each
reader is a task of its own, going at its own pace. So each reader carries the source's
BOUNDARY records through its boxes (``streams.CARRIED``: filters keep them, maps pass
them on) and stages its copy after its results below it, in order (one producer per
task, idempotent, to one partition). The relay passes a BOUNDARY on once every reader
has staged it: by then it has read every result below it. Promises trail results by
milliseconds, and the batch (``REALTIME_BATCH``) is only how often the query checkpoints.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import threading
import time
from collections import deque
from typing import Any

import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from medusa.consuming import take
from medusa.gc_pauses import collector_held_off
from medusa.settings import kafka_config, spark_kafka_options
from medusa.topics import ensure_topics
from medusa_spark.fragment import KEY, OUTPUT, FragmentWiring, build_fragment, read_source
from medusa_spark.fragment_writer import (
    ENCODED_EXTRAS,
    FragmentHaltedError,
    FragmentWriter,
    encoded_columns,
)
from medusa_spark.network.execution import MICRO_BATCH, REAL_TIME, realtime_refusal
from medusa_spark.network.validate import Plan
from medusa_spark.streams import (
    BOUNDARY,
    EPOCH,
    ID,
    INVALID,
    RAW,
    RAW_HEADERS,
    READER,
    REDO,
    SOURCE_OFFSET,
    STIME,
    TRACE,
    TYPE,
)

log = logging.getLogger(__name__)

REALTIME_BATCH = "5 minutes"
"""How long each of Real-time Mode's batches runs (Spark's default): how often the query
checkpoints, and so how much input a restart reads again (for the SOutput to drop); not a
latency. Between two batches the query stops reading for about a second here (the next
batch planned, its tasks started): a longer batch pays that less often."""
STAGED_SUFFIX = ".staged"
RELAY_IDLE_POLL_S = 0.1
"""How long the relay waits in one poll for a record (it returns as one comes)."""
_OFFSET = SOURCE_OFFSET
_RAW_PREFIX = "raw:"
"""Staged headers that carry an INVALID record's own headers (for its dead letter)."""
_COLUMNS = (OUTPUT, TYPE, ID, STIME, KEY, "value", TRACE, *ENCODED_EXTRAS)


class RealtimeSlots:
    """The task slots a session keeps for Real-time Mode (``spark_session``'s
    ``realtime_slots``): a real-time query holds one per reader of its source for good, so
    it starts only where its slots are free, and runs on micro-batches otherwise."""

    def __init__(self) -> None:
        self.total = 0
        self.taken = 0
        self._lock = threading.Lock()

    def configure(self, total: int) -> None:
        with self._lock:
            self.total, self.taken = total, 0

    def take(self, count: int) -> bool:
        with self._lock:
            if self.taken + count > self.total:
                return False
            self.taken += count
            return True

    def give_back(self, count: int) -> None:
        with self._lock:
            self.taken = max(0, self.taken - count)


SLOTS = RealtimeSlots()


def readers_of(plan: Plan, wiring: FragmentWiring) -> int:
    """The readers of its source a fragment's real-time query has (each a task per source
    partition): one per input each output box's lineage reads, and one for the control
    rows (see ``build_fragment``)."""
    def count(name: str) -> int:
        if name in wiring.fragment.inputs:
            return 1
        return sum(count(source) for source in plan.inputs[name].values())
    return 1 + sum(count(box) for box in wiring.outputs)


def realtime_supported() -> bool:
    """Whether this PySpark has Real-time Mode's trigger (``trigger(realTime=...)``)."""
    return "realTime" in inspect.signature(DataStreamWriter.trigger).parameters


def execution_of(plan: Plan, wiring: FragmentWiring, standby: bool) -> tuple[str, str]:
    """How a fragment's query runs here, and why (without taking its task slots: see
    ``SLOTS``)."""
    refusal = realtime_refusal(plan, wiring.fragment)
    if refusal is None and wiring.instance is not None:
        refusal = "an instance of a scaled-out fragment runs on micro-batches"
    if refusal is None and standby:
        refusal = "a standby replica (a warm move's) runs on micro-batches"
    if refusal is None and not realtime_supported():
        refusal = "this Spark has no Real-time Mode in Python (4.2 or newer)"
    if refusal is None:
        return REAL_TIME, "stateless: each record is passed on as it is read"
    return MICRO_BATCH, refusal


def staged_topic(wiring: FragmentWiring) -> str:
    return wiring.source.topic + STAGED_SUFFIX


def _now_ms() -> Column:
    """The wall clock per row: ``current_timestamp`` is fixed per batch, and a real-time
    batch runs for seconds."""
    return F.expr("CAST(reflect('java.lang.System', 'currentTimeMillis') AS BIGINT)")


def _staged_rows(plan: Plan, wiring: FragmentWiring, spark: SparkSession) -> DataFrame:
    """The fragment's rows as Kafka records: the encoded value (an INVALID record's raw
    value), the envelope and the source offset in headers."""
    def reader() -> DataFrame:  # one per use: Real-time Mode unions distinct sources only
        return read_source(spark, wiring.source).withColumn(_OFFSET, F.col("offset"))

    rows = build_fragment(plan, wiring, reader)
    encoded = rows.select(*encoded_columns(wiring, rows.columns, _now_ms()),
                          F.col(_OFFSET), F.col(READER))
    headers = [F.struct(F.lit(name).alias("key"),
                        F.col(name).cast("string").cast("binary").alias("value"))
               for name in (c for c in _COLUMNS if c not in ("value", RAW, RAW_HEADERS))]
    raw_headers = F.transform(
        F.coalesce(F.col(RAW_HEADERS), F.array().cast("array<struct<key:string,value:binary>>")),
        lambda h: F.struct(F.concat(F.lit(_RAW_PREFIX), h["key"]).alias("key"),
                           h["value"].alias("value")))
    return encoded.select(
        F.coalesce(F.col("value"), F.col(RAW).cast("binary")).alias("value"),
        F.concat(F.array(*headers, *(
            F.struct(F.lit(name).alias("key"),
                     F.col(name).cast("string").cast("binary").alias("value"))
            for name in (_OFFSET, READER))), raw_headers).alias("headers"))


def start_realtime_query(spark: SparkSession, plan: Plan, wiring: FragmentWiring,
                         checkpoint: str, name: str) -> StreamingQuery:
    """The fragment's query in Real-time Mode, staging its rows (see the module's doc)."""
    staged = staged_topic(wiring)
    ensure_topics(kafka_config(wiring.source.bootstrap), [staged], partitions=1)
    stream = _staged_rows(plan, wiring, spark).writeStream.format("kafka")
    for key, value in spark_kafka_options(wiring.source.bootstrap).items():
        stream = stream.option(key, value)
    return (stream.option("topic", staged)
            .option("checkpointLocation", checkpoint)
            .option("kafka.linger.ms", "0")
            .queryName(name).outputMode("update")
            .trigger(realTime=REALTIME_BATCH)  # type: ignore[call-overload,unused-ignore]
            .start())


class StagedRelay:
    """Reads a real-time fragment's staged topic and writes its rows through the
    fragment's writer (see the module's doc). ``readers``: the readers of the source that
    carry each BOUNDARY (``readers_of`` less the control rows' one)."""

    def __init__(self, wiring: FragmentWiring, writer: FragmentWriter, readers: int) -> None:
        self.wiring = wiring
        self.writer = writer
        self.readers = readers
        self.topic = staged_topic(wiring)
        self.group = f"medusa.relay.{wiring.topic_prefix}{wiring.global_name}"
        self.error: Exception | None = None
        self._held: dict[int, tuple[dict[str, Any], set[str]]] = {}
        """BOUNDARY rows not yet staged by every reader: source offset -> (the row, the
        readers that staged it)."""
        self._released_offset = -1
        """The source offset of the newest BOUNDARY passed on."""
        self._position = 0
        """The staged offset after the last row read."""
        self._written_to: int | None = None
        """The staged offset after the last row written (what the relay commits)."""
        self._busy: deque[tuple[float, float]] = deque(maxlen=100_000)
        """(when, seconds) of each write: the fragment's load (the query's tasks run for
        the whole of each batch, so Spark's progress says nothing of it)."""
        self._stopping = threading.Event()
        self._drain_asked = threading.Event()
        self._drain_end: int | None = None
        """Where the staged topic ended when a drain was asked (see ``drain``)."""
        self._consumer = Consumer(kafka_config(
            wiring.source.bootstrap, **{
                "group.id": self.group, "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "fetch.wait.max.ms": 5,
                "fetch.min.bytes": 1, "isolation.level": "read_uncommitted"}))
        start = self._start_offset()
        self._position = max(start, 0)
        self._started_at_position = self._position
        self._consumer.assign([TopicPartition(self.topic, 0, start)])
        self._thread = threading.Thread(target=self._run, name=f"relay {wiring.global_name}",
                                        daemon=True)

    def _start_offset(self) -> int:
        committed = self._consumer.committed([TopicPartition(self.topic, 0)], timeout=10)
        offset = committed[0].offset if committed else -1
        return offset if offset >= 0 else OFFSET_BEGINNING

    def load(self, window_s: float) -> float:
        """The share of the last ``window_s`` seconds the relay spent writing."""
        since = time.monotonic() - window_s
        return min(1.0, sum(spent for at, spent in list(self._busy) if at >= since) / window_s)

    def start(self) -> StagedRelay:
        self._thread.start()
        return self

    def drain(self, timeout_s: float) -> None:
        """Once the query has stopped (its tasks ended, so all they read is staged): waits
        until every staged row has been written. BOUNDARY rows still held are left: the
        next runner promises again from what it computes. The relay's own thread learns
        where the staged topic ends (a consumer is not to be used from two threads: a
        poll and a watermark query at once hung both)."""
        deadline = time.monotonic() + timeout_s
        self._drain_asked.set()

        def written() -> int:
            return self._written_to if self._written_to is not None else \
                self._started_at_position

        while (end := self._drain_end) is None or self._position < end or \
                written() < self._position:
            if self.error is not None or not self._thread.is_alive():
                raise RuntimeError(f"relay of {self.topic} stopped before it had written "
                                   f"what was staged: {self.error}")
            if time.monotonic() > deadline:
                left = "an unknown number of" if end is None else str(end - self._position)
                raise TimeoutError(f"relay of {self.topic}: {left} staged row(s) not "
                                   f"written within {timeout_s:.0f}s")
            time.sleep(0.01)

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(10)
            if self._thread.is_alive():  # its consumer is not to be used from here too
                log.warning("%s: the relay did not stop within 10 s; its consumer is left "
                            "open", self.wiring.global_name)
                return
        if self._written_to is not None:  # the next runner's relay starts there
            with contextlib.suppress(KafkaException, RuntimeError):
                self._consumer.commit(offsets=[TopicPartition(self.topic, 0, self._written_to)],
                                      asynchronous=False)
        with contextlib.suppress(RuntimeError):  # closed already
            self._consumer.close()

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                if self._drain_asked.is_set() and self._drain_end is None:
                    self._drain_end = self._consumer.get_watermark_offsets(
                        TopicPartition(self.topic, 0), timeout=10, cached=False)[1]
                messages = take(self._consumer, 10_000, RELAY_IDLE_POLL_S)
                # A dict per record and the writer's pass, none in a cycle (``gc_pauses``).
                with collector_held_off():
                    rows, last = self._rows(messages)
                    if last is not None:
                        self._position = last + 1
                    released = self._released_boundaries()
                    rows += released
                    if rows:
                        began = time.perf_counter()
                        self.writer.write_table(_table(rows), self._batch_id(last), began)
                        self._busy.append((time.monotonic(), time.perf_counter() - began))
                if released:  # every result below them is written: promise them now
                    self.writer.write_idle_boundaries(None)
                if last is not None:
                    self._written_to = last + 1
                    self._consumer.commit(offsets=[TopicPartition(self.topic, 0, last + 1)],
                                          asynchronous=True)
        except FragmentHaltedError:
            return
        except Exception as error:  # the node sees it through the fragment's run
            self.error = error
            log.exception("%s: the relay of the staged rows stopped",
                          self.wiring.global_name)

    def _batch_id(self, last: int | None) -> int:
        """A relayed batch's id: the staged offset after its last record (rising, also
        across restarts)."""
        return self._position if last is not None else \
            max(self.writer.last_written or 0, self._position)

    def _rows(self, messages: list[Any]) -> tuple[list[dict[str, Any]], int | None]:
        rows = []
        last = None
        for message in messages:
            if message.error() is not None:
                if message.error().code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"relay of {self.topic}: {message.error()}")
                continue
            last = message.offset()
            row = _row(message)
            offset, reader = row.pop(_OFFSET, None), row.pop(READER, None)
            if row[TYPE] == BOUNDARY and row[OUTPUT] is None:
                at = int(offset)
                if at > self._released_offset:  # else staged again after a restart
                    self._held.setdefault(at, (row, set()))[1].add(str(reader))
            else:
                rows.append(row)
        return rows, last

    def _released_boundaries(self) -> list[dict[str, Any]]:
        """The held BOUNDARY rows every reader has staged, in their order in the source.
        A reader stages its rows in the order it reads them, so its copy of a BOUNDARY
        comes after each of its results below it, all read by now. One that some reader
        staged before this relay started (and so is not read again) is never complete:
        the next complete one supersedes it."""
        complete = [offset for offset, (_, staged) in self._held.items()
                    if len(staged) >= self.readers]
        if not complete:
            return []
        through = max(complete)
        released = [self._held[offset][0] for offset in sorted(complete)]
        self._held = {o: held for o, held in self._held.items() if o > through}
        self._released_offset = through
        return released


def _row(message: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(_COLUMNS)
    raw_headers = []
    for key, value in message.headers() or []:
        if key.startswith(_RAW_PREFIX):
            raw_headers.append({"key": key[len(_RAW_PREFIX):], "value": value})
        elif value is not None:
            row[key] = value.decode()
    if row[TYPE] == INVALID:
        row[RAW] = message.value()
        row[RAW_HEADERS] = raw_headers
    else:
        row["value"] = message.value()
    for name in (EPOCH, REDO):
        row[name] = None if row[name] is None else int(row[name])
    return row


_SCHEMA = pa.schema([
    *[pa.field(name, pa.binary() if name in ("value", RAW) else
               pa.int32() if name in (EPOCH, REDO) else
               pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
               if name == RAW_HEADERS else pa.string()) for name in _COLUMNS]])


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=_SCHEMA)
