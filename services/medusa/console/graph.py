"""A query network laid out as boxes and arrows, for the console to draw as SVG.

The browser only draws: every position, size, colour and polyline is computed here, from
the network's YAML definition and the catalog's fragment entries (where each box runs, in
which DPC state), with the nodes' latest rates and lags. The layout is layered left to
right: a node's column is its longest path from a source, each column is ordered by the
barycentres of its neighbours (fewer crossings), an arrow spanning several columns passes
through empty slots of those between, and an arrow closing a cycle goes back over the top.

The definition is read with ``yaml.safe_load`` rather than ``medusa_spark``'s model, which
services do not import; unknown keys are ignored, and a network that would not validate is
still drawn as far as it can be.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from itertools import pairwise
from typing import Any

import yaml

from medusa.catalog.model import Entry, Kind

BOX_WIDTH = 180  # room for "aggregate @ participant/node-name" at the page's font size
BOX_HEIGHT = 54
LAYER_GAP = 64
"""Between columns: room for the arrows, and for a back arrow's turn (half of it)."""
ROW_GAP = 24
MARGIN = 40
"""At least half of LAYER_GAP: a back arrow turns that far outside its boxes, and runs
along the top margin."""
SWEEPS = 3
"""Down-and-up passes of the barycentre ordering; more rarely change a small network."""
DEFAULT_PARTICIPANT = "alpha"
"""The network model's default ``participant``."""

FILLS = ("#77aadd", "#99ddff", "#44bb99", "#bbcc33", "#aaaa00", "#eedd88", "#ee8866",
         "#ffaabb", "#c2a5cf", "#a6dba0")
"""Fragments: Paul Tol's light scheme (dark text stays readable on each), and two more."""
STROKES = ("#0077bb", "#33bbee", "#009988", "#ee7733", "#cc3311", "#ee3377", "#332288",
           "#228833", "#aa3377", "#997700")
"""Nodes: Paul Tol's vibrant and bright schemes, dark enough for an outline."""
STREAM_FILL = "#eeeeee"
UNPLACED_FILL = "#ffffff"
NEUTRAL_STROKE = "#777777"
DPC_RANK = {"STABLE": 0, "STABILIZATION": 1, "UP_FAILURE": 2}
"""A merged fragment shows its worst instance."""
DUMMY = "\0"
"""Starts the ids of the empty slots a long arrow passes through (never a YAML name)."""

Arrow = tuple[str, str, str | None]
"""Source, target, target's port."""
Point = list[float]


def colour(name: str, palette: tuple[str, ...] = FILLS) -> str:
    """The same colour for a name in every call and process (crc32 is not salted per
    process, as ``hash`` of a str is)."""
    return palette[zlib.crc32(name.encode()) % len(palette)]


