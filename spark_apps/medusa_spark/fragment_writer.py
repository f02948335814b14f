"""A fragment's writer: each micro-batch's results, boundaries and dead letters, written once.

Per micro-batch the writer encodes every output's results in ONE Spark job
(Avro in the Confluent wire format, stamped with ``emit_time``), takes them to
the driver as Arrow columns (not row objects), and writes them with a BOUNDARY
per output partition through the SOutput: one Kafka transaction per output
cluster, each tuple id once.

The boundary of an output says that no later result of it has a smaller stime.
On micro-batches every reader of the query's source (the results' and the control
rows') is the one Kafka source of the SUnion's topic, whose single partition Spark
reads to the same offset for all of them, at a transaction's end: a batch that saw
the SUnion's BOUNDARY b has read every tuple below b. In Real-time Mode the relay
hands a BOUNDARY over once every reader has staged it, after every result below it
(see ``realtime``). So after batch M, with b(M) the newest source BOUNDARY seen up to
batch M:
- an output with no window or join upstream in the fragment promises b(M) (a process
  box answers its input in the same batch);
- an output behind a window or a join promises b(M-2) less the source delay and
  the reach of its joins (a join may match an old tuple with a new one).
Spark runs a batch without data as soon as the watermark moves, so the promise
trails the input by one trigger, not by one bucket.

DPC (see ``reconcile``): from the first batch that reads a record of an UP_FAILURE period
until the reconciliation, every result is TENTATIVE (a window closed by a tentative
boundary may lack the failed input's tuples even when none of its own was tentative),
and the outputs' boundaries are marked with the period, so downstream SUnions take
them as tentative. A batch that holds a REDO not yet redone sets ``redo_requested``: the
node starts a query that redoes the period beside this one, which writes on (a standby
stops with ``ReconcileRequired`` instead, to be rolled back in place). A writer whose
query redoes writes UNDO on every output partition first, and REC_DONE once every output
has promised the REDO's boundary (the corrections of everything it re-released are out
by then). The REDO's traceparent is kept
in the DPC record, and the span ``REC_DONE <fragment>`` (from the query's restart until
REC_DONE is written) joins the period's trace.

A real-time fragment's writer (``in_stream``, fed by its relay) reconciles in the stream
instead, as Borealis's stateless operators do: its query reads every record, each tuple
with its DPC marks, so its results are TENTATIVE exactly where their input was, and after
the failure its REDO's tuples give the corrections. The first record of a REDO not yet
redone puts UNDO on every output partition before anything else is written; from then on
a tentative result of that period or an older one is superseded and left out (a reader of
the source still behind the REDO staged it); REC_DONE follows with the first stable
BOUNDARY past the REDO's, which every reader staged after all its corrections. No query
is rolled back or started for it.

When the input stops, no further batch comes to carry the last promise (a stateless
query never runs a batch without data). So once the query is idle, with every
reader at the end of its source, ``write_idle_boundaries`` promises the newest
source BOUNDARY itself (stateless outputs), or the watermark the last batch ran
with (outputs behind a window or a join: Spark had closed every window it passes).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Producer
from opentelemetry import trace
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import to_avro

from medusa import dead_letters
from medusa.batch_phases import RecentWriterTimes, WriterTimes
from medusa.envelope import (
    ID_HEADER,
    STIME_HEADER,
    TENTATIVE_HEADER,
    TRACEPARENT_HEADER,
    TYPE_HEADER,
    Envelope,
    TupleType,
    boundary,
)
from medusa.errors import MedusaError
from medusa.gc_pauses import collector_held_off
from medusa.settings import kafka_config
from medusa.tracing import context_of, traceparent
from medusa_spark import eviction_hold
from medusa_spark.durations import duration_ms
from medusa_spark.fragment import (
    EMIT_TIME,
    KEY,
    OUTPUT,
    SOURCE_DELAY,
    FragmentOutput,
    FragmentWiring,
    packed,
)
from medusa_spark.network.validate import Plan
from medusa_spark.reconcile import DpcRecord, ReconcileRequired
from medusa_spark.scheduler_pools import PREPARING, SERVING, run_jobs_in
from medusa_spark.soutput import OutRecord, SOutput
from medusa_spark.streams import (
    BOUNDARY,
    EPOCH,
    ID,
    INVALID,
    RAW,
    RAW_HEADERS,
    REASON,
    REDO,
    SOURCE,
    STIME,
    TRACE,
    TYPE,
    wire_prefix,
)

_TYPE_KEY, _ID_KEY, _STIME_KEY = TYPE_HEADER, ID_HEADER, STIME_HEADER
_TENTATIVE = TupleType.TENTATIVE.value
log = logging.getLogger(__name__)


class RecordSink(Protocol):
    """Where a fragment's records go: an SOutput, or a list in tests."""

    topics: list[str]
    standby: bool

    def write(self, records: Sequence[OutRecord]) -> int: ...

    def promote(self, keep_tentative: bool = True, from_stime_ms: int | None = None
                ) -> int: ...

    def close(self) -> None: ...


