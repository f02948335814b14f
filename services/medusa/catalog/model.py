"""What the catalog holds: one versioned entry per named entity, of seven kinds.

Every name is global: ``participant/entity`` (a participant's own name is just
``participant``; a fragment is ``participant/network/fragment``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

PART = r"[a-z][a-z0-9_-]{0,62}"
"""One segment of a name: a participant, node, stream, network or box."""
NODE_NAME = rf"^{PART}/{PART}$"
NETWORK_NAME = rf"^{PART}/{PART}$"

PartName = Annotated[str, Field(pattern=rf"^{PART}$", examples=["alpha"])]
NodeName = Annotated[str, Field(pattern=NODE_NAME, examples=["alpha/node-1"])]


class Kind(StrEnum):
    PARTICIPANTS = "participants"
    NODES = "nodes"
    STREAMS = "streams"
    NETWORKS = "networks"
    FRAGMENTS = "fragments"
    CONTRACTS = "contracts"
    OFFERS = "offers"

    @property
    def singular(self) -> str:
        return self.value[:-1]

    @property
    def segments(self) -> int:
        """How many ``/``-separated parts a name of this kind has."""
        return {Kind.PARTICIPANTS: 1, Kind.FRAGMENTS: 3}.get(self, 2)


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ParticipantSpec(Spec):
    """An administrative domain: one Kafka cluster with its own nodes."""

    kafka_bootstrap: str = Field(min_length=1, max_length=1000, examples=["127.0.0.1:19092"])
    registry_url: str | None = Field(None, max_length=1000)
    description: str = Field("", max_length=2000)


class NodeSpec(Spec):
    """A node process: one SparkSession hosting the boxes placed on it."""

    secondary: NodeName | None = None
    """The node that takes over this node's boxes when it fails."""
    status: Literal["up", "down", "draining", "failed"] = "up"
    """``failed``: declared dead by the failure detector; its boxes went to other nodes, and
    the incarnation named here is fenced: it stops its boxes and rejoins as a new one."""
    checkpoint_root: str | None = Field(None, max_length=2000)
    """Where this node keeps its boxes' checkpoints; a box moved away is copied from here."""
    incarnation: str | None = Field(None, max_length=100)
    """Changes at every start of the node process."""
    capacity: float = Field(1.0, gt=0, le=1_000_000)
    """Relative capacity, used by the automatic placement."""
    spark_ui: str | None = Field(None, max_length=500, pattern=r"^https?://\S+$",
                                 examples=["http://127.0.0.1:4040"])
    """The URL of the web UI of the node's SparkSession (jobs, stages, SQL, streaming
    queries), which the node reports when it registers; None when it runs without one
    (``MEDUSA_NODE_SPARK_UI_PORT=0``) or has stopped. The UI listens on the loopback
    interface of the node's machine. Only http(s) URLs, since a console links to it."""
    rehearsed: list[str] = Field(default_factory=list, max_length=10_000)
    """The fragments this node backs up (``ha: passive``) whose query it has rehearsed in
    this incarnation: their takeover here is pre-warmed."""


class StreamSpec(Spec):
    """A Kafka topic of the participant's cluster, with its schema."""

    topic: str = Field(min_length=1, max_length=249, pattern=r"^[A-Za-z0-9._-]+$")
    schema_subject: str = Field(min_length=1, max_length=500)
    network: str | None = Field(None, pattern=NETWORK_NAME)
    """The network that declared it, if any."""


class NetworkSpec(Spec):
    """A query network: its YAML definition, which nodes instantiate by name (remote definition)."""

    definition: str = Field(min_length=1, max_length=1_000_000)


FragmentPhase = Literal["placed", "running", "moving", "released", "failed", "warming",
                        "retiring", "retired"]


