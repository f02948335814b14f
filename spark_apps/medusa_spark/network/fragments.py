"""Fragments: the connected groups of boxes of a network that run together as one Spark query.

A box names its fragment with ``fragment:``; otherwise the boxes a placement
puts on one node form one fragment, and boxes placed nowhere in particular form
one fragment per participant (where their outputs live), each cut into its
connected parts. Inside a fragment the
arrows are DataFrame edges; an arrow between two fragments, and every declared
stream, is a Kafka topic.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from medusa_spark.durations import duration_ms
from medusa_spark.network.execution import realtime_refusal
from medusa_spark.network.model import NetworkError, NetworkSpec
from medusa_spark.network.validate import Plan


@dataclass(frozen=True)
class Fragment:
    name: str
    boxes: tuple[str, ...]
    """In dependency order."""
    inputs: tuple[str, ...]
    """The streams and the boxes of other fragments it reads, each once, sorted."""
    outputs: tuple[str, ...]
    """Its boxes whose output leaves it: a declared stream, read by another fragment, or
    read by nobody (a result of the network, on the box's own topic)."""
    ha: str
    """``active`` when any of its boxes asks for an active replica, else ``passive``."""
    state_store: str = "rocksdb"
    """``memory`` when any of its boxes asks for Spark's in-memory state store."""

    def fingerprint(self, plan: Plan, prefix: str = "") -> str:
        """Changes whenever the fragment's query would: its boxes, their definitions, its
        inputs and outputs, and its topics. A checkpoint only fits the same fingerprint.
        An arrow that leaves the fragment is not part of it: a box read elsewhere is one of
        its outputs already, and a new reader of an output changes nothing here."""
        network = plan.network
        described = {
            "boxes": {b: network.boxes[b].model_dump(mode="json",
                                                     exclude={"ha", "state_store"})
                      for b in self.boxes},
            "inputs": {i: plan_source(plan, i) for i in self.inputs},
            "outputs": list(self.outputs),
            "prefix": prefix,
            "bucket": network.bucket,
            "arrows": [(a.source, a.target) for a in network.arrows
                       if a.target_box in self.boxes],
        }
        if network.sunion != "process":  # another source, other offsets
            described["sunion"] = network.sunion
        if realtime_refusal(plan, self) is None:
            described["execution"] = network.execution  # another query, another checkpoint
        if self.state_store != "rocksdb":  # Spark keeps a checkpoint's store for good
            described["state_store"] = self.state_store
        text = json.dumps(described, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def plan_source(plan: Plan, name: str) -> str:
    """What an input is: a declared stream's topic, or a box of another fragment."""
    network = plan.network
    if name in network.streams:
        return f"stream:{network.streams[name].topic}"
    return f"box:{name}"


def default_fragment(box_participant: str, node: str | None) -> str:
    """The name of the fragment a box joins when it names none."""
    if node is not None:
        return node.replace("/", "-")
    return box_participant


def group(plan: Plan, placement: dict[str, str] | None = None) -> dict[str, Fragment]:
    """The network's fragments: explicit names first, then one per placed node, then one
    per participant for the rest. ``placement`` maps boxes to nodes (``participant/node``)."""
    network = plan.network
    placement = placement or {}
    member: dict[str, str] = {}
    implicit: set[str] = set()
    for box in plan.order:
        spec = network.boxes[box]
        if spec.fragment:
            member[box] = spec.fragment
        else:
            participant = spec.participant or network.participant
            member[box] = default_fragment(participant, placement.get(box))
            implicit.add(box)
    return fragments_of(plan, split_unconnected(plan, member, implicit))


def split_unconnected(plan: Plan, member: dict[str, str], implicit: set[str]
                      ) -> dict[str, str]:
    """``member`` with each group of ``implicit`` boxes (those that name no fragment) cut
    into its connected parts: the first part keeps the group's name, the others take
    ``<name>-2``, ``<name>-3``, ... (a name no other group has). A fragment is one query,
    so boxes that only share a node or a participant run as separate queries; boxes that
    name their fragment keep it, and a fragment they leave unconnected is an error."""
    result = dict(member)
    groups: dict[str, list[str]] = {}
    for box in plan.order:
        if box in implicit:
            groups.setdefault(member[box], []).append(box)
    taken = set(member.values())
    for base, boxes in groups.items():
        if any(member[b] == base for b in member if b not in implicit):
            continue  # shares its name with named boxes: checked as one fragment
        for index, component in enumerate(_components(boxes, plan)):
            name = base
            if index > 0:
                suffix = index + 1
                while f"{base}-{suffix}" in taken:
                    suffix += 1
                name = f"{base}-{suffix}"
                taken.add(name)
            for box in component:
                result[box] = name
    return result


def _components(boxes: list[str], plan: Plan) -> list[list[str]]:
    neighbours: dict[str, set[str]] = {b: set() for b in boxes}
    for box in boxes:
        for source in plan.inputs[box].values():
            if source in neighbours:
                neighbours[box].add(source)
                neighbours[source].add(box)
    components: list[list[str]] = []
    seen: set[str] = set()
    for start in boxes:
        if start in seen:
            continue
        seen.add(start)
        todo, found = [start], [start]
        while todo:
            for other in sorted(neighbours[todo.pop()] - seen):
                seen.add(other)
                todo.append(other)
                found.append(other)
        components.append([b for b in boxes if b in found])
    return components


def read_elsewhere(spec: NetworkSpec, boxes: list[str] | tuple[str, ...]) -> dict[str, str]:
    """The fragment's boxes whose output a box of another fragment reads (straight or
    through a declared stream), each with one such reader. A scaled fragment writes
    these outputs one instance per partition (``FragmentOutput.owned``)."""
    inside = set(boxes)
    readers: dict[str, list[str]] = {}
    for arrow in spec.arrows:
        readers.setdefault(arrow.source, []).append(arrow.target_box)
    found: dict[str, str] = {}
    for box in boxes:
        for target in readers.get(box, []):
            outside = [target] if target in spec.boxes else readers.get(target, [])
            outside = [r for r in outside if r in spec.boxes and r not in inside]
            if outside:
                found[box] = outside[0]
    return found


def fragments_of(plan: Plan, member: dict[str, str]) -> dict[str, Fragment]:
    """Fragments from each box's fragment name; checks that a fragment is connected."""
    network = plan.network
    names = sorted(set(member.values()))
    result: dict[str, Fragment] = {}
    readers: dict[str, set[str]] = {}
    for box, ports in plan.inputs.items():
        for source in ports.values():
            readers.setdefault(source, set()).add(box)
            if plan.boxes[box].type_name == "port" and member[source] != member[box]:
                raise NetworkError(f"box {box!r}, field 'fragment': a port box runs in the "
                                   f"fragment of its process box {source!r}")
    for name in names:
        boxes = tuple(b for b in plan.order if member[b] == name)
        inputs = sorted({src for b in boxes for src in plan.inputs[b].values()
                         if src not in boxes})
        outputs = tuple(b for b in boxes if plan.output_stream[b] is not None
                        or not readers.get(b)
                        or any(member[r] != name for r in readers.get(b, ())))
        _check_connected(name, boxes, plan)
        _check_one_process_box(name, boxes, plan)
        ha = "active" if any(network.boxes[b].ha == "active" for b in boxes) else "passive"
        store = ("memory" if any(network.boxes[b].state_store == "memory" for b in boxes)
                 else "rocksdb")
        if store == "memory":
            _check_rocksdb_only(name, boxes, plan)
        _check_timed_results_not_windowed(name, boxes, plan)
        result[name] = Fragment(name, boxes, tuple(inputs), outputs, ha, store)
    return result


def _check_rocksdb_only(name: str, boxes: tuple[str, ...], plan: Plan) -> None:
    """A processor's entries (``keyed_state``) and an aggregate's timers (``expiry:
    timers``) live in Spark's RocksDB state store only."""
    for box in boxes:
        processor = getattr(plan.boxes[box], "processor", None)
        if _keyed(plan, box) and processor is not None:
            raise NetworkError(f"box {box!r}, field 'state_store': fragment {name!r} keeps its "
                               f"state in memory, and {processor.__name__} keeps its state as "
                               "entries, which need the RocksDB store; drop 'state_store: "
                               "memory' or give the box a fragment of its own")
        if _timed(plan, box):
            raise NetworkError(f"box {box!r}, field 'state_store': fragment {name!r} keeps its "
                               "state in memory, and an aggregate with 'expiry: timers' needs "
                               "the RocksDB store; drop 'state_store: memory' or give the box "
                               "a fragment of its own")


def runs_transform_with_state(plan: Plan, boxes: tuple[str, ...]) -> bool:
    """Whether a box among ``boxes`` runs on Spark's ``transformWithState``: a processor
    keeping entries, or an aggregate expiring by timers."""
    return any(_keyed(plan, box) or _timed(plan, box) for box in boxes)


def _keyed(plan: Plan, box: str) -> bool:
    processor = getattr(plan.boxes[box], "processor", None)
    return processor is not None and bool(processor.keyed_state)


def _timed(plan: Plan, box: str) -> bool:
    params = getattr(plan.boxes[box], "params", None)
    return getattr(params, "expiry", None) == "timers"


def _check_timed_results_not_windowed(name: str, boxes: tuple[str, ...], plan: Plan) -> None:
    """The results of an aggregate with ``expiry: timers`` carry no event-time marker: a
    box that windows (an aggregate, a join) cannot read them in the same query."""
    inside = set(boxes)
    for box in boxes:
        if plan.boxes[box].type_name not in ("aggregate", "join"):
            continue
        upstream = [s for s in plan.inputs[box].values() if s in inside]
        while upstream:
            source = upstream.pop()
            if _timed(plan, source):
                raise NetworkError(
                    f"box {box!r}, field 'fragment': in fragment {name!r} it windows the "
                    f"results of aggregate {source!r} (expiry: timers), which carry no "
                    "event-time marker in the same query; give it a fragment of its own")
            if not plan.boxes[source].stateful:
                upstream.extend(s for s in plan.inputs[source].values() if s in inside)


def _check_one_process_box(name: str, boxes: tuple[str, ...], plan: Plan) -> None:
    """Spark runs at most one ``applyInPandasWithState`` in a query: a second process box
    goes in a fragment of its own, reading the first one's port through a stream."""
    process = [b for b in boxes if plan.boxes[b].type_name == "process"]
    if len(process) > 1:
        raise NetworkError(f"box {process[1]!r}, field 'fragment': fragment {name!r} already "
                           f"has process box {process[0]!r}; Spark runs one process box per "
                           "query, so give it a fragment of its own")


def _check_connected(name: str, boxes: tuple[str, ...], plan: Plan) -> None:
    """A fragment is one query: its boxes must hang together by arrows (either way)."""
    components = _components(list(boxes), plan)
    if len(components) > 1:
        apart = components[1]
        raise NetworkError(f"box {apart[0]!r}, field 'fragment': fragment {name!r} is not "
                           f"connected ({apart[0]} has no arrow path to {boxes[0]} inside it); "
                           "name another fragment or place the boxes apart")


def fragment_delays(plan: Plan, fragments: dict[str, Fragment]) -> dict[str, int | None]:
    """DPC's delay D of every fragment, in ms: the network's availability bound X split
    evenly along its longest chain of fragments. A result crosses k fragments on that
    chain; each may hold it D in its SUnion and one trigger in its query, so

        D = (X - k * trigger) / k

    keeps every result within X. None for all when the network sets no bound."""
    network = plan.network
    if network.availability_bound is None:
        return {name: None for name in fragments}
    bound = duration_ms(network.availability_bound)
    trigger = duration_ms(network.trigger)
    owner = {box: name for name, fragment in fragments.items() for box in fragment.boxes}
    depth: dict[str, int] = {}

    def chain(name: str, seen: frozenset[str]) -> int:
        if name not in depth:
            upstream = [owner[i] for i in fragments[name].inputs
                        if i in owner and owner[i] not in seen]
            depth[name] = 1 + max((chain(u, seen | {name}) for u in upstream), default=0)
        return depth[name]

    longest = max((chain(name, frozenset()) for name in fragments), default=1)
    delay = (bound - longest * trigger) // longest
    if delay <= 0:
        raise NetworkError(
            f"network {network.name}: field 'availability_bound': {network.availability_bound} "
            f"leaves no delay for its chain of {longest} fragment(s), each taking a trigger "
            f"of {network.trigger}; give at least {longest * trigger + longest} milliseconds")
    return {name: delay for name in fragments}