class FragmentHaltedError(MedusaError, RuntimeError):
    """Raised by a fragment's writer after ``halt``: the batch is left to its next runner."""


def upstream_in_fragment(plan: Plan, box: str, boxes: tuple[str, ...]) -> list[str]:
    """The box and every box of the fragment it depends on."""
    found, todo = {box}, [box]
    while todo:
        for source in plan.inputs[todo.pop()].values():
            if source in boxes and source not in found:
                found.add(source)
                todo.append(source)
    return [b for b in boxes if b in found]


class FragmentWriter:
    """foreachBatch sink of a fragment's query."""

    def __init__(self, plan: Plan, wiring: FragmentWiring, standby: bool = False,
                 on_batch: Callable[[str, int], None] | None = None,
                 sinks: list[RecordSink] | None = None, checkpoint: str | None = None,
                 rebuild: bool = True) -> None:
        """``sinks`` replaces the SOutputs (one per output cluster), e.g. in ``testing``;
        the DPC record is kept beside ``checkpoint`` (in memory without one)."""
        self.wiring = wiring
        self.checkpoint = checkpoint
        self.dpc = DpcRecord.load(checkpoint) if checkpoint else DpcRecord()
        self._started_ns = time.time_ns()
        """When the query (re)started: after a roll-back, the start of its REC_DONE span."""
        self._tentative_epoch: int | None = None
        """Set while the results are TENTATIVE: the UP_FAILURE period they belong to."""
        self._undo_written = False
        self._redo_passed = False
        """In the stream: a stable BOUNDARY past the REDO's has been released."""
        self.tentative_written = 0
        self.stray_tentative = 0
        """Tentative results met outside any failure period, and not written (see
        ``_write_batch``)."""
        self.on_batch = on_batch
        self.query_key = f"{wiring.global_name}#{uuid.uuid4().hex[:8]}"
        """Names its query's jobs in the session (``scheduler_pools.set_query_priority``)."""
        self.rebuild = rebuild
        """While a standby: it rebuilds its state beside a serving instance (a scale step's,
        a move's or a redo's), whose batches go first, until it has caught up (then it
        keeps pace, ``node.state.keep_pace``); an active or reader-side replica keeps pace
        with its primary from the start (see ``run_jobs_in``)."""
        clusters: dict[str, list[str]] = {}
        for output in wiring.outputs.values():
            clusters.setdefault(output.stream.bootstrap, []).append(output.stream.topic)
        owner = f"{wiring.topic_prefix}{wiring.global_name}"
        self.outputs: list[RecordSink] = sinks if sinks is not None else [
            SOutput(owner if len(clusters) == 1 else f"{owner}@{index}", topics, bootstrap,
                    standby=standby)
            for index, (bootstrap, topics) in enumerate(sorted(clusters.items()))]
        self._output_of_topic = {topic: out for out in self.outputs for topic in out.topics}
        self._lag_ms: dict[str, int | None] = {}
        for box in wiring.outputs:
            upstream = upstream_in_fragment(plan, box, wiring.fragment.boxes)
            if any(plan.boxes[b].emits_on_watermark for b in upstream):
                reach = sum(plan.boxes[b].reach_ms() for b in upstream)
                self._lag_ms[box] = duration_ms(SOURCE_DELAY) + reach
            else:
                self._lag_ms[box] = None
        self._seen_boundaries: deque[int | None] = deque([None, None], maxlen=2)
        self._newest_boundary: int | None = None
        self._emitted: dict[str, int] = {}
        self._dead_letter_producers: dict[str, Producer] = {}
        self.lock = threading.Lock()
        self._halted = False
        self.last_written: int | None = None
        """The id of the last batch written in full."""
        self.emit_from_ms: int | None = wiring.instance.emit_from_ms if wiring.instance \
            else None
        """An instance of a scaled-out fragment: the results below this stime are written
        by the instances before it (it rebuilt their windows only to finish the open ones).
        Raised when a scale step's new instances take over (see ``scaling``)."""
        self.emit_until_ms: int | None = None
        """During a scale step: the results from this stime on are the new instances'
        (see ``cut``); its boundaries promise no further."""
        self.promise_hold_ms: int | None = None
        """During a scale step, on a new instance: its promises on the outputs another
        fragment reads go no further until the old instances have promised this (the
        cut), since that reader takes each partition's newest BOUNDARY as its promise."""
        self._written_through_ms: int | None = None
        """The largest stime of a result written."""
        self.redo_requested: ReconcileRequired | None = None
        """The newest REDO read that this query has not redone: the node starts a query
        that redoes it beside this one, which writes on (see ``reconcile``)."""
        self._rec_done_untraced: tuple[str | None, dict[str, str | int]] | None = None
        """A standby wrote REC_DONE into its buffer: traced when it is promoted."""
        self.batches = 0
        self.recent_times = RecentWriterTimes()
        """What the writer spent on each recent batch (``batch_phases``)."""
        self.results_written = 0
        self.error: Exception | None = None
        """What made the last batch fail in this writer (a fenced output, say)."""
        self.in_stream = False
        """A real-time fragment's writer: it reconciles in the stream (see the module's
        doc), the DPC record keeping the REDO being redone (``skip_epoch``) and how far its
        boundaries went (``redo_through``)."""
        self.reconciled_in_stream = 0
        self.superseded_tentative = 0
        """Tentative results left out in the stream: their period's REDO had begun."""
        self._encoding: tuple[tuple[str, ...], list[Column]] | None = None
        """The batch's columns and the columns that encode them (``_encoded``)."""
        self.eviction_held = False
        """Its query's aggregations keep their closed windows (a move's replica catching
        up, ``hold_eviction``): a batch begun so promises nothing behind a window."""
        self._batch_held = False

    @property
    def halted(self) -> bool:
        return self._halted

    @property
    def standby(self) -> bool:
        return self.outputs[0].standby

    @property
    def rebuilding(self) -> bool:
        """Whether its batches rebuild state beside a serving instance, niced: a standby
        rebuilding (a move's replica, a scale step's instance) until ``keep_pace``."""
        return self.standby and self.rebuild

    def hold_eviction(self, spark: SparkSession) -> None:
        """Its query's aggregations keep their closed windows from its next batch on
        (``eviction_hold``)."""
        self.eviction_held = True
        eviction_hold.hold_eviction(spark, self.query_key)

    def release_eviction(self, spark: SparkSession) -> None:
        """Its query's aggregations evict again, if held: released in the JVM before it is
        noted here, so a batch begun as unheld (``_write_batch``) is."""
        if self.eviction_held:
            eviction_hold.release_eviction(spark, self.query_key)
            self.eviction_held = False

    def halt(self) -> int | None:
        """No batch is written after this returns; says the last one that was."""
        with self.lock:
            self._halted = True
            return self.last_written

    def is_ahead(self) -> bool:
        """A standby: whether it holds a result its primary has not written (``SOutput``)."""
        return any(output.is_ahead() for output in self.outputs if isinstance(output, SOutput))

    def primary_wrote_at(self) -> float | None:
        """A standby: when its outputs last read a result its primary committed."""
        return max((at for output in self.outputs if isinstance(output, SOutput)
                    if (at := output.primary_wrote_at()) is not None), default=None)

    def promote(self, emit_from_ms: int | None = None) -> int:
        """The standby writes from now on; ``emit_from_ms`` raises ``emit_from_ms`` first
        (a scale step's new instance: the cut the old instances agreed to)."""
        # No wait for a batch in progress: its results, written after the promotion, go
        # through the same deduplication (and the SOutput drops those below the new bound).
        if emit_from_ms is not None:
            self.emit_from_ms = emit_from_ms
        return self._promote_outputs()

    def _promote_outputs(self) -> int:
        # Tentative results kept from a failure period already reconciled are stale.
        current = self._tentative_epoch is not None or self.dpc.reconciling
        written = sum(output.promote(current, self.emit_from_ms) for output in self.outputs)
        if self._rec_done_untraced is not None:  # a redo that took over, REC_DONE written
            parent, attributes = self._rec_done_untraced
            self._rec_done_untraced = None
            self._span_rec_done(parent, attributes)
        return written

    def cut(self, at_least_ms: int | None) -> int | None:
        """A scale step's switch: from the returned stime on, this writer writes no result
        (its replacements do); it is ``at_least_ms``, or past every result written already
        if that is further. None lifts the cut (a step given up)."""
        with self.lock:
            if at_least_ms is None:
                self.emit_until_ms = None
                return None
            written = self._written_through_ms
            self.emit_until_ms = at_least_ms if written is None else \
                max(at_least_ms, written + 1)
            return self.emit_until_ms

    @property
    def lowest_promise_ms(self) -> int | None:
        """The smallest stime its outputs' boundaries have promised: every result below it
        is written (None before each output has promised one)."""
        if any(box not in self._emitted for box in self.wiring.outputs):
            return None
        return min(self._emitted[box] for box in self.wiring.outputs)

    def written_below_ms(self) -> int | None:
        """Every result below this stime is written: what the outputs promised, or past the
        newest result written (results come out in watermark order), within the cut."""
        marks = [m for m in (self.lowest_promise_ms, None if self._written_through_ms is None
                             else self._written_through_ms + 1) if m is not None]
        if not marks:
            return None
        mark = max(marks)
        return mark if self.emit_until_ms is None else min(mark, self.emit_until_ms)

    def wrote_all_before_cut(self) -> bool:
        """Whether every output has promised the cut: all its results below it are out."""
        cut = self.emit_until_ms
        return cut is not None and all(self._emitted.get(box, -1) >= cut
                                       for box in self.wiring.outputs)

    @property
    def newest_promise_ms(self) -> int | None:
        """The largest stime its outputs' boundaries have promised (a standby's too)."""
        return max(self._emitted.values(), default=None)

    def close(self) -> None:
        """Nothing more is written, not even an idle query's boundaries or its DPC record
        (which the node may be rewriting for a roll-back)."""
        with self.lock:
            self._halted = True
        for output in self.outputs:
            output.close()
        for producer in self._dead_letter_producers.values():
            producer.flush(10)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        def write() -> None:
            run_jobs_in(batch.sparkSession, PREPARING if self.standby else SERVING,
                        rebuilding=self.rebuilding, query=self.query_key)
            self._write_batch(batch, batch_id)

        # Nothing of a batch begun after ``halt`` is written and Spark does not commit it,
        # so the fragment's next runner replays it from the same offsets and state.
        self._write_once(batch_id, write, f"batch {batch_id} is left to its next runner")

    def _write_once(self, batch_id: int, write: Callable[[], None], left: str) -> None:
        """Runs ``write`` for one batch unless the writer was halted (``left`` says what
        the next runner gets then), and notes the batch as written."""
        # Held for the whole batch: ``halt`` waits for a batch being written to finish.
        with self.lock:
            if self._halted:
                raise FragmentHaltedError(
                    f"fragment {self.wiring.global_name} is handing over; {left}")
            try:
                write()
            except Exception as error:
                self.error = error
                raise
            self.last_written = batch_id
            self.batches += 1
        if self.on_batch is not None:
            self.on_batch(self.wiring.global_name, batch_id)

    # -- one batch --------------------------------------------------------------------------

    def _encoded(self, batch: DataFrame) -> pa.Table:
        """One Spark job: every output's values encoded, plus the control rows' columns."""
        columns = tuple(batch.columns)
        if self._encoding is None or self._encoding[0] != columns:
            # Built once: dozens of calls into the JVM, tens of ms a batch at a low rate.
            self._encoding = (columns, encoded_columns(
                self.wiring, columns, F.unix_millis(F.current_timestamp())))
        return batch.select(*self._encoding[1]).toArrow()

    def write_table(self, table: pa.Table, batch_id: int, began: float | None = None) -> None:
        """Writes rows already encoded (``encoded_columns``) as one batch, as ``__call__``
        does a micro-batch's: the relay of a real-time fragment (see ``realtime``)."""
        started = began or time.perf_counter()
        self._write_once(batch_id, lambda: self._write_table(table, batch_id, started),
                         f"its rows from offset {batch_id} on are left to its next runner")

    def _write_batch(self, batch: DataFrame, batch_id: int) -> None:
        began = time.perf_counter()
        # Read before the batch's job runs: the hold is lifted in the JVM first.
        self._batch_held = self.eviction_held
        self._write_table(self._encoded(batch), batch_id, began)

    def _write_table(self, table: pa.Table, batch_id: int, began: float) -> None:
        # Its pass builds a few small objects per result, none in a cycle (``gc_pauses``).
        with collector_held_off():
            self._write_rows(table, batch_id, began)

    def _write_rows(self, table: pa.Table, batch_id: int, began: float) -> None:
        encoded = time.perf_counter()
        in_stream = self.in_stream
        if in_stream:
            table = self._reconcile_in_stream(table)
            redo = None
        else:
            redo = self._dpc_before(table, batch_id)
        tentative = self._tentative_epoch is not None and not in_stream
        outputs, types, ids, stimes, keys, values, traces = (
            _objects(table, name) for name in (OUTPUT, TYPE, ID, STIME, KEY, "value", TRACE))
        topics = {box: output.stream.topic for box, output in self.wiring.outputs.items()}
        owned = {box: output.owned for box, output in self.wiring.outputs.items()
                 if output.owned is not None}
        started_ns = time.time_ns()
        records: list[OutRecord] = []
        append = records.append
        newest: int | None = None
        invalid_rows: list[int] = []
        stray = 0
        rows = zip(outputs, types, ids, stimes, keys, values, traces, strict=True)
        emit_from, emit_until = self.emit_from_ms, self.emit_until_ms
        # One pass in plain Python per result: kept to the minimum (header values as str,
        # which the producer encodes; no per-row lookups beyond the topic).
        for row, (box, kind, tuple_id, stime, key, value, parent) in enumerate(rows):
            if box is None:
                if kind == BOUNDARY and stime is not None:
                    newest = max(int(stime), newest or 0)
                elif kind == INVALID:
                    invalid_rows.append(row)
                continue
            if stime is not None and (emit_from is not None or emit_until is not None):
                at = int(stime)
                if (emit_from is not None and at < emit_from) or \
                        (emit_until is not None and at >= emit_until):
                    continue
            if tentative:
                kind = _TENTATIVE
            elif kind == _TENTATIVE and not in_stream:
                # Outside a failure period nothing the query reads is tentative: this one
                # comes from state older than the last reconciliation, its window already
                # written stable; written, it would be a tentative result no UNDO follows.
                stray += 1
                continue
            key_bytes = None if key is None else key.encode()
            record = OutRecord(topics[box], tuple_id, value,
                               [(_TYPE_KEY, kind), (_ID_KEY, tuple_id), (_STIME_KEY, stime)],
                               key_bytes, _owned_partition(owned[box], key_bytes or tuple_id)
                               if owned and box in owned else None,
                               tentative=kind == _TENTATIVE)
            if parent:
                record = self._traced(record, box, parent, started_ns, batch_id)
            append(record)
        if invalid_rows:
            self._dead_letters(table, invalid_rows)
        if stray:
            self.stray_tentative += stray
            log.warning("%s: batch %d: %d tentative result(s) outside any failure period left "
                        "out (state older than the last reconciliation)",
                        self.wiring.global_name, batch_id, stray)
        if newest is not None and (self._newest_boundary is None
                                   or newest > self._newest_boundary):
            self._newest_boundary = newest
        records += self._boundaries()
        self._seen_boundaries.append(self._newest_boundary)
        if self.dpc.reconciling and redo == self.dpc.skip_epoch and newest is not None:
            self.dpc.redo_through = max(newest, self.dpc.redo_through or 0)
            self._save_dpc()
        undo = self.dpc.reconciling and not self._undo_written
        if undo:
            records[:0] = self._marks(TupleType.UNDO)
        # Every output, even with nothing to write: a batch opens (and fences) its outputs.
        committed_before = self._transaction_commit_ms()
        writing = time.perf_counter()
        self.results_written += self._write_then_rec_done(records, every_output=True)
        written = time.perf_counter()
        commit_ms = self._transaction_commit_ms() - committed_before
        self.recent_times.add(WriterTimes(
            batch_id, (encoded - began) * 1000, (writing - encoded) * 1000,
            max(0.0, (written - writing) * 1000 - commit_ms), commit_ms))
        through = None if self.standby else _newest_result(table, emit_from, emit_until)
        if through is not None and (self._written_through_ms is None or
                                    through > self._written_through_ms):
            self._written_through_ms = through
        if tentative or in_stream:
            self.tentative_written += sum(record.tentative for record in records)
        self._undo_written = self._undo_written or undo

    # -- DPC --------------------------------------------------------------------------------

    def _dpc_before(self, table: pa.Table, batch_id: int) -> int | None:
        """Reads the batch's DPC marks before anything of it is written (see
        ``DpcRecord.read_batch``). Returns the REDO seen, if any."""
        redo = _largest(table, REDO)
        dpc = self.dpc
        if redo is not None and redo > dpc.skip_epoch:
            request = ReconcileRequired(self.wiring.global_name, redo, batch_id)
            if self.redo_requested is None or self.redo_requested.epoch < redo:
                dpc.redo_traceparent = redo_traceparent(table, redo)
                self._save_dpc()  # the roll-back and the redoing query join that trace
                self.redo_requested = request
            if self.standby:
                raise request  # a standby writes nothing: it stops, rolls back, restarts
            # Otherwise the query writes on, tentative, while a query that redoes the
            # period runs beside it (see ``reconcile``); it never reads the REDO's tuples.
        self._keep_redo_trace(table, redo)
        if dpc.read_batch(batch_id, _largest(table, EPOCH)):
            self._save_dpc()
        self._tentative_epoch = self.dpc.tentative_in(batch_id)
        return redo

    def _reconcile_in_stream(self, table: pa.Table) -> pa.Table:
        """A relayed batch's DPC marks (see the module's doc): starts the reconciliation
        of a REDO not yet redone, notes how far its boundaries went and whether a stable
        one came past them, sets whether the outputs' promises are tentative; returns the
        rows less the tentative results the REDO supersedes."""
        dpc = self.dpc
        redo = _largest(table, REDO)
        if redo is not None and redo > dpc.skip_epoch:
            dpc.skip_epoch, dpc.redo_through = redo, None
            dpc.redo_traceparent = redo_traceparent(table, redo)
            self._undo_written = False
            self._started_ns = time.time_ns()  # the REC_DONE span's start
            self._save_dpc()
        else:  # seen first on a tuple, now perhaps on its BOUNDARY
            self._keep_redo_trace(table, redo)
        if dpc.reconciling and redo is not None:
            # How far the REDO went, from its tuples as well as its boundaries: a stable
            # BOUNDARY past that comes after all of it (one before it, below its first
            # bucket). Kept, so that a restart in the middle still knows.
            redone = table.filter(pc.equal(table.column(REDO), dpc.skip_epoch))
            newest = pc.max(pc.cast(redone.column(STIME), pa.int64())).as_py() \
                if redone.num_rows else None
            if newest is not None and (dpc.redo_through is None or newest > dpc.redo_through):
                dpc.redo_through = newest
                self._save_dpc()
        control = table.filter(pc.and_(pc.is_null(table.column(OUTPUT)),
                                       pc.equal(table.column(TYPE), BOUNDARY)))
        for mark, epoch, stime in zip(*(control.column(c).to_pylist()
                                        for c in (REDO, EPOCH, STIME)), strict=True):
            if mark is not None:
                continue
            # A period reconciled already is read again only by a restarted query.
            self._tentative_epoch = epoch if epoch is None or epoch > dpc.rec_done_epoch \
                else None
            if dpc.reconciling and epoch is None and dpc.redo_through is not None and \
                    stime is not None and int(stime) > dpc.redo_through:
                self._redo_passed = True
        if dpc.skip_epoch <= 0:
            return table
        superseded = pc.and_(pc.equal(table.column(TYPE), _TENTATIVE),
                             pc.less_equal(table.column(EPOCH), dpc.skip_epoch))
        superseded = pc.fill_null(superseded, False)
        dropped = pc.sum(superseded).as_py() or 0
        if not dropped:
            return table
        self.superseded_tentative += dropped
        return table.filter(pc.invert(superseded))

    def _keep_redo_trace(self, table: pa.Table, redo: int | None) -> None:
        """Keeps the traceparent of the REDO being redone, once a batch carries it (on its
        BOUNDARY records): the REC_DONE span joins that trace."""
        dpc = self.dpc
        if redo is not None and redo == dpc.skip_epoch and dpc.reconciling and \
                dpc.redo_traceparent is None:
            dpc.redo_traceparent = redo_traceparent(table, redo)
            self._save_dpc()

    def _rec_done_due(self) -> bool:
        """REC_DONE goes out once every output has promised the REDO's boundary (less its
        reach behind windows and joins): all the corrections are written before it. In the
        stream, once a stable BOUNDARY past the REDO's has been released."""
        through = self.dpc.redo_through
        if not self.dpc.reconciling or through is None:
            return False
        if self.in_stream:
            return self._redo_passed
        return all(self._emitted.get(box, -1) >= through - (self._lag_ms[box] or 0)
                   for box in self.wiring.outputs)

    def _write_then_rec_done(self, records: list[OutRecord], every_output: bool = False) -> int:
        """Writes the records (see ``_write``), with REC_DONE after them once it is due."""
        rec_done = self._rec_done_due()
        written = self._write([*records, *self._marks(TupleType.REC_DONE)] if rec_done
                              else records, every_output)
        if rec_done:
            self._trace_rec_done()
            self.dpc.rec_done()
            self._save_dpc()
            if self.in_stream:
                self._redo_passed = False
                self.reconciled_in_stream += 1
        return written

    def _trace_rec_done(self) -> None:
        """The reconciliation's last stage, in the trace of the period it corrects: from
        the query's restart until its REC_DONE is written."""
        dpc = self.dpc
        attributes: dict[str, str | int] = {"medusa.fragment": self.wiring.global_name,
                                            "medusa.dpc.epoch": dpc.skip_epoch}
        if dpc.rolled_back_batches is not None:
            attributes["medusa.dpc.rolled_back_batches"] = dpc.rolled_back_batches
        if self.standby:  # written when it takes over
            self._rec_done_untraced = (dpc.redo_traceparent, attributes)
            return
        self._span_rec_done(dpc.redo_traceparent, attributes)

    def _span_rec_done(self, parent: str | None, attributes: dict[str, str | int]) -> None:
        trace.get_tracer("medusa").start_span(
            f"REC_DONE {self.wiring.global_name}", context=context_of(parent),
            start_time=self._started_ns, attributes=attributes).end()

    def _marks(self, kind: TupleType) -> list[OutRecord]:
        """An UNDO (back to the last stable tuple) or a REC_DONE on every output partition.

        Their ids name the period by its number and by the SUnion that numbered it: a
        reader-side replica's SUnion numbers its own periods, so its UNDO of period 1 and
        its primary's are two marks, and the output's tuple-id deduplication must not drop
        the second (the tentative results written before it would stay)."""
        epoch = f"{self.dpc.skip_epoch}@{self._epochs_numbered_by}"
        records = []
        for box, output in self.wiring.outputs.items():
            for partition in partitions_of(output):
                envelope = Envelope(kind, f"{self.wiring.global_name}/{box}/{kind.value.lower()}"
                                          f"/{epoch}/{partition}",
                                    max(self._emitted.get(box, 0), 0))
                records.append(OutRecord(output.stream.topic, envelope.tuple_id, None,
                                         envelope.headers(), partition=partition))
        return records

    @property
    def _epochs_numbered_by(self) -> str:
        """The SUnion whose periods ``skip_epoch`` counts: its topic on its cluster."""
        source = self.wiring.source
        return f"{zlib.crc32(f'{source.bootstrap}/{source.topic}'.encode()):08x}"

    def _save_dpc(self) -> None:
        if self.checkpoint:
            self.dpc.save(self.checkpoint)

    @property
    def dpc_state(self) -> str:
        """The fragment's DPC state as its results show it."""
        if self.dpc.reconciling:
            return "STABILIZATION"
        return "UP_FAILURE" if self._tentative_epoch is not None else "STABLE"

    def _boundaries(self) -> list[OutRecord]:
        """The BOUNDARY each output can promise after this batch (see the module's doc)."""
        newest, two_back = self._newest_boundary, self._seen_boundaries[-2]
        records = []
        for box in self.wiring.outputs:
            lag = self._lag_ms[box]
            base = newest if lag is None else two_back
            if base is None or (lag is not None and self._batch_held):
                continue
            records += self._promise(box, base - (lag or 0))
        return records

    def _promise(self, box: str, promise: int) -> list[OutRecord]:
        """A BOUNDARY at ``promise`` on every partition of the box's output, unless it
        promised as much already (nor past a scale step's cut)."""
        output = self.wiring.outputs[box]
        if self.emit_until_ms is not None:
            promise = min(promise, self.emit_until_ms)
        if self.promise_hold_ms is not None and output.owned is not None:
            promise = min(promise, self.promise_hold_ms)
        if promise <= self._emitted.get(box, -1):
            return []
        self._emitted[box] = promise
        epoch = self._tentative_epoch
        source = f"{self.wiring.global_name}/{box}"
        extra: list[tuple[str, str | bytes | None]] = []
        if epoch is not None:  # a promise about tentative results only
            source += f"/tentative/{epoch}"
            extra.append((TENTATIVE_HEADER, str(epoch)))
        records = []
        for partition in partitions_of(output):
            envelope = boundary(source, partition, promise)
            records.append(OutRecord(output.stream.topic, envelope.tuple_id, None,
                                     envelope.headers(extra), partition=partition,
                                     tentative=epoch is not None))
        return records

    def _write(self, records: list[OutRecord], every_output: bool = False) -> int:
        """Each record through the SOutput of its topic's cluster, one transaction per
        output (and an empty one for outputs without records when ``every_output``);
        returns how many were written."""
        if len(self.outputs) == 1:  # most fragments: no record to sort
            (output,) = self.outputs
            return output.write(records) if records or every_output else 0
        by_output: dict[int, list[OutRecord]] = {}
        for record in records:
            by_output.setdefault(id(self._output_of_topic[record.topic]), []).append(record)
        return sum(output.write(by_output.get(id(output), [])) for output in self.outputs
                   if every_output or id(output) in by_output)

    def _transaction_commit_ms(self) -> float:
        """The outputs' transaction commits so far, summed (sinks that do not time theirs
        count none: their writes count as handing the records over)."""
        return sum(stats.transaction_commit_ms for output in self.outputs
                   if (stats := getattr(output, "stats", None)) is not None)

    def write_idle_boundaries(self, watermark_ms: int | None) -> int:
        """Promises what an idle query has passed (see the module's doc); call it only when
        no batch runs and every reader of the source is at its end. ``watermark_ms`` is
        the watermark the last batch ran with. Returns the boundaries written."""
        with self.lock:
            newest = self._newest_boundary
            if self._halted or self.standby or newest is None:
                return 0
            records = []
            for box in self.wiring.outputs:
                lag = self._lag_ms[box]
                if lag is None:
                    promise = newest
                elif watermark_ms is None:
                    continue
                else:
                    promise = min(newest, watermark_ms + duration_ms(SOURCE_DELAY)) - lag
                records += self._promise(box, promise)
            self._write_then_rec_done(records)
            return len(records)

    def _dead_letters(self, table: pa.Table, rows: list[int]) -> None:
        raw = table.column(RAW).to_pylist()
        raw_headers = table.column(RAW_HEADERS).to_pylist()
        reasons = table.column(REASON).to_pylist()
        sources = table.column(SOURCE).to_pylist()
        by_bootstrap: dict[str, list[dead_letters.DeadLetter]] = {}
        bootstrap_of = {s.topic: s.bootstrap for s in self.wiring.inputs.values()}
        for row in rows:
            headers = [(h["key"], h["value"]) for h in (raw_headers[row] or [])]
            letter = dead_letters.DeadLetter(sources[row], reasons[row] or "unusable record",
                                             raw[row], headers=headers,
                                             box=self.wiring.global_name)
            bootstrap = bootstrap_of.get(sources[row], self.wiring.source.bootstrap)
            by_bootstrap.setdefault(bootstrap, []).append(letter)
        for bootstrap, letters in by_bootstrap.items():
            producer = self._dead_letter_producers.get(bootstrap)
            if producer is None:
                producer = Producer(kafka_config(bootstrap, **{"enable.idempotence": True}))
                self._dead_letter_producers[bootstrap] = producer
            dead_letters.send(producer, letters)

    def _traced(self, record: OutRecord, box: str, parent: str, started_ns: int,
                batch_id: int) -> OutRecord:
        """A sampled tuple: a span for the box, whose context rides on to the next."""
        span = trace.get_tracer("medusa").start_span(
            f"box {box}", context=context_of(parent), start_time=started_ns,
            attributes={"medusa.id": record.tuple_id, "medusa.box": box,
                        "medusa.fragment": self.wiring.global_name, "medusa.batch": batch_id})
        span.end()
        own = traceparent(span)
        if own is None:
            return record
        headers = [(k, v) for k, v in record.headers if k != TRACEPARENT_HEADER]
        headers.append((TRACEPARENT_HEADER, own.encode()))
        return OutRecord(record.topic, record.tuple_id, record.value, headers, record.key,
                         record.partition)