class InstanceSpec(Spec):
    """One instance of a scaled-out fragment: it computes the keys whose hash falls to
    ``index`` of ``count``, from its own SUnion and checkpoint."""

    of: PartName
    """The fragment's name in its network."""
    index: int = Field(ge=0)
    count: int = Field(ge=1, le=64)
    generation: int = Field(ge=1)
    """Which scale step made it; a new step makes new instances, with new topics."""
    key: list[Annotated[str, Field(min_length=1)]] = Field(max_length=64)
    """Empty for the one instance that replaces an unkeyed fragment (a redeploy): it
    reads all the input."""
    emit_from_ms: int
    """Its results below this stime were written by the instances before it."""
    start_positions: dict[str, dict[int, int]] = Field(default_factory=dict)
    """Input -> partition -> offset its SUnion starts from: a window's span before
    ``emit_from_ms``, so that every window still open there is rebuilt whole."""
    by_partition: bool = False
    """Its input is keyed by ``key``: its SUnion reads only the partitions p with
    p % count == index; otherwise it reads them all and its query keeps its keys' rows."""

    @model_validator(mode="after")
    def _index_below_count(self) -> InstanceSpec:
        if self.index >= self.count:
            raise ValueError(f"instance index {self.index} is not below count {self.count}")
        if not self.key and self.count > 1:
            raise ValueError("instances of an unkeyed fragment: only one can run (count 1)")
        return self


TOPIC_NAME = r"^[A-Za-z0-9._-]{1,249}$"


class TopicUse(BaseModel):
    """A topic a fragment reads or writes, on the cluster of ``participant``."""

    model_config = ConfigDict(extra="forbid")

    participant: PartName
    topic: str = Field(pattern=TOPIC_NAME)


