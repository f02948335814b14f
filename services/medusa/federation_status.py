"""What the federation is doing: the catalog's participants, nodes and fragments, with each
fragment's rates, lag, errors and SUnion state, and its boxes' rates, from the nodes'
latest load reports."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from medusa.catalog.client import CatalogClient, CatalogError
from medusa.catalog.model import Entry, Kind
from medusa.endpoints import Endpoints
from medusa.load import cost_of_removing, participant_loads
from medusa.registry import SERDE_CONFIG
from medusa.schemas import NODE_LOAD_TOPIC, epoch_ms
from medusa.settings import END_OF_LOG_FETCH_WAIT_MS, kafka_config

RECENT_REPORTS = 200
"""How far back each participant's load topic is read for the latest report per node."""


@dataclass
class BoxStatus:
    """One box of a fragment, with its own rows per second (from the node's load report)."""

    name: str
    """Global name: participant/network/box."""
    input_rate: float | None = None
    """Rows in per second."""
    processing_rate: float | None = None
    """Rows out per second."""


@dataclass
class SUnionStatus:
    """The state of a fragment's SUnion, as its node last reported it."""

    held_buckets: int | None = None
    held_tuples: int | None = None
    released_through: int | None = None
    """The stime through which buckets are released stably (None: none yet)."""
    lag: int | None = None
    """Records of its inputs not read yet, summed over their partitions."""
    dead_lettered: int | None = None
    tentative_through: int | None = None
    """DPC: the stime through which buckets went out TENTATIVE (None: none pending)."""
    failed_inputs: list[str] = field(default_factory=list)
    redos: int = 0


@dataclass
class FragmentStatus:
    name: str
    """Global name: participant/network/fragment."""
    network: str
    node: str
    phase: str
    """The catalog's phase: placed, running, moving, released or failed."""
    state: str | None = None
    """What its node last reported: running, standby, restarting or failed (None: no report)."""
    ha: str = "passive"
    replica: str | None = None
    """ha: active only: the node of the standby replica (None: none)."""
    replica_ready: bool = False
    warm_target: str | None = None
    """During a warm move: the node whose replica is loading the state to take it over."""
    warm_ready: bool = False
    reader_replica: str | None = None
    """The node of its reader-side replica (``medusa.reader_side``), if it has one."""
    serving: str | None = None
    """The reader-side replica's node while that replica writes the output (None: the
    fragment's own node does)."""
    input_rate: float | None = None
    processing_rate: float | None = None
    batch_duration_ms: int | None = None
    batch_phases_ms: dict[str, float] = field(default_factory=dict)
    """Where its recent batches spent their time, each phase's median (``batch_phases``);
    empty before a batch with input."""
    execution: str | None = None
    """How its query runs: micro-batch or real-time (None: no report yet)."""
    execution_why: str | None = None
    """Why it runs that way (``medusa_spark.realtime``)."""
    execution_asked: str | None = None
    """How its network asks its fragments to run (its field ``execution``)."""
    lag: int | None = None
    restarts: int = 0
    dpc_state: str = "STABLE"
    """STABLE, UP_FAILURE or STABILIZATION (DPC)."""
    tentative_results: int = 0
    corrections: int = 0
    load: float | None = None
    """Share of one processing slot it needs (``medusa.load``)."""
    marginal_cost: float | None = None
    """How much its participant's cost D(u) would fall without it."""
    error: str | None = None
    """The failure of its query, from the catalog and from the node's report (both, when
    they differ); None when it runs."""
    sunion: SUnionStatus | None = None
    boxes: list[BoxStatus] = field(default_factory=list)


@dataclass
class NodeStatus:
    name: str
    status: str
    secondary: str | None
    fragments: int
    utilisation: float | None = None
    report_age_s: float | None = None
    capacity: float | None = None
    load: float | None = None
    spark_ui: str | None = None
    """The URL of the node's Spark web UI, from its catalog entry (None: it has none)."""
    rehearsed: list[str] = field(default_factory=list)
    """The fragments it backs up whose query it has rehearsed: their takeover here is
    pre-warmed (``ha: passive``)."""


