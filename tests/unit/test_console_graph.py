"""A network laid out for the console: every box, stream and arrow, left to right without
overlaps, coloured and annotated from the catalog's fragments, whatever the definition."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from medusa.catalog.model import Entry, Kind
from medusa.console.graph import (
    BOX_HEIGHT,
    BOX_WIDTH,
    FILLS,
    MARGIN,
    NEUTRAL_STROKE,
    STREAM_FILL,
    STROKES,
    UNPLACED_FILL,
    colour,
    network_graph,
)

pytestmark = pytest.mark.unit

NETWORKS = Path(__file__).resolve().parents[2] / "spark_apps/medusa_spark/networks"
SENSOR_WINDOWS = (NETWORKS / "sensor_windows.yaml").read_text()
LINEAR_ROAD = (NETWORKS / "linear_road.yaml").read_text()
NODE_KEYS = {"id", "label", "kind", "type", "participant", "x", "y", "width", "height",
             "fragment", "node", "fill", "stroke", "rows_in", "rows_out", "lag", "dpc_state"}


def _fragment(name: str, boxes: list[str], node: str = "beta/node-1", **spec: Any) -> Entry:
    network = name.rsplit("/", 1)[0]
    return Entry(kind=Kind.FRAGMENTS, name=name, version=1, updated_at=0,
                 spec={"network": network, "boxes": boxes, "node": node, **spec})


def _instance(index: int, count: int, node: str, **spec: Any) -> Entry:
    return _fragment(f"alpha/sensor-windows/main--g1-{index}", ["plausible", "per_sensor"],
                     node, instance={"of": "main", "index": index, "count": count,
                                     "generation": 1, "key": ["sensor_id"], "emit_from_ms": 0},
                     **spec)


def _by_id(graph: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {node["id"]: node for node in graph["nodes"]}


def _overlap(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"]
            and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"])


def _check_layout(graph: dict[str, Any]) -> None:
    """No two nodes overlap, everything lies inside the canvas, and every edge runs from the
    right middle of its source to the left middle of its target."""
    nodes = _by_id(graph)
    assert len(nodes) == len(graph["nodes"])
    for node in graph["nodes"]:
        assert set(node) == NODE_KEYS
        assert node["width"] == BOX_WIDTH and node["height"] == BOX_HEIGHT
        assert 0 <= node["x"] <= graph["width"] - node["width"]
        assert 0 <= node["y"] <= graph["height"] - node["height"]
    listed = graph["nodes"]
    for index, a in enumerate(listed):
        for b in listed[index + 1:]:
            assert not _overlap(a, b), (a["id"], b["id"])
    for edge in graph["edges"]:
        source, target = nodes[edge["from"]], nodes[edge["to"]]
        assert edge["points"][0] == [source["x"] + BOX_WIDTH, source["y"] + BOX_HEIGHT / 2]
        assert edge["points"][-1] == [target["x"], target["y"] + BOX_HEIGHT / 2]
        for x, y in edge["points"]:
            assert 0 <= x <= graph["width"] and 0 <= y <= graph["height"]
    json.dumps(graph)


@pytest.mark.parametrize("name,text", [("alpha/sensor-windows", SENSOR_WINDOWS),
                                       ("alpha/linear-road", LINEAR_ROAD)])
def test_an_example_network_is_laid_out_left_to_right_without_overlaps(name: str,
                                                                       text: str) -> None:
    graph = network_graph(name, text, [])
    raw = yaml.safe_load(text)
    nodes = _by_id(graph)
    assert graph["error"] is None and graph["name"] == name
    assert set(nodes) == set(raw["streams"]) | set(raw["boxes"])
    assert {n for n, node in nodes.items() if node["kind"] == "box"} == set(raw["boxes"])
    assert all(nodes[box]["type"] == spec["type"] for box, spec in raw["boxes"].items())
    assert [(e["from"], e["to"] + (f".{e['port']}" if e["port"] else ""))
            for e in graph["edges"]] == [(a["from"], a["to"]) for a in raw["arrows"]]
    for edge in graph["edges"]:
        assert nodes[edge["to"]]["x"] > nodes[edge["from"]]["x"]
    _check_layout(graph)


def test_ports_and_participants_come_from_the_definition() -> None:
    graph = network_graph("alpha/linear-road", LINEAR_ROAD, [])
    ports = {(e["from"], e["port"]) for e in graph["edges"] if e["to"] in {"road",
                                                                            "expenditures"}}
    assert ports == {("position_reports", "reports"), ("account_balance_queries",
                                                       "balance_queries"),
                     ("daily_expenditure_queries", "queries"), ("historical_tolls", "history")}
    sensors = _by_id(network_graph("alpha/sensor-windows", SENSOR_WINDOWS, []))
    assert sensors["readings"]["participant"] == "alpha"
    assert sensors["plausible"]["participant"] == "beta"


def test_colours_are_stable_and_from_the_palettes() -> None:
    entries = [_fragment("alpha/sensor-windows/f1", ["plausible", "per_sensor"])]
    first = network_graph("alpha/sensor-windows", SENSOR_WINDOWS, entries)
    assert network_graph("alpha/sensor-windows", SENSOR_WINDOWS, entries) == first
    # crc32, not hash(): the same in every process.
    name = "alpha/sensor-windows/f1"
    assert colour(name) == FILLS[zlib.crc32(name.encode()) % len(FILLS)] == colour(name)
    assert colour("beta/node-1", STROKES) in STROKES
    plausible = _by_id(first)["plausible"]
    assert plausible["fill"] == colour(name) and plausible["stroke"] == colour("beta/node-1",
                                                                                STROKES)
    assert _by_id(first)["readings"]["fill"] == STREAM_FILL
    assert _by_id(first)["readings"]["stroke"] == NEUTRAL_STROKE


def test_fragments_nodes_rates_lag_and_dpc_come_from_the_entries() -> None:
    entries = [_fragment("alpha/sensor-windows/f1", ["plausible"], "beta/node-1",
                         phase="running", dpc_state="UP_FAILURE"),
               _fragment("alpha/sensor-windows/f2", ["per_sensor"], "beta/node-2"),
               _fragment("alpha/other/f1", ["readings", "plausible"], "gamma/node-9")]
    graph = network_graph(
        "alpha/sensor-windows", SENSOR_WINDOWS, entries,
        box_rates={"alpha/sensor-windows/plausible": (120.0, 118.5),
                   "alpha/sensor-windows/per_sensor": (None, 2.0)},
        fragment_lags={"alpha/sensor-windows/f1": 42})
    nodes = _by_id(graph)
    plausible, per_sensor, readings = nodes["plausible"], nodes["per_sensor"], nodes["readings"]
    assert (plausible["fragment"], plausible["node"], plausible["dpc_state"],
            plausible["lag"]) == ("alpha/sensor-windows/f1", "beta/node-1", "UP_FAILURE", 42)
    assert (plausible["rows_in"], plausible["rows_out"]) == (120.0, 118.5)
    assert (per_sensor["fragment"], per_sensor["node"], per_sensor["dpc_state"],
            per_sensor["lag"]) == ("alpha/sensor-windows/f2", "beta/node-2", "STABLE", None)
    assert (per_sensor["rows_in"], per_sensor["rows_out"]) == (None, 2.0)
    assert plausible["fill"] != UNPLACED_FILL
    assert (readings["fragment"], readings["node"], readings["rows_in"], readings["lag"],
            readings["dpc_state"]) == (None, None, None, None, None)
    assert graph["fragments"] == [
        {"name": "alpha/sensor-windows/f1", "colour": colour("alpha/sensor-windows/f1"),
         "node": "beta/node-1", "node_colour": plausible["stroke"], "phase": "running",
         "dpc_state": "UP_FAILURE"},
        {"name": "alpha/sensor-windows/f2", "colour": colour("alpha/sensor-windows/f2"),
         "node": "beta/node-2", "node_colour": per_sensor["stroke"], "phase": "placed",
         "dpc_state": "STABLE"}]


def test_an_unplaced_box_has_no_fragment() -> None:
    nodes = _by_id(network_graph("alpha/sensor-windows", SENSOR_WINDOWS, []))
    assert nodes["plausible"]["fragment"] is None and nodes["plausible"]["node"] is None
    assert nodes["plausible"]["fill"] == UNPLACED_FILL
    assert nodes["plausible"]["stroke"] == NEUTRAL_STROKE


def test_the_instances_of_a_scaled_out_fragment_are_merged() -> None:
    entries = [_instance(0, 3, "beta/node-2", phase="running", dpc_state="STABILIZATION"),
               _instance(1, 3, "beta/node-1", phase="running", dpc_state="UP_FAILURE"),
               _instance(2, 3, "beta/node-1", phase="placed"),
               _fragment("alpha/sensor-windows/main--g0-0", ["plausible", "per_sensor"],
                         "beta/node-3", phase="retired",
                         instance={"of": "main", "index": 0, "count": 1}, dpc_state="STABLE")]
    lags = {"alpha/sensor-windows/main--g1-0": 5, "alpha/sensor-windows/main--g1-1": None,
            "alpha/sensor-windows/main--g1-2": 7, "alpha/sensor-windows/main--g0-0": 1000}
    graph = network_graph("alpha/sensor-windows", SENSOR_WINDOWS, entries, fragment_lags=lags)
    nodes = _by_id(graph)
    for box in ("plausible", "per_sensor"):
        assert nodes[box]["fragment"] == "alpha/sensor-windows/main ×3"
        assert nodes[box]["node"] == "beta/node-1, beta/node-2"
        assert nodes[box]["dpc_state"] == "UP_FAILURE"
        assert nodes[box]["lag"] == 12
        assert nodes[box]["fill"] == colour("alpha/sensor-windows/main")
    assert graph["fragments"] == [
        {"name": "alpha/sensor-windows/main ×3", "colour": colour("alpha/sensor-windows/main"),
         "node": "beta/node-1, beta/node-2", "node_colour": nodes["plausible"]["stroke"],
         "phase": "placed, running", "dpc_state": "UP_FAILURE"}]
    calmer = network_graph("alpha/sensor-windows", SENSOR_WINDOWS, entries[:1] + entries[2:3])
    assert _by_id(calmer)["plausible"]["dpc_state"] == "STABILIZATION"


CYCLE = """
name: loop
participant: gamma
streams:
  input: {topic: loop.input, participant: gamma, schema: x}