class FragmentSpec(Spec):
    """Where one fragment of a network (a group of boxes run as one Spark query) runs, and
    how far its start or move has come: the unit of placement, moves and takeovers.

    ``placed``: not run yet; ``running`` on ``node``; ``moving``: placed on ``node``
    while the old node still runs it (the new node copies the checkpoint ahead);
    ``released``: the old node stopped it at a batch boundary, and its state is at
    ``checkpoint``, from which the new node resumes it; ``failed``: its query failed
    more often than its node restarts it (``error`` says why). A scale step's new
    instance is ``warming`` while it rebuilds its state beside the old instances, writing
    nothing; the old ones are ``retiring`` once the new ones write, and ``retired`` when
    stopped.

    A warm move (the default for a running fragment): first ``warm_target`` runs a standby
    replica from a copy of the checkpoint until it has caught up (``warm_ready``), with the
    state loaded; then the old node hands over and the replica takes the output over.
    """

    network: str = Field(pattern=NETWORK_NAME)
    boxes: list[Annotated[str, Field(pattern=rf"^{PART}$")]] = Field(min_length=1,
                                                                      max_length=10_000)
    """The network's boxes that run in it."""
    node: NodeName
    phase: FragmentPhase = "placed"
    checkpoint: str | None = Field(None, max_length=2000)
    """Where the fragment's state is, once a node has run it."""
    released_by: NodeName | None = None
    ha: Literal["passive", "active"] = "passive"
    """``passive``: on a failure the fragment restarts from its checkpoint on the secondary
    (upstream backup); ``active``: a replica runs on ``replica`` and takes over at once."""
    replica: NodeName | None = None
    """For ``ha: active``: the node running the standby replica."""
    replica_ready: bool = False
    """Set by the replica's node once the standby runs."""
    warm_target: NodeName | None = None
    """During a warm move: the node that runs a standby replica to take the fragment over."""
    warm_ready: bool = False
    """Set by ``warm_target`` once its replica has caught up with the running fragment."""
    takeover_trace: str | None = Field(None, max_length=200)
    """W3C traceparent of the failure that moved it here, continued by the new node."""
    error: str | None = Field(None, max_length=4000)
    """The last failure of its query, set by the node that runs it; None once it runs."""
    restarts: int = Field(0, ge=0)
    """How often its node restarted the query from the checkpoint after a failure."""
    instance: InstanceSpec | None = None
    """Set on each instance of a scaled-out fragment (``medusa scale``)."""
    retired_watermark_ms: int | None = None
    """Set by its node once a ``retiring`` instance has stopped: the watermark of its last
    committed batch (its results below it are written)."""
    emit_until_ms: int | None = None
    """Set by ``medusa scale`` on the instances it replaces: they write no result from this
    stime on (at least), their replacements do."""
    emit_cut_ms: int | None = None
    """Set by its node in answer to ``emit_until_ms``: the stime from which it writes no
    result (``emit_until_ms``, or past what it had written already if that is further)."""
    promise_hold_ms: int | None = None
    """Set by ``medusa scale`` on its new instances while the old ones finish: their
    BOUNDARY promises on the outputs another fragment reads go no further than this (the
    cut) until then."""
    replaced: bool | None = None
    """Set by a redeploy (``medusa deploy`` without ``--restart``) on a changed fragment's
    instances: their nodes keep running the definition they have until the new one's take
    over."""
    boxes_after: list[Annotated[str, Field(pattern=rf"^{PART}$")]] | None = Field(
        None, max_length=10_000)
    """Set with ``replaced`` when the new definition changes the fragment's boxes: its
    boxes under that definition. Nodes count both lists as the fragment's, so every box of
    either definition is in a fragment until the new instances, which list them, exist."""
    sunion_topic: str | None = Field(None, max_length=500)
    """Set with ``retired_watermark_ms``: its SUnion's topic, on its node's cluster, whose
    buckets say where the inputs stood at each stime."""
    dpc_state: Literal["STABLE", "UP_FAILURE", "STABILIZATION"] = "STABLE"
    """DPC: ``UP_FAILURE`` while an input is failed (or tentative) and its results are
    TENTATIVE; ``STABILIZATION`` while it reconciles; set by the node that runs it."""
    reads: list[TopicUse] = Field(default_factory=list, max_length=10_000)
    """The topics it reads outside its node's cluster: its inputs, and the SUnion topic on
    its origin's cluster that a moved fragment rebases from (set by the deploy)."""
    writes: list[TopicUse] = Field(default_factory=list, max_length=10_000)
    """The topics its outputs go to (set by the deploy)."""
    source_topic: str | None = Field(None, pattern=TOPIC_NAME)
    """The topic its SUnion writes, on the cluster of whichever node runs it (set by the
    deploy): the next node of a move across clusters reads where it stood there."""
    contract: str | None = Field(None, pattern=rf"^{PART}/{PART}$")
    """BPM: the contract it runs under on a partner's node; its access there ends with it."""
    dpc_delay_ms: int | None = Field(None, ge=0)
    """DPC's delay D from its network's availability bound (None: no bound; the deploy)."""
    reader_replica: NodeName | None = None
    """With a bound, while it runs away from its outputs' cluster: the node of the output's
    participant that runs its reader-side replica (``medusa.reader_side``)."""
    serving: NodeName | None = None
    """Set by the reader-side replica's node while that replica writes the output."""


ContractStatus = Literal["proposed", "active", "revoked"]
MOVABLE_NAME = rf"^{PART}/{PART}(/{PART})?$"
"""A network (participant/network) or one fragment of it (participant/network/fragment)."""