def network_graph(network_name: str, definition: str, fragments: list[Entry],
                  box_rates: Mapping[str, tuple[float | None, float | None]] | None = None,
                  fragment_lags: Mapping[str, int | None] | None = None) -> dict[str, Any]:
    """The network ``participant/name`` laid out, as a JSON-able dict; never raises: a
    definition that cannot be read gives no nodes and ``error`` saying why.

    ``box_rates``: global box name -> (rows in, rows out) per second; ``fragment_lags``:
    global fragment (or instance) name -> records not read yet."""
    graph: dict[str, Any] = {"name": network_name, "participant": network_name.split("/")[0],
                             "width": 0, "height": 0, "nodes": [], "edges": [],
                             "fragments": [], "error": None}
    raw, error = _parse(definition)
    if raw is None:
        graph["error"] = error
        return graph
    participant = str(raw.get("participant") or DEFAULT_PARTICIPANT)
    nodes, arrows = _nodes_and_arrows(raw, participant)
    legend, of_box = _fragments(network_name, fragments, fragment_lags or {})
    rates = box_rates or {}
    for node in nodes.values():
        is_box = node["kind"] == "box"
        placed = of_box.get(node["id"]) if is_box else None
        rows_in, rows_out = (rates.get(f"{network_name}/{node['id']}", (None, None)) if is_box
                             else (None, None))
        hosts = placed["node"] if placed else None
        node.update(
            fragment=placed["name"] if placed else None, node=hosts,
            fill=placed["colour"] if placed else UNPLACED_FILL if is_box else STREAM_FILL,
            stroke=colour(hosts, STROKES) if hosts else NEUTRAL_STROKE,
            rows_in=rows_in, rows_out=rows_out, lag=placed["lag"] if placed else None,
            dpc_state=placed["dpc_state"] if placed else None)
    positions, lines, width, height = _layout(list(nodes), [(s, t) for s, t, _ in arrows])
    for name, node in nodes.items():
        x, y = positions[name]
        node.update(x=x, y=y, width=BOX_WIDTH, height=BOX_HEIGHT)
    graph.update(participant=participant, width=width, height=height,
                 nodes=[{key: node[key] for key in NODE_KEYS} for node in nodes.values()],
                 edges=[{"from": s, "to": t, "port": port, "points": points}
                        for (s, t, port), points in zip(arrows, lines, strict=True)],
                 fragments=[{key: item[key] for key in LEGEND_KEYS} for item in legend])
    return graph


NODE_KEYS = ("id", "label", "kind", "type", "participant", "x", "y", "width", "height",
             "fragment", "node", "fill", "stroke", "rows_in", "rows_out", "lag", "dpc_state")
LEGEND_KEYS = ("name", "colour", "node", "node_colour", "phase", "dpc_state")


def _parse(definition: str) -> tuple[dict[str, Any] | None, str | None]:
    try:
        raw = yaml.safe_load(definition)
    except yaml.YAMLError as error:
        return None, f"not valid YAML: {error}"
    except RecursionError:
        # PyYAML composes nested collections recursively: hundreds of levels exhaust the stack.
        return None, "not valid YAML: collections nested too deeply"
    if not isinstance(raw, dict):
        return None, "expected a mapping with streams, boxes and arrows"
    return raw, None


def _section(value: Any) -> dict[str, dict[str, Any]]:
    """A ``streams`` or ``boxes`` section as name -> mapping, whatever shape it has."""
    if not isinstance(value, dict):
        return {}
    return {str(name): spec if isinstance(spec, dict) else {} for name, spec in value.items()}


def _nodes_and_arrows(raw: dict[str, Any],
                      participant: str) -> tuple[dict[str, dict[str, Any]], list[Arrow]]:
    """Graph nodes by id (streams first, then boxes, then undeclared names as streams), and
    the arrows between them. A box and a stream of one name (which the model refuses) is
    the box."""
    streams, boxes = _section(raw.get("streams")), _section(raw.get("boxes"))
    nodes: dict[str, dict[str, Any]] = {}

    def stream(name: str, spec: dict[str, Any]) -> None:
        nodes.setdefault(name, {"id": name, "label": name, "kind": "stream", "type": "stream",
                                "participant": str(spec.get("participant") or participant)})

    for name, spec in streams.items():
        if name not in boxes:
            stream(name, spec)
    for name, spec in boxes.items():
        nodes[name] = {"id": name, "label": name, "kind": "box",
                       "type": str(spec.get("type") or "?"),
                       "participant": str(spec.get("participant") or participant)}
    arrows: list[Arrow] = []
    listed = raw.get("arrows")
    for arrow in listed if isinstance(listed, list) else []:
        if not isinstance(arrow, dict) or arrow.get("from") is None or arrow.get("to") is None:
            continue
        source, target, port = str(arrow["from"]), str(arrow["to"]), None
        box, dot, named = target.partition(".")
        if target not in nodes and dot and box in boxes:
            target, port = box, named
        stream(source, {})
        stream(target, {})
        arrows.append((source, target, port))
    return nodes, arrows


