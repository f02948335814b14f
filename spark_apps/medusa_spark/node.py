"""A Medusa node: one long-lived SparkSession hosting the fragments the catalog places on it.

The node registers itself in the catalog and then follows it: every second it
reads the fragments placed on it and starts the ones it does not run, and hands
over the ones placed elsewhere. Each hosted fragment is two things: its SUnion,
a process of its own that merges the fragment's inputs bucket by bucket into one
topic on this node's cluster, and its Spark query, which reads that topic and
writes the fragment's outputs through one SOutput transaction per micro-batch.

A fragment placed elsewhere is handed over: the node stops its query at a batch
boundary and marks it ``released`` with the location of its checkpoint; the new
node copies that checkpoint (most of it while the fragment still ran) and
resumes from it. A query that fails is restarted from its checkpoint, with
backoff, up to ``max_restarts`` times; its error goes to the catalog, where
``medusa status`` shows it, and past the limit the fragment is marked
``failed`` until it is redeployed, moved or taken over.

For high availability the node sends a heartbeat to ``medusa.heartbeats`` every
``heartbeat_interval_s``, from a thread of its own. When the failure detector
declares it failed, the detector places its fragments on other nodes; should
this node come back, it finds its incarnation marked ``failed``, stops every
fragment without writing (their outputs are fenced anyway, see ``soutput``) and
rejoins with a new incarnation and none. A node also runs the standby replicas
of ``ha: active`` fragments whose replica it is (reading the primary's SUnion
topic, writing nothing), and promotes one when the fragment is placed on it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from opentelemetry import trace
from py4j.protocol import Py4JError
from pyspark.sql import SparkSession

from medusa.access import explained
from medusa.catalog.client import CatalogError
from medusa.catalog.model import Entry, Kind
from medusa.endpoints import Endpoints
from medusa.errors import MedusaError
from medusa.load import DEFAULT_WINDOW_S, BatchSample, fragment_load, utilisation
from medusa.producing import TupleProducer
from medusa.reader_side import should_serve
from medusa.schemas import (
    HEARTBEAT_TOPIC,
    HEARTBEAT_TOPIC_CONFIG,
    NODE_LOAD_TOPIC,
    schema_for_topic,
)
from medusa.settings import StackSettings, kafka_config
from medusa.sunion.service import positions_before
from medusa.topics import ensure_topics
from medusa.tracing import context_of
from medusa_spark.checkpoints import (
    batch_offsets,
    batch_watermark_ms,
    delete_checkpoint,
    drop_uncommitted,
    is_local,
    last_committed_batch,
    read_resume,
    rebase_source,
    source_offsets,
    sync_checkpoint,
    write_resume,
)
from medusa_spark.fragment import FragmentWiring, Instance
from medusa_spark.fragment_run import (
    REPLICA_SUFFIX,
    FragmentRun,
    checkpoint_location,
    same_definition,
    start_fragment,
)
from medusa_spark.network.fragments import Fragment, fragment_delays, fragments_of
from medusa_spark.network.model import NetworkError, parse_network
from medusa_spark.network.validate import Plan, validate
from medusa_spark.output_watch import OutputWatch
from medusa_spark.reconcile import DpcRecord, ReconcileRequired, rollback
from medusa_spark.sunion_process import SUnionProcess
from medusa_spark.warmup import warm_up
from medusa_spark.wiring import NetworkTopics, fragment_wiring, network_topics

READER_SUFFIX = ".reader"
"""A reader-side replica's checkpoint: beside the one the fragment would have here."""
REFENCED_HOLD_S = 10.0
"""After its primary took the output back, a reader-side replica's restarted query replays
behind it (its tentative boundaries may run ahead of the output's): it serves again only
after this."""
URGENT_POLL_S = 0.1
"""How often a node reads the catalog while it takes part in a warm move."""
CAUGHT_UP_RECORDS = 1000
"""A replica this close to the end of its input takes a fragment over within a batch."""

log = logging.getLogger("medusa.node")

CatalogClient = Any  # medusa.catalog.client.CatalogClient, or an in-memory one in tests


@dataclass
class PendingTakeover:
    """A takeover's span, open until the fragment writes its first output after it."""

    span: Any
    started_ns: int
    ended: threading.Event = field(default_factory=threading.Event)


@dataclass
class HostedFragment:
    name: str
    """Global name: participant/network/fragment."""
    network_version: int
    run: FragmentRun
    started_at: float
    sunion: SUnionProcess | None = None
    """None on an HA standby replica: it reads the primary's SUnion topic. A warm move's
    replica has one started, waiting to go at the hand-over."""
    restarts: int = 0
    restart_at: float | None = None
    """When the failed query is started again (monotonic clock)."""
    failed: bool = False
    """Restarted too often: it waits for a redeploy, a move or a takeover."""
    rates: dict[str, float] = field(default_factory=dict)
    takeover: PendingTakeover | None = None
    """Set after a takeover until its first output; a restarted query takes it over."""
    reconciliations: int = 0
    dpc_state: str = "STABLE"
    """The DPC state last written to the catalog."""
    bottleneck_since: float | None = None
    """Since when (wall clock) it has not kept up with its input, without a break."""
    output_watch: OutputWatch | None = None
    """Set on a reader-side replica (``medusa.reader_side``): its output's silence."""
    serve_after: float = 0.0
    """A reader-side replica serves no sooner (monotonic clock): its primary took the
    output back, and the replica's own query restarts and replays behind it."""
    yielded: bool = False
    """Its reader-side replica took the output over: it runs as a standby until it has
    caught up and is stable, then takes the output back."""

    @property
    def reader(self) -> bool:
        return self.output_watch is not None


