"""What the node's parts share: one ``NodeState`` (its settings, hosted fragments, lock and
catalog client), given to each part rather than copied, and what a hosted fragment is."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from opentelemetry.trace import Tracer
from pyspark.sql import SparkSession

from medusa.endpoints import Endpoints
from medusa_spark.fragment_run import FragmentRun, progress_time
from medusa_spark.output_watch import OutputWatch
from medusa_spark.sunion_process import SUnionProcess

CAUGHT_UP_RECORDS = 1000
"""A replica this close to the end of its input takes a fragment over within a batch."""

PACE_TRIGGERS = 2
"""A rebuilt replica keeps pace once a batch takes at most this many trigger intervals..."""
PACE_STEADY = 1.1
"""...or, for a fragment whose batches take longer anyway, once its last three batches
took within this factor of each other (they have stopped shrinking)..."""
PACE_WAIT_S = 30.0
"""...or once it has read near the end of its input for this long, whatever its pace."""

CatalogClient = Any  # medusa.catalog.client.CatalogClient, or an in-memory one in tests


@dataclass
class PendingTakeover:
    """A takeover's span, open until the fragment writes its first output after it."""

    span: Any
    started_ns: int
    ended: threading.Event = field(default_factory=threading.Event)
    reported: bool = False
    """Whether the log has said where its first batches' time went."""


@dataclass
class HostedFragment:
    name: str
    """Global name: participant/network/fragment."""
    network_version: int
    run: FragmentRun
    started_at: float
    sunion: SUnionProcess | None = None
    """A standby replica's is started and waits to go at the takeover (it reads the
    primary's SUnion topic until then)."""
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
    caught up and is stable, then takes the output back (``may_take_back``)."""
    stable_since: tuple[FragmentRun, float] | None = None
    """The query that ``may_take_back`` has seen STABLE, and since when (wall clock)
    without a break (the run itself, not its ``id``, which a later run may reuse)."""
    warming: bool = False
    """A scale step's new instance: it rebuilds its state beside the old instances, as a
    standby, until the step switches the output over to it."""
    redo: FragmentRun | None = None
    """DPC: the query that redoes an UP_FAILURE period beside this one, from a copy of its
    checkpoint rolled back, as a standby, until it takes the output over."""
    retiring_since: float | None = None
    """When (monotonic clock) a scale step asked it to stop, or it last ran a batch since:
    it stops once its outputs have promised the step's cut, or once its input is quiet."""
    retiring_batches: int = 0
    own_input: bool = False
    """A warm move's replica on another cluster than the old node's: its SUnion runs here
    from the start, on this cluster's topic, so the takeover switches the output alone."""
    switch_asked_at: float | None = None
    """When (wall clock) such a replica was first asked to take the output over."""
    switch_batch: int | None = None
    """The replica's newest batch when it was first asked to take the output over."""
    switch_reason: str | None = None
    """Why a warm move's replica took the output over when it did (``ready_to_take_over``)."""
    released_after_batch: int | None = None
    """A held replica's newest batch when its eviction was released for the switch: it
    takes the output over once the batch then in progress has ended."""
    released_at: float | None = None
    """When (wall clock) it was released."""
    replaced: bool = False
    """A redeploy replaces it by instances of a new definition, beside it (``deploy``)."""
    pace_batch: int = -1
    """The newest batch ``keeping_pace`` has seen, and the durations (ms) of the last three."""
    pace_ms: tuple[int, ...] = ()
    pace_since: float | None = None
    """When (monotonic clock) ``keeping_pace`` was first asked."""

    @property
    def reader(self) -> bool:
        return self.output_watch is not None


def caught_up(run: FragmentRun) -> bool:
    """Whether a standby replica's query has restored its state and reads less than a
    batch behind the end of its input."""
    progress: dict[str, Any] = run.query.lastProgress or {}
    if not progress or run.failure() is not None:
        return False
    return offsets_behind(progress) <= max(CAUGHT_UP_RECORDS,
                                           int(progress.get("numInputRows") or 0))


def offsets_behind(progress: dict[str, Any]) -> int:
    """How many records a batch left unread in its furthest-behind source, of those there
    were when it was planned (Spark's ``maxOffsetsBehindLatest``; 0 without a report)."""
    return max((int(float((source.get("metrics") or {}).get("maxOffsetsBehindLatest", 0)
                          or 0)) for source in progress.get("sources", [])), default=0)


def may_take_back(hosted: HostedFragment) -> bool:
    """Whether a primary that yielded its output to its reader-side replica takes it back:
    STABLE, and a batch that began since it was seen STABLE read all its SUnion had
    released. A query just restarted from its checkpoint says STABLE before it has read
    anything, while the tentative records and the REDO of the cut may lie ahead of it;
    the SUnion writes its REDO before it says STABLE, so such a batch has read the REDO
    too, and the query is reconciling (not STABLE) if it had a period to redo."""
    run = hosted.run
    if not caught_up(run) or dpc_state(hosted) != "STABLE":
        hosted.stable_since = None
        return False
    if hosted.stable_since is None or hosted.stable_since[0] is not run:
        hosted.stable_since = (run, time.time())
        return False
    progress: dict[str, Any] = run.query.lastProgress or {}
    began = progress_time(progress)
    return began is not None and began > hosted.stable_since[1] and \
        offsets_behind(progress) == 0