def _fragments(network_name: str, fragments: list[Entry], lags: Mapping[str, int | None]
               ) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Legend entries (each with its lag), and box -> its fragment's entry. The instances of
    a scaled-out fragment are one entry, named and coloured by the fragment they are of;
    retired instances no longer run, and are left out."""
    groups: dict[str, list[Entry]] = {}
    for entry in sorted(fragments, key=lambda e: e.name):
        spec = entry.spec
        if (entry.kind != Kind.FRAGMENTS or spec.get("network") != network_name
                or spec.get("phase") == "retired"):
            continue
        instance = spec.get("instance")
        of = instance.get("of") if isinstance(instance, dict) else None
        groups.setdefault(f"{network_name}/{of}" if isinstance(of, str) else entry.name,
                          []).append(entry)
    legend: list[dict[str, Any]] = []
    of_box: dict[str, dict[str, Any]] = {}
    for name, entries in groups.items():
        scaled = any(isinstance(e.spec.get("instance"), dict) for e in entries)
        hosts = sorted({str(e.spec["node"]) for e in entries if e.spec.get("node")})
        states = [str(e.spec.get("dpc_state")) for e in entries]
        known = [lag for e in entries if (lag := lags.get(e.name)) is not None]
        item = {"name": f"{name} ×{len(entries)}" if scaled else name, "colour": colour(name),
                "node": ", ".join(hosts) or None,
                "node_colour": colour(", ".join(hosts), STROKES) if hosts else NEUTRAL_STROKE,
                "phase": ", ".join(sorted({str(e.spec.get("phase") or "placed")
                                           for e in entries})),
                "dpc_state": max((s for s in states if s in DPC_RANK), key=DPC_RANK.__getitem__,
                                 default="STABLE"),
                "lag": sum(known) if known else None}
        legend.append(item)
        for entry in entries:
            boxes = entry.spec.get("boxes")
            for box in boxes if isinstance(boxes, list) else []:
                of_box.setdefault(str(box), item)
    return legend, of_box


def _back_edges(ids: list[str], edges: list[tuple[str, str]]) -> set[int]:
    """Indices of the edges that close a cycle, found by a depth-first search (from the
    sources first): the layering ignores them, so a cycle cannot keep pushing a node right."""
    out: dict[str, list[tuple[int, str]]] = {name: [] for name in ids}
    for index, (source, target) in enumerate(edges):
        out[source].append((index, target))
    targets = {target for _, target in edges}
    state = dict.fromkeys(ids, 0)  # 0: not seen, 1: on the current path, 2: done
    back: set[int] = set()
    for root in [name for name in ids if name not in targets] + ids:
        if state[root]:
            continue
        state[root] = 1
        stack = [(root, iter(out[root]))]
        while stack:  # iterative: a long chain of boxes must not exhaust the stack
            name, pending = stack[-1]
            step = next(pending, None)
            if step is None:
                state[name] = 2
                stack.pop()
                continue
            index, target = step
            if state[target] == 1:
                back.add(index)
            elif state[target] == 0:
                state[target] = 1
                stack.append((target, iter(out[target])))
    return back


def _layout(ids: list[str], edges: list[tuple[str, str]]
            ) -> tuple[dict[str, tuple[float, float]], list[list[Point]], float, float]:
    """Top-left corner of every node, each edge's polyline, and the width and height."""
    if not ids:
        return {}, [], 0, 0
    back = _back_edges(ids, edges)
    forward = [(i, s, t) for i, (s, t) in enumerate(edges) if i not in back]
    # Longest path from a source (Kahn's order over the edges that are left: a DAG).
    layer = dict.fromkeys(ids, 0)
    indegree = dict.fromkeys(ids, 0)
    out: dict[str, list[str]] = {name: [] for name in ids}
    for _, source, target in forward:
        indegree[target] += 1
        out[source].append(target)
    ready = [name for name in ids if indegree[name] == 0]
    for name in ready:  # grows while it is walked
        for target in out[name]:
            layer[target] = max(layer[target], layer[name] + 1)
            indegree[target] -= 1
            if indegree[target] == 0:
                ready.append(target)
    # An edge spanning several columns passes through an empty slot in each between.
    chains: dict[int, list[str]] = {}
    for index, source, target in forward:
        between = [f"{DUMMY}{index}.{step}" for step in range(layer[source] + 1, layer[target])]
        for step, slot in enumerate(between, start=layer[source] + 1):
            layer[slot] = step
        chains[index] = [source, *between, target]
    columns: list[list[str]] = [[] for _ in range(max(layer.values()) + 1)]
    for name in layer:  # nodes in declaration order, then the slots
        columns[layer[name]].append(name)
    predecessors: dict[str, list[str]] = {name: [] for name in layer}
    successors: dict[str, list[str]] = {name: [] for name in layer}
    for chain in chains.values():
        for source, target in pairwise(chain):
            successors[source].append(target)
            predecessors[target].append(source)
    _order(columns, predecessors, successors)
    # Columns centred on the tallest; the top margin carries the back edges.
    def span(count: int) -> float:
        return count * BOX_HEIGHT + (count - 1) * ROW_GAP

    tallest = max(len(column) for column in columns)
    corner: dict[str, tuple[float, float]] = {}
    for number, column in enumerate(columns):
        top = MARGIN + (span(tallest) - span(len(column))) / 2
        for row, name in enumerate(column):
            corner[name] = (MARGIN + number * (BOX_WIDTH + LAYER_GAP),
                            top + row * (BOX_HEIGHT + ROW_GAP))
    lines = [_line(chains.get(index), corner, source, target)
             for index, (source, target) in enumerate(edges)]
    width = 2 * MARGIN + len(columns) * BOX_WIDTH + (len(columns) - 1) * LAYER_GAP
    return ({name: corner[name] for name in ids}, lines, width,
            2 * MARGIN + span(tallest))