boxes:
  a: {type: filter}
  b: {type: map, participant: delta, unknown_key: 1}
  c: {type: union}
  d: {type: filter}
arrows:
  - {from: input, to: a}
  - {from: a, to: b}
  - {from: b, to: c}
  - {from: c, to: a}
  - {from: d, to: d}
  - {from: c, to: nowhere}
"""


def test_a_cycle_terminates_and_goes_back_over_the_top() -> None:
    graph = network_graph("gamma/loop", CYCLE, [])
    nodes = _by_id(graph)
    assert graph["error"] is None and graph["participant"] == "gamma"
    assert set(nodes) == {"input", "a", "b", "c", "d", "nowhere"}
    assert nodes["b"]["participant"] == "delta" and nodes["a"]["participant"] == "gamma"
    assert nodes["nowhere"]["kind"] == "stream" and nodes["nowhere"]["type"] == "stream"
    assert nodes["input"]["x"] < nodes["a"]["x"] < nodes["b"]["x"] < nodes["c"]["x"]
    back = {(e["from"], e["to"]): e["points"] for e in graph["edges"]}
    for edge in (("c", "a"), ("d", "d")):
        assert min(y for _, y in back[edge]) == MARGIN / 2  # the lane above every box
    _check_layout(graph)


def test_an_edge_over_several_columns_passes_between_the_boxes() -> None:
    text = """
