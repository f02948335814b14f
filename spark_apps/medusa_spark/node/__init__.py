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
topic, writing nothing), and promotes one when the fragment is placed on it. For the
passive (upstream-backup) fragments of a node whose secondary it is, it keeps their
SUnions started and waiting (``backups``), so that a takeover's inputs flow again while
the query restores its checkpoint.

The node's parts share one ``NodeState`` (``state``): ``hosting`` follows the placement,
``moves`` hands fragments over and takes them over, ``reporting`` publishes load and DPC
states, ``membership`` beats and keeps the node's catalog entry; ``Node`` runs them.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from opentelemetry import trace
from pyspark.sql import SparkSession

from medusa.catalog.client import CatalogError
from medusa.catalog.model import Entry
from medusa.endpoints import Endpoints
from medusa.load import DEFAULT_WINDOW_S
from medusa.schemas import HEARTBEAT_TOPIC, HEARTBEAT_TOPIC_CONFIG
from medusa.settings import StackSettings, kafka_config
from medusa.topics import ensure_topics
from medusa_spark.compiler_priority import CompilerPriority
from medusa_spark.node.hosting import Hosting, NetworkPlan, fragment_of
from medusa_spark.node.membership import Membership
from medusa_spark.node.reporting import Reporting
from medusa_spark.node.state import (
    CatalogClient,
    HostedFragment,
    NodeState,
    PendingTakeover,
    caught_up,
    dpc_state,
)
from medusa_spark.realtime import SLOTS
from medusa_spark.session import jvm_pid
from medusa_spark.warmup import warm_up

__all__ = ["HostedFragment", "NetworkPlan", "Node", "NodeState", "PendingTakeover",
           "caught_up", "dpc_state", "fragment_of"]

log = logging.getLogger("medusa.node")


class Node:
    """The node as the CLI runs it and tests drive it: its parts behind one object."""

    def __init__(self, name: str, participant: str, endpoints: Endpoints,
                 registry: SchemaRegistryClient, spark: SparkSession, checkpoint_root: str,
                 catalog: CatalogClient, secondary: str | None = None,
                 poll_interval_s: float = 1.0, metrics_interval_s: float = 5.0,
                 heartbeat_interval_s: float = 0.5, max_restarts: int = 5,
                 work_dir: Path | None = None, capacity: float | None = None,
                 load_window_s: float = DEFAULT_WINDOW_S) -> None:
        self.poll_interval_s = poll_interval_s
        self.state = NodeState(
            name=name, participant=participant,
            # Other participants' clusters through the links, so a cut link cuts it off.
            endpoints=endpoints.seen_from(participant),
            registry=registry, spark=spark, checkpoint_root=checkpoint_root.rstrip("/"),
            catalog=catalog, secondary=secondary, metrics_interval_s=metrics_interval_s,
            heartbeat_interval_s=heartbeat_interval_s, max_restarts=max_restarts,
            # Spark's cores, less those kept for Real-time Mode's queries.
            capacity=capacity or float(max(1, spark.sparkContext.defaultParallelism -
                                           SLOTS.total)),
            spark_ui=spark.sparkContext.uiWebUrl, load_window_s=load_window_s,
            work_dir=work_dir or StackSettings().run_dir / "nodes" / participant / name,
            tracer=trace.get_tracer("medusa"), incarnation=uuid.uuid4().hex)
        self._membership = Membership(self.state)
        self._reporting = Reporting(self.state)
        self._hosting = Hosting(self.state, self._membership, self._reporting)
        self._compilers = CompilerPriority(jvm_pid(spark))

    @property
    def global_name(self) -> str:
        return self.state.global_name

    @property
    def capacity(self) -> float:
        return self.state.capacity

    @property
    def spark_ui(self) -> str | None:
        return self.state.spark_ui

    @property
    def incarnation(self) -> str:
        """Changes when the node rejoins after being declared failed."""
        return self.state.incarnation

    def register(self) -> Entry | None:
        return self._membership.register()

    def mark_down(self) -> Entry | None:
        return self._membership.mark_down()

    def reconcile(self) -> None:
        self._hosting.reconcile()

    def _follow_rebuilds(self) -> None:
        """The JIT compilers, and the SUnion of each fragment that rebuilds, at a rebuild's
        priority while a query here rebuilds state beside a serving instance: a warm move's
        replica or a scale step's instance catching up (``compiler_priority``,
        ``SUnionProcess.follow_rebuild``). A DPC redo's compilers and SUnion are left at
        the normal priority (its first batch is what a reconciliation waits for), and what
        its query left niced goes back once it has ended."""
        with self.state.lock:
            hosted = list(self.state.hosted.values())
        self._compilers.follow(any(h.run.writer.rebuilding for h in hosted),
                               redoing=any(h.redo is not None for h in hosted))
        for fragment in hosted:
            if fragment.sunion is not None:
                fragment.sunion.follow_rebuild(fragment.run.writer.rebuilding)

    def fragment_loads(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return self._reporting.fragment_loads()

    # -- life cycle -----------------------------------------------------------------------

    def _keep_running(self, what: str, body: Callable[[], None], retry_s: float) -> None:
        """Runs ``body`` until ``stop``; a failure (Kafka or the registry away) is logged and
        retried."""
        while not self.state.stopping.is_set():
            try:
                body()
            except Exception as error:
                log.warning("%s: %s: %s; retrying", self.state.global_name, what, error)
                self.state.stopping.wait(retry_s)

    def run(self) -> None:
        """Register, then follow the catalog until ``stop``."""
        ensure_topics(kafka_config(self.state.bootstrap), [HEARTBEAT_TOPIC], partitions=1,
                      config=HEARTBEAT_TOPIC_CONFIG)
        # Beating before joining: the detector starts the clock at the registration.
        threading.Thread(target=self._keep_running, name="heartbeats", daemon=True,
                         args=("heartbeats", self._membership.beat,
                               self.state.heartbeat_interval_s)).start()
        warm_up(self.state.spark, self.state.bootstrap, HEARTBEAT_TOPIC)
        self.register()
        threading.Thread(target=self._keep_running, name="load-reports", daemon=True,
                         args=("load reports", self._reporting.report,
                               self.state.metrics_interval_s)).start()
        try:
            while not self.state.stopping.is_set():
                try:
                    self.reconcile()
                except CatalogError as error:  # keep running what runs; try again
                    log.warning("%s: %s", self.state.global_name, error)
                self._follow_rebuilds()
                self.state.stopping.wait(self._hosting.poll_interval(self.poll_interval_s))
        finally:
            for name in list(self.state.hosted):
                hosted = self.state.hosted.pop(name)
                try:  # at a batch boundary, so a restart resumes without a duplicate
                    if hosted.run.query.isActive:
                        hosted.run.hand_over(timeout_s=30)
                except Exception as error:
                    log.warning("%s: stopping %s: %s", self.state.global_name, name, error)
                if hosted.sunion is not None:
                    hosted.sunion.stop()
            self._hosting.backups.stop()
            self._hosting.rehearsals.stop()
            try:
                self.mark_down()
            except CatalogError as error:
                log.warning("%s: could not mark itself down: %s", self.state.global_name, error)

    def stop(self) -> None:
        self.state.stopping.set()

