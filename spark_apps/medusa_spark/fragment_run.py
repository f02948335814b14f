"""A running fragment: its Spark query, its writer, and how it stops, hands over or is promoted."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from confluent_kafka import KafkaException
from py4j.protocol import Py4JError
from pyspark.sql import SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from medusa_spark.durations import duration_ms
from medusa_spark.fragment import FragmentWiring, start_query_frame
from medusa_spark.fragment_writer import FragmentWriter, RecordSink
from medusa_spark.network.execution import MICRO_BATCH, REAL_TIME
from medusa_spark.network.fragments import Fragment, runs_transform_with_state
from medusa_spark.network.validate import Plan
from medusa_spark.realtime import (
    SLOTS,
    StagedRelay,
    execution_of,
    readers_of,
    start_realtime_query,
)
from medusa_spark.reconcile import DpcRecord, ReconcileRequired
from medusa_spark.scheduler_pools import (
    forget_query,
    jvm_thread_at,
    set_query_catching_up,
    set_query_priority,
    threads_started_in,
)
from medusa_spark.session import (
    INDEXED_ROCKSDB,
    QUERY_STOP_TIMEOUT_MS,
    REBUILD_NICE,
    STATE_STORE_PROVIDER,
    STATE_STORE_PROVIDERS,
    can_renice_back,
)
from medusa_spark.soutput import OutputFencedError, SOutput
from medusa_spark.wiring import SUNION_PARTITIONS

log = logging.getLogger(__name__)

AVAILABLE_NOW = "available-now"
DRAIN_TIMEOUT_S = 15.0
"""The longest a moving real-time fragment waits for its relay to write what it staged."""


def checkpoint_location(checkpoint_root: str, wiring: FragmentWiring) -> str:
    """Per fragment and fingerprint: a changed definition never resumes an old checkpoint."""
    participant, network = wiring.network.split("/")
    return (f"{checkpoint_root.rstrip('/')}/{participant}/{network}/"
            f"{wiring.topic_prefix}{wiring.name}-{wiring.fingerprint}")


REPLICA_SUFFIX = ".replica"
"""A standby replica's checkpoint sits beside its primary's, named with this suffix."""
REDO_SUFFIX = ".redo-"
"""A query that redoes an UP_FAILURE period beside the fragment's: its checkpoint, beside
the one the fragment has, with the period's number; once it has taken the output over,
the fragment's checkpoint."""
_REDO_COPY = re.compile(re.escape(REDO_SUFFIX) + r"\d+$")


def same_definition(checkpoint: str, other: str) -> bool:
    """Whether two checkpoint locations (on any node or store, a primary's, a replica's or
    a redo's) hold the same definition of a fragment: the same topics and fingerprint, the
    last part of the location."""
    def definition(location: str) -> str:
        last = location.rstrip("/").rsplit("/", 1)[-1].removesuffix(REPLICA_SUFFIX)
        return _REDO_COPY.sub("", last)
    return definition(checkpoint) == definition(other)


def is_redo_copy(checkpoint: str, of: str) -> bool:
    """Whether ``checkpoint`` is a redo's copy of the checkpoint at ``of`` (beside it)."""
    return checkpoint.startswith(of + REDO_SUFFIX) and \
        _REDO_COPY.search(checkpoint.rstrip("/")) is not None


