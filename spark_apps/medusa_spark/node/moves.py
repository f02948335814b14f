"""Moves and takeovers: a fragment handed over to its new node, the standby replicas of
``ha: active`` fragments and warm moves and their promotion, the reader-side replicas
that serve an output cut off from its primary, and the takeover's trace up to the
first output."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from medusa.catalog.model import Entry, Kind
from medusa.reader_side import should_serve
from medusa.tracing import context_of
from medusa_spark.checkpoints import (
    delete_checkpoint,
    drop_uncommitted,
    last_committed_batch,
    sync_checkpoint,
)
from medusa_spark.fragment_run import (
    REPLICA_SUFFIX,
    FragmentRun,
    checkpoint_location,
    progress_time,
    start_fragment,
)
from medusa_spark.node.state import (
    CAUGHT_UP_RECORDS,
    HostedFragment,
    NodeState,
    PendingTakeover,
    caught_up,
    keeping_pace,
)
from medusa_spark.output_watch import OutputWatch
from medusa_spark.session import REBUILD_NICE, can_renice_back
from medusa_spark.thread_priority import this_thread_at

if TYPE_CHECKING:  # the hosting part owns this one and is given to it
    from medusa_spark.node.hosting import Hosting, NetworkPlan

OUTPUT_SWITCH_LIMIT_S = 20.0
"""A warm move hands its output over this long after its input whatever its replica's
batches do (one that stalls)."""
JUST_WRITTEN_S = 0.5
"""A warm move hands its output over within this long of a result the old node wrote."""
RESULT_WAIT_S = 8.0
"""How long after the input a warm move waits for the old node's next result, before it
hands the output over at its replica's next batch boundary instead (rarer results)."""
FIRST_BATCHES_REPORTED = 3
"""How many of a taken-over query's first batches the log breaks down."""
MOVE_TIMELINE_S = 60.0
"""How far back a warm move's two sides log their batches, at the switch."""
READER_SUFFIX = ".reader"
"""A reader-side replica's checkpoint: beside the one the fragment would have here."""

log = logging.getLogger("medusa.node")