def _order(columns: list[list[str]], predecessors: dict[str, list[str]],
           successors: dict[str, list[str]]) -> None:
    """Sorts each column by the mean position of its neighbours in the column before (down)
    or after (up), a few times over: the barycentre heuristic against crossings. A node
    without neighbours there keeps its own position; ties keep their order (stable sort)."""
    position = {name: row for column in columns for row, name in enumerate(column)}

    def sort(column: list[str], neighbours: dict[str, list[str]]) -> None:
        def key(name: str) -> float:
            near = neighbours[name]
            return sum(position[n] for n in near) / len(near) if near else position[name]

        column.sort(key=key)
        for row, name in enumerate(column):
            position[name] = row

    for _ in range(SWEEPS):
        for column in columns[1:]:
            sort(column, predecessors)
        for column in reversed(columns[:-1]):
            sort(column, successors)


def _line(chain: list[str] | None, corner: dict[str, tuple[float, float]], source: str,
          target: str) -> list[Point]:
    """From the right middle of the source to the left middle of the target: through the
    slots of a long edge, or, for a back edge (no chain), out right, along the top margin
    and in from the left."""
    def middle(name: str) -> float:
        return corner[name][1] + BOX_HEIGHT / 2

    start = [corner[source][0] + BOX_WIDTH, middle(source)]
    end = [corner[target][0], middle(target)]
    if chain is None:
        lane, turn = MARGIN / 2, LAYER_GAP / 2
        return [start, [start[0] + turn, start[1]], [start[0] + turn, lane],
                [end[0] - turn, lane], [end[0] - turn, end[1]], end]
    points = [start]
    for slot in chain[1:-1]:
        points += [[corner[slot][0], middle(slot)], [corner[slot][0] + BOX_WIDTH, middle(slot)]]
    return [*points, end]