@dataclass
class FragmentRun:
    wiring: FragmentWiring
    query: StreamingQuery
    writer: FragmentWriter
    checkpoint: str
    trigger_ms: int = 0
    """Its trigger interval (0: process what is there, then stop, or Real-time Mode)."""
    execution: str = MICRO_BATCH
    """micro-batch or real-time (see ``realtime``)."""
    execution_why: str = ""
    relay: StagedRelay | None = None
    """A real-time fragment's: passes its staged rows to its writer."""
    realtime_slots: int = 0
    """The session's task slots its real-time query holds (``realtime.SLOTS``)."""
    execution_asked: str = MICRO_BATCH
    """How its network asks its fragments to run (the network's ``execution``)."""
    _stop_timed_out: bool = False
    _catching_up: bool = False

    @property
    def name(self) -> str:
        return self.wiring.global_name

    def failure(self) -> str | None:
        """Why the query stopped, unless it stopped because it was asked to."""
        if self.relay is not None and self.relay.error is not None and \
                not self.writer.halted:
            return _first_lines(f"relay of its staged rows: {self.relay.error}")
        if self.query.isActive or self.writer.halted:
            return None
        error = self.query.exception()
        return None if error is None else _first_lines(str(error))

    def reconcile_requested(self) -> ReconcileRequired | None:
        """The REDO that stopped the query, when it stopped to reconcile (see ``reconcile``)."""
        error = self.writer.error
        if self.query.isActive or not isinstance(error, ReconcileRequired):
            return None
        return error

    def fenced(self) -> bool:
        """Whether the query stopped because another node took over its outputs."""
        return isinstance(self.writer.error, OutputFencedError)

    @property
    def standby(self) -> bool:
        return self.writer.standby

    def has_work(self) -> bool:
        """Whether its query is running a batch or has input it has not read yet."""
        return query_has_work(self.query)

    def promote(self, emit_from_ms: int | None = None) -> int:
        """A standby replica becomes the fragment's writer; returns the results it caught up
        (from ``emit_from_ms`` on, for a scale step's new instance). A rebuilding one's
        batch in progress, and the planning of its next, go on at the normal priority at
        once: its first batch after a warm move's switch was planned niced (390 to 640 ms
        against 60 to 120)."""
        self.release_eviction()
        written = self.writer.promote(emit_from_ms)
        set_query_priority(SparkSession.active(), self.writer.query_key, rebuilding=False)
        return written

    def catch_up(self) -> None:
        """A rebuilding standby (a warm move's replica, a DPC redo with its corrections
        done) works off its lag before it takes over, its batch in progress too, at a
        priority between a rebuild's and the normal one (``session.CATCH_UP_NICE``).
        A replica whose eviction is held (``eviction_hold``) has kept pace and has no lag
        to work off: it goes on at the normal priority, held until its promotion."""
        if self._catching_up:
            return
        self._catching_up = True
        if self.writer.eviction_held:
            # At nice 5 its batches took 2.5 to 3.6 s beside the old node's, and promoted
            # a batch behind, its first result came 2.7 to 3.3 s after the old node's last.
            # Released here, both instances scanned the state at one priority until the
            # output switch, 4 to 5 s, and the old node's output paused 2.6 to 3.1 s there.
            set_query_priority(SparkSession.active(), self.writer.query_key, rebuilding=False)
        else:
            set_query_catching_up(SparkSession.active(), self.writer.query_key)

    def release_eviction(self) -> None:
        """Its aggregations evict again, from their next scan on (``eviction_hold``)."""
        self.writer.release_eviction(SparkSession.active())

    def give_way(self) -> None:
        """Another instance has taken the outputs over: the batch in progress here, which
        writes nothing now, leaves the CPU to it. Its tasks go to the lowest priority (one
        in a state store's scan does not see a cancellation) and its jobs are cancelled (no
        further task starts); a warm move's old node computed 0.8 to 1.4 s beside its
        replica's first batch."""
        spark = SparkSession.active()
        set_query_priority(spark, self.writer.query_key, rebuilding=True)
        spark.sparkContext.cancelJobsWithTag(self.writer.query_key)

    def abandon(self) -> None:
        """Stops at once, writing nothing more: the fragment belongs to another node now."""
        self.writer.halt()
        self._stop_relay()
        self.stop_query()
        self.writer.close()

    def stop_query(self) -> None:
        """Stops the query; one whose thread does not end within Spark's ``stopTimeout``
        (``session.QUERY_STOP_TIMEOUT_MS``) is logged and left to end on its own, once:
        whatever it still runs writes nothing once its writer is halted (before the stop,
        or by ``abandon`` right after a real-time drain) or fenced by its next runner."""
        if self._stop_timed_out:
            return
        try:
            self.query.stop()
            forget_query(SparkSession.active(), self.writer.query_key)
            self.release_eviction()
        except Exception as error:  # Spark's TimeoutException, through py4j
            if "stopTimeout" not in str(error) and "failed to stop" not in str(error):
                raise
            self._stop_timed_out = True
            log.error("%s: its query did not stop within %d s; the node goes on without "
                      "it (it writes nothing more): %s", self.name,
                      QUERY_STOP_TIMEOUT_MS // 1000, _first_lines(str(error), 300))

    def _stop_relay(self) -> None:
        if self.relay is not None:
            self.relay.stop()
        SLOTS.give_back(self.realtime_slots)
        self.realtime_slots = 0

    def hand_over(self, timeout_s: float = 120.0, drain: bool = False) -> None:
        """Stops at a batch boundary, so the checkpoint holds exactly what was written.

        Every batch written is committed to the checkpoint before the query stops; a
        batch begun after ``halt`` writes nothing and is replayed by the next runner.
        ``drain``: a real-time fragment moving to another node (perhaps on another
        cluster, with another staged topic) first writes all it staged.
        """
        if self.relay is not None:
            if drain:
                # Its tasks end with the query, having staged all they read; what the next
                # runner computes again is dropped by tuple id.
                self.stop_query()
                try:
                    self.relay.drain(DRAIN_TIMEOUT_S)
                except (RuntimeError, TimeoutError, KafkaException) as error:
                    log.warning("%s: %s; the next runner on this cluster writes the rest "
                                "from the relay's committed position", self.name, error)
            # Otherwise what was staged and not yet written is written by the next runner
            # here, from the position this relay committed.
            self.abandon()
            return
        last = self.writer.halt()
        deadline = time.monotonic() + timeout_s
        while last is not None and self.query.isActive:
            progress: dict[str, Any] = self.query.lastProgress or {}
            if int(progress.get("batchId", -1)) >= last:
                break  # progress is reported after the batch's commit
            if time.monotonic() > deadline:
                raise TimeoutError(f"fragment {self.name}: batch {last} was not committed "
                                   f"within {timeout_s:.0f}s")
            time.sleep(0.05)
        self.stop_query()
        self.writer.close()

    def box_rows(self) -> dict[str, int]:
        """Rows each output box produced in the last batch (Spark's observed metrics)."""
        progress: dict[str, Any] = self.query.lastProgress or {}
        observed = progress.get("observedMetrics") or {}
        rows = {}
        for name, metrics in observed.items():
            # A Row in PySpark's progress object, a dict in its JSON form.
            values = metrics.asDict() if hasattr(metrics, "asDict") else (metrics or {})
            if name.startswith("box."):
                rows[name[4:]] = int(values.get("rows", 0) or 0)
            elif name.startswith("boxes."):  # a process box's ports, counted in one pass
                rows.update({box: int(count or 0) for box, count in values.items()})
        return rows


def start_fragment(spark: SparkSession, plan: Plan, wiring: FragmentWiring, checkpoint: str,
                   trigger: str | None = None, standby: bool = False,
                   on_batch: Callable[[str, int], None] | None = None,
                   role: str | None = None, sinks: list[RecordSink] | None = None,
                   rebuild: bool = True, hold_eviction: bool = False) -> FragmentRun:
    """Starts a fragment's query, resuming from ``checkpoint`` when it holds one.

    A ``standby`` fragment (an active replica) computes everything and writes nothing
    until promoted (see ``soutput``); unless ``rebuild`` is false (an active or
    reader-side replica, which keeps pace with its primary), it does so at the lowest
    priority (see ``scheduler_pools.run_jobs_in``); with ``hold_eviction`` (a warm move's
    replica) its aggregations keep their closed windows until it is promoted (see
    ``eviction_hold``), where its state store allows it. ``role``
    names a query that runs beside the fragment's own in this session (a query's name is
    unique in it). ``sinks`` replace its writer's SOutputs (a benchmark meters them).
    """
    skip_epoch = DpcRecord.load(checkpoint).skip_epoch
    interval = trigger or plan.network.trigger
    writer = FragmentWriter(plan, wiring, standby=standby, on_batch=on_batch,
                            sinks=sinks, checkpoint=checkpoint, rebuild=rebuild)
    suffix = f"/{role}" if role else "/standby" if standby else ""
    execution, why = execution_of(plan, wiring, standby or role is not None) \
        if interval != AVAILABLE_NOW else (MICRO_BATCH, "runs what is there, then stops")
    slots = readers_of(plan, wiring) * SUNION_PARTITIONS
    if execution == REAL_TIME and not SLOTS.take(slots):
        execution, why = MICRO_BATCH, (
            f"Real-time Mode needs {slots} task slot(s) for good; the node has "
            f"{SLOTS.total - SLOTS.taken} of {SLOTS.total} free (medusa node --realtime-slots)")
    if execution == REAL_TIME:
        name = f"{wiring.topic_prefix}{wiring.global_name}{suffix}"
        try:
            query = start_realtime_query(spark, plan, wiring, checkpoint, name)
        except Exception:
            SLOTS.give_back(slots)
            raise
        writer.in_stream = True
        relay = StagedRelay(wiring, writer, readers_of(plan, wiring) - 1).start()
        return FragmentRun(wiring, query, writer, checkpoint, 0, execution, why, relay, slots,
                           plan.network.execution)
    # Building the frame analyses each box's plan on this thread's JVM thread: a
    # rebuilding query's at a rebuild's priority, beside the queries serving here.
    with jvm_thread_at(spark, REBUILD_NICE, standby and rebuild and can_renice_back()):
        frame = start_query_frame(spark, plan, wiring, skip_epoch)
    stream = (frame.writeStream.queryName(f"{wiring.topic_prefix}{wiring.global_name}{suffix}")
              .outputMode("append")
              .foreachBatch(writer)
              .option("checkpointLocation", checkpoint))
    if interval == AVAILABLE_NOW:  # process what is there, then stop (benchmarks)
        stream = stream.trigger(availableNow=True)
    else:
        duration_ms(interval)  # fail early on a malformed trigger
        stream = stream.trigger(processingTime=interval)
    store = state_store_provider(plan, wiring.fragment)
    if hold_eviction and standby and store == INDEXED_ROCKSDB:
        writer.hold_eviction(spark)
    query = start_stream(spark, stream, plan.network.state_partitions, store,
                         rebuilding=standby and rebuild)
    for output in writer.outputs if standby else ():
        if isinstance(output, SOutput):
            output.follow()  # so that a promotion reads back only the last moments
    if interval != AVAILABLE_NOW:
        threading.Thread(target=_write_boundaries_when_idle,
                         args=(query, writer, max(duration_ms(interval), 200) / 1000),
                         name=f"idle-boundaries {wiring.global_name}", daemon=True).start()
    return FragmentRun(wiring, query, writer, checkpoint,
                       0 if interval == AVAILABLE_NOW else duration_ms(interval),
                       execution, why, execution_asked=plan.network.execution)


_STARTING = threading.Lock()
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def state_store_provider(plan: Plan, fragment: Fragment) -> str:
    """The state store class of the fragment's query: its ``state_store``, RocksDB the one
    whose aggregations evict through an index and can be held by a move's replica, where
    Spark allows it."""
    if fragment.state_store == "rocksdb" and \
            not runs_transform_with_state(plan, fragment.boxes):
        return INDEXED_ROCKSDB
    return STATE_STORE_PROVIDERS[fragment.state_store]


def start_stream(spark: SparkSession, stream: DataStreamWriter, partitions: int | None,
                 state_store_class: str, rebuilding: bool = False) -> StreamingQuery:
    """Starts the query with ``partitions`` state partitions, if given, and its state in
    a ``state_store_class`` store: a query takes the session's settings when it starts
    (and keeps them in its checkpoint, which wins when it resumes), so the node's defaults
    are set aside only meanwhile. A ``rebuilding`` query's thread starts at the lowest
    priority."""
    settings: dict[str, str] = {STATE_STORE_PROVIDER: state_store_class}
    if partitions is not None:
        settings[SHUFFLE_PARTITIONS] = str(partitions)
    with _STARTING:
        defaults = {key: spark.conf.get(key) for key in settings}
        for key, value in settings.items():
            spark.conf.set(key, value)
        try:
            with threads_started_in(spark, rebuilding):
                return stream.start()
        finally:
            for key, default in defaults.items():
                if default is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, default)