name: long
streams: {s: {topic: t, participant: alpha, schema: x}}
boxes: {a: {type: filter}, b: {type: filter}, c: {type: union}}
arrows: [{from: s, to: a}, {from: a, to: b}, {from: b, to: c}, {from: s, to: c}]
"""
    graph = network_graph("alpha/long", text, [])
    long = next(e for e in graph["edges"] if (e["from"], e["to"]) == ("s", "c"))
    assert len(long["points"]) == 2 + 2 * 2  # through one slot in each of two columns
    for (x1, y1), (x2, y2) in zip(long["points"][1:-1:2], long["points"][2:-1:2], strict=True):
        assert y1 == y2
        segment = {"x": x1, "y": y1, "width": x2 - x1, "height": 0}
        assert not any(_overlap(segment, node) for node in graph["nodes"])
    _check_layout(graph)


def test_a_column_is_ordered_against_crossings() -> None:
    text = """
name: crossed
streams:
  s1: {topic: t1, participant: alpha, schema: x}
  s2: {topic: t2, participant: alpha, schema: x}
boxes: {b2: {type: filter}, b1: {type: filter}}
arrows: [{from: s2, to: b2}, {from: s1, to: b1}]
"""
    nodes = _by_id(network_graph("alpha/crossed", text, []))
    assert nodes["s1"]["y"] < nodes["s2"]["y"]
    assert nodes["b1"]["y"] < nodes["b2"]["y"]


@pytest.mark.parametrize("text,reason", [
    ("name: x\nboxes: [", "not valid YAML"),
    ("- a\n- b\n", "expected a mapping"),
    ("just text", "expected a mapping"),
    ("", "expected a mapping"),
    ("[" * 5000, "not valid YAML"),
])
def test_a_bad_definition_gives_an_error_and_no_nodes(text: str, reason: str) -> None:
    graph = network_graph("alpha/broken", text, [_fragment("alpha/broken/f1", ["a"])])
    assert reason in graph["error"]
    assert graph["nodes"] == [] and graph["edges"] == []
    assert graph["name"] == "alpha/broken" and graph["participant"] == "alpha"
    json.dumps(graph)


def test_odd_shapes_are_tolerated() -> None:
    text = """
name: odd
streams: [not, a, mapping]
boxes: {a: null, 7: {type: filter}}
arrows: [{from: a}, 3, {from: x, to: a.port}, {from: a, to: 7}]
"""
    graph = network_graph("alpha/odd", text, [_fragment("alpha/odd/f1", ["a"], spec_extra=1)])
    nodes = _by_id(graph)
    assert set(nodes) == {"a", "7", "x"}
    assert nodes["a"]["type"] == "?" and nodes["x"]["kind"] == "stream"
    assert [(e["from"], e["to"], e["port"]) for e in graph["edges"]] == [
        ("x", "a", "port"), ("a", "7", None)]
    assert nodes["a"]["fragment"] == "alpha/odd/f1"
    _check_layout(graph)
