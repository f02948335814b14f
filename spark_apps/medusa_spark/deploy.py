"""Deploying a network through the catalog, withdrawing it, and moving one of its fragments.

Deploying validates the network (with Spark's analyzer), groups its boxes into
fragments (see ``network.fragments``), creates its topics and registers its
schemas once, then writes the network, its streams and one entry per fragment
with the node that runs it. The nodes do the rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from pyspark.sql import SparkSession

from medusa.catalog.client import CatalogClient, CatalogError
from medusa.catalog.model import Entry, Kind
from medusa.contracts import covering
from medusa.endpoints import Endpoints
from medusa.placement import NodeSlot, PlacementError, place
from medusa.reader_side import reader_replica
from medusa_spark.network.execution import network_realtime_refusal, realtime_refusal
from medusa_spark.network.fragments import (
    Fragment,
    default_fragment,
    fragment_delays,
    fragments_of,
    split_unconnected,
)
from medusa_spark.network.model import parse_network
from medusa_spark.network.validate import Plan, validate
from medusa_spark.scaling import ScaleError, fragment_key, instance_base_topic, scale
from medusa_spark.wiring import NetworkTopics, network_topics, topic_uses

Report = Callable[[str], None]


def running_nodes(catalog: CatalogClient) -> list[NodeSlot]:
    per_node: dict[str, int] = {}
    for fragment in catalog.list(Kind.FRAGMENTS):
        per_node[fragment.spec["node"]] = per_node.get(fragment.spec["node"], 0) + 1
    return [NodeSlot(e.name, float(e.spec.get("capacity", 1.0)), per_node.get(e.name, 0))
            for e in catalog.list(Kind.NODES) if e.spec.get("status") == "up"]


def _placed_on(node: str, trace_parent: str | None = None, contract: str | None = None,
               reader: str | None = None
               ) -> Callable[[dict[str, Any] | None], dict[str, Any] | None]:
    """``contract``: the BPM contract it moves under, onto a partner's node; ``reader``:
    the node of its reader-side replica there (``medusa.reader_side``)."""
    def change(spec: dict[str, Any] | None) -> dict[str, Any] | None:
        if spec is None:
            return None
        placed = retarget(spec, node)
        if placed is not None:
            placed.update(reader_replica=reader, serving=None)
        if placed is not None and trace_parent:
            # The new node's hand-over and first output join the caller's trace.
            placed["takeover_trace"] = trace_parent
        if placed is not None:
            home = node.split("/", 1)[0] == spec["network"].split("/", 1)[0]
            if home:
                placed["contract"] = None
            elif contract is not None:
                placed["contract"] = contract
        return placed
    return change


def _set_to(wanted: dict[str, Any]) -> Callable[[dict[str, Any] | None], dict[str, Any] | None]:
    def change(spec: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if spec == wanted else wanted
    return change


def _redeployed(boxes: list[str], ha: str, replica: str | None,
                uses: dict[str, Any]
                ) -> Callable[[dict[str, Any] | None], dict[str, Any] | None]:
    def change(spec: dict[str, Any] | None) -> dict[str, Any] | None:
        if spec is None:
            return None
        wanted = {**spec, "boxes": boxes, "ha": ha, "replica": replica, **uses}
        if (spec.get("ha", "passive"), spec.get("replica")) != (ha, replica):
            wanted["replica_ready"] = False
        if spec.get("phase") == "failed":  # a redeploy gives a failed fragment a new start
            wanted.update(phase="placed", error=None, restarts=0)
        return None if wanted == spec else wanted
    return change


def _box_streams(topics: NetworkTopics, network_name: str
                 ) -> list[tuple[str, str, dict[str, str]]]:
    """(participant, entry name, stream spec) of each box output that leaves its fragment
    on another participant's cluster than the network's: registered as that participant's
    stream of the network, which opens its cluster to the network (``medusa.access``); only
    that participant, or the federation's services, may write it."""
    network = topics.plan.network
    found = []
    for box in network.boxes:
        participant = topics.participants.get(box)
        if box in network.streams or participant is None or participant == network.participant:
            continue
        if topics.plan.output_stream.get(box) is not None:
            continue  # a declared stream, registered under its own name
        topic = topics.streams[box].topic
        found.append((participant, f"{network.name}-{box}"[:63],
                      {"topic": topic, "schema_subject": f"{topic}-value",
                       "network": network_name}))
    return found