def _write_boundaries_when_idle(query: StreamingQuery, writer: FragmentWriter,
                                interval_s: float) -> None:
    """While the query runs: once it waits for data with nothing left to read, its writer
    promises what the last batches passed (no batch would come to carry it)."""
    while query.isActive:
        time.sleep(interval_s)
        try:
            if query_has_work(query):
                continue
            progress: dict[str, Any] = query.lastProgress or {}
            writer.write_idle_boundaries(_watermark_ms(progress))
        except Exception:  # the query stopped meanwhile: its runner reports why
            if not query.isActive:
                return
            time.sleep(interval_s)


def query_has_work(query: StreamingQuery) -> bool:
    """Whether the query is running a batch or has input it has not read yet (False once
    it has stopped)."""
    try:
        status = query.status
    except Py4JError:
        return False
    return bool(status.get("isTriggerActive") or status.get("isDataAvailable"))


def _watermark_ms(progress: dict[str, Any]) -> int | None:
    """The watermark a batch ran with, from its progress (None before the first)."""
    text = (progress.get("eventTime") or {}).get("watermark")
    if not text:
        return None
    millis = int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    return millis if millis > 0 else None


def progress_time(progress: dict[str, Any]) -> float | None:
    """When a batch started (wall clock, seconds), from its progress."""
    text = progress.get("timestamp")
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None


def _first_lines(text: str, limit: int = 1500) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    short = "\n".join(lines[:6])
    return short[:limit]