ENCODED_EXTRAS = (RAW, RAW_HEADERS, REASON, SOURCE, EPOCH, REDO)
"""The control rows' columns beside a result's (null on results)."""


def encoded_columns(wiring: FragmentWiring, columns: Sequence[str], now: Column
                    ) -> list[Column]:
    """A fragment's rows as the writer takes them: each output's value encoded (Avro in
    the wire format, ``emit_time`` stamped with ``now``, epoch milliseconds), the envelope,
    and the control rows' columns (``ENCODED_EXTRAS``)."""
    value: Any = F.lit(None).cast("binary")
    for box, output in wiring.outputs.items():
        fields = output.fields.fieldNames()
        struct = F.col(packed(box))
        if EMIT_TIME in fields:
            struct = struct.withField(EMIT_TIME, now)
        encoded = F.concat(F.lit(wire_prefix(output.stream.schema_id)),
                           to_avro(struct, output.stream.schema))
        value = F.when(F.col(OUTPUT) == box, encoded).otherwise(value)
    # The stime as text, as its header carries it (and no column of numbers with nulls,
    # which would come out of Arrow as floats).
    selected = [F.col(OUTPUT), F.col(TYPE), F.col(ID),
                F.unix_millis(F.col(STIME)).cast("string").alias(STIME), F.col(KEY),
                value.alias("value"), F.col(TRACE)]
    selected += [F.col(c) if c in columns else
                 F.lit(None).cast("int" if c in (EPOCH, REDO) else "string").alias(c)
                 for c in ENCODED_EXTRAS]
    return selected