class ContractSpec(Spec):
    """Terms under which ``origin`` may move load to ``host`` (BPM): ``origin`` pays a unit
    price within [price - delta, price] per unit of load and period. Proposed by one party,
    it is active only once the other accepted it; revoked, it ends at the end of its
    current period (``ends_at``), and load under it returns."""

    origin: PartName
    """The participant whose load moves, and who pays."""
    host: PartName
    """The participant that runs it, and is paid."""
    price: float = Field(ge=0, le=1e12)
    """The upper end p of the price range [p - delta, p], per unit of load and period."""
    delta: float = Field(0.0, ge=0, le=1e12)
    movable: list[Annotated[str, Field(pattern=MOVABLE_NAME)]] = Field(min_length=1,
                                                                       max_length=10_000)
    """Networks or fragments of ``origin`` that may move under it."""
    period_s: float = Field(3600.0, gt=0, le=1e9)
    """Load is paid for per period; a revoked contract ends with its period."""
    proposed_by: PartName
    status: ContractStatus = "proposed"
    accepted_at: int | None = Field(None, ge=0)
    """Milliseconds since the epoch; its periods are counted from here."""
    ends_at: int | None = Field(None, ge=0)
    """Once revoked: when it ends (the end of the period it was revoked in)."""

    @property
    def parties(self) -> tuple[str, str]:
        return self.origin, self.host

    @model_validator(mode="after")
    def _consistent(self) -> ContractSpec:
        if self.origin == self.host:
            raise ValueError("a contract needs two different parties (origin and host)")
        if self.delta > self.price:
            raise ValueError("delta must not exceed price (the range is [price - delta, price])")
        if self.proposed_by not in self.parties:
            raise ValueError(f"proposed_by: {self.proposed_by!r} is neither the origin nor "
                             "the host")
        for name in self.movable:
            if name.split("/", 1)[0] != self.origin:
                raise ValueError(f"movable: {name} is not load of the origin {self.origin!r}")
        if self.status == "active" and self.accepted_at is None:
            raise ValueError("accepted_at: an active contract says when it was accepted")
        if self.status == "revoked" and self.ends_at is None:
            raise ValueError("ends_at: a revoked contract says when it ends")
        return self


OfferStatus = Literal["open", "accepted", "refused", "withdrawn", "done"]
FRAGMENT_NAME = rf"^{PART}/{PART}/{PART}$"


class OfferSpec(Spec):
    """BPM: ``origin`` offers ``host`` one of its fragments under a contract, at a unit price.

    ``open`` until the host's agent answers: ``accepted`` (naming the node that takes it) or
    ``refused`` (with the reason); the origin's agent then moves the fragment (``done``), or
    withdraws an offer left unanswered (``withdrawn``).
    """

    fragment: str = Field(pattern=FRAGMENT_NAME)
    origin: PartName
    host: PartName
    contract: str = Field(pattern=rf"^{PART}/{PART}$")
    unit_price: float = Field(ge=0, le=1e12)
    load: float = Field(ge=0, le=1e6)
    """The fragment's load when offered, in processing slots."""
    status: OfferStatus = "open"
    reason: str = Field("", max_length=2000)
    node: NodeName | None = None
    """Once accepted: the host's node that takes the fragment."""
    made_at: int = Field(0, ge=0)
    decided_at: int | None = Field(None, ge=0)
    trace: str | None = Field(None, max_length=200)
    """W3C traceparent of the move's trace (offer, answer, hand-over, first output)."""

    @model_validator(mode="after")
    def _consistent(self) -> OfferSpec:
        if self.origin == self.host:
            raise ValueError("an offer goes from one participant to another")
        if self.fragment.split("/", 1)[0] != self.origin:
            raise ValueError(f"fragment: {self.fragment} is not load of {self.origin}")
        if self.status == "accepted" and self.node is None:
            raise ValueError("node: an accepted offer names the node that takes it")
        return self


SPECS: dict[Kind, type[Spec]] = {
    Kind.PARTICIPANTS: ParticipantSpec,
    Kind.NODES: NodeSpec,
    Kind.STREAMS: StreamSpec,
    Kind.NETWORKS: NetworkSpec,
    Kind.FRAGMENTS: FragmentSpec,
    Kind.CONTRACTS: ContractSpec,
    Kind.OFFERS: OfferSpec,
}


class Entry(BaseModel):
    """One entity as stored: its kind, global name, version and spec."""

    kind: Kind
    name: str
    version: int = Field(ge=1)
    updated_at: int
    """Milliseconds since the epoch."""
    spec: dict[str, Any]

    @property
    def participant(self) -> str:
        return self.name.split("/", 1)[0]


def key_of(kind: Kind, name: str) -> str:
    return f"{kind.value}/{name}"