def retarget(spec: dict[str, Any], node: str) -> dict[str, Any] | None:
    """The fragment's spec once placed on ``node``; None when it is there already."""
    if spec["node"] == node:
        return None
    if spec.get("phase") == "moving":
        raise CatalogError(f"the fragment is being moved to {spec['node']} already; "
                           "wait until it runs there")
    # A running fragment is handed over by its node first; one never run starts afresh.
    phase = {"running": "moving", "released": "released"}.get(spec.get("phase", ""), "placed")
    return {**spec, "node": node, "phase": phase, "error": None, "restarts": 0}


def _grouping(plan: Plan, existing: dict[str, Entry], given: dict[str, str]
              ) -> tuple[dict[str, Fragment], dict[str, str]]:
    """The network's fragments, and the node the placement file gives each (if any).

    A box keeps the fragment it had unless it names another or the file places it
    elsewhere; a new box joins the default fragment of its node or participant. Boxes
    that name no fragment and do not hang together by arrows run as fragments of their
    own (``split_unconnected``).
    """
    network = plan.network
    had = {box: short for short, entry in existing.items() for box in entry.spec["boxes"]}
    member: dict[str, str] = {}
    implicit: set[str] = set()
    for box in plan.order:
        spec = network.boxes[box]
        if spec.fragment:
            member[box] = spec.fragment
            continue
        implicit.add(box)
        if box in given:
            member[box] = default_fragment(spec.participant or network.participant, given[box])
        elif box in had:
            member[box] = had[box]
        else:
            member[box] = default_fragment(spec.participant or network.participant, None)
    fragments = fragments_of(plan, split_unconnected(plan, member, implicit))
    fragment_delays(plan, fragments)  # rejects an availability bound the chain cannot keep
    nodes: dict[str, str] = {}
    for name, fragment in fragments.items():
        named = {given[b] for b in fragment.boxes if b in given}
        if name in given:
            named.add(given[name])
        if len(named) > 1:
            raise PlacementError(f"fragment {name!r}: its boxes are placed on different "
                                 f"nodes ({', '.join(sorted(named))}); a fragment runs on one")
        if named:
            nodes[name] = named.pop()
    return fragments, nodes


def _box_participant(plan: Plan, box: str) -> str:
    """The participant whose cluster holds the box's output."""
    network = plan.network
    declared = plan.output_stream[box]
    if declared is not None:
        return network.streams[declared].participant
    return network.boxes[box].participant or network.participant


def _output_participants(plan: Plan, fragment: Fragment) -> set[str]:
    """The participants whose clusters hold the fragment's outputs."""
    return {_box_participant(plan, box) for box in fragment.outputs}


def _participant(plan: Plan, fragment: Fragment) -> str:
    """Where a fragment belongs: the participant of its outputs."""
    for box in fragment.outputs or fragment.boxes:
        return _box_participant(plan, box)
    return plan.network.participant


@dataclass(frozen=True)
class PlacedFragment:
    """Where one fragment of a network goes, and with what (``plan_deploy``)."""

    name: str
    """Within its network."""
    fragment: Fragment
    node: str
    before: Entry | None
    """Its catalog entry when it was deployed before."""
    moved: bool
    """Placed before on another node: the redeploy moves it."""
    replica: str | None
    """The node of its active standby replica (``ha: active``), if it has one."""
    reader: str | None
    """The node of its reader-side replica (``medusa.reader_side``), if it needs one."""
    delay_ms: int | None
    """DPC's delay D (``fragments.fragment_delays``)."""
    contract: str | None
    """The contract it runs under on a partner's node."""
    instances: tuple[Entry, ...] = ()
    """Its instances' entries, when it runs scaled out or in (``scaling``)."""


@dataclass(frozen=True)
class DeployPlan:
    """What deploying a network will do: nothing is written while it is made."""

    text: str
    plan: Plan
    network_name: str
    fragments: dict[str, Fragment]
    placed: list[PlacedFragment]
    """Each fragment of the definition, in the definition's order."""
    withdrawn: list[Entry]
    """The fragments deployed before that the definition no longer has."""


