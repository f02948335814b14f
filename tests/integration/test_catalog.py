"""The catalog service: versioned writes, clear 4xx, durability under kill -9, no 5xx."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from medusa.catalog.client import CatalogClient, CatalogError, ConflictError
from medusa.catalog.model import Kind
from tests.federation_processes import CatalogProcess
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

NETWORK = """
name: counts
participant: alpha
streams:
  readings: {topic: sensors.readings, participant: alpha, schema: sensor_reading}
  counted: {topic: sensors.counted, participant: alpha, schema: sensor_reading}
boxes:
  hot: {type: filter, params: {predicate: "value > 10"}}
arrows:
  - {from: readings, to: hot}
  - {from: hot, to: counted}
"""


@pytest.fixture
def catalog_process(federation, tmp_path) -> Iterator[CatalogProcess]:
    process = CatalogProcess(federation, tmp_path).start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def catalog(catalog_process) -> Iterator[CatalogClient]:
    with CatalogClient(catalog_process.url) as client:
        yield client


def test_participants_of_the_federation_are_registered_at_start(catalog, federation) -> None:
    names = {e.name: e.spec["kafka_bootstrap"] for e in catalog.list(Kind.PARTICIPANTS)}
    assert names == federation.kafka


def test_writes_are_versioned_and_a_stale_version_is_a_conflict(catalog) -> None:
    created = catalog.put(Kind.NODES, "alpha/node-a", {"secondary": "beta/node-b"})
    assert created.version == 1
    updated = catalog.put(Kind.NODES, "alpha/node-a", {"secondary": "beta/node-c"}, 1)
    assert updated.version == 2
    with pytest.raises(ConflictError, match="is at version 2, not 1"):
        catalog.put(Kind.NODES, "alpha/node-a", {"status": "down"}, 1)
    with pytest.raises(ConflictError, match="already exists at version 2"):
        catalog.put(Kind.NODES, "alpha/node-a", {"status": "down"})
    assert catalog.get(Kind.NODES, "alpha/node-a").spec["secondary"] == "beta/node-c"
    with pytest.raises(ConflictError):
        catalog.delete(Kind.NODES, "alpha/node-a", version=1)
    assert catalog.delete(Kind.NODES, "alpha/node-a", version=2).version == 2
    assert catalog.get(Kind.NODES, "alpha/node-a") is None


def test_two_writers_of_one_version_cannot_both_win(catalog) -> None:
    catalog.put(Kind.NODES, "alpha/contended", {})
    outcomes: list[str] = []

    def write(secondary: str) -> None:
        with CatalogClient(catalog.url) as own:
            try:
                own.put(Kind.NODES, "alpha/contended", {"secondary": secondary}, 1)
                outcomes.append("won")
            except ConflictError:
                outcomes.append("conflict")

    writers = [threading.Thread(target=write, args=(f"beta/n{i}",)) for i in range(8)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    assert sorted(outcomes) == ["conflict"] * 7 + ["won"]
    assert catalog.get(Kind.NODES, "alpha/contended").version == 2


@pytest.mark.parametrize(("kind", "name", "spec", "message"), [
    (Kind.NODES, "zeta/node-1", {}, "no participant 'zeta'"),
    (Kind.NODES, "alpha/node-1", {"secondary": "alpha/node-1"}, "its own secondary"),
    (Kind.NODES, "alpha/node-1", {"status": "sleeping"}, "spec.status"),
    (Kind.NETWORKS, "alpha/counts", {"definition": NETWORK.replace("filter", "filtre")
                                     .replace("predicate", "oops")}, None),
    (Kind.NETWORKS, "alpha/other", {"definition": NETWORK}, "names network alpha/counts"),
    (Kind.FRAGMENTS, "alpha/counts/f0", {"network": "alpha/counts", "boxes": ["hot"],
                                         "node": "alpha/node-1"},
     "no network 'alpha/counts'"),
    (Kind.FRAGMENTS, "alpha/counts/f0", {"network": "alpha/counts", "boxes": [],
                                         "node": "alpha/node-1"}, "spec.boxes"),
    (Kind.FRAGMENTS, "alpha/counts/f0", {"network": "alpha/counts", "boxes": ["hot"],
                                         "node": "alpha/node-1", "phase": "lost"},
     "spec.phase"),
    (Kind.FRAGMENTS, "alpha/counts/f0", {"network": "beta/counts", "boxes": ["hot"],
                                         "node": "alpha/node-1"}, "not beta/counts"),
    (Kind.CONTRACTS, "alpha/c1", {"origin": "beta", "host": "alpha", "price": 1,
                                  "movable": ["beta/counts"], "proposed_by": "beta"},
     "who must have proposed it"),
    (Kind.CONTRACTS, "alpha/c1", {"origin": "alpha", "host": "beta", "price": 1, "delta": 2,
                                  "movable": ["alpha/counts"], "proposed_by": "alpha"},
     "delta must not exceed price"),
    (Kind.CONTRACTS, "alpha/c1", {"origin": "alpha", "host": "beta", "price": 1,
                                  "movable": ["beta/counts"], "proposed_by": "alpha"},
     "not load of the origin"),
    (Kind.CONTRACTS, "alpha/c1", {"origin": "alpha", "host": "omega", "price": 1,
                                  "movable": ["alpha/counts"], "proposed_by": "alpha"},
     "host: there is no participant 'omega'"),
])
def test_bad_writes_are_refused_with_a_reason(catalog, kind, name, spec, message) -> None:
    with pytest.raises(CatalogError) as refused:
        catalog.put(kind, name, spec)
    assert refused.value.status == 422
    if message:
        assert message in str(refused.value)


def test_a_network_with_a_bad_box_is_refused_naming_the_box(catalog) -> None:
    broken = NETWORK.replace("params: {predicate", "parms: {predicate")
    with pytest.raises(CatalogError, match="box 'hot'"):
        catalog.put(Kind.NETWORKS, "alpha/counts", {"definition": broken})


def test_fragments_are_placed_on_registered_nodes_of_known_networks(catalog) -> None:
    catalog.put(Kind.NETWORKS, "alpha/counts", {"definition": NETWORK})
    with pytest.raises(CatalogError, match="no node 'beta/ghost'"):
        catalog.put(Kind.FRAGMENTS, "alpha/counts/f0",
                    {"network": "alpha/counts", "boxes": ["hot"], "node": "beta/ghost"})
    with pytest.raises(CatalogError, match="has no box 'cold'") as refused:
        catalog.put(Kind.FRAGMENTS, "alpha/counts/f0",
                    {"network": "alpha/counts", "boxes": ["hot", "cold"], "node": "beta/ghost"})
    assert refused.value.status == 422
    catalog.put(Kind.NODES, "beta/worker", {})
    with pytest.raises(CatalogError, match="replica on its own node"):
        catalog.put(Kind.FRAGMENTS, "alpha/counts/f0",
                    {"network": "alpha/counts", "boxes": ["hot"], "node": "beta/worker",
                     "ha": "active", "replica": "beta/worker"})
    placed = catalog.put(Kind.FRAGMENTS, "alpha/counts/f0",
                         {"network": "alpha/counts", "boxes": ["hot"], "node": "beta/worker"})
    assert placed.spec["phase"] == "placed" and placed.spec["restarts"] == 0
    assert [e.name for e in catalog.list(Kind.FRAGMENTS, node="beta/worker")] == [placed.name]
    assert [e.name for e in catalog.list(Kind.FRAGMENTS, network="alpha/counts")] == [placed.name]
    failed = catalog.put(Kind.FRAGMENTS, "alpha/counts/f0",
                         {**placed.spec, "phase": "failed", "error": "boom", "restarts": 3},
                         placed.version)
    assert catalog.get(Kind.FRAGMENTS, "alpha/counts/f0") == failed
    assert catalog.delete(Kind.FRAGMENTS, "alpha/counts/f0").name == "alpha/counts/f0"


def test_nothing_acknowledged_is_lost_when_the_service_is_killed_under_writes(
        catalog_process) -> None:
    acknowledged: dict[str, int] = {}
    stop = threading.Event()

    def write() -> None:
        with CatalogClient(catalog_process.url, timeout_s=5) as client:
            for i in range(100_000):
                if stop.is_set():
                    return
                name = f"alpha/node-{i % 40}"
                try:
                    entry = client.update(Kind.NODES, name,
                                          lambda spec, i=i: {**(spec or {}), "capacity": i + 1},
                                          attempts=1)
                except CatalogError:
                    return  # the service is gone
                assert entry is not None
                acknowledged[name] = entry.version

    writer = threading.Thread(target=write)
    writer.start()
    wait_until(lambda: f"200 acknowledged writes on 40 nodes (only {acknowledged})",
               lambda: len(acknowledged) >= 40 and sum(acknowledged.values()) >= 200,
               120, interval_s=0.05)
    catalog_process.kill()
    stop.set()
    writer.join(30)
    assert not writer.is_alive()
    catalog_process.start()
    with CatalogClient(catalog_process.url) as client:
        stored = {e.name: e.version for e in client.list(Kind.NODES)}
    missing = {n: v for n, v in acknowledged.items() if stored.get(n, 0) < v}
    assert not missing, f"acknowledged but lost after kill -9: {missing}"


def test_a_second_instance_on_the_same_topic_fences_the_first(federation, tmp_path,
                                                               catalog_process) -> None:
    with CatalogClient(catalog_process.url) as first:
        first.put(Kind.NODES, "alpha/before", {})
        second = CatalogProcess(federation, tmp_path, topic=catalog_process.topic).start()
        try:
            with pytest.raises(CatalogError) as refused:
                first.put(Kind.NODES, "alpha/after", {})
            assert refused.value.status == 503
            with CatalogClient(second.url) as client:
                assert client.get(Kind.NODES, "alpha/before") is not None
        finally:
            second.stop()


def test_no_request_gets_a_server_error(catalog_process, tmp_path) -> None:
    """Schemathesis generates requests from the OpenAPI description, valid and not."""
    run = subprocess.run(
        [str(Path(sys.executable).with_name("schemathesis")), "run",
         f"{catalog_process.url}/openapi.json", "--checks", "not_a_server_error",
         "--max-examples", "25", "--seed", "1", "--report-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=900, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " generated, " in run.stdout, run.stdout[-2000:]