class Moves:
    """Fragments arriving or leaving other than by a plain start: it starts and watches
    them through ``hosting``, which calls it in turn."""

    def __init__(self, node: NodeState, hosting: Hosting) -> None:
        self.node = node
        self._hosting = hosting

    def follow_replica(self, name: str, entry: Entry, network: NetworkPlan) -> None:
        """Runs the standby replica of an ``ha: active`` fragment or of a warm move: it
        computes, writes nothing.

        It reads the primary's SUnion topic, on the primary's cluster, so both see the
        same buckets; promoted, it starts a SUnion of its own that resumes that topic.
        A warm move onto another cluster (``across_clusters``) runs its own SUnion on this
        cluster from the start instead, resumed where the copied checkpoint stood.
        """
        hosted = self.node.hosted.get(name)
        primary = str(entry.spec["node"]).split("/")[0]
        own_input = self.across_clusters(entry)
        bootstrap = self.node.bootstrap if own_input else self.node.endpoints.bootstrap(primary)
        if hosted is not None:
            failure = hosted.run.failure()
            if not self._hosting.kept_through_redeploy(hosted, network, entry, bootstrap):
                self.abandon(name, "redeployed")
            elif failure is not None:
                # Started again on the next pass, from a new copy of the checkpoint.
                self.node.errors[name] = failure
                self.abandon(name, f"its replica failed: {failure}")
            elif entry.spec.get("warm_target") == self.node.global_name and \
                    not entry.spec.get("warm_ready") and caught_up(hosted.run) and \
                    keeping_pace(hosted) and (hosted.sunion is None or not hosted.own_input or
                     hosted.sunion.caught_up(CAUGHT_UP_RECORDS)):
                # It stays at the rebuild's priority until the input switch: at the
                # normal one from here, both nodes' batches ran at half speed for 7 to
                # 13 s, and the old node's output paused longest there (4.3 to 4.5 s).
                self._set_warm_ready(name)
                return
            else:
                return
        wiring = self._hosting.wiring(network, name, entry, bootstrap)
        mine = checkpoint_location(self.node.checkpoint_root, wiring) + REPLICA_SUFFIX
        source = entry.spec.get("checkpoint")
        warm = entry.spec.get("warm_target") == self.node.global_name
        # A warm move's copy yields to the queries serving here: walking a gigabyte's
        # thousand files at the normal priority slowed a serving batch from 0.85 to 1.5 s.
        with this_thread_at(REBUILD_NICE, warm and can_renice_back()):
            if warm and source:
                # A new copy for each warm move: an older one may be far behind, or diverged.
                delete_checkpoint(mine)
            if source and last_committed_batch(mine) is None:
                # Starts where the primary is, instead of replaying the inputs from the start.
                stats = sync_checkpoint(source, mine)
                drop_uncommitted(mine)  # copied while it ran: the batch in progress is replanned
                log.info("%s: %s: copied %s of its checkpoint for a replica",
                         self.node.global_name, name, stats)
        if own_input:
            # The copy goes on at the end of this cluster's SUnion topic, and the SUnion
            # here from the inputs' positions of the copy's last batch: both then compute
            # what the primary does, from the same inputs.
            resume = self._hosting.rebase(name, mine, wiring,
                                          self.node.endpoints.bootstrap(primary))
            sunion = self._hosting.start_sunion(name, wiring, resume, wait_for_go=True,
                                                rebuilding=warm)
            sunion.go()
            run = start_fragment(self.node.spark, network.plan, wiring, mine, standby=True,
                                 rebuild=warm, hold_eviction=warm)
        else:
            run = start_fragment(self.node.spark, network.plan, wiring, mine, standby=True,
                                 rebuild=warm, hold_eviction=warm)
            # Its SUnion is started and waits, to go at the takeover (the process's
            # start-up is then off the takeover's path, and niced beside a warm move's).
            sunion = self._hosting.start_sunion(name, wiring, wait_for_go=True,
                                                rebuilding=warm)
        with self.node.lock:
            self.node.hosted[name] = HostedFragment(name, network.version, run, time.time(),
                                                    sunion, own_input=own_input)
        log.info("%s: running the standby replica of %s%s", self.node.global_name, name,
                 (" to take it over (warm move from another cluster, with its own SUnion)"
                  if own_input else " to take it over (warm move)") if warm else "")
        if warm:
            return

        def ready(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None or spec.get("replica") != self.node.global_name:
                return None
            return {**spec, "replica_ready": True}
        self.node.catalog.update(Kind.FRAGMENTS, name, ready)

    def across_clusters(self, entry: Entry) -> bool:
        """Whether the fragment warms up here for a move from a node of another cluster."""
        return entry.spec.get("warm_target") == self.node.global_name and \
            self.node.endpoints.bootstrap(str(entry.spec["node"]).split("/")[0]) != \
            self.node.bootstrap

    def follow_reader(self, name: str, entry: Entry, network: NetworkPlan) -> None:
        """Runs the fragment's reader-side replica (``medusa.reader_side``): its own SUnion
        on this node's cluster and a standby query, which takes the output over when
        ``should_serve`` says the primary's output no longer reaches this side."""
        hosted = self.node.hosted.get(name)
        if hosted is not None and not hosted.reader:
            self.hand_over(name)  # it ran here as the fragment, which has moved on
            return
        if hosted is not None and not self._hosting.kept_through_redeploy(hosted, network, entry):
            self.abandon(name, "redeployed")
            hosted = None
        if hosted is None:
            wiring = self._hosting.wiring(network, name, entry)
            mine = checkpoint_location(self.node.checkpoint_root, wiring) + READER_SUFFIX
            sunion = self._hosting.start_sunion(name, wiring)
            run = start_fragment(self.node.spark, network.plan, wiring, mine, standby=True,
                                 rebuild=False)
            started = OutputWatch([o.stream.topic for o in wiring.outputs.values()
                                   if o.stream.bootstrap == self.node.bootstrap],
                                  self.node.bootstrap, f"{wiring.topic_prefix}{name}").start()
            with self.node.lock:
                self.node.hosted[name] = HostedFragment(name, network.version, run,
                                                        time.time(), sunion,
                                                        output_watch=started)
            log.info("%s: running the reader-side replica of %s (its primary runs on %s)",
                     self.node.global_name, name, entry.spec["node"])
            return
        self._hosting.watch(hosted, entry, network)
        watch = hosted.output_watch
        # A primary in STABILIZATION has every input back, so it reaches this side again:
        # its output is the reconciliation's, coming.
        if hosted.failed or watch is None or not hosted.run.standby or \
                self.node.hosted.get(name) is not hosted or entry.spec.get("phase") != "running" \
                or entry.spec.get("dpc_state") == "STABILIZATION" or \
                time.monotonic() < hosted.serve_after:
            return
        delay_s = (hosted.run.wiring.max_delay_ms or 0) / 1000
        if should_serve(watch.silent_s(), delay_s, hosted.run.writer.newest_promise_ms,
                        watch.newest_boundary_ms):
            self._serve(name, hosted, watch.silent_s())

    def _serve(self, name: str, hosted: HostedFragment, silent_s: float) -> None:
        """The reader-side replica takes the output over: fences the primary, writes what
        the output lacks (tentative results too, when an input is cut off here as well)."""
        with self.node.tracer.start_as_current_span(
                f"reader-side replica serves {name}", attributes={
                    "medusa.fragment": name, "medusa.node": self.node.global_name,
                    "medusa.output.silent_s": round(silent_s, 3)}):
            written = hosted.run.promote()
        self.set_serving(name, self.node.global_name)
        log.warning("%s: the output of %s was silent for %.1fs: its reader-side replica "
                    "serves it now (%d results caught up, DPC %s)", self.node.global_name, name,
                    silent_s, written, hosted.run.writer.dpc_state)

    def set_serving(self, name: str, serving: str | None) -> None:
        def change(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None or spec.get("reader_replica") != self.node.global_name or \
                    spec.get("serving") == serving:
                return None
            return {**spec, "serving": serving}
        self.node.catalog.update(Kind.FRAGMENTS, name, change)

    def _set_warm_ready(self, name: str) -> None:
        def ready(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None or spec.get("warm_target") != self.node.global_name:
                return None
            return {**spec, "warm_ready": True}
        self.node.catalog.update(Kind.FRAGMENTS, name, ready)
        log.info("%s: the replica of %s has caught up; ready to take it over",
                 self.node.global_name, name)

    def ready_to_take_over(self, hosted: HostedFragment) -> bool:
        """A warm move takes the input over first: the replica's SUnion goes (fencing the
        old node's, whose query reads the same topic and goes on writing); one from another
        cluster has its own SUnion running already. From then on the replica works off its
        lag at nice 5, or, held (``eviction_hold``), keeps pace at the normal priority
        (``FragmentRun.catch_up``). The output follows once a
        batch of the replica has read what the new SUnion released (it is current), just
        after the old node's next result (``JUST_WRITTEN_S``), or at once if it holds a
        result the old node has not written (a batch ahead). A replica whose eviction is
        held is released just after one result of the old node and takes over, once the
        batch it then ran held has ended, just after the next (or a batch ahead). Without
        a result of the old node within ``RESULT_WAIT_S``, at the replica's next batch
        boundary; at the latest ``OUTPUT_SWITCH_LIMIT_S`` after the input.

        Just after a result, the old node's next is furthest off: switched later, the old
        node's batch computing it was fenced and the replica computed it again from the
        start (at 1.6 GB the switch came 1.8 s after the old node's last result, and the
        output paused 3.6 s where it writes every 2 s). Niced until the switch, the
        replica lagged a batch of 4 to 6 s and worked it off after the switch (3.3 to
        4.8 s at the switch); caught up first, it took over 0.3 s beyond the normal gap,
        and the 5 to 6 s of catching up beside the old node slowed that node's batches
        from 1.0 to 1.7 s (the output paused 3.4 s there). Before the input switch the
        replica runs at a rebuild's priority: at the normal one from its readiness on,
        both nodes ran at half speed for 7 to 13 s."""
        sunion = hosted.sunion
        if sunion is None:
            return True
        if hosted.own_input:
            # Its SUnion has run here all along, on this cluster's topic: no input switch.
            if hosted.switch_asked_at is None:
                hosted.switch_asked_at = time.time()
                hosted.run.catch_up()
                log.info("%s: its replica is asked to take the output over (eviction %s)",
                         hosted.name, "held" if hosted.run.writer.eviction_held else "not held")
            running_since: float | None = hosted.switch_asked_at
        else:
            if sunion.went_at is None:
                sunion.follow_rebuild(False)  # it feeds the old node's query too from now on
                sunion.go()
                hosted.run.catch_up()
                log.info("%s: its replica takes the input over (eviction %s)", hosted.name,
                         "held" if hosted.run.writer.eviction_held else "not held")
                return False
            running_since = sunion.running_since()
        if running_since is None:
            return False
        waited_s = time.time() - running_since
        if waited_s > OUTPUT_SWITCH_LIMIT_S:
            hosted.switch_reason = f"at the limit, {waited_s:.1f}s after the input"
            return True
        progress: dict[str, Any] = hosted.run.query.lastProgress or {}
        if not self._held_batch_ended(hosted, progress):
            return False
        batch_started = progress_time(progress)
        fed = batch_started is not None and batch_started > running_since and \
            int(progress.get("numInputRows") or 0) > 0
        released = "" if hosted.released_at is None else \
            f", released {time.time() - hosted.released_at:.1f}s before"
        if fed and hosted.run.writer.is_ahead():
            hosted.switch_reason = f"a batch ahead, {waited_s:.1f}s after the input{released}"
            return True
        wrote_at = hosted.run.writer.primary_wrote_at()
        if fed and wrote_at is not None and time.time() - wrote_at <= JUST_WRITTEN_S and \
                (hosted.released_at is None or wrote_at > hosted.released_at):
            if hosted.run.writer.eviction_held:
                # Promoted here, a held batch in progress that had passed its scan emitted
                # nothing, and the windows came with the next (3.0 s at the switch, where
                # 1.9 to 2.2 s otherwise); released here and promoted once that batch had
                # ended, it fenced the old node just before its next result (4.1 s). So it
                # scans from here, and takes over just after the old node's next result.
                hosted.run.release_eviction()
                hosted.released_after_batch = int(progress.get("batchId", -1))
                hosted.released_at = time.time()
                log.info("%s: its replica's eviction released %.2fs after the old node's "
                         "result, %.1fs after the input (after batch %d)", hosted.name,
                         time.time() - wrote_at, waited_s, hosted.released_after_batch)
                return False
            hosted.switch_reason = (f"{time.time() - wrote_at:.2f}s after the old node's "
                                    f"result, {waited_s:.1f}s after the input{released}")
            return True
        if waited_s < RESULT_WAIT_S:
            return False
        if self._at_batch_boundary(hosted, progress):
            # Its next batch reads all the old node has, and runs without it once it is
            # fenced. Mid-batch, the rest of a batch whose results the old node had
            # mostly written came first (a 1.4 GB replica's take 3 s).
            hosted.switch_reason = (f"at a batch boundary, {waited_s:.1f}s after the "
                                    f"input{released}")
            return True
        return False

    @staticmethod
    def _held_batch_ended(hosted: HostedFragment, progress: dict[str, Any]) -> bool:
        """Whether a replica released for the switch has ended the batch it then ran
        held (or was between batches); true for one never released."""
        released = hosted.released_after_batch
        if released is None or int(progress.get("batchId", -1)) > released:
            return True
        status: dict[str, Any] = hosted.run.query.status or {}
        return not status.get("isTriggerActive", False)

    @staticmethod
    def _at_batch_boundary(hosted: HostedFragment, progress: dict[str, Any]) -> bool:
        """Whether the replica is between batches (a quiet input's too), or has ended one
        since it was first asked (its batches run back to back)."""
        batch = int(progress.get("batchId", -1))
        if hosted.switch_batch is None:
            hosted.switch_batch = batch
        if batch > hosted.switch_batch:
            return True
        status: dict[str, Any] = hosted.run.query.status or {}
        return not status.get("isTriggerActive", False)

    def promote(self, name: str, entry: Entry, hosted: HostedFragment, warm: bool) -> None:
        """The standby replica becomes the fragment: after its primary failed (``ha:
        active``), as soon as it is placed here (a warm move: its SUnion and outputs
        fence the old node's, which stops when it sees the move), or when a scale step
        switches over to its new instances (they write from the step's cut on)."""
        failover = context_of(entry.spec.get("takeover_trace"))
        kind = "warm move" if warm else "scale step" if hosted.warming else "active"
        takeover = self.node.tracer.start_span(f"takeover {name}", context=failover, attributes={
            "medusa.fragment": name, "medusa.node": self.node.global_name,
            "medusa.ha": kind,
            "medusa.failed_node": entry.spec.get("released_by") or ""})
        restored = last_committed_batch(hosted.run.checkpoint)
        takeover.set_attribute("medusa.checkpoint.batch_restored",
                               -1 if restored is None else restored)
        for output in hosted.run.writer.outputs:
            if hasattr(output, "trace_context"):
                output.trace_context = trace.set_span_in_context(takeover)
        pending = PendingTakeover(takeover, time.time_ns())
        started = time.monotonic()
        # The inputs go on where the old primary's SUnion stopped, into the same topic.
        if hosted.sunion is not None:
            hosted.sunion.follow_rebuild(False)
            hosted.sunion.go()
        else:
            hosted.sunion = self._hosting.start_sunion(name, hosted.run.wiring)
        emit_from = (entry.spec.get("instance") or {}).get("emit_from_ms") \
            if hosted.warming else None
        hosted.run.writer.promise_hold_ms = entry.spec.get("promise_hold_ms")
        caught_up = hosted.run.promote(emit_from)
        hosted.warming = False
        promoted_s = time.monotonic() - started
        takeover.set_attribute("medusa.replica.results_caught_up", caught_up)
        hosted.takeover = pending
        self.trace_first_output(hosted.run, pending)
        stats = output_stats(hosted.run)
        log.info("%s: promoted the replica of %s (%s%s) in %.2fs (fencing %.2fs, reading "
                 "back %d ids %.2fs); it wrote %d results the primary had not",
                 self.node.global_name, name, kind,
                 f": {hosted.switch_reason}" if warm and hosted.switch_reason else "",
                 promoted_s, sum(s.fence_s or 0 for s in stats),
                 sum(s.recovered_ids for s in stats), sum(s.read_back_s or 0 for s in stats),
                 caught_up)
        if warm:
            log.info("%s: %s's replica's batches before its promotion: %s",
                     self.node.global_name, name, recent_batches(hosted.run, MOVE_TIMELINE_S))
        self._hosting.mark_running(name, hosted.run.checkpoint)

    def trace_first_output(self, run: FragmentRun, takeover: PendingTakeover) -> None:
        """Ends the takeover span with a child at the fragment's first result after recovery."""
        context = trace.set_span_in_context(takeover.span)
        lock = threading.Lock()

        def first(count: int) -> None:
            with lock:
                if takeover.ended.is_set():
                    return
                takeover.ended.set()
            self.node.tracer.start_span("first output", context=context,
                                        start_time=takeover.started_ns,
                                        attributes={"medusa.results": count}).end()
            takeover.span.end()
        for output in run.writer.outputs:
            if hasattr(output, "trace_context"):
                output.trace_context = context
            stats = getattr(output, "stats", None)
            if stats is None:
                continue
            if stats.first_write_at is not None and not run.standby:
                first(0)
            else:
                stats.first_write_listeners.append(first)

    def report_first_batches(self, hosted: HostedFragment) -> bool:
        """Logs where the time of a taken-over query's first batches went, by Spark's
        phases (a passive takeover's start, the checkpoint's restore and the catch-up are
        in them; a promoted replica's are those that ended after its promotion), once the
        first batch with input is done; says whether it has."""
        since_s = hosted.takeover.started_ns / 1e9 if hosted.takeover is not None else 0.0
        done = [detail for detail in (json.loads(p.json) for p in
                                      list(hosted.run.query.recentProgress))
                if (progress_time(detail) or 0.0) + int(detail.get("batchDuration") or 0) / 1000
                >= since_s][:FIRST_BATCHES_REPORTED]
        if len(done) < FIRST_BATCHES_REPORTED and \
                not any(int(d.get("numInputRows") or 0) > 0 for d in done):
            return False
        batches = []
        for detail in done:
            phases = detail.get("durationMs") or {}
            shown = ", ".join(f"{phase} {ms}" for phase, ms in sorted(
                phases.items(), key=lambda item: -int(item[1])) if phase != "triggerExecution")
            batches.append(f"batch {detail.get('batchId')}: {phases.get('triggerExecution')} ms "
                           f"for {detail.get('numInputRows')} rows ({shown}"
                           f"{state_load(detail)})")
        stats = output_stats(hosted.run)
        opened = ", ".join(f"fencing {s.fence_s * 1000:.0f}, reading back {s.recovered_ids} ids "
                           f"{(s.read_back_s or 0) * 1000:.0f}" for s in stats
                           if s.fence_s is not None)
        log.info("%s: %s after its takeover, in ms: %s%s", self.node.global_name, hosted.name,
                 "; ".join(batches), f"; its outputs opened in the first: {opened}" if opened
                 else "")
        return True

    def take_back(self, hosted: HostedFragment) -> None:
        """The primary, caught up and stable beside its serving reader-side replica, writes
        the output again: the promotion fences the replica, and what the replica wrote
        already is dropped by tuple id."""
        with self.node.tracer.start_as_current_span(f"takes output back {hosted.name}", attributes={
                "medusa.fragment": hosted.name, "medusa.node": self.node.global_name}):
            written = hosted.run.promote()
        hosted.yielded = False
        self._served_by_primary(hosted.name)
        log.info("%s: %s is caught up and stable: it writes its output again (%d results "
                 "the reader-side replica had not)", self.node.global_name, hosted.name, written)

    def _served_by_primary(self, name: str) -> None:
        """The catalog says the primary serves again. The replica, fenced, says so too once
        it next writes; with the input over it may never write again."""
        def change(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None or spec.get("node") != self.node.global_name or \
                    spec.get("serving") is None:
                return None
            return {**spec, "serving": None}
        self.node.catalog.update(Kind.FRAGMENTS, name, change)

    def abandon(self, name: str, why: str) -> None:
        """Stops a fragment without releasing it: another node writes its outputs."""
        with self.node.lock:
            hosted = self.node.hosted.pop(name)
        if hosted.output_watch is not None:
            hosted.output_watch.stop()
        stop_redo(hosted)
        hosted.run.abandon()
        if hosted.sunion is not None:
            hosted.sunion.stop()
        log.info("%s: stopped %s: %s", self.node.global_name, name, why)

    def hand_over(self, name: str, keep_placement: bool = False, at_once: bool = False,
                  moved: bool = True) -> None:
        """Stops a fragment placed elsewhere and releases it to its new node: at a batch
        boundary, so that the checkpoint holds what was written; or ``at_once`` when a
        replica that has computed the same batches takes it over (a warm move)."""
        with self.node.lock:
            hosted = self.node.hosted.pop(name)
        started = time.monotonic()
        # Its next node redoes the period again, from the checkpoint released to it.
        stop_redo(hosted)
        if at_once:
            # Nothing more is written from here; the replica may take over at once, while
            # the query and the SUnion stop (the replica's SUnion fences this one). Its
            # batch in progress, fenced, leaves the CPU to the replica's first.
            hosted.run.give_way()
            hosted.run.writer.halt()
            self._release(name, hosted)
            hosted.run.abandon()
        elif hosted.run.query.isActive:
            # A real-time fragment placed on another node writes what it staged first (a
            # withdrawn one's outputs may be gone already; a redeployed one stays here).
            hosted.run.hand_over(drain=moved and not keep_placement)
        else:
            hosted.run.writer.close()
        if hosted.sunion is not None:
            hosted.sunion.stop()
        if at_once:
            log.info("%s: %s's last batches here: %s", self.node.global_name, name,
                     recent_batches(hosted.run, MOVE_TIMELINE_S))
        log.info("%s: stopped %s %s in %.1fs", self.node.global_name, name,
                 "for its warm replica" if at_once else "at a batch boundary",
                 time.monotonic() - started)
        if not keep_placement and not at_once:
            self._release(name, hosted)

    def _release(self, name: str, hosted: HostedFragment) -> None:
        """Tells the fragment's new node it may go on: ``released``, with the checkpoint."""
        def released(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None or spec.get("node") == self.node.global_name or \
                    spec.get("phase") != "moving":
                return None  # withdrawn, placed back here, or taken over by another node
            return {**spec, "phase": "released", "checkpoint": hosted.run.checkpoint,
                    "released_by": self.node.global_name}
        self.node.catalog.update(Kind.FRAGMENTS, name, released)


def state_load(progress: dict[str, Any]) -> str:
    """What loading a batch's RocksDB state took, summed over its state stores (Spark's
    custom metrics): the changelogs replayed and the bytes copied from the checkpoint;
    empty when it did neither. (Spark's own load latency is left out: it said 6 ms for a
    first batch that copied 1 GB.)"""
    metrics = [op.get("customMetrics") or {} for op in progress.get("stateOperators", [])]
    replayed = _summed(metrics, "rocksdbNumReplayChangelogFiles")
    copied = _summed(metrics, "rocksdbBytesCopied")
    if not replayed and not copied:
        return ""
    return (f"; state: {replayed} changelog(s) replayed in "
            f"{_summed(metrics, 'rocksdbReplayChangeLogLatencyMs')} ms, {copied / 1e6:.0f} MB "
            "copied from the checkpoint")


def _summed(rows: list[dict[str, Any]], key: str) -> int:
    """``key`` summed over a batch's state operators (or their custom metrics)."""
    return sum(int(row.get(key) or 0) for row in rows)


def recent_batches(run: FragmentRun, within_s: float) -> str:
    """The query's batches that started in the last ``within_s``: start (wall clock),
    duration and rows (and where its state operators' time went), to lay the two sides of
    a warm move side by side."""
    since = time.time() - within_s
    shown = []
    for progress in run.query.recentProgress:
        detail = json.loads(progress.json)
        started = progress_time(detail)
        if started is None or started < since:
            continue
        operators = detail.get("stateOperators") or []
        addition = (f" (add {(detail.get('durationMs') or {}).get('addBatch')}: state update "
                    f"{_summed(operators, 'allUpdatesTimeMs')}, removal "
                    f"{_summed(operators, 'allRemovalsTimeMs')}, commit "
                    f"{_summed(operators, 'commitTimeMs')})") if operators else ""
        shown.append(f"{detail.get('batchId')} at {_clock(started)} "
                     f"{detail.get('batchDuration')} ms/{detail.get('numInputRows')} rows"
                     f"{addition}")
    return ", ".join(shown) or "none"


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at)) + f".{int(at * 1000) % 1000:03d}"


def stop_redo(hosted: HostedFragment) -> bool:
    """A query redoing an UP_FAILURE period beside the fragment's (``Hosting``) goes with it;
    says whether there was one."""
    redo, hosted.redo = hosted.redo, None
    if redo is None:
        return False
    redo.abandon()
    delete_checkpoint(redo.checkpoint)
    return True


def output_stats(run: FragmentRun) -> list[Any]:
    """The figures (``soutput.OutputStats``) of a run's outputs that keep them: how each
    opened, what it wrote."""
    return [o.stats for o in run.writer.outputs if hasattr(o, "stats")]
