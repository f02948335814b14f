"""A Medusa node: one long-lived SparkSession hosting the boxes the catalog places on it.

The node registers itself in the catalog and then follows it: every second it
reads the boxes placed on it and starts the ones it does not run, and stops the
ones placed elsewhere. A box placed elsewhere is handed over: the node stops it
at a batch boundary and marks it ``released`` with the location of its
checkpoint; the new node copies that checkpoint (most of it while the box still
ran) and resumes the box from it. Every few seconds the node publishes each
box's progress (rates, batch duration, consumer lag) as a NodeLoadReport to
``medusa.node-load`` of its participant.

For high availability the node sends a heartbeat to ``medusa.heartbeats`` every
``heartbeat_interval_s``, from a thread of its own. When the failure detector
declares it failed, the detector places its boxes on other nodes; should this
node come back (it was only paused, or cut off), it finds its incarnation marked
``failed``, stops every box without writing (their outputs are fenced anyway,
see ``soutput``) and rejoins with a new incarnation and no boxes. A node also
runs the standby replicas of ``ha: active`` boxes whose replica it is, and
promotes one when the box is placed on it.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from opentelemetry import trace
from pyspark.sql import SparkSession

from medusa.catalog.client import CatalogClient, CatalogError
from medusa.catalog.model import Entry, Kind
from medusa.producing import TupleProducer
from medusa.schemas import (
    HEARTBEAT_TOPIC,
    HEARTBEAT_TOPIC_CONFIG,
    NODE_LOAD_TOPIC,
    schema_for_topic,
)
from medusa.stack.endpoints import Endpoints
from medusa.topics import ensure_topics
from medusa.tracing import context_of
from medusa_spark.checkpoints import batch_offsets, last_committed_batch, sync_checkpoint
from medusa_spark.network.model import NetworkError, parse_network
from medusa_spark.network.validate import Plan, validate
from medusa_spark.runner import BoxRun, BoxWiring, run_box, wire
from medusa_spark.warmup import warm_up

REPLICA_SUFFIX = ".replica"

log = logging.getLogger("medusa.node")


@dataclass
class HostedBox:
    name: str
    """Global name: participant/network/box."""
    network_version: int
    run: BoxRun
    started_at: float


@dataclass
class NetworkPlan:
    version: int
    plan: Plan
    wiring: dict[str, BoxWiring]


class Node:
    def __init__(self, name: str, participant: str, endpoints: Endpoints,
                 registry: SchemaRegistryClient, spark: SparkSession, checkpoint_root: str,
                 catalog: CatalogClient, secondary: str | None = None,
                 poll_interval_s: float = 1.0, metrics_interval_s: float = 5.0,
                 heartbeat_interval_s: float = 0.5) -> None:
        self.name = name
        self.participant = participant
        self.endpoints = endpoints
        self.registry = registry
        self.spark = spark
        self.checkpoint_root = checkpoint_root.rstrip("/")
        self.catalog = catalog
        self.secondary = secondary
        self.poll_interval_s = poll_interval_s
        self.metrics_interval_s = metrics_interval_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self.tracer = trace.get_tracer("medusa")
        self.hosted: dict[str, HostedBox] = {}
        self.errors: dict[str, str] = {}
        self.incarnation = uuid.uuid4().hex
        self._plans: dict[str, NetworkPlan] = {}
        self._precopied: set[str] = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()

    @property
    def global_name(self) -> str:
        return f"{self.participant}/{self.name}"

    @property
    def bootstrap(self) -> str:
        return self.endpoints.bootstrap(self.participant)

    def checkpoint_of(self, box: str, network: NetworkPlan) -> str:
        # A copy of a network on other topics is another query: it gets its own checkpoint.
        participant, network_name, box_name = box.split("/")
        prefix = network.plan.network.topic_prefix
        return f"{self.checkpoint_root}/{participant}/{network_name}/{prefix}{box_name}"

    def register(self) -> Entry | None:
        """Adds this node to the catalog, or marks it up again with a new incarnation."""
        def change(spec: dict[str, Any] | None) -> dict[str, Any]:
            return {**(spec or {}), "status": "up", "incarnation": self.incarnation,
                    "checkpoint_root": self.checkpoint_root,
                    "secondary": self.secondary or (spec or {}).get("secondary")}
        return self.catalog.update(Kind.NODES, self.global_name, change)

    # -- following the catalog ------------------------------------------------------------

    def reconcile(self) -> None:
        """One pass: start what is placed here, hand over what is placed elsewhere."""
        own = self.catalog.get(Kind.NODES, self.global_name)
        if own is not None and own.spec.get("status") == "failed" and \
                own.spec.get("incarnation") == self.incarnation:
            self._rejoin()
            return
        boxes = self.catalog.list(Kind.BOXES)
        placed = {e.name: e for e in boxes if e.spec["node"] == self.global_name}
        replicas = {e.name: e for e in boxes if e.spec.get("replica") == self.global_name
                    and e.spec.get("ha") == "active" and e.name not in placed}
        for name in [n for n in self.hosted if n not in placed and n not in replicas]:
            if self.hosted[name].run.standby:
                self._abandon(name, "its replica is no longer placed here")
            else:
                self._hand_over(name)
        wanted = {**replicas, **placed}
        # Each network is read once a pass; one that cannot be read fails its boxes alone.
        networks: dict[str, NetworkPlan | Exception] = {}
        for network_name in {entry.spec["network"] for entry in wanted.values()}:
            try:
                networks[network_name] = self._network(network_name)
            except (NetworkError, CatalogError, RuntimeError) as error:
                networks[network_name] = error

        def upstream_first(item: tuple[str, Entry]) -> tuple[str, int]:
            name, entry = item
            network = networks[entry.spec["network"]]
            order = network.plan.order if isinstance(network, NetworkPlan) else []
            box = name.rsplit("/", 1)[1]
            return (entry.spec["network"], order.index(box) if box in order else len(order))

        for name, entry in sorted(wanted.items(), key=upstream_first):
            try:
                network = networks[entry.spec["network"]]
                if isinstance(network, Exception):
                    raise network
                if name in placed:
                    self._follow(name, entry, network)
                else:
                    self._follow_replica(name, entry, network)
                self.errors.pop(name, None)
            except (NetworkError, CatalogError, RuntimeError) as error:
                if self.errors.get(name) != str(error):
                    log.error("%s: box %s: %s", self.global_name, name, error)
                self.errors[name] = str(error)

    def _follow(self, name: str, entry: Entry, network: NetworkPlan) -> None:
        hosted = self.hosted.get(name)
        if hosted is not None and hosted.run.standby:
            if entry.spec.get("phase") != "moving":
                self._promote(name, entry, hosted)
                return
            # Moved here while its primary runs: the move restores it from that checkpoint.
            self._abandon(name, "moved here; resuming from the primary's checkpoint instead")
            hosted = None
        if hosted is not None:
            if hosted.run.fenced():
                self._abandon(name, "another node writes its output")
                return
            failure = hosted.run.failure()
            if failure is not None:
                self.errors[name] = failure
            if hosted.network_version != network.version:  # redeployed: run the new definition
                self._hand_over(name, keep_placement=True)
                hosted = None
            else:
                return
        phase = entry.spec.get("phase", "placed")
        source = entry.spec.get("checkpoint")
        mine = self.checkpoint_of(name, network)
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
            "medusa.box": name, "medusa.node": self.global_name, "medusa.ha": "passive",
            "medusa.failed_node": entry.spec.get("released_by") or ""})
            if failover is not None else None)
        if source and source != mine:
            stats = sync_checkpoint(source, mine)
            log.info("%s: %s: copied %d more files (%d bytes) of its checkpoint",
                     self.global_name, name, stats.files, stats.bytes)
        box = name.rsplit("/", 1)[1]
        if box not in network.wiring:
            raise NetworkError(f"network {entry.spec['network']} has no box {box!r}")
        if takeover is not None:
            restored = last_committed_batch(mine)
            takeover.set_attributes({
                "medusa.checkpoint.batch_restored": -1 if restored is None else restored,
                "medusa.checkpoint.offsets_replayed_from":
                    (batch_offsets(mine, restored) if restored is not None else None) or
                    "the earliest offsets"})
        run = run_box(self.spark, network.plan, network.wiring[box], mine)
        if takeover is not None:
            self._trace_first_output(run, takeover)
        with self._lock:
            self.hosted[name] = HostedBox(name, network.version, run, time.time())
        self._precopied.discard(name)
        log.info("%s: running %s%s", self.global_name, name,
                 f" (taken over from {entry.spec.get('released_by')})" if takeover else "")
        self._mark_running(name, mine)

    def _mark_running(self, name: str, checkpoint: str) -> None:
        def running(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None or spec.get("node") != self.global_name:
                return None  # moved on meanwhile; the next pass hands it over
            return {**spec, "phase": "running", "checkpoint": checkpoint, "released_by": None,
                    "takeover_trace": None}
        self.catalog.update(Kind.BOXES, name, running)

    def _follow_replica(self, name: str, entry: Entry, network: NetworkPlan) -> None:
        """Runs the standby replica of an ``ha: active`` box: it computes, writes nothing."""
        hosted = self.hosted.get(name)
        if hosted is not None:
            if hosted.network_version != network.version:
                self._abandon(name, "redeployed")
            else:
                return
        box = name.rsplit("/", 1)[1]
        if box not in network.wiring:
            raise NetworkError(f"network {entry.spec['network']} has no box {box!r}")
        mine = self.checkpoint_of(name, network) + REPLICA_SUFFIX
        source = entry.spec.get("checkpoint")
        if source and last_committed_batch(mine) is None:
            # Starts where the primary is, instead of replaying the inputs from the start.
            sync_checkpoint(source, mine)
        run = run_box(self.spark, network.plan, network.wiring[box], mine, standby=True)
        with self._lock:
            self.hosted[name] = HostedBox(name, network.version, run, time.time())
        log.info("%s: running the standby replica of %s", self.global_name, name)

        def ready(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None or spec.get("replica") != self.global_name:
                return None
            return {**spec, "replica_ready": True}
        self.catalog.update(Kind.BOXES, name, ready)

    def _promote(self, name: str, entry: Entry, hosted: HostedBox) -> None:
        failover = context_of(entry.spec.get("takeover_trace"))
        takeover = self.tracer.start_span(f"takeover {name}", context=failover, attributes={
            "medusa.box": name, "medusa.node": self.global_name, "medusa.ha": "active",
            "medusa.failed_node": entry.spec.get("released_by") or ""})
        restored = last_committed_batch(hosted.run.checkpoint)
        takeover.set_attribute("medusa.checkpoint.batch_restored",
                               -1 if restored is None else restored)
        hosted.run.writer.output.trace_context = trace.set_span_in_context(takeover)
        caught_up = hosted.run.promote()
        takeover.set_attribute("medusa.replica.results_caught_up", caught_up)
        self._trace_first_output(hosted.run, takeover)
        log.info("%s: promoted the replica of %s; it wrote %d results the primary had not",
                 self.global_name, name, caught_up)
        self._mark_running(name, hosted.run.checkpoint)

    def _trace_first_output(self, run: BoxRun, takeover: Any) -> None:
        """Ends the takeover span with a child at the box's first result after recovery."""
        started = time.time_ns()
        context = trace.set_span_in_context(takeover)
        run.writer.output.trace_context = context

        def first(count: int) -> None:
            self.tracer.start_span("first output", context=context, start_time=started,
                                   attributes={"medusa.results": count}).end()
            takeover.end()
        stats = run.writer.output.stats
        if stats.first_write_at is not None and not run.standby:
            first(0)
        else:
            stats.first_write_listeners.append(first)

    def _abandon(self, name: str, why: str) -> None:
        with self._lock:
            hosted = self.hosted.pop(name)
        hosted.run.abandon()
        log.info("%s: stopped %s: %s", self.global_name, name, why)

    def _rejoin(self) -> None:
        """Declared failed while alive: stop everything, write nothing, rejoin as a new node."""
        log.warning("%s: the failure detector declared incarnation %s failed and its boxes "
                    "run elsewhere; stopping them and rejoining", self.global_name,
                    self.incarnation)
        for name in list(self.hosted):
            self._abandon(name, "this node was declared failed")
        self._plans.clear()
        self.incarnation = uuid.uuid4().hex
        self.register()

    def _network(self, network_name: str) -> NetworkPlan:
        entry = self.catalog.get(Kind.NETWORKS, network_name)
        if entry is None:
            raise NetworkError(f"network {network_name} is not in the catalog")
        cached = self._plans.get(network_name)
        if cached is not None and cached.version == entry.version:
            return cached
        spec = parse_network(entry.spec["definition"], origin=f"network {network_name}")
        plan = validate(spec, self.spark)
        # Topics and schemas exist since the deploy; wiring here only looks them up.
        wiring = wire(plan, self.endpoints, self.registry, announce=False)
        self._plans[network_name] = NetworkPlan(entry.version, plan, wiring)
        return self._plans[network_name]

    def _hand_over(self, name: str, keep_placement: bool = False) -> None:
        with self._lock:
            hosted = self.hosted.pop(name)
        started = time.monotonic()
        hosted.run.hand_over()
        log.info("%s: stopped %s at a batch boundary in %.1fs", self.global_name, name,
                 time.monotonic() - started)
        if keep_placement:
            return

        def released(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None or spec.get("node") == self.global_name or \
                    spec.get("phase") != "moving":
                return None  # withdrawn, placed back here, or taken over by another node
            return {**spec, "phase": "released", "checkpoint": hosted.run.checkpoint,
                    "released_by": self.global_name}
        self.catalog.update(Kind.BOXES, name, released)

    # -- load reports ---------------------------------------------------------------------

    def box_loads(self) -> list[dict[str, Any]]:
        loads = []
        with self._lock:
            items = list(self.hosted.values())
        for hosted in items:
            query = hosted.run.query
            progress: dict[str, Any] = query.lastProgress or {}
            lag = 0
            for source in progress.get("sources", []):
                metrics = source.get("metrics") or {}
                lag += int(float(metrics.get("maxOffsetsBehindLatest", 0) or 0))
            loads.append({
                "box": hosted.name,
                "input_rate": float(progress.get("inputRowsPerSecond") or 0.0),
                "processing_rate": float(progress.get("processedRowsPerSecond") or 0.0),
                "batch_duration_ms": int(progress.get("batchDuration") or 0),
                "lag": lag,
                "active": query.isActive,
                "error": hosted.run.failure(),
            })
        return loads

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
        ensure_topics({"bootstrap.servers": self.bootstrap}, [NODE_LOAD_TOPIC], partitions=1)
        with TupleProducer({"bootstrap.servers": self.bootstrap}, self.registry, NODE_LOAD_TOPIC,
                           schema_for_topic(NODE_LOAD_TOPIC), self.global_name,
                           boundary_interval_s=self.metrics_interval_s) as producer:
            while not self._stop.wait(self.metrics_interval_s):
                loads = self.box_loads()
                busy_ms = sum(load["batch_duration_ms"] for load in loads)
                now = int(time.time() * 1000)
                report = {
                    "node": self.global_name, "participant": self.participant,
                    "reported_at": now,
                    "utilisation": min(1.0, busy_ms / (self.metrics_interval_s * 1000)),
                    "boxes": [{k: load[k] for k in ("box", "input_rate", "processing_rate",
                                                    "batch_duration_ms", "lag")}
                              for load in loads],
                }
                producer.produce(report, f"{self.global_name}/load/{now}", now,
                                 key=self.global_name)

    # -- heartbeats -----------------------------------------------------------------------

    def _beat(self) -> None:
        """Beats until ``stop``, on a thread of its own so slow boxes do not delay it."""
        config = {"bootstrap.servers": self.bootstrap, "linger.ms": 0}
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
        ensure_topics({"bootstrap.servers": self.bootstrap}, [HEARTBEAT_TOPIC], partitions=1,
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
                self._stop.wait(self.poll_interval_s)
        finally:
            for name in list(self.hosted):
                try:  # at a batch boundary, so a restart resumes without a duplicate
                    self.hosted.pop(name).run.hand_over(timeout_s=30)
                except Exception as error:
                    log.warning("%s: stopping %s: %s", self.global_name, name, error)
            try:
                self.catalog.update(Kind.NODES, self.global_name,
                                    lambda spec: {**spec, "status": "down"} if spec else None)
            except CatalogError as error:
                log.warning("%s: could not mark itself down: %s", self.global_name, error)

    def stop(self) -> None:
        self._stop.set()
