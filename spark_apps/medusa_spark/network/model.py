"""The query network file: streams, boxes and arrows."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from medusa.errors import MedusaError
from medusa_spark.durations import duration_ms


class NetworkError(MedusaError, ValueError):
    """A query network that cannot run; the message names the box (or stream) and field."""


class StreamSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    topic: str
    participant: str
    schema_name: str = Field(alias="schema")
    """A schema file under schemas/, without .avsc."""
    key: list[str] = Field(default_factory=list)
    """The fields its producers key its records by (Kafka's default partitioner), if any:
    a fragment keyed the same way can be scaled out by partition (see ``scaling``)."""


class BoxSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    type: str
    params: dict[str, Any] = Field(default_factory=dict)
    participant: str | None = None
    """Where the box's own output topic lives when no stream names it; the network's default."""
    key: list[str] = Field(default_factory=list)
    """Output fields that make the Kafka key (so related results share a partition)."""
    ha: Literal["passive", "active"] = "passive"
    """On a node failure: ``passive`` restarts the box's fragment on the node's secondary
    from its checkpoint; ``active`` keeps a replica running there, which takes over at once.
    A fragment is ``active`` when any of its boxes is."""
    state_store: Literal["rocksdb", "memory"] = "rocksdb"
    """Where the box's fragment keeps its state between batches: ``rocksdb`` (Spark's
    RocksDB store, for large state) or ``memory`` (Spark's in-memory store, in the node's
    JVM heap); both checkpoint what each batch changed. A stream-stream join goes through
    every row it holds each batch to evict, a point read per row in RocksDB: a join that
    holds many rows runs faster in ``memory``, if they fit. A fragment keeps its state in
    memory when any of its boxes asks for it; a change starts it afresh (another
    checkpoint)."""
    fragment: str | None = Field(None, pattern=r"^[a-z][a-z0-9_-]{0,62}$")
    """The fragment (one Spark query) the box runs in; by default, the boxes a placement
    puts on one node form one fragment (see ``network.fragments``)."""


class ArrowSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    source: str = Field(alias="from")
    target: str = Field(alias="to")

    @property
    def target_box(self) -> str:
        return self.target.split(".", 1)[0]

    @property
    def target_port(self) -> str | None:
        parts = self.target.split(".", 1)
        return parts[1] if len(parts) == 2 else None


class NetworkSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[a-z][a-z0-9-]*$")
    participant: str = "alpha"
    """Default participant of intermediate topics."""
    partitions: int = Field(4, ge=1)
    """Partitions of the topics the network creates."""
    state_partitions: int | None = Field(None, ge=1)
    """Partitions of the fragments' state and shuffles (Spark's shuffle partitions), fixed
    when a fragment first starts; the node's default (4) when not given. Each partition
    costs every batch a task and a state store commit, used or not: one for a network
    whose state is one group."""
    trigger: str = "500 milliseconds"
    execution: Literal["micro-batch", "real-time"] = "micro-batch"
    """How its fragments' queries run: ``real-time`` runs each fragment that can in Spark's
    Real-time Mode (stateless boxes, no active standby; see ``medusa_spark.realtime``),
    each record passed on as it is read; the rest run on micro-batches of ``trigger``, and
    ``medusa status`` says why."""
    sunion: Literal["process", "in-query"] = "process"
    """Where each fragment's SUnion runs: ``process``, a process of its own writing the
    merged buckets to a topic the query reads; ``in-query``, inside the query as its Spark
    source (``medusa.spark.sunion``), reading the inputs directly, one Kafka hop and no
    Python per record fewer. ``in-query`` does not yet support DPC (``availability_bound``),
    ``execution: real-time``, ``ha: active``, moves or scale steps."""
    bucket: str = "1 second"
    """The SUnion's bucket in stime: a fragment's input is released bucket by bucket once
    every input partition's BOUNDARY has passed it (the producers' BOUNDARY interval)."""
    topic_prefix: str = ""
    """Put in front of every topic of the network, to run a copy of it on topics of its own."""
    availability_bound: str | None = None
    """DPC's X, e.g. '3 seconds': the longest a result may be delayed by a failed input.
    Split into a delay D per fragment (see ``fragments.fragment_delays``); None: no DPC,
    every fragment waits for all its inputs however long."""
    streams: dict[str, StreamSpec]
    boxes: dict[str, BoxSpec]
    arrows: list[ArrowSpec]

    @field_validator("trigger", "bucket", "availability_bound")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None:
            duration_ms(value)
        return value

    @model_validator(mode="after")
    def _sunion_in_query_supports(self) -> NetworkSpec:
        """What the in-query SUnion does not do yet is refused here, not met at run time."""
        if self.sunion != "in-query":
            return self
        if self.availability_bound is not None:
            raise ValueError("sunion 'in-query' does not support DPC yet: leave "
                             "'availability_bound' out, or use sunion 'process'")
        if self.execution != "micro-batch":
            raise ValueError("sunion 'in-query' runs on micro-batches only so far: use "
                             "execution 'micro-batch', or sunion 'process'")
        active = sorted(name for name, box in self.boxes.items() if box.ha == "active")
        if active:
            raise ValueError(f"sunion 'in-query' does not support ha 'active' yet (box "
                             f"{active[0]!r}): use ha 'passive', or sunion 'process'")
        return self

    def sunion_in_query_refusal(self, network: str, what: str) -> str | None:
        """Why this network's fragments cannot be ``what`` (moved, scaled) yet: moves and
        scale steps do not hand over a fragment whose SUnion runs in its query; None when
        they can."""
        if self.sunion != "in-query":
            return None
        return (f"network {network} runs its SUnions in the query (sunion: in-query): its "
                f"fragments cannot be {what} yet; redeploy it with sunion: process to do so")

    def intermediate_topic(self, box: str) -> str:
        return f"medusa.{self.name}.{box}"


def parse_network(text: str, origin: str = "<network>") -> NetworkSpec:
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise NetworkError(f"{origin}: not valid YAML: {error}") from None
    except RecursionError:
        # PyYAML composes nested collections recursively: hundreds of levels exhaust the stack.
        raise NetworkError(f"{origin}: not valid YAML: collections nested too deeply") from None
    if not isinstance(raw, dict):
        raise NetworkError(f"{origin}: expected a mapping with streams, boxes and arrows")
    try:
        return NetworkSpec.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        raise NetworkError(f"{origin}: {_describe(first['loc'])}: {first['msg']}") from None


def _describe(location: tuple[int | str, ...]) -> str:
    # The location's parts, not its dotted text: a box or stream name may contain a dot.
    parts = [str(part) for part in location]
    if not parts:  # a rule over several fields, which its message names
        return "network"
    if len(parts) >= 2 and parts[0] in ("boxes", "streams"):
        kind = "box" if parts[0] == "boxes" else "stream"
        rest = ".".join(parts[2:])
        return f"{kind} {parts[1]!r}" + (f", field {rest!r}" if rest else "")
    return f"field {'.'.join(parts)!r}"


def renamed_network(text: str, name: str, origin: str = "<network>") -> str:
    """The network's YAML under another name (its fragments and topics follow the name)."""
    parse_network(text, origin)
    renamed = yaml.safe_dump({**yaml.safe_load(text), "name": name}, sort_keys=False)
    parse_network(renamed, f"{origin} (as {name!r})")  # the name itself is checked too
    return renamed


def load_network(path: Path) -> NetworkSpec:
    return parse_network(path.read_text(), origin=str(path))
