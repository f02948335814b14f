"""``medusa status``: fragments with their rates, errors, SUnion state and boxes, names whole."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from medusa.catalog.model import Entry, Kind
from medusa.federation_status import BoxStatus, SUnionStatus, build_status
from medusa_apps.cli import federation_tables

pytestmark = pytest.mark.unit

NETWORK = "alpha/linear-road-expressway-zero"
POSITIONS = f"{NETWORK}/alpha-node-1"
TOLLS = f"{NETWORK}/tolls-and-accidents"


def _entry(kind: Kind, name: str, **spec: object) -> Entry:
    return Entry(kind=kind, name=name, version=1, updated_at=0, spec=spec)


def _federation() -> tuple[list[Entry], list[Entry], list[Entry], dict[str, dict]]:
    participants = [_entry(Kind.PARTICIPANTS, "alpha", kafka_bootstrap="127.0.0.1:19092")]
    nodes = [_entry(Kind.NODES, "alpha/node-1", status="up", secondary="alpha/node-2",
                    spark_ui="http://127.0.0.1:4040"),
             _entry(Kind.NODES, "alpha/node-2", status="up", secondary="alpha/node-1")]
    fragments = [
        _entry(Kind.FRAGMENTS, POSITIONS, network=NETWORK, boxes=["positions", "segment_stats"],
               node="alpha/node-1", phase="running", ha="active", replica="alpha/node-2",
               replica_ready=True, restarts=0),
        _entry(Kind.FRAGMENTS, TOLLS, network=NETWORK, boxes=["toll_notifications"],
               node="alpha/node-2", phase="failed", restarts=3,
               error="StreamingQueryException: [CANNOT_PARSE] bad toll\n\tat Spark..."),
    ]
    sunion = {"fragment": POSITIONS, "held_buckets": 2, "held_tuples": 517,
              "released_through": 1_700_000_060_000, "dead_lettered": 1,
              "inputs": {"reports": {"topic": "lr.positions", "partitions": {
                  "0": {"boundary": 1, "position": 10, "lag": 40},
                  "1": {"boundary": 1, "position": 12, "lag": 2}}}}}
    reports = {
        "alpha/node-1": {
            "node": "alpha/node-1", "participant": "alpha", "reported_at": 99_000,
            "capacity": 2.0, "load": 0.5, "utilisation": 0.25,
            "boxes": [{"box": f"{NETWORK}/positions", "input_rate": 1200.0,
                       "processing_rate": 1180.0, "batch_duration_ms": 800, "lag": 3},
                      {"box": f"{NETWORK}/segment_stats", "input_rate": 1180.0,
                       "processing_rate": 12.5, "batch_duration_ms": 800, "lag": 3}],
            "fragments": [{"fragment": POSITIONS, "state": "running", "input_rate": 1200.0,
                           "processing_rate": 1150.0, "batch_duration_ms": 800, "lag": 3,
                           "load": 0.5, "restarts": 1, "error": None, "operators": "[]",
                           "sunion": json.dumps(sunion)}]},
        "alpha/node-2": {  # the replica's standby, and the failed fragment
            "node": "alpha/node-2", "participant": "alpha", "reported_at": 90_000,
            "capacity": 2.0, "load": 0.0, "utilisation": 0.0, "boxes": [],
            "fragments": [{"fragment": POSITIONS, "state": "standby", "input_rate": 0.0,
                           "processing_rate": 0.0, "batch_duration_ms": 0, "lag": 0,
                           "restarts": 0, "error": None, "operators": "[]", "sunion": "{}"},
                          {"fragment": TOLLS, "state": "failed", "input_rate": 0.0,
                           "processing_rate": 0.0, "batch_duration_ms": 0, "lag": 9,
                           "restarts": 3, "error": "query stopped after 3 restarts",
                           "operators": "[]", "sunion": "{}"}]},
    }
    return participants, nodes, fragments, reports


def test_fragments_carry_their_rates_errors_sunion_and_boxes_from_the_nodes_reports() -> None:
    status = build_status(*_federation(), now_ms=100_000)
    assert [(n.name, n.fragments, n.report_age_s) for n in status.nodes] == [
        ("alpha/node-1", 1, 1.0), ("alpha/node-2", 1, 10.0)]
    positions, tolls = status.fragments
    assert (positions.name, positions.state, positions.input_rate, positions.processing_rate,
            positions.batch_duration_ms, positions.lag, positions.restarts, positions.error) == (
        POSITIONS, "running", 1200.0, 1150.0, 800, 3, 1, None)  # its node's, not the standby's
    assert positions.sunion == SUnionStatus(2, 517, 1_700_000_060_000, 42, 1)
    assert positions.boxes == [BoxStatus(f"{NETWORK}/positions", 1200.0, 1180.0),
                               BoxStatus(f"{NETWORK}/segment_stats", 1180.0, 12.5)]
    assert (tolls.phase, tolls.state, tolls.restarts, tolls.sunion) == ("failed", "failed", 3, None)
    assert tolls.error == ("StreamingQueryException: [CANNOT_PARSE] bad toll\n\tat Spark...\n"
                           "query stopped after 3 restarts")  # the catalog's and the node's
    assert tolls.boxes == [BoxStatus(f"{NETWORK}/toll_notifications", None, None)]
    as_json = json.loads(json.dumps(status.as_dict()))
    assert as_json["fragments"][0]["sunion"]["held_tuples"] == 517
    assert as_json["fragments"][0]["boxes"][1]["processing_rate"] == 12.5
    assert as_json["fragments"][1]["error"].startswith("StreamingQueryException")


def test_load_utilisation_and_cost_per_node_participant_and_fragment() -> None:
    status = build_status(*_federation(), now_ms=100_000)
    assert [(n.name, n.capacity, n.load, n.utilisation) for n in status.nodes] == [
        ("alpha/node-1", 2.0, 0.5, 0.25), ("alpha/node-2", 2.0, 0.0, 0.0)]
    alpha = next(p for p in status.participants if p["name"] == "alpha")
    assert (alpha["capacity"], alpha["load"], alpha["utilisation"]) == (4.0, 0.5, 0.125)
    assert alpha["cost"] == pytest.approx(0.125 / 0.875)
    positions = status.fragments[0]
    assert positions.load == 0.5
    assert positions.marginal_cost == pytest.approx(0.125 / 0.875)  # alone on alpha
    rendered = _rendered(status)
    assert "0.50 / 4" in rendered and "12%" in rendered and "0.14" in rendered


def test_each_node_shows_its_spark_ui() -> None:
    status = build_status(*_federation(), now_ms=100_000)
    assert [(n.name, n.spark_ui) for n in status.nodes] == [
        ("alpha/node-1", "http://127.0.0.1:4040"), ("alpha/node-2", None)]
    as_json = json.loads(json.dumps(status.as_dict()))
    assert [n["spark_ui"] for n in as_json["nodes"]] == ["http://127.0.0.1:4040", None]
    rendered = _rendered(status)
    assert "Spark UI" in rendered and "http://127.0.0.1:4040" in rendered  # whole


def test_a_node_shows_how_many_fragments_it_has_rehearsed_for_a_takeover() -> None:
    participants, nodes, fragments, reports = _federation()
    nodes[1] = _entry(Kind.NODES, "alpha/node-2", status="up", secondary="alpha/node-1",
                      rehearsed=["alpha/sensors/check", "alpha/sensors/windows"])
    status = build_status(participants, nodes, fragments, reports, now_ms=100_000)
    assert [n.rehearsed for n in status.nodes] == [
        [], ["alpha/sensors/check", "alpha/sensors/windows"]]
    assert json.loads(json.dumps(status.as_dict()))["nodes"][1]["rehearsed"] == [
        "alpha/sensors/check", "alpha/sensors/windows"]
    assert "rehearsed" in _rendered(status)


def test_a_move_shows_the_old_node_until_the_new_one_runs_it_and_no_report_shows_dashes() -> None:
    participants, nodes, fragments, reports = _federation()
    moving = _entry(Kind.FRAGMENTS, POSITIONS, **{**fragments[0].spec, "node": "alpha/node-3",
                                                  "phase": "moving", "ha": "passive"})
    status = build_status(participants, nodes, [moving], reports, now_ms=100_000)
    assert status.fragments[0].input_rate == 1200.0
    released = _entry(Kind.FRAGMENTS, POSITIONS, **{**moving.spec, "phase": "released"})
    shown = build_status(participants, nodes, [released], reports, now_ms=100_000).fragments[0]
    assert (shown.state, shown.input_rate, shown.sunion) == (None, None, None)
    assert shown.boxes[0] == BoxStatus(f"{NETWORK}/positions", None, None)


def test_the_tables_show_whole_names_and_a_failed_query_in_red() -> None:
    status = build_status(*_federation(), now_ms=100_000)
    console = Console(record=True, width=120, color_system="truecolor")
    for table in federation_tables(status):
        console.print(table)
    text = console.export_text(clear=False)
    print(text)
    assert f"{NETWORK}: fragments" in text  # the network titles its fragments
    for name in ("alpha-node-1", "tolls-and-accidents", "segment_stats", "toll_notifications"):
        assert f" {name} " in text, name  # whole, on one line
    assert f"{TOLLS}: StreamingQueryException" in text
    assert "StreamingQueryException" in text and "[CANNOT_PARSE]" in text
    assert "1,150" in text and "1,180" in text and "517" in text and "1700000060000" in text
    html = console.export_html(inline_styles=True)
    assert '#800000">StreamingQueryException' in html  # red


def _rendered(status) -> str:  # type: ignore[no-untyped-def]
    console = Console(record=True, width=200)
    for table in federation_tables(status):
        console.print(table)
    return console.export_text()


def test_a_catalog_that_does_not_answer_is_said_so() -> None:
    from medusa.federation_status import FederationStatus

    console = Console(record=True, width=100)
    for renderable in federation_tables(FederationStatus(error="catalog at x did not answer")):
        console.print(renderable)
    assert "catalog: catalog at x did not answer" in console.export_text()