def keeping_pace(hosted: HostedFragment) -> bool:
    """Whether a rebuilt replica that reads near the end of its input (``caught_up``, asked
    first) also runs its batches as fast as a running fragment does: after loading a
    large state, its first batches work off the input of the load (at 1.8 GB: 6 to 7 s
    each for 1,000 to 4,000 rows, where a batch of the running fragment takes 1 to 2 s for
    150 to 300), and one that took over then would pay them in its output. Its newest
    batch took at most ``PACE_TRIGGERS`` trigger intervals, or its last three within
    ``PACE_STEADY`` of each other; or it has been asked for ``PACE_WAIT_S``."""
    now = time.monotonic()
    if hosted.pace_since is None:
        hosted.pace_since = now
    progress: dict[str, Any] = hosted.run.query.lastProgress or {}
    batch = progress.get("batchId")
    if batch is not None and batch != hosted.pace_batch:
        hosted.pace_batch = int(batch)
        hosted.pace_ms = (*hosted.pace_ms[-2:], int(progress.get("batchDuration") or 0))
    if now - hosted.pace_since >= PACE_WAIT_S:
        return True
    if not hosted.pace_ms:
        return False
    trigger = hosted.run.trigger_ms
    if trigger and hosted.pace_ms[-1] <= PACE_TRIGGERS * trigger:
        return True
    return len(hosted.pace_ms) == 3 and \
        max(hosted.pace_ms) <= PACE_STEADY * max(1, min(hosted.pace_ms))


def dpc_state(hosted: HostedFragment, sunion_state: dict[str, Any] | None = None) -> str:
    """STABLE, UP_FAILURE or STABILIZATION, from the SUnion (is an input failed or
    tentative? are they all back?) and the query (are its results tentative? is it
    redoing?). ``sunion_state``: the SUnion's state when already read."""
    writer = hosted.run.writer.dpc_state
    if writer == "STABILIZATION" or hosted.redo is not None:
        return "STABILIZATION"
    if sunion_state is None:
        sunion_state = hosted.sunion.state() if hosted.sunion is not None else {}
    sunion = sunion_state.get("dpc_state")
    if sunion in ("UP_FAILURE", "STABILIZATION"):
        return str(sunion)
    # The SUnion wrote its REDO; the query has not reconciled yet.
    return "STABILIZATION" if writer == "UP_FAILURE" else "STABLE"


def published_dpc_state(hosted: HostedFragment, replica_serves: bool = False,
                        sunion_state: dict[str, Any] | None = None) -> str:
    """The DPC state the catalog shows for the fragment: ``dpc_state``, except that a
    primary whose reader-side replica serves its output (``replica_serves``: the catalog
    says so; or it has yielded it) is STABLE only once it writes that output again
    (``may_take_back``). Fenced, or restarted from its checkpoint, it says STABLE before
    it has read the tentative records and the REDO ahead of it, and a reader of the
    catalog would take the reconciliation for done. ``sunion_state``: as ``dpc_state``'s."""
    state = dpc_state(hosted, sunion_state)
    yielded = hosted.yielded or replica_serves
    return "STABILIZATION" if yielded and state == "STABLE" else state


@dataclass
class NodeState:
    """The node's settings and its mutable state, one object that every part reads and
    changes (``hosted`` under ``lock`` where another thread reads it)."""

    name: str
    participant: str
    endpoints: Endpoints
    """As seen from this participant (``Endpoints.seen_from``)."""
    registry: SchemaRegistryClient
    spark: SparkSession
    checkpoint_root: str
    catalog: CatalogClient
    secondary: str | None
    metrics_interval_s: float
    heartbeat_interval_s: float
    max_restarts: int
    capacity: float
    """Processing slots, in the unit of a fragment's load: measured as Spark's cores."""
    spark_ui: str | None
    """Where its SparkSession's web UI answers (None: it runs without one)."""
    load_window_s: float
    work_dir: Path
    tracer: Tracer
    incarnation: str
    hosted: dict[str, HostedFragment] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    stopping: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def global_name(self) -> str:
        return f"{self.participant}/{self.name}"

    @property
    def bootstrap(self) -> str:
        return self.endpoints.bootstrap(self.participant)


def keep_pace(hosted: HostedFragment) -> None:
    """A scale step's new instance that has caught up runs its next batches at the normal
    priority: niced, it fell a batch behind the instance it replaces whenever the machine
    was busy, and took the output over that late. (A move's replica stays niced until
    the input switch, ``FragmentRun.catch_up``: beside the old node at one priority from
    its readiness on, both ran at half speed.)"""
    hosted.run.writer.rebuild = False