def deploy(text: str, origin: str, endpoints: Endpoints, registry: SchemaRegistryClient,
           spark: SparkSession, catalog: CatalogClient, given: dict[str, str] | None = None,
           report: Report = print, make_before_break: bool = True) -> dict[str, str]:
    """Deploys (or redeploys) a network; returns where each fragment runs.

    ``given`` maps boxes (or fragments) to nodes, as a placement file does.
    ``make_before_break``: see ``apply_deploy``.
    """
    deployment = plan_deploy(text, origin, spark, catalog, given)
    return apply_deploy(deployment, endpoints, registry, catalog, report, make_before_break)


def plan_deploy(text: str, origin: str, spark: SparkSession, catalog: CatalogClient,
                given: dict[str, str] | None = None) -> DeployPlan:
    """Validates the network and decides where each fragment goes, its replicas and the
    contracts it runs under; reads the catalog, writes nothing (PlacementError when the
    network cannot be placed as asked)."""
    network = parse_network(text, origin)
    plan = validate(network, spark)
    network_name = f"{network.participant}/{network.name}"
    existing, instances = _deployed(catalog.list(Kind.FRAGMENTS, network=network_name))
    given = dict(given or {})
    fragments, named_nodes = _grouping(plan, existing, given)
    _check_given(plan, fragments, given)
    for name, node in named_nodes.items():
        if name in instances and node not in {e.spec["node"] for e in instances[name]}:
            raise PlacementError(
                f"fragment {name!r} runs as {len(instances[name])} instances (medusa scale); "
                f"the placement file cannot move it to {node}: scale it there instead")
    boxes_of = {name: fragment.boxes for name, fragment in fragments.items()}
    # Named nodes are checked before whether they run; the rest once they are placed.
    hosted = _hosting_contracts(catalog, network_name, boxes_of, named_nodes)
    nodes = running_nodes(catalog)
    running = {node.name for node in nodes}
    for name, node in named_nodes.items():
        if node not in running:
            raise PlacementError(f"fragment {name!r}: node {node!r} is not a running node in "
                                 f"the catalog (running: {', '.join(sorted(running)) or 'none'})")
    placement = _placement(plan, fragments, existing, named_nodes, nodes)
    hosted |= _hosting_contracts(catalog, network_name, boxes_of, {
        name: node for name, node in placement.items() if name not in named_nodes})
    delays = fragment_delays(plan, fragments)
    node_entries = catalog.list(Kind.NODES)
    all_fragments = catalog.list(Kind.FRAGMENTS)
    nodes_by_name = {e.name: e for e in node_entries}
    placed = []
    for name, fragment in fragments.items():
        node = placement.get(name) or existing[name].spec["node"]
        before = existing.get(name)
        writes = [{"participant": p} for p in _output_participants(plan, fragment)]
        reader = reader_replica(
            f"{network_name}/{name}", {**(before.spec if before else {}), "writes": writes,
                                       "dpc_delay_ms": delays[name],
                                       "boxes": list(fragment.boxes)},
            node, node_entries, all_fragments)
        placed.append(PlacedFragment(
            name, fragment, node, before,
            moved=before is not None and name in placement and name not in instances and
            placement[name] != before.spec["node"],
            replica=None if name in instances else _replica(fragment, node, nodes_by_name,
                                                            running),
            reader=reader,
            delay_ms=delays[name], contract=hosted.get(name),
            instances=tuple(instances.get(name, ()))))
    withdrawn = [entry for name, entry in existing.items() if name not in fragments
                 and name not in instances]
    withdrawn += [entry for name, group in instances.items() if name not in fragments
                  for entry in group]
    return DeployPlan(text, plan, network_name, fragments, placed, withdrawn)


def _deployed(entries: list[Entry]) -> tuple[dict[str, Entry], dict[str, list[Entry]]]:
    """A network's fragments in the catalog by name in the network, and the instances of
    each scaled one (``scaling``): a scaled fragment is known by its first instance."""
    existing: dict[str, Entry] = {}
    instances: dict[str, list[Entry]] = {}
    for entry in entries:
        instance = entry.spec.get("instance")
        if instance:
            instances.setdefault(str(instance["of"]), []).append(entry)
        else:
            existing[entry.name.rsplit("/", 1)[1]] = entry
    for name, group in instances.items():
        group.sort(key=lambda e: int(e.spec["instance"].get("index", 0)))
        existing.setdefault(name, group[0])
    return existing, instances


