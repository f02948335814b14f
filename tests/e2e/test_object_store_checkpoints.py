"""Checkpoints on an S3-compatible object store, a real one started locally (s3proxy):
two nodes of alpha keep their checkpoints in it, under s3a://. A stateful fragment is
moved warm from one to the other (its replica's copy of the state is made inside the
store), then the node that runs it is killed -9 and the other takes it over, resuming in
place from the checkpoint in the store instead of copying files from the dead node's
disk. Checked by tuple id against the reference."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest

from medusa.catalog.client import CatalogClient
from medusa.sensor_windows import OutputWatch, SteadyInput
from medusa.settings import kafka_config
from medusa.stack.s3 import LocalS3
from medusa_spark.deploy import deploy, move, resolve_fragment, undeploy
from medusa_spark.networks import network_yaml
from tests.federation_processes import NodeProcess, running
from tests.fragment_checks import (
    TAIL_S,
    assert_exactly_once,
    wait_first_result,
    wait_result_after,
    wait_running_on,
)
from tests.s3_fixtures import BUCKET, s3_env

pytestmark = pytest.mark.e2e

SENSORS = 12
SECONDS = 20
"""At least; the input goes on until the takeover is done."""


@dataclass
class ObjectStoreRun:
    expected: dict[str, dict]
    results: list[str]
    checkpoints: list[str]
    """The fragment's checkpoint: at the start, after the move, after the takeover."""
    node_logs: str


def in_store(store: LocalS3, location: str) -> Path:
    """Where the store's file system backend keeps the objects under an s3a:// location."""
    uri = urlparse(location)
    return store.bucket_dir(uri.netloc) / uri.path.lstrip("/")


@pytest.fixture(scope="module")
def object_store_run(federation, s3_store, spark, registry_module, tmp_path_factory
                     ) -> Iterator[ObjectStoreRun]:
    run_dir = tmp_path_factory.mktemp("s3-nodes")
    names = [f"s3-{i}" for i in (1, 2)]
    by_name = {name: NodeProcess(name, "alpha", federation, run_dir, secondary=f"alpha/{other}",
                                 checkpoint_root=f"s3a://{BUCKET}/checkpoints/alpha/{name}")
               for name, other in zip(names, reversed(names), strict=True)}
    for node in by_name.values():
        node.env.update(s3_env(s3_store))
    name = f"objstore-{uuid.uuid4().hex[:6]}"
    prefix = f"{name}."
    alpha = kafka_config(federation.bootstrap("alpha"))
    results_topic = f"{prefix}medusa.{name}.per_sensor"
    box = f"alpha/{name}/per_sensor"
    with running(by_name) as started, CatalogClient(federation.catalog_url) as catalog:
        nodes = list(started.values())
        deploy(network_yaml(name, prefix, box_participant="alpha"), name, federation,
               registry_module, spark, catalog,
               {"plausible": nodes[0].global_name, "per_sensor": nodes[0].global_name},
               report=lambda _: None)
        wait_running_on(catalog, box, nodes[0].global_name)
        watch = OutputWatch(alpha, registry_module, [results_topic]).start()
        steady = SteadyInput(alpha, registry_module, f"{prefix}sensors.readings", SENSORS,
                             SECONDS, open_ended=True)
        steady.start()
        wait_first_result(watch, results_topic)
        checkpoints = [resolve_fragment(catalog, box).spec["checkpoint"]]
        move(catalog, box, nodes[1].global_name, timeout_s=300, report=lambda _: None)
        checkpoints.append(resolve_fragment(catalog, box).spec["checkpoint"])
        wait_result_after(watch, results_topic)  # batches committed on the new node
        nodes[1].kill()
        wait_running_on(catalog, box, nodes[0].global_name)
        checkpoints.append(resolve_fragment(catalog, box).spec["checkpoint"])
        expected = steady.finish(TAIL_S)
        watch.wait_for(results_topic, set(expected), timeout_s=300)
        watch.stop()
        yield ObjectStoreRun(expected, watch.ids(results_topic), checkpoints,
                             "\n".join(n.log.read_text(errors="replace") for n in nodes))
        undeploy(catalog, f"alpha/{name}", report=lambda _: None)


def test_every_result_reaches_the_output_exactly_once(object_store_run) -> None:
    assert_exactly_once(object_store_run.results, object_store_run.expected,
                        "the move and the takeover")


def test_the_checkpoints_live_in_the_object_store(object_store_run, s3_store) -> None:
    checkpoints = object_store_run.checkpoints
    assert all(c.startswith(f"s3a://{BUCKET}/") for c in checkpoints), checkpoints
    # Spark's commit log of each, as the store itself keeps it.
    for checkpoint in checkpoints:
        commits = in_store(s3_store, f"{checkpoint}/commits")
        assert commits.is_dir() and any(commits.iterdir()), (checkpoint, commits)


def test_the_takeover_resumed_in_place_from_the_object_store(object_store_run) -> None:
    _, moved, taken_over = object_store_run.checkpoints
    # The survivor went on from the dead node's checkpoint itself, not from a copy.
    assert taken_over == moved, object_store_run.checkpoints
    assert "resumes in place from its checkpoint on the shared store" in \
        object_store_run.node_logs


def test_the_warm_move_copied_the_state_inside_the_store(object_store_run) -> None:
    start, moved, _ = object_store_run.checkpoints
    assert moved != start and moved.endswith(".replica"), object_store_run.checkpoints
    assert "of its checkpoint for a replica" in object_store_run.node_logs