def fragment_of(entry: Entry) -> str:
    """The fragment's name in its network (an instance's is the fragment's it is one of)."""
    instance = entry.spec.get("instance")
    return str(instance["of"]) if instance else entry.name.rsplit("/", 1)[1]


def caught_up(run: FragmentRun) -> bool:
    """Whether a standby replica's query has restored its state and reads less than a
    batch behind the end of its input."""
    progress: dict[str, Any] = run.query.lastProgress or {}
    if not progress or run.failure() is not None:
        return False
    behind = 0
    for source in progress.get("sources", []):
        metrics = source.get("metrics") or {}
        behind = max(behind, int(float(metrics.get("maxOffsetsBehindLatest", 0) or 0)))
    return behind <= max(CAUGHT_UP_RECORDS, int(progress.get("numInputRows") or 0))


def dpc_state(hosted: HostedFragment, sunion_state: dict[str, Any] | None = None) -> str:
    """STABLE, UP_FAILURE or STABILIZATION, from the SUnion (is an input failed or
    tentative? are they all back?) and the query (are its results tentative? is it
    redoing?). ``sunion_state``: the SUnion's state when already read."""
    writer = hosted.run.writer.dpc_state
    if writer == "STABILIZATION":
        return writer
    if sunion_state is None:
        sunion_state = hosted.sunion.state() if hosted.sunion is not None else {}
    sunion = sunion_state.get("dpc_state")
    if sunion in ("UP_FAILURE", "STABILIZATION"):
        return str(sunion)
    # The SUnion wrote its REDO; the query has not reconciled yet.
    return "STABILIZATION" if writer == "UP_FAILURE" else "STABLE"


@dataclass
class NetworkPlan:
    version: int
    plan: Plan
    topics: NetworkTopics
    fragments: dict[str, Fragment]
    delays: dict[str, int | None]
    """DPC's delay D of each fragment (``fragment_delays``), once per network version."""
    wiring: dict[str, FragmentWiring] = field(default_factory=dict)