@dataclass
class FederationStatus:
    participants: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[NodeStatus] = field(default_factory=list)
    fragments: list[FragmentStatus] = field(default_factory=list)
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def latest_load_reports(endpoints: Endpoints, registry: SchemaRegistryClient,
                        timeout_s: float = 5.0) -> dict[str, dict[str, Any]]:
    """Node -> its newest load report, over every participant's load topic."""
    deserialize = AvroDeserializer(registry, conf=SERDE_CONFIG)
    latest: dict[str, dict[str, Any]] = {}
    for bootstrap in endpoints.kafka.values():
        consumer = Consumer(kafka_config(bootstrap, {"log_level": 0}, group_id="medusa-status",
                                         enable_auto_commit=False, enable_partition_eof=True,
                                         fetch_wait_max_ms=END_OF_LOG_FETCH_WAIT_MS))
        try:
            metadata = consumer.list_topics(NODE_LOAD_TOPIC, timeout=timeout_s)
            described = metadata.topics.get(NODE_LOAD_TOPIC)
            if described is None or described.error is not None:
                continue
            partitions = []
            for partition in described.partitions:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(NODE_LOAD_TOPIC, partition), timeout=timeout_s)
                if high > low:
                    partitions.append(TopicPartition(NODE_LOAD_TOPIC, partition,
                                                     max(low, high - RECENT_REPORTS)))
            consumer.assign(partitions)
            pending, deadline = len(partitions), time.monotonic() + timeout_s
            while pending and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    pending -= error.code() == KafkaError._PARTITION_EOF
                    continue
                if message.value() is None:  # a BOUNDARY
                    continue
                report = deserialize(message.value(),
                                     SerializationContext(NODE_LOAD_TOPIC, MessageField.VALUE))
                if not isinstance(report, dict):
                    continue
                known = latest.get(report["node"])
                if known is None or report["reported_at"] >= known["reported_at"]:
                    latest[report["node"]] = report
        finally:
            consumer.close()
    return latest


def federation_status(endpoints: Endpoints, registry: SchemaRegistryClient) -> FederationStatus:
    try:
        with CatalogClient(endpoints.catalog_url, timeout_s=5) as catalog:
            participants = catalog.list(Kind.PARTICIPANTS)
            nodes = catalog.list(Kind.NODES)
            fragments = catalog.list(Kind.FRAGMENTS)
    except CatalogError as error:
        return FederationStatus(error=str(error))
    reports = latest_load_reports(endpoints, registry)
    return build_status(participants, nodes, fragments, reports, time.time() * 1000)


def build_status(participants: list[Entry], nodes: list[Entry], fragments: list[Entry],
                 reports: dict[str, dict[str, Any]], now_ms: float) -> FederationStatus:
    """The status from the catalog's entries and the nodes' latest load reports."""
    status = FederationStatus()
    # Load and cost count the nodes that are up (a failed node's last report is stale).
    loads = participant_loads(reports[n.name] for n in nodes
                              if n.name in reports and n.spec.get("status", "up") == "up")
    for p in participants:
        load = loads.get(p.name)
        status.participants.append({
            "name": p.name, **p.spec,
            "capacity": load.capacity if load else None, "load": load.load if load else None,
            "utilisation": load.utilisation if load else None,
            "cost": load.cost if load else None})
    for node in nodes:
        report = reports.get(node.name)
        status.nodes.append(NodeStatus(
            node.name, node.spec.get("status", "?"), node.spec.get("secondary"),
            sum(f.spec.get("node") == node.name for f in fragments),
            report["utilisation"] if report else None,
            round((now_ms - epoch_ms(report["reported_at"])) / 1000, 1) if report else None,
            report.get("capacity") if report else None, report.get("load") if report else None,
            node.spec.get("spark_ui"), list(node.spec.get("rehearsed") or [])))
    for fragment in sorted(fragments, key=lambda f: f.name):
        shown = _fragment_status(fragment, reports)
        owner = loads.get(str(fragment.spec.get("node", "")).split("/", 1)[0])
        if shown.load is not None and owner is not None:
            shown.marginal_cost = cost_of_removing(owner.load, owner.capacity, shown.load)
        status.fragments.append(shown)
    return status


def batch_phases_of(operators: str | None) -> dict[str, float]:
    """The phases in a load report's ``operators`` JSON (none from an older node)."""
    try:
        phases = json.loads(operators or "{}").get("batch_phases_ms") or {}
    except (ValueError, AttributeError):
        return {}
    return {str(k): float(v) for k, v in phases.items() if isinstance(v, int | float)}


