"""The console's snapshot, routes and actions, in memory: the catalog's entries and the
feeds are given, the actions' runners are stubs. The page itself is driven in a real
browser against the running stack in tests/e2e/test_console.py."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Entry, Kind
from medusa.console.actions import ActionLog, Runners
from medusa.console.live import Console
from medusa.console.routes import mount_console
from medusa.console.snapshot import build_snapshot
from medusa.settings import REPO_ROOT
from tests.waiting import wait_until

pytestmark = pytest.mark.unit

NETWORK = (REPO_ROOT / "spark_apps" / "medusa_spark" / "networks" /
           "sensor_windows.yaml").read_text()
TOKENS = {"alpha-token": "alpha", "beta-token": "beta"}


def _entry(kind: Kind, name: str, **spec: Any) -> Entry:
    return Entry(kind=kind, name=name, version=1, updated_at=0, spec=spec)


def _entries() -> dict[Kind, list[Entry]]:
    return {
        Kind.PARTICIPANTS: [_entry(Kind.PARTICIPANTS, "alpha", kafka_bootstrap="127.0.0.1:1"),
                            _entry(Kind.PARTICIPANTS, "beta", kafka_bootstrap="127.0.0.1:2")],
        Kind.NODES: [_entry(Kind.NODES, "alpha/node-1", status="up",
                            spark_ui="http://127.0.0.1:4040"),
                     _entry(Kind.NODES, "beta/node-1", status="failed")],
        Kind.NETWORKS: [_entry(Kind.NETWORKS, "alpha/sensor-windows", definition=NETWORK)],
        Kind.FRAGMENTS: [_entry(Kind.FRAGMENTS, "alpha/sensor-windows/main",
                                network="alpha/sensor-windows", boxes=["plausible", "per_sensor"],
                                node="alpha/node-1", phase="running", dpc_state="UP_FAILURE",
                                takeover_trace="00-" + "ab" * 16 + "-" + "cd" * 8 + "-01")],
        Kind.CONTRACTS: [_entry(Kind.CONTRACTS, "alpha/alpha-beta-1", origin="alpha",
                                host="beta", price=2.0, delta=0.5,
                                movable=["alpha/sensor-windows"], proposed_by="alpha")],
    }


def test_the_snapshot_joins_the_catalog_with_the_nodes_reports() -> None:
    report = {"node": "alpha/node-1", "reported_at": 1_000, "utilisation": 0.5,
              "capacity": 2.0, "load": 1.0,
              "fragments": [{"fragment": "alpha/sensor-windows/main", "state": "running",
                             "input_rate": 12.5, "processing_rate": 12.0, "lag": 7,
                             "tentative_results": 3, "corrections": 1,
                             "dpc_state": "UP_FAILURE"}],
              "boxes": [{"box": "alpha/sensor-windows/plausible", "input_rate": 12.5,
                         "processing_rate": 12.0}]}
    snapshot = build_snapshot(_entries(), {"alpha/node-1": report}, 2_000)
    json.dumps(snapshot)  # what the page receives
    nodes = {node["name"]: node for node in snapshot["nodes"]}
    assert nodes["alpha/node-1"]["spark_ui"] == "http://127.0.0.1:4040"
    assert nodes["alpha/node-1"]["cost"] == pytest.approx(1.0)  # D(0.5) = 0.5 / 0.5
    assert nodes["beta/node-1"]["status"] == "failed"
    [fragment] = snapshot["fragments"]
    assert (fragment["dpc_state"], fragment["tentative_results"], fragment["corrections"],
            fragment["lag"]) == ("UP_FAILURE", 3, 1, 7)
    assert fragment["takeover_trace"] == "ab" * 16
    [graph] = snapshot["networks"]
    boxes = {node["id"]: node for node in graph["nodes"]}
    assert boxes["plausible"]["fragment"] == "alpha/sensor-windows/main"
    assert boxes["plausible"]["rows_in"] == 12.5 and boxes["per_sensor"]["lag"] == 7
    [contract] = snapshot["contracts"]
    assert contract["state"] == "proposed" and contract["low"] == 1.5


class _Recorder:
    """A move runner that records its calls and the token it was given."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str | None]] = []

    def __call__(self, catalog: CatalogClient, fragment: str, node: str) -> str:
        self.calls.append((fragment, node, catalog._http.headers.get("authorization")))
        return f"moved {fragment} to {node}"


@pytest.fixture
def console_app() -> tuple[TestClient, _Recorder, Console]:
    move = _Recorder()
    console = Console(lambda: (7, _entries()),
                      Runners(catalog_url="http://127.0.0.1:1", move=move))
    app = FastAPI()
    mount_console(app, console, TOKENS)
    return TestClient(app), move, console


def test_the_page_and_its_script_are_served(console_app) -> None:
    client, _, _ = console_app
    page = client.get("/console")
    assert page.status_code == 200 and "/console/static/console.js" in page.text
    script = client.get("/console/static/console.js")
    assert script.status_code == 200 and "EventSource" in script.text
    assert client.get("/console/static/secrets.json").status_code == 404
    snapshot = client.get("/console/snapshot").json()
    assert snapshot["revision"] == 7 and snapshot["nodes"][0]["name"] == "alpha/node-1"