class Node:
    def __init__(self, name: str, participant: str, endpoints: Endpoints,
                 registry: SchemaRegistryClient, spark: SparkSession, checkpoint_root: str,
                 catalog: CatalogClient, secondary: str | None = None,
                 poll_interval_s: float = 1.0, metrics_interval_s: float = 5.0,
                 heartbeat_interval_s: float = 0.5, max_restarts: int = 5,
                 work_dir: Path | None = None, capacity: float | None = None,
                 load_window_s: float = DEFAULT_WINDOW_S) -> None:
        self.name = name
        self.participant = participant
        # Other participants' clusters through the links, so a cut link cuts this node off.
        self.endpoints = endpoints.seen_from(participant)
        self.registry = registry
        self.spark = spark
        self.checkpoint_root = checkpoint_root.rstrip("/")
        self.catalog = catalog
        self.secondary = secondary
        self.poll_interval_s = poll_interval_s
        self.metrics_interval_s = metrics_interval_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.max_restarts = max_restarts
        # Processing slots, in the unit of a fragment's load: measured as Spark's cores.
        self.capacity = capacity or float(spark.sparkContext.defaultParallelism)
        # Where its SparkSession's web UI answers (None: it runs without one).
        self.spark_ui: str | None = spark.sparkContext.uiWebUrl
        self.load_window_s = load_window_s
        self.work_dir = work_dir or StackSettings().run_dir / "nodes" / participant / name
        self.tracer = trace.get_tracer("medusa")
        self.hosted: dict[str, HostedFragment] = {}
        self.errors: dict[str, str] = {}
        self.incarnation = uuid.uuid4().hex
        self._plans: dict[str, NetworkPlan] = {}
        self._precopied: set[str] = set()
        self._urgent = False
        self._stop = threading.Event()
        self._lock = threading.Lock()

    @property
    def global_name(self) -> str:
        return f"{self.participant}/{self.name}"

    @property
    def bootstrap(self) -> str:
        return self.endpoints.bootstrap(self.participant)

    def register(self) -> Entry | None:
        """Adds this node to the catalog, or marks it up again with a new incarnation (and
        the URL of its Spark UI, whose port may differ from its last start's)."""
        def change(spec: dict[str, Any] | None) -> dict[str, Any]:
            return {**(spec or {}), "status": "up", "incarnation": self.incarnation,
                    "checkpoint_root": self.checkpoint_root,
                    "secondary": self.secondary or (spec or {}).get("secondary"),
                    "spark_ui": self.spark_ui}
        return self.catalog.update(Kind.NODES, self.global_name, change)

    # -- following the catalog ------------------------------------------------------------

    def reconcile(self) -> None:
        """One pass: start what is placed here, hand over what is placed elsewhere."""
        own = self.catalog.get(Kind.NODES, self.global_name)
        if own is not None and own.spec.get("status") == "failed" and \
                own.spec.get("incarnation") == self.incarnation:
            self._rejoin()
            return
        entries = self.catalog.list(Kind.FRAGMENTS)
        placed = {e.name: e for e in entries if e.spec["node"] == self.global_name}
        replicas = {e.name: e for e in entries if e.name not in placed and (
            (e.spec.get("replica") == self.global_name and e.spec.get("ha") == "active") or
            e.spec.get("warm_target") == self.global_name or
            e.spec.get("reader_replica") == self.global_name)}
        by_name = {e.name: e for e in entries}
        # During a warm move both nodes follow the catalog closely: the pause is theirs; so
        # does a reader-side replica whose output has gone quiet.
        self._urgent = any(by_name[n].spec.get("warm_ready") for n in self.hosted
                           if n in by_name) or any(
            h.output_watch.silent_s() > 1.0 for h in self.hosted.values()
            if h.output_watch is not None)
        for name in [n for n in self.hosted if n not in placed and n not in replicas]:
            gone = self.hosted[name]
            if (gone.run.standby and not gone.yielded) or gone.reader:
                self._abandon(name, "its replica is no longer placed here")
            else:
                moved = by_name.get(name)
                warm = moved is not None and moved.spec.get("warm_target") == moved.spec["node"]
                self._hand_over(name, at_once=warm)
        wanted = {**replicas, **placed}
        # Each network is read once a pass; one that cannot be read fails its fragments alone.
        networks: dict[str, NetworkPlan | Exception] = {}
        for network_name in {entry.spec["network"] for entry in wanted.values()}:
            try:
                members = [e for e in entries if e.spec["network"] == network_name]
                networks[network_name] = self._network(network_name, members)
            except (MedusaError, CatalogError, RuntimeError, ValueError) as error:
                networks[network_name] = error
        for name, entry in sorted(wanted.items()):
            try:
                network = networks[entry.spec["network"]]
                if isinstance(network, Exception):
                    raise network
                if name in placed and entry.spec.get("phase") in ("retiring", "retired"):
                    self._retire(name, entry)
                elif name in placed:
                    self._follow(name, entry, network)
                elif entry.spec.get("reader_replica") == self.global_name:
                    self._follow_reader(name, entry, network)
                else:
                    self._follow_replica(name, entry, network)
            except (MedusaError, CatalogError, RuntimeError, ValueError, Py4JError,
                    KafkaException) as error:
                # One fragment's failure (a JVM call included) is its own, not the node's.
                if self.errors.get(name) != str(error):
                    log.error("%s: fragment %s: %s", self.global_name, name, error)
                self.errors[name] = str(error)

    def _wiring(self, network: NetworkPlan, name: str, entry: Entry,
                bootstrap: str | None = None) -> FragmentWiring:
        short = fragment_of(entry)
        fragment = network.fragments.get(short)
        if fragment is None:
            raise NetworkError(f"network {entry.spec['network']} has no fragment {short!r}")
        spec = entry.spec.get("instance")
        instance = None if spec is None else Instance(
            spec["index"], spec["count"], spec["generation"], tuple(spec["key"]),
            spec["emit_from_ms"], {name: {int(p): o for p, o in offsets.items()}
                                   for name, offsets in spec["start_positions"].items()},
            bool(spec.get("by_partition")))
        return fragment_wiring(network.topics, entry.spec["network"], fragment,
                               bootstrap or self.bootstrap, network.delays[short], instance)

    def _follow(self, name: str, entry: Entry, network: NetworkPlan) -> None:
        hosted = self.hosted.get(name)
        if hosted is not None and hosted.reader:
            self._abandon(name, "placed here; its reader-side replica gives way to it")
            hosted = None
        warm = entry.spec.get("warm_target") == self.global_name
        if hosted is not None and hosted.run.standby and not hosted.yielded:
            if entry.spec.get("phase") != "moving":
                self._promote(name, entry, hosted, warm)
                return
            if warm:
                return  # the replica takes over once the old node has stopped at a batch
            # Moved here while its primary runs: the move restores it from that checkpoint.
            self._abandon(name, "moved here; resuming from the primary's checkpoint instead")
            hosted = None
        if hosted is not None:
            if hosted.network_version != network.version:  # redeployed: run the new definition
                self._hand_over(name, keep_placement=True)
                hosted = None
            else:
                self._watch(hosted, entry, network)
                return
        if entry.spec.get("phase") == "failed":
            return  # restarted too often; waits for a redeploy, a move or a takeover
        phase = entry.spec.get("phase", "placed")
        wiring = self._wiring(network, name, entry)
        mine = checkpoint_location(self.checkpoint_root, wiring)
        source = entry.spec.get("checkpoint")
        if source and not same_definition(source, mine):
            log.info("%s: %s was redeployed with another definition or other topics; it "
                     "starts afresh rather than from %s", self.global_name, name, source)
            source = None
        if source and not is_local(source):
            mine = source  # on a shared store: resumed in place, nothing is copied
        if phase == "moving":
            # The old node still runs it: copy the bulk of its state ahead of the hand-over.
            if source and name not in self._precopied:
                stats = sync_checkpoint(source, mine)
                self._precopied.add(name)
                log.info("%s: %s: copied %d files (%d bytes) ahead of the hand-over",
                         self.global_name, name, stats.files, stats.bytes)
            return
        failover = context_of(entry.spec.get("takeover_trace")) if phase == "released" else None
        takeover = (self.tracer.start_span(f"takeover {name}", context=failover, attributes={
            "medusa.fragment": name, "medusa.node": self.global_name, "medusa.ha": "passive",
            "medusa.failed_node": entry.spec.get("released_by") or ""})
            if failover is not None else None)
        if source and source != mine:
            stats = sync_checkpoint(source, mine)
            log.info("%s: %s: copied %d more files (%d bytes) of its checkpoint",
                     self.global_name, name, stats.files, stats.bytes)
        elif source and not is_local(source):
            log.info("%s: %s resumes in place from its checkpoint on the shared store %s",
                     self.global_name, name, source)
        if takeover is not None:
            restored = last_committed_batch(mine)
            takeover.set_attributes({
                "medusa.checkpoint.batch_restored": -1 if restored is None else restored,
                "medusa.checkpoint.offsets_replayed_from":
                    (batch_offsets(mine, restored) if restored is not None else None) or
                    "the earliest offsets"})
        resume = None
        before = str(entry.spec.get("released_by") or "").split("/")[0]
        if source and before and self.endpoints.bootstrap(before) != self.bootstrap:
            resume = self._rebase(name, mine, wiring, self.endpoints.bootstrap(before))
        drop_uncommitted(mine)  # a batch begun after the hand-over: planned anew here
        sunion = self._start_sunion(name, wiring, resume)
        run = start_fragment(self.spark, network.plan, wiring, mine)
        pending = None
        if takeover is not None:
            pending = PendingTakeover(takeover, time.time_ns())
            self._trace_first_output(run, pending)
        with self._lock:
            self.hosted[name] = HostedFragment(name, network.version, run, time.time(), sunion,
                                               takeover=pending)
        self._precopied.discard(name)
        log.info("%s: running %s (%s)%s", self.global_name, name,
                 ", ".join(wiring.fragment.boxes),
                 f", taken over from {entry.spec.get('released_by')}" if takeover else "")
        self._mark_running(name, mine)

    def _retire(self, name: str, entry: Entry) -> None:
        """A scale step replaces this fragment (or instance): stops it at a batch boundary
        and records how far its results go (see ``scaling``)."""
        if entry.spec.get("phase") == "retired":
            return
        hosted = self.hosted.get(name)
        checkpoint = entry.spec.get("checkpoint")
        topic = None
        if hosted is not None:
            checkpoint, topic = hosted.run.checkpoint, hosted.run.wiring.source.topic
            self._hand_over(name, keep_placement=True)
        batch = last_committed_batch(checkpoint) if checkpoint else None
        watermark = batch_watermark_ms(checkpoint, batch) if checkpoint and batch is not None \
            else None

        def retired(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None or spec.get("node") != self.global_name or \
                    spec.get("phase") != "retiring":
                return None
            return {**spec, "phase": "retired", "checkpoint": checkpoint,
                    "retired_watermark_ms": watermark, "sunion_topic": topic}
        self.catalog.update(Kind.FRAGMENTS, name, retired)
        log.info("%s: retired %s for a scale step: results written below stime %s",
                 self.global_name, name, watermark)

    def _rebase(self, name: str, checkpoint: str, wiring: FragmentWiring,
                old_bootstrap: str) -> dict[str, Any] | None:
        """Moved here from another cluster: the query goes on at the end of this cluster's
        SUnion topic, and the SUnion from the inputs' positions of the last batch the
        query committed there."""
        batch = last_committed_batch(checkpoint)
        topic = wiring.source.topic
        read = source_offsets(checkpoint, batch, topic) if batch is not None else None
        if batch is None or read is None:
            return None
        positions = positions_before(old_bootstrap, topic, read)
        if positions is None:
            # Nothing read there since it came (moved away again before committing a batch
            # on that cluster): it resumes where it resumed there.
            positions = read_resume(checkpoint, batch)
        if positions is not None:
            write_resume(checkpoint, batch, positions)
        consumer = Consumer(kafka_config(self.bootstrap, **{"group.id": f"medusa.{name}"}))
        try:
            ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                    for p in read}
        finally:
            consumer.close()
        rebase_source(checkpoint, topic, ends)
        log.info("%s: %s comes from another cluster: batch %d rebased to %s, inputs resume "
                 "from the positions read there", self.global_name, name, batch, ends)
        return positions

    def _start_sunion(self, name: str, wiring: FragmentWiring,
                      resume: dict[str, Any] | None = None, wait_for_go: bool = False
                      ) -> SUnionProcess:
        config = wiring.sunion_config(resume, self.endpoints.otlp_endpoint or None)
        folder = self.work_dir / "sunion" / f"{wiring.topic_prefix}{name}".replace("/", "_")
        return SUnionProcess(config, folder).start(wait_for_go)

    def _watch(self, hosted: HostedFragment, entry: Entry, network: NetworkPlan) -> None:
        """Keeps a hosted fragment going: its SUnion alive, its failed query restarted."""
        if hosted.failed:
            return
        if hosted.sunion is not None:
            hosted.sunion.keep_alive()
        if not hosted.reader:
            self._publish_dpc_state(hosted)
        if hosted.run.fenced():
            if hosted.reader:
                self._restart_query(hosted, network, "the primary writes its output again",
                                    standby=True)
                self._set_serving(hosted.name, None)
                hosted.serve_after = time.monotonic() + REFENCED_HOLD_S
            elif entry.spec.get("reader_replica"):
                # Its reader-side replica serves: it catches up beside it, writing nothing,
                # and takes the output back once stable (make before break).
                hosted.yielded = True
                self._restart_query(hosted, network, "as a standby while its reader-side "
                                    f"replica on {entry.spec['reader_replica']} serves",
                                    standby=True)
            else:
                self._abandon(hosted.name, "another node writes its outputs")
            return
        request = hosted.run.reconcile_requested()
        if request is not None:
            self._reconcile(hosted, network, request)
            return
        failure = hosted.run.failure()
        if failure is None:
            if hosted.yielded and caught_up(hosted.run) and dpc_state(hosted) == "STABLE":
                self._take_back(hosted)
            return
        now = time.monotonic()
        if hosted.restart_at is None:
            hosted.restarts += 1
            if hosted.restarts > self.max_restarts:
                hosted.failed = True
                log.error("%s: %s failed %d times; giving up until it is redeployed or "
                          "moved: %s", self.global_name, hosted.name, hosted.restarts, failure)
                if hosted.sunion is not None:
                    hosted.sunion.stop()
                self._record_failure(hosted.name, failure, hosted.restarts, "failed")
                return
            delay = min(60.0, 2.0 ** (hosted.restarts - 1))
            hosted.restart_at = now + delay
            log.warning("%s: %s failed (restart %d of %d in %.0fs): %s", self.global_name,
                        hosted.name, hosted.restarts, self.max_restarts, delay, failure)
            self._record_failure(hosted.name, failure, hosted.restarts, None)
            return
        if now < hosted.restart_at:
            return
        hosted.restart_at = None
        if hosted.reader:
            self._set_serving(hosted.name, None)
        # A reader-side replica restarts as a standby: it serves again if the output is
        # still quiet.
        self._restart_query(hosted, network, "after its failure",
                            standby=hosted.reader or hosted.yielded)

    def _take_back(self, hosted: HostedFragment) -> None:
        """The primary, caught up and stable beside its serving reader-side replica, writes
        the output again: the promotion fences the replica, and what the replica wrote
        already is dropped by tuple id."""
        with self.tracer.start_as_current_span(f"takes output back {hosted.name}", attributes={
                "medusa.fragment": hosted.name, "medusa.node": self.global_name}):
            written = hosted.run.promote()
        hosted.yielded = False
        log.info("%s: %s is caught up and stable: it writes its output again (%d results "
                 "the reader-side replica had not)", self.global_name, hosted.name, written)

    def _restart_query(self, hosted: HostedFragment, network: NetworkPlan, why: str,
                       standby: bool = False) -> None:
        """Starts the fragment's query again from its checkpoint."""
        hosted.run.writer.close()
        wiring = hosted.run.wiring
        hosted.run = start_fragment(self.spark, network.plan, wiring, hosted.run.checkpoint,
                                    standby=standby)
        if hosted.takeover is not None and not hosted.takeover.ended.is_set():
            # The takeover's first output comes from this query now.
            self._trace_first_output(hosted.run, hosted.takeover)
        log.info("%s: restarted %s from its checkpoint, %s", self.global_name, hosted.name,
                 why)

    def _publish_dpc_state(self, hosted: HostedFragment) -> None:
        """The fragment's DPC state into the catalog, when it changed."""
        state = dpc_state(hosted)
        if state == hosted.dpc_state:
            return

        def changed(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None or spec.get("node") != self.global_name:
                return None
            return {**spec, "dpc_state": state}
        self.catalog.update(Kind.FRAGMENTS, hosted.name, changed)
        log.info("%s: %s is %s (was %s)", self.global_name, hosted.name, state,
                 hosted.dpc_state)
        hosted.dpc_state = state

    def _reconcile(self, hosted: HostedFragment, network: NetworkPlan,
                   request: ReconcileRequired) -> None:
        """DPC's checkpoint/redo: back to the batch before the UP_FAILURE period, then the
        query redoes the corrected input (see ``reconcile``)."""
        run = hosted.run
        run.writer.close()
        record = DpcRecord.load(run.checkpoint)
        since = record.tentative_since_batch
        last = last_committed_batch(run.checkpoint)
        to_batch = (since - 1) if since is not None else (last if last is not None else -1)
        attributes: dict[str, str | int] = {
            "medusa.fragment": hosted.name, "medusa.node": self.global_name,
            "medusa.dpc.epoch": request.epoch, "medusa.checkpoint.rolled_back_to": to_batch,
            "medusa.checkpoint.last_committed": -1 if last is None else last}
        # A stage of the failure's trace, which the SUnion's REDO named.
        with self.tracer.start_as_current_span(f"reconcile {hosted.name}", attributes=attributes,
                                               context=context_of(record.redo_traceparent)):
            deleted = rollback(run.checkpoint, to_batch)
            record.skip_epoch = max(record.skip_epoch, request.epoch)
            record.tentative_since_batch = None
            record.rolled_back_batches = (last - to_batch) if last is not None else 0
            record.save(run.checkpoint)
            # A serving reader-side replica writes the corrections; a standby stays one.
            hosted.run = start_fragment(self.spark, network.plan, run.wiring, run.checkpoint,
                                        standby=run.standby)
        hosted.reconciliations += 1
        log.info("%s: %s reconciles UP_FAILURE period %d: checkpoint back to batch %d "
                 "(%d files dropped), redoing", self.global_name, hosted.name, request.epoch,
                 to_batch, deleted)

    def _record_failure(self, name: str, error: str, restarts: int, phase: str | None) -> None:
        def failed(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None or spec.get("node") != self.global_name:
                return None
            return {**spec, "error": explained(error, self.participant)[:4000],
                    "restarts": restarts,
                    **({"phase": phase} if phase else {})}
        self.catalog.update(Kind.FRAGMENTS, name, failed)

    def _mark_running(self, name: str, checkpoint: str) -> None:
        def running(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None or spec.get("node") != self.global_name:
                return None  # moved on meanwhile; the next pass hands it over
            return {**spec, "phase": "running", "checkpoint": checkpoint, "released_by": None,
                    "takeover_trace": None, "error": None, "restarts": 0,
                    "warm_target": None, "warm_ready": False}
        self.catalog.update(Kind.FRAGMENTS, name, running)

    def _follow_replica(self, name: str, entry: Entry, network: NetworkPlan) -> None:
        """Runs the standby replica of an ``ha: active`` fragment: it computes, writes nothing.

        It reads the primary's SUnion topic, on the primary's cluster, so both see the
        same buckets; promoted, it starts a SUnion of its own that resumes that topic.
        """
        hosted = self.hosted.get(name)
        if hosted is not None:
            failure = hosted.run.failure()
            if hosted.network_version != network.version:
                self._abandon(name, "redeployed")
            elif failure is not None:
                # Started again on the next pass, from a new copy of the checkpoint.
                self.errors[name] = failure
                self._abandon(name, f"its replica failed: {failure}")
            elif entry.spec.get("warm_target") == self.global_name and \
                    not entry.spec.get("warm_ready") and caught_up(hosted.run):
                self._set_warm_ready(name)
                return
            else:
                return
        primary = str(entry.spec["node"]).split("/")[0]
        wiring = self._wiring(network, name, entry, self.endpoints.bootstrap(primary))
        mine = checkpoint_location(self.checkpoint_root, wiring) + REPLICA_SUFFIX
        source = entry.spec.get("checkpoint")
        warm = entry.spec.get("warm_target") == self.global_name
        if warm and source:
            # A new copy for each warm move: an older one may be far behind, or diverged.
            delete_checkpoint(mine)
        if source and last_committed_batch(mine) is None:
            # Starts where the primary is, instead of replaying the inputs from the start.
            stats = sync_checkpoint(source, mine)
            drop_uncommitted(mine)  # copied while it ran: the batch in progress is replanned
            log.info("%s: %s: copied %d files (%d bytes) of its checkpoint for a replica",
                     self.global_name, name, stats.files, stats.bytes)
        run = start_fragment(self.spark, network.plan, wiring, mine, standby=True)
        # A warm move's replica has its SUnion started and waiting, to go at the hand-over.
        sunion = self._start_sunion(name, wiring, wait_for_go=True) if warm else None
        with self._lock:
            self.hosted[name] = HostedFragment(name, network.version, run, time.time(), sunion)
        log.info("%s: running the standby replica of %s%s", self.global_name, name,
                 " to take it over (warm move)" if warm else "")
        if warm:
            return

        def ready(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None or spec.get("replica") != self.global_name:
                return None
            return {**spec, "replica_ready": True}
        self.catalog.update(Kind.FRAGMENTS, name, ready)

    def _follow_reader(self, name: str, entry: Entry, network: NetworkPlan) -> None:
        """Runs the fragment's reader-side replica (``medusa.reader_side``): its own SUnion
        on this node's cluster and a standby query, which takes the output over when
        ``should_serve`` says the primary's output no longer reaches this side."""
        hosted = self.hosted.get(name)
        if hosted is not None and not hosted.reader:
            self._hand_over(name)  # it ran here as the fragment, which has moved on
            return
        if hosted is not None and hosted.network_version != network.version:
            self._abandon(name, "redeployed")
            hosted = None
        if hosted is None:
            wiring = self._wiring(network, name, entry)
            mine = checkpoint_location(self.checkpoint_root, wiring) + READER_SUFFIX
            sunion = self._start_sunion(name, wiring)
            run = start_fragment(self.spark, network.plan, wiring, mine, standby=True)
            started = OutputWatch([o.stream.topic for o in wiring.outputs.values()
                                   if o.stream.bootstrap == self.bootstrap],
                                  self.bootstrap, f"{wiring.topic_prefix}{name}").start()
            with self._lock:
                self.hosted[name] = HostedFragment(name, network.version, run, time.time(),
                                                   sunion, output_watch=started)
            log.info("%s: running the reader-side replica of %s (its primary runs on %s)",
                     self.global_name, name, entry.spec["node"])
            return
        self._watch(hosted, entry, network)
        watch = hosted.output_watch
        # A primary in STABILIZATION has every input back, so it reaches this side again:
        # its output is the reconciliation's, coming.
        if hosted.failed or watch is None or not hosted.run.standby or \
                self.hosted.get(name) is not hosted or entry.spec.get("phase") != "running" \
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
        with self.tracer.start_as_current_span(f"reader-side replica serves {name}", attributes={
                "medusa.fragment": name, "medusa.node": self.global_name,
                "medusa.output.silent_s": round(silent_s, 3)}):
            written = hosted.run.promote()
        self._set_serving(name, self.global_name)
        log.warning("%s: the output of %s was silent for %.1fs: its reader-side replica "
                    "serves it now (%d results caught up, DPC %s)", self.global_name, name,
                    silent_s, written, hosted.run.writer.dpc_state)

    def _set_serving(self, name: str, serving: str | None) -> None:
        def change(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None or spec.get("reader_replica") != self.global_name or \
                    spec.get("serving") == serving:
                return None
            return {**spec, "serving": serving}
        self.catalog.update(Kind.FRAGMENTS, name, change)

    def _set_warm_ready(self, name: str) -> None:
        def ready(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None or spec.get("warm_target") != self.global_name:
                return None
            return {**spec, "warm_ready": True}
        self.catalog.update(Kind.FRAGMENTS, name, ready)
        log.info("%s: the replica of %s has caught up; ready to take it over",
                 self.global_name, name)

    def _promote(self, name: str, entry: Entry, hosted: HostedFragment, warm: bool) -> None:
        """The standby replica becomes the fragment: after its primary failed (``ha:
        active``), or once its old node stopped it (a warm move)."""
        failover = context_of(entry.spec.get("takeover_trace"))
        takeover = self.tracer.start_span(f"takeover {name}", context=failover, attributes={
            "medusa.fragment": name, "medusa.node": self.global_name,
            "medusa.ha": "warm move" if warm else "active",
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
            hosted.sunion.go()
        else:
            hosted.sunion = self._start_sunion(name, hosted.run.wiring)
        caught_up = hosted.run.promote()
        promoted_s = time.monotonic() - started
        takeover.set_attribute("medusa.replica.results_caught_up", caught_up)
        hosted.takeover = pending
        self._trace_first_output(hosted.run, pending)
        log.info("%s: promoted the replica of %s in %.1fs; it wrote %d results the primary "
                 "had not", self.global_name, name, promoted_s, caught_up)
        self._mark_running(name, hosted.run.checkpoint)

    def _trace_first_output(self, run: FragmentRun, takeover: PendingTakeover) -> None:
        """Ends the takeover span with a child at the fragment's first result after recovery."""
        context = trace.set_span_in_context(takeover.span)
        lock = threading.Lock()

        def first(count: int) -> None:
            with lock:
                if takeover.ended.is_set():
                    return
                takeover.ended.set()
            self.tracer.start_span("first output", context=context,
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

    def _abandon(self, name: str, why: str) -> None:
        with self._lock:
            hosted = self.hosted.pop(name)
        if hosted.output_watch is not None:
            hosted.output_watch.stop()
        hosted.run.abandon()
        if hosted.sunion is not None:
            hosted.sunion.stop()
        log.info("%s: stopped %s: %s", self.global_name, name, why)

    def _rejoin(self) -> None:
        """Declared failed while alive: stop everything, write nothing, rejoin as a new node."""
        log.warning("%s: the failure detector declared incarnation %s failed and its "
                    "fragments run elsewhere; stopping them and rejoining", self.global_name,
                    self.incarnation)
        for name in list(self.hosted):
            self._abandon(name, "this node was declared failed")
        self._plans.clear()
        self.incarnation = uuid.uuid4().hex
        self.register()

    def _network(self, network_name: str, members: list[Entry]) -> NetworkPlan:
        entry = self.catalog.get(Kind.NETWORKS, network_name)
        if entry is None:
            raise NetworkError(f"network {network_name} is not in the catalog")
        member = {box: fragment_of(e) for e in members for box in e.spec["boxes"]}
        cached = self._plans.get(network_name)
        if cached is not None and cached.version == entry.version and \
                {b: f for f in cached.fragments.values() for b in f.boxes} == member:
            return cached
        spec = parse_network(entry.spec["definition"], origin=f"network {network_name}")
        plan = validate(spec, self.spark)
        missing = [box for box in plan.order if box not in member]
        if missing:
            raise NetworkError(f"network {network_name}: box {missing[0]!r} is in no fragment "
                               "of the catalog; redeploy the network")
        fragments = fragments_of(plan, member)
        # Topics and schemas exist since the deploy; this only looks them up.
        topics = network_topics(plan, fragments, self.endpoints, self.registry, announce=False)
        self._plans[network_name] = NetworkPlan(entry.version, plan, topics, fragments,
                                                fragment_delays(plan, fragments))
        return self._plans[network_name]

    def _hand_over(self, name: str, keep_placement: bool = False, at_once: bool = False
                   ) -> None:
        """Stops a fragment placed elsewhere and releases it to its new node: at a batch
        boundary, so that the checkpoint holds what was written; or ``at_once`` when a
        replica that has computed the same batches takes it over (a warm move)."""
        with self._lock:
            hosted = self.hosted.pop(name)
        started = time.monotonic()
        if at_once:
            # Nothing more is written from here; the replica may take over at once, while
            # the query and the SUnion stop (the replica's SUnion fences this one).
            hosted.run.writer.halt()
            self._release(name, hosted)
            hosted.run.abandon()
        elif hosted.run.query.isActive:
            hosted.run.hand_over()
        else:
            hosted.run.writer.close()
        if hosted.sunion is not None:
            hosted.sunion.stop()
        log.info("%s: stopped %s %s in %.1fs", self.global_name, name,
                 "for its warm replica" if at_once else "at a batch boundary",
                 time.monotonic() - started)
        if not keep_placement and not at_once:
            self._release(name, hosted)

    def _release(self, name: str, hosted: HostedFragment) -> None:
        """Tells the fragment's new node it may go on: ``released``, with the checkpoint."""
        def released(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None or spec.get("node") == self.global_name or \
                    spec.get("phase") != "moving":
                return None  # withdrawn, placed back here, or taken over by another node
            return {**spec, "phase": "released", "checkpoint": hosted.run.checkpoint,
                    "released_by": self.global_name}
        self.catalog.update(Kind.FRAGMENTS, name, released)

    # -- load reports ---------------------------------------------------------------------

    def fragment_loads(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Per hosted fragment and per box: rates, batch time, lag, errors, SUnion state."""
        fragments, boxes = [], []
        with self._lock:
            items = list(self.hosted.values())
        for hosted in items:
            run = hosted.run
            progress: dict[str, Any] = run.query.lastProgress or {}
            lag = 0
            for source in progress.get("sources", []):
                metrics = source.get("metrics") or {}
                lag = max(lag, int(float(metrics.get("maxOffsetsBehindLatest", 0) or 0)))
            failure = run.failure()
            state = ("failed" if hosted.failed else "restarting" if failure else
                     "standby" if run.standby else "running")
            operators = [{"operator": op.get("operatorName"),
                          "rows_total": op.get("numRowsTotal"),
                          "rows_updated": op.get("numRowsUpdated"),
                          "rows_dropped_late": op.get("numRowsDroppedByWatermark"),
                          "update_ms": op.get("allUpdatesTimeMs"),
                          "removal_ms": op.get("allRemovalsTimeMs"),
                          "commit_ms": op.get("commitTimeMs")}
                         for op in progress.get("stateOperators", [])]
            sunion = hosted.sunion.state() if hosted.sunion is not None else {}
            samples = [BatchSample.of(json.loads(p.json)) for p in run.query.recentProgress]
            load = fragment_load([s for s in samples if s is not None], int(time.time() * 1000),
                                 self.load_window_s)
            batch_ms = int(progress.get("batchDuration") or 0)
            if load.demand >= 1.0 or (run.trigger_ms and batch_ms > run.trigger_ms):
                hosted.bottleneck_since = hosted.bottleneck_since or time.time()
            else:
                hosted.bottleneck_since = None
            fragments.append({
                "fragment": hosted.name, "state": state, "dpc_state": dpc_state(hosted, sunion),
                "tentative_results": run.writer.tentative_written,
                "corrections": hosted.reconciliations,
                "input_rate": float(progress.get("inputRowsPerSecond") or 0.0),
                "processing_rate": float(progress.get("processedRowsPerSecond") or 0.0),
                "batch_duration_ms": int(progress.get("batchDuration") or 0),
                "load": round(load.load, 4),
                "running_s": round(time.time() - hosted.started_at, 1),
                "bottleneck_s": round(time.time() - hosted.bottleneck_since, 1)
                if hosted.bottleneck_since is not None and not run.standby else 0.0,
                "lag": lag, "restarts": hosted.restarts,
                "error": failure or self.errors.get(hosted.name),
                "operators": json.dumps({"operators": operators,
                                         "duration_ms": progress.get("durationMs", {})}),
                "sunion": json.dumps(sunion),
            })
            duration_s = max(0.001, (progress.get("batchDuration") or 0) / 1000.0)
            rows = run.box_rows()
            network = hosted.name.rsplit("/", 1)[0]
            for box in run.wiring.fragment.boxes:
                out = rows.get(box)
                boxes.append({
                    "box": f"{network}/{box}",
                    "input_rate": float(progress.get("inputRowsPerSecond") or 0.0),
                    "processing_rate": (out / duration_s) if out is not None else 0.0,
                    "batch_duration_ms": int(progress.get("batchDuration") or 0),
                    "lag": lag,
                })
        return fragments, boxes

    def _keep_running(self, what: str, body: Callable[[], None], retry_s: float) -> None:
        """Runs ``body`` until ``stop``; a failure (Kafka or the registry away) is logged and
        retried."""
        while not self._stop.is_set():
            try:
                body()
            except Exception as error:
                log.warning("%s: %s: %s; retrying", self.global_name, what, error)
                self._stop.wait(retry_s)

    def _report(self) -> None:
        ensure_topics(kafka_config(self.bootstrap), [NODE_LOAD_TOPIC], partitions=1)
        with TupleProducer(kafka_config(self.bootstrap), self.registry, NODE_LOAD_TOPIC,
                           schema_for_topic(NODE_LOAD_TOPIC), self.global_name,
                           boundary_interval_s=self.metrics_interval_s) as producer:
            while not self._stop.wait(self.metrics_interval_s):
                fragments, boxes = self.fragment_loads()
                load = sum(f["load"] for f in fragments)
                now = int(time.time() * 1000)
                report = {
                    "node": self.global_name, "participant": self.participant,
                    "reported_at": now, "capacity": self.capacity, "load": load,
                    "utilisation": utilisation(load, self.capacity),
                    "boxes": boxes, "fragments": fragments,
                }
                producer.produce(report, f"{self.global_name}/load/{now}", now,
                                 key=self.global_name)

    # -- heartbeats -----------------------------------------------------------------------

    def _beat(self) -> None:
        """Beats until ``stop``, on a thread of its own so slow fragments do not delay it."""
        config = kafka_config(self.bootstrap, **{"linger.ms": 0})
        with TupleProducer(config, self.registry, HEARTBEAT_TOPIC,
                           schema_for_topic(HEARTBEAT_TOPIC), self.global_name,
                           boundary_interval_s=60.0) as producer:
            seq = 0
            while not self._stop.is_set():
                now = int(time.time() * 1000)
                seq += 1
                producer.produce({"node": self.global_name, "participant": self.participant,
                                  "seq": seq, "incarnation": self.incarnation, "sent_at": now,
                                  "boxes": sorted(self.hosted)},
                                 f"{self.global_name}/heartbeat/{self.incarnation}/{seq}", now,
                                 key=self.global_name)
                producer.poll()
                self._stop.wait(self.heartbeat_interval_s)

    # -- life cycle -----------------------------------------------------------------------

    def run(self) -> None:
        """Register, then follow the catalog until ``stop``."""
        ensure_topics(kafka_config(self.bootstrap), [HEARTBEAT_TOPIC], partitions=1,
                      config=HEARTBEAT_TOPIC_CONFIG)
        # Beating before joining: the detector starts the clock at the registration.
        threading.Thread(target=self._keep_running, name="heartbeats", daemon=True,
                         args=("heartbeats", self._beat, self.heartbeat_interval_s)).start()
        warm_up(self.spark, self.bootstrap, HEARTBEAT_TOPIC)
        self.register()
        threading.Thread(target=self._keep_running, name="load-reports", daemon=True,
                         args=("load reports", self._report, self.metrics_interval_s)).start()
        try:
            while not self._stop.is_set():
                try:
                    self.reconcile()
                except CatalogError as error:  # keep running what runs; try again
                    log.warning("%s: %s", self.global_name, error)
                self._stop.wait(URGENT_POLL_S if self._urgent else self.poll_interval_s)
        finally:
            for name in list(self.hosted):
                hosted = self.hosted.pop(name)
                try:  # at a batch boundary, so a restart resumes without a duplicate
                    if hosted.run.query.isActive:
                        hosted.run.hand_over(timeout_s=30)
                except Exception as error:
                    log.warning("%s: stopping %s: %s", self.global_name, name, error)
                if hosted.sunion is not None:
                    hosted.sunion.stop()
            try:
                self.mark_down()
            except CatalogError as error:
                log.warning("%s: could not mark itself down: %s", self.global_name, error)

    def mark_down(self) -> Entry | None:
        """Marks this node down, as it stops. Its Spark UI stops with it, and the UI's port
        may go to another node's: its URL goes too."""
        return self.catalog.update(Kind.NODES, self.global_name,
                                   lambda spec: {**spec, "status": "down", "spark_ui": None}
                                   if spec else None)

    def stop(self) -> None:
        self._stop.set()