def _execution(operators: str | None) -> tuple[str | None, str | None, str | None]:
    """How the fragment's query runs, why, and how its network asks it to, from a load
    report (none from an older node)."""
    try:
        execution = json.loads(operators or "{}").get("execution") or {}
        return execution.get("mode"), execution.get("why"), execution.get("asked")
    except (ValueError, AttributeError):
        return None, None, None


def _fragment_status(entry: Entry, reports: dict[str, dict[str, Any]]) -> FragmentStatus:
    spec = entry.spec
    network = spec.get("network") or entry.name.rsplit("/", 1)[0]
    report, load = _load_of(entry.name, spec.get("node"), spec.get("phase") == "moving",
                            reports)
    fragment = FragmentStatus(
        entry.name, network, spec.get("node", "?"), spec.get("phase", "?"),
        ha=spec.get("ha", "passive"), replica=spec.get("replica"),
        replica_ready=bool(spec.get("replica_ready")),
        warm_target=spec.get("warm_target"), warm_ready=bool(spec.get("warm_ready")),
        reader_replica=spec.get("reader_replica"), serving=spec.get("serving"),
        restarts=int(spec.get("restarts") or 0),
        dpc_state=spec.get("dpc_state") or "STABLE")
    errors = [spec.get("error")]
    if load is not None:
        fragment.state = load.get("state")
        fragment.input_rate = load.get("input_rate")
        fragment.processing_rate = load.get("processing_rate")
        fragment.batch_duration_ms = load.get("batch_duration_ms")
        fragment.batch_phases_ms = batch_phases_of(load.get("operators"))
        fragment.execution, fragment.execution_why, fragment.execution_asked = \
            _execution(load.get("operators"))
        fragment.lag = load.get("lag")
        fragment.restarts = max(fragment.restarts, int(load.get("restarts") or 0))
        fragment.dpc_state = load.get("dpc_state") or fragment.dpc_state
        fragment.tentative_results = int(load.get("tentative_results") or 0)
        fragment.corrections = int(load.get("corrections") or 0)
        fragment.load = load.get("load")
        errors.append(load.get("error"))
        fragment.sunion = _sunion_status(load.get("sunion"))
    distinct = [e for i, e in enumerate(errors) if e and e not in errors[:i]]
    fragment.error = "\n".join(distinct) if distinct else None
    box_loads = {b["box"]: b for b in (report or {}).get("boxes", [])}
    for box in spec.get("boxes", []):
        name = f"{network}/{box}"
        box_load = box_loads.get(name) if load is not None else None
        fragment.boxes.append(BoxStatus(
            name, box_load.get("input_rate") if box_load else None,
            box_load.get("processing_rate") if box_load else None))
    return fragment


def _load_of(fragment: str, node: str | None, moving: bool,
             reports: dict[str, dict[str, Any]]
             ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The report, and its entry for ``fragment``, that tell how the fragment runs: its
    node's; during a move, while its node has not started it, the old node's."""
    own = reports.get(node) if node is not None else None
    for load in (own or {}).get("fragments") or []:
        if load.get("fragment") == fragment:
            return own, load
    if moving:
        for name, report in sorted(reports.items()):
            for load in report.get("fragments") or []:
                if (name != node and load.get("fragment") == fragment
                        and load.get("state") != "standby"):
                    return report, load
    return None, None


def _sunion_status(raw: Any) -> SUnionStatus | None:
    """The SUnion's state from a load report's JSON (None when it reported none)."""
    try:
        state = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return None
    if not isinstance(state, dict) or not state:
        return None
    lags = [partition.get("lag") for spec in (state.get("inputs") or {}).values()
            if isinstance(spec, dict)
            for partition in (spec.get("partitions") or {}).values()
            if isinstance(partition, dict)]
    known = [lag for lag in lags if isinstance(lag, int)]
    # The SUnion in the query reports its lag whole (its source's maxOffsetsBehindLatest).
    lag = sum(known) if known else state.get("lag")
    return SUnionStatus(state.get("held_buckets"), state.get("held_tuples"),
                        state.get("released_through"), lag if isinstance(lag, int) else None,
                        state.get("dead_lettered"), state.get("tentative_through"),
                        list(state.get("failed_inputs") or []), int(state.get("redos") or 0))