def redo_traceparent(table: pa.Table, epoch: int) -> str | None:
    """The traceparent on a batch's BOUNDARY records of the REDO of ``epoch``, if any."""
    marked = table.filter(pc.and_(pc.equal(table.column(REDO), epoch),
                                  pc.is_valid(table.column(TRACE))))
    return str(marked.column(TRACE)[0].as_py()) if marked.num_rows else None


def _newest_result(table: pa.Table, emit_from: int | None, emit_until: int | None
                   ) -> int | None:
    """The largest stime of the batch's results that were written (within the bounds)."""
    stimes = pc.cast(table.filter(pc.is_valid(table.column(OUTPUT))).column(STIME), pa.int64())
    if emit_from is not None:
        stimes = stimes.filter(pc.greater_equal(stimes, emit_from))
    if emit_until is not None:
        stimes = stimes.filter(pc.less(stimes, emit_until))
    value = pc.max(stimes).as_py() if len(stimes) else None
    return None if value is None else int(value)


def _largest(table: pa.Table, name: str) -> int | None:
    """The largest value of an integer column (None when it is all null)."""
    value = pc.max(table.column(name)).as_py()
    return None if value is None else int(value)


def _objects(table: pa.Table, name: str) -> Any:
    """A column as Python objects (str, bytes or None), ten times faster than ``to_pylist``."""
    return table.column(name).to_numpy(zero_copy_only=False)


def partitions_of(output: FragmentOutput) -> Sequence[int]:
    """The partitions the writer promises on: all, or an instance's own (``owned``)."""
    return output.owned if output.owned is not None else range(output.partitions)


def _owned_partition(owned: tuple[int, ...], key: bytes | str) -> int:
    """One of an instance's own partitions for a result, the same on every replay."""
    data = key if isinstance(key, bytes) else key.encode()
    return owned[zlib.crc32(data) % len(owned)]