def _check_given(plan: Plan, fragments: dict[str, Fragment], given: dict[str, str]) -> None:
    """Every box or fragment the placement file names is one of the network's."""
    network = plan.network
    for name in given:
        if name not in network.boxes and name not in fragments:
            raise PlacementError(
                f"box {name!r}: the network has no such box or fragment (its boxes: "
                f"{', '.join(network.boxes)}; its fragments: {', '.join(fragments)})")


def _placement(plan: Plan, fragments: dict[str, Fragment], existing: dict[str, Entry],
               named_nodes: dict[str, str], nodes: list[NodeSlot]) -> dict[str, str]:
    """The node of each fragment placed now: the new ones (on the node named, else where
    ``place`` finds room), and those placed before that the file names another node for."""
    unplaced = {name: _participant(plan, fragment) for name, fragment in fragments.items()
                if name not in existing}
    placement = place(unplaced, nodes, {n: node for n, node in named_nodes.items()
                                        if n in unplaced})
    for name, node in named_nodes.items():
        if name in existing:  # placed before: a new node here is a move
            placement[name] = node
    return placement


def _replica(fragment: Fragment, node: str, nodes_by_name: Mapping[str, Entry],
             running: set[str]) -> str | None:
    """The node of an ``ha: active`` fragment's replica: its node's live secondary."""
    if fragment.ha != "active":
        return None
    entry = nodes_by_name.get(node)
    secondary = entry.spec.get("secondary") if entry is not None else None
    # A replica reads its primary's SUnion topic: on the same cluster only.
    if secondary in running and secondary.split("/")[0] == node.split("/")[0]:
        return str(secondary)
    return None


def apply_deploy(deployment: DeployPlan, endpoints: Endpoints, registry: SchemaRegistryClient,
                 catalog: CatalogClient, report: Report = print,
                 make_before_break: bool = True) -> dict[str, str]:
    """Creates the network's topics and registers its schemas, then writes the network, its
    streams and its fragments to the catalog as planned; returns where each fragment runs.

    A changed fragment restarts with its new definition, from the start of its input; with
    ``make_before_break`` (the default), a changed fragment that runs, with the same
    inputs, keyed (or unkeyed, as one instance) and on micro-batches, is replaced as a
    scale step to as many instances on the same nodes (``scaling``): the new definition's
    instances rebuild their state beside the old ones, which go on writing, and take the
    output over at a cut. Boxes new to the network may join it (their outputs begin at
    the cut) and boxes gone from it may leave; a box moving between fragments restarts
    both."""
    topics = network_topics(deployment.plan, deployment.fragments, endpoints, registry)
    replaced = _replaceable(deployment, topics, report) if make_before_break else {}
    for fragment_name, entries in replaced.items():
        boxes = list(deployment.fragments[fragment_name].boxes)
        for entry in entries:
            catalog.update(Kind.FRAGMENTS, entry.name, _marked_replaced(True, boxes))
    _write_network(catalog, deployment, topics)
    where: dict[str, str] = {}
    for placed in deployment.placed:
        if placed.name in replaced:
            where[placed.name] = _replace(catalog, endpoints, deployment, placed, topics,
                                          replaced[placed.name], report)
            continue
        _write_fragment(catalog, deployment.network_name, placed, topics)
        nodes = ", ".join(e.spec["node"] for e in placed.instances) if placed.instances \
            else placed.node
        scaled = f" as {len(placed.instances)} instance(s)" if placed.instances else ""
        report(f"  {deployment.network_name}/{placed.name} [{', '.join(placed.fragment.boxes)}]"
               f" -> {nodes}{scaled}{_standby(placed)}")
        where[placed.name] = placed.node
    for entry in deployment.withdrawn:
        catalog.delete(Kind.FRAGMENTS, entry.name)
        report(f"  {entry.name} withdrawn")
    return where