def test_the_live_stream_sends_the_snapshot_as_a_server_sent_event(console_app) -> None:
    client, _, console = console_app
    sequence, payload = console.latest()
    with client.stream("GET", "/console/events") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        lines = []
        for line in stream.iter_lines():
            lines.append(line)
            if line.startswith("data: "):
                break
    assert f"id: {sequence}" in lines and lines[-1] == f"data: {payload}"


def test_actions_need_a_token_and_name_the_field_they_lack(console_app) -> None:
    client, move, _ = console_app
    assert client.post("/console/actions/move", json={}).status_code == 401
    assert client.post("/console/whoami",
                       headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.post("/console/whoami", headers={"Authorization": "Bearer beta-token"}
                       ).json() == {"principal": "beta"}
    alpha = {"Authorization": "Bearer alpha-token"}
    bad = client.post("/console/actions/move", json={"fragment": "alpha/sensor-windows/main",
                                                      "node": "nowhere"}, headers=alpha)
    assert bad.status_code == 422 and "node" in bad.json()["detail"]
    unknown = client.post("/console/actions/explode", json={}, headers=alpha)
    assert unknown.status_code == 422 and "expected one of" in unknown.json()["detail"]
    # Only a party to a link (or the federation's operator) may cut it.
    foreign = client.post("/console/actions/partition", json={"first": "beta",
                                                              "second": "gamma"},
                          headers=alpha)
    assert foreign.status_code == 422 and "its own links" in foreign.json()["detail"]
    assert move.calls == []


def test_an_action_runs_with_the_operators_own_token_and_its_outcome_is_kept(
        console_app) -> None:
    client, move, console = console_app
    started = client.post("/console/actions/move",
                          json={"fragment": "alpha/sensor-windows/main", "node": "beta/node-2"},
                          headers={"Authorization": "Bearer alpha-token"})
    assert started.status_code == 202
    action = started.json()
    assert action["principal"] == "alpha" and action["status"] == "running"
    wait_until("the move action ends", lambda: client.get(
        f"/console/actions/{action['id']}").json()["status"] != "running", 5, interval_s=0.05)
    done = client.get(f"/console/actions/{action['id']}").json()
    assert done["status"] == "done" and done["outcome"] == \
        "moved alpha/sensor-windows/main to beta/node-2"
    assert move.calls == [("alpha/sensor-windows/main", "beta/node-2", "Bearer alpha-token")]
    assert console.actions.recent()[-1]["id"] == action["id"]


def test_a_failed_action_says_why() -> None:
    def refused(*_: Any) -> str:
        raise PermissionError("403: alpha may not change beta's fragment")

    actions = ActionLog(Runners(catalog_url="http://127.0.0.1:1", move=refused))
    started = actions.start("move", {"fragment": "beta/n/f", "node": "alpha/node-1"},
                            "alpha", "alpha-token")
    wait_until("the refused action ends",
               lambda: actions.get(started["id"])["status"] != "running", 5, interval_s=0.05)
    assert actions.get(started["id"])["status"] == "failed"
    assert "may not change" in actions.get(started["id"])["outcome"]


def test_without_tokens_the_console_takes_no_actions() -> None:
    console = Console(lambda: (0, {}), Runners(catalog_url="http://127.0.0.1:1"))
    app = FastAPI()
    mount_console(app, console, None)
    answer = TestClient(app).post("/console/actions/heal", json={"first": "alpha",
                                                                 "second": "beta"})
    assert answer.status_code == 403 and "checks no tokens" in answer.json()["detail"]


def test_the_console_stays_out_of_the_catalogs_api_description(console_app) -> None:
    app = FastAPI()
    mount_console(app, console_app[2], TOKENS)
    assert not [path for path in app.openapi()["paths"] if path.startswith("/console")]


def test_the_catalog_service_wires_a_console_whose_trace_feed_asks_jaeger(monkeypatch) -> None:
    """The wiring of ``medusa catalog serve``: the trace feed's thread asks whether a page
    reads before each poll, and polls (it once died asking, before the console existed)."""
    from medusa.console import feeds
    from medusa.endpoints import Endpoints
    from medusa_apps import console_service

    polled = []
    monkeypatch.setattr(feeds.NodeLoadFeed, "start", lambda self: self)
    monkeypatch.setattr(feeds.LedgerFeed, "start", lambda self: self)
    monkeypatch.setattr(feeds.TraceFeed, "poll", lambda self: polled.append(time.monotonic()))
    monkeypatch.setattr(console_service, "registry_client", lambda url: object())
    endpoints = Endpoints(kafka={"alpha": "127.0.0.1:1"}, registry_url="http://127.0.0.1:1",
                         otlp_endpoint="http://127.0.0.1:1", jaeger_query_url="http://127.0.0.1:1")

    class Store:
        revision = 0

        def entries(self, kind: Kind, prefix: str) -> list[Entry]:
            return []

    app = FastAPI()
    console_service.console_extension(endpoints, TOKENS, 1)(app, Store())  # type: ignore[arg-type]
    wait_until("the trace feed polled", lambda: bool(polled), 5, interval_s=0.05)
    assert TestClient(app).get("/console/snapshot").json()["traces"]["error"] is None