def _write_network(catalog: CatalogClient, deployment: DeployPlan,
                   topics: NetworkTopics) -> None:
    """The network's definition, its declared streams, and the box outputs that other
    participants' clusters hold (``_box_streams``)."""
    text, network_name = deployment.text, deployment.network_name
    network = deployment.plan.network

    def definition(spec: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if spec and spec["definition"] == text else {"definition": text}
    catalog.update(Kind.NETWORKS, network_name, definition)
    for stream, spec in network.streams.items():
        stream_spec = {"topic": network.topic_prefix + spec.topic,
                       "schema_subject": f"{network.topic_prefix}{spec.topic}-value",
                       "network": network_name}
        catalog.update(Kind.STREAMS, f"{spec.participant}/{stream}", _set_to(stream_spec))
    for participant, entry_name, stream_spec in _box_streams(topics, network_name):
        catalog.update(Kind.STREAMS, f"{participant}/{entry_name}", _set_to(stream_spec))


def _write_fragment(catalog: CatalogClient, network_name: str, placed: PlacedFragment,
                    topics: NetworkTopics) -> None:
    """A new fragment's entry, or the changes to one deployed before (a move first)."""
    global_name = f"{network_name}/{placed.name}"
    fragment = placed.fragment
    boxes = list(fragment.boxes)
    uses = {**topic_uses(topics, fragment), "dpc_delay_ms": placed.delay_ms,
            "reader_replica": placed.reader}
    if placed.instances:
        # Each instance keeps its node, its SUnion topic and its share of the keys.
        instance_uses = {k: v for k, v in uses.items() if k != "source_topic"}
        for instance in placed.instances:
            catalog.update(Kind.FRAGMENTS, instance.name,
                           _redeployed(boxes, fragment.ha, None, instance_uses))
    elif placed.before is not None:
        if placed.moved:
            catalog.update(Kind.FRAGMENTS, global_name, _placed_on(placed.node))
        catalog.update(Kind.FRAGMENTS, global_name,
                       _redeployed(boxes, fragment.ha, placed.replica, uses))
    else:
        catalog.put(Kind.FRAGMENTS, global_name,
                    {"network": network_name, "boxes": boxes, "node": placed.node,
                     "ha": fragment.ha, "replica": placed.replica, **uses})


def _marked_replaced(replaced: bool, boxes_after: list[str] | None = None
                     ) -> Callable[[dict[str, Any] | None], dict[str, Any] | None]:
    """``replaced``: its node keeps running the definition it has, whatever the network's,
    until a scale step's new instances have taken over (or the step is given up);
    ``boxes_after``, the fragment's boxes under the new definition where they differ."""
    def change(spec: dict[str, Any] | None) -> dict[str, Any] | None:
        if spec is None:
            return None
        after = boxes_after if replaced and boxes_after != spec["boxes"] else None
        if bool(spec.get("replaced")) == replaced and spec.get("boxes_after") == after:
            return None
        return {**spec, "replaced": replaced or None, "boxes_after": after}
    return change


def _replaceable(deployment: DeployPlan, topics: NetworkTopics, report: Report
                 ) -> dict[str, list[Entry]]:
    """The changed fragments a redeploy can replace beside their running instances, with
    those instances' entries; the others are named with the reason they restart."""
    found: dict[str, list[Entry]] = {}
    for placed in deployment.placed:
        entries = list(placed.instances) or ([placed.before] if placed.before else [])
        if not entries:
            continue
        uses = topic_uses(topics, placed.fragment)
        if uses["source_topic"] == instance_base_topic(entries[0].spec.get("source_topic")):
            continue  # unchanged: it goes on running
        why = None
        if placed.moved:
            why = "it moves to another node too"
        elif any(e.spec.get("phase") != "running" for e in entries):
            why = "it does not run now"
        elif _inputs(entries[0].spec) != _inputs(uses):
            why = "its inputs changed"
        elif realtime_refusal(deployment.plan, placed.fragment) is None:
            why = "it runs in Real-time Mode, and its replacement would run on micro-batches"
        elif (moved := _moved_box(deployment, placed, entries)) is not None:
            why = f"box {moved!r} moves between it and another fragment"
        else:
            try:
                fragment_key(deployment.plan.network, list(placed.fragment.boxes),
                             placed.name, unkeyed=len(entries) == 1)
            except ScaleError as error:
                why = str(error)
        if why is not None:
            report(f"  {deployment.network_name}/{placed.name} restarts with its new "
                   f"definition: {why}")
            continue
        found[placed.name] = entries
    return found


def _moved_box(deployment: DeployPlan, placed: PlacedFragment, entries: list[Entry]
               ) -> str | None:
    """A box the fragment gained that ran in another fragment, or lost that runs in another
    now: each fragment's replacement cuts at a stime of its own, so that box's results
    between the two cuts would be written twice or not at all. None when the boxes it
    gained are new to the network and those it lost are gone from it."""
    before, after = set(entries[0].spec["boxes"]), set(placed.fragment.boxes)
    elsewhere_before = {box for entry in deployment.withdrawn for box in entry.spec["boxes"]}
    elsewhere_after: set[str] = set()
    for other in deployment.placed:
        if other.name == placed.name:
            continue
        elsewhere_after.update(other.fragment.boxes)
        for entry in list(other.instances) or ([other.before] if other.before else []):
            elsewhere_before.update(entry.spec["boxes"])
    moved = sorted(((after - before) & elsewhere_before) | ((before - after) & elsewhere_after))
    return moved[0] if moved else None


def _inputs(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The topics a fragment reads, but for its own SUnion's."""
    own = instance_base_topic(spec.get("source_topic"))
    return sorted((str(r["participant"]), str(r["topic"])) for r in spec.get("reads") or []
                  if instance_base_topic(r["topic"]) != own)


def _replace(catalog: CatalogClient, endpoints: Endpoints, deployment: DeployPlan,
             placed: PlacedFragment, topics: NetworkTopics, entries: list[Entry],
             report: Report) -> str:
    """A changed fragment replaced beside its running instances (``apply_deploy``); where
    its new instances run. A step given up leaves the old instances to restart with the
    new definition, as without ``make_before_break``."""
    name = f"{deployment.network_name}/{placed.name}"
    uses = {**topic_uses(topics, placed.fragment), "dpc_delay_ms": placed.delay_ms}
    nodes = [str(e.spec["node"]) for e in entries]
    report(f"  {name}: its new definition takes over beside the running one "
           f"({len(entries)} instance(s) on {', '.join(nodes)})")
    try:
        result = scale(catalog, endpoints, name, len(entries), nodes, report=report,
                       redefined={"boxes": list(placed.fragment.boxes), **uses})
    except (ScaleError, CatalogError, TimeoutError) as error:
        report(f"  {name}: replacing it beside the running one failed ({error}); it "
               "restarts with its new definition")
        for entry in entries:
            catalog.update(Kind.FRAGMENTS, entry.name, _marked_replaced(False))
            catalog.update(Kind.FRAGMENTS, entry.name, _redeployed(
                list(placed.fragment.boxes), placed.fragment.ha, None,
                {**uses, "reader_replica": placed.reader}))
        return nodes[0]
    report(f"  {name} [{', '.join(placed.fragment.boxes)}] -> "
           f"{', '.join(result.after)}, from stime {result.emit_from_ms} on")
    return nodes[0]


def _standby(placed: PlacedFragment) -> str:
    """What the deploy's report says of a fragment besides its node."""
    standby = f" (replica on {placed.replica})" if placed.replica else ""
    if placed.fragment.ha == "active" and placed.replica is None:
        standby = " (ha: active, but its node has no live secondary on its cluster)"
    if placed.reader:
        standby += f" (reader-side replica on {placed.reader})"
    under = f" under contract {placed.contract}" if placed.contract is not None else ""
    return standby + under


def _hosting_contracts(catalog: CatalogClient, network_name: str,
                       boxes: Mapping[str, Sequence[str]], placement: dict[str, str]
                       ) -> dict[str, str]:
    """The contract under which each fragment placed now on a partner's node runs there;
    refuses a placement at a partner that no contract in force covers."""
    origin = network_name.split("/", 1)[0]
    hosted = {}
    for name, node in placement.items():
        host = node.split("/", 1)[0]
        if host == origin:
            continue
        contract = covering(catalog, origin, host, f"{network_name}/{name}")
        if contract is None:
            box = boxes[name][0]
            raise PlacementError(
                f"box {box!r}: placed on {host} (node {node}), but no contract in force lets "
                f"{origin}'s load run on {host}'s nodes: {host} hosts {network_name} under a "
                f"contract only (`medusa contract propose {origin} {host} --price P "
                f"--movable {network_name}`, then `medusa contract accept "
                f"{origin}/NAME --by {host}`)")
        hosted[name] = contract.name
    return hosted


def undeploy(catalog: CatalogClient, network_name: str, report: Report = print) -> int:
    """Withdraws a network's fragments (their nodes stop them), then the network."""
    fragments = catalog.list(Kind.FRAGMENTS, network=network_name)
    for fragment in fragments:
        catalog.delete(Kind.FRAGMENTS, fragment.name)
        report(f"  {fragment.name} withdrawn")
    if catalog.delete(Kind.NETWORKS, network_name) is None and not fragments:
        raise CatalogError(f"no network {network_name} in the catalog")
    return len(fragments)


def resolve_fragment(catalog: CatalogClient, name: str) -> Entry:
    """The fragment named ``participant/network/fragment``, or the one holding a box named
    ``participant/network/box`` or ``participant/box`` (when only one network has it)."""
    parts = name.split("/")
    if len(parts) not in (2, 3):
        raise CatalogError(f"expected participant/box, participant/network/box or "
                           f"participant/network/fragment, got {name!r}")
    if len(parts) == 3:
        entry = catalog.get(Kind.FRAGMENTS, name)
        if entry is not None:
            return entry
    participant, box = parts[0], parts[-1]
    network = f"{parts[0]}/{parts[1]}" if len(parts) == 3 else None
    found = [e for e in catalog.list(Kind.FRAGMENTS, participant=participant)
             if box in e.spec["boxes"] and (network is None or e.spec["network"] == network)]
    if not found:
        raise CatalogError(f"no fragment or box {name} in the catalog")
    if len(found) > 1:
        raise CatalogError(f"box {name} is ambiguous: it is in {', '.join(e.name for e in found)}")
    return found[0]


def wait_for_node(catalog: CatalogClient, node: str, timeout_s: float = 180.0,
                  since_incarnation: str | None = None) -> Entry:
    """Waits until ``node`` is up in the catalog (with another incarnation than given)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        entry = catalog.get(Kind.NODES, node)
        if entry is not None and entry.spec.get("status") == "up" and (
                since_incarnation is None or entry.spec.get("incarnation") != since_incarnation):
            return entry
        time.sleep(0.5)
    raise TimeoutError(f"node {node} did not register in the catalog within {timeout_s:.0f}s")


@dataclass(frozen=True)
class MoveResult:
    fragment: str
    source: str
    target: str
    seconds: float
    """From the move's request to the box running on the target."""


def move(catalog: CatalogClient, name: str, target: str, timeout_s: float = 300.0,
         report: Report = print, trace_parent: str | None = None,
         warm: bool = True, contract: str | None = None) -> MoveResult:
    """Moves a fragment (named, or by one of its boxes), with its state, to ``target``, and
    waits until it runs there. ``trace_parent``: a traceparent the new node's hand-over
    span continues.

    The move is ``warm`` (unless told not to): the target first runs a standby replica
    from a copy of the checkpoint, which loads the state and catches up while the fragment
    goes on running; only then does the old node stop, and the replica takes the output
    over, so the pause does not grow with the state. Onto another cluster (load moved to a
    partner) the replica runs its own SUnion there from the start, resumed where the copy
    stood. A cold move resumes on the target from the checkpoint the old node released;
    a fragment in Real-time Mode moves cold (a warm replica would run on micro-batches).
    ``contract``: the BPM contract under which it moves to a partner; the partner's access
    to its topics lasts as long as the contract (``medusa.access``).
    """
    entry = resolve_fragment(catalog, name)
    node = catalog.get(Kind.NODES, target)
    if node is None or node.spec.get("status") != "up":
        raise CatalogError(f"--to: {target} is not a running node in the catalog")
    refuse_sunion_in_query(catalog, entry.spec["network"], "moved")
    source = entry.spec["node"]
    if source == target:
        raise CatalogError(f"fragment {entry.name} runs on {target} already")
    if contract is None:  # BPM names the contract it moves under; others need one too
        short = entry.name.rsplit("/", 1)[1]
        _hosting_contracts(catalog, entry.spec["network"], {short: entry.spec["boxes"]},
                           {short: target})
    # A placement that cannot keep the availability bound is refused before anything moves.
    reader = reader_replica(entry.name, entry.spec, target, catalog.list(Kind.NODES),
                            catalog.list(Kind.FRAGMENTS))
    started = time.monotonic()
    deadline = started + timeout_s
    if warm and warm_move_possible(entry.spec, target):
        if _runs_real_time(catalog, entry):
            # Its replica would run on micro-batches, and keep it on them once it took over.
            report(f"  {entry.name}: runs in Real-time Mode: moved cold (it keeps no state "
                   "to load; a warm replica would run on micro-batches)")
        else:
            _warm_up(catalog, entry.name, target, deadline, report)
    catalog.update(Kind.FRAGMENTS, entry.name,
                   _placed_on(target, trace_parent, contract, reader))
    if reader:
        report(f"  {entry.name}: its output is read on {reader.split('/')[0]}; a replica "
               f"runs on {reader} to keep the availability bound when the link is cut")
    report(f"  {entry.name}: handing over from {source} to {target}")
    last_phase = ""
    while time.monotonic() < deadline:
        current = catalog.get(Kind.FRAGMENTS, entry.name)
        if current is None:
            raise CatalogError(f"fragment {entry.name} was withdrawn during the move")
        phase = current.spec.get("phase", "")
        if phase != last_phase:
            report(f"  {entry.name}: {phase} on {current.spec['node']}")
            last_phase = phase
        if current.spec["node"] == target and phase == "running":
            return MoveResult(entry.name, source, target, time.monotonic() - started)
        time.sleep(0.2)
    raise TimeoutError(f"fragment {entry.name} did not run on {target} within {timeout_s:.0f}s "
                       f"(phase {last_phase}); see the nodes' logs")


def refuse_sunion_in_query(catalog: CatalogClient, network: str, what: str) -> None:
    """A move of a fragment whose SUnion runs in its query is refused before anything
    changes (``NetworkSpec.sunion_in_query_refusal``)."""
    entry = catalog.get(Kind.NETWORKS, network)
    if entry is None:
        return
    spec = parse_network(entry.spec["definition"], origin=f"network {network}")
    refusal = spec.sunion_in_query_refusal(network, what)
    if refusal is not None:
        raise CatalogError(refusal)


def _runs_real_time(catalog: CatalogClient, entry: Entry) -> bool:
    """Whether the fragment's network runs it in Real-time Mode (``network.execution``)."""
    network = catalog.get(Kind.NETWORKS, entry.spec["network"])
    if network is None or entry.spec.get("instance"):  # an instance runs on micro-batches
        return False
    spec = parse_network(network.spec["definition"], origin=f"network {network.name}")
    boxes = entry.spec["boxes"]
    return all(box in spec.boxes for box in boxes) and \
        network_realtime_refusal(spec, boxes) is None


def warm_move_possible(spec: dict[str, Any], target: str) -> bool:
    """A running fragment, not moving onto its own active or reader-side replica."""
    return spec.get("phase") == "running" and target not in (spec.get("replica"),
                                                             spec.get("reader_replica"))


def _warm_up(catalog: CatalogClient, name: str, target: str, deadline: float,
             report: Report) -> None:
    """Has ``target`` run a standby replica of the fragment until it has caught up."""
    def warming(spec: dict[str, Any] | None) -> dict[str, Any] | None:
        if spec is None or spec.get("phase") != "running":
            raise CatalogError(f"fragment {name} is not running; it cannot be moved warm")
        return {**spec, "warm_target": target, "warm_ready": False}
    catalog.update(Kind.FRAGMENTS, name, warming)
    report(f"  {name}: loading its state on {target} while it runs")
    while time.monotonic() < deadline:
        current = catalog.get(Kind.FRAGMENTS, name)
        if current is None:
            raise CatalogError(f"fragment {name} was withdrawn during the move")
        if current.spec.get("warm_target") != target:
            raise CatalogError(f"fragment {name}: the warm move to {target} was cancelled")
        if current.spec.get("warm_ready"):
            report(f"  {name}: the replica on {target} has caught up")
            return
        time.sleep(0.2)

    def cancelled(spec: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if spec is None else {**spec, "warm_target": None, "warm_ready": False}
    catalog.update(Kind.FRAGMENTS, name, cancelled)
    raise TimeoutError(f"fragment {name}: the replica on {target} did not catch up in time; "
                       "the fragment still runs where it ran (see the nodes' logs)")
