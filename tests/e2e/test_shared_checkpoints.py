"""Checkpoints on a shared store, each a real one started locally: HDFS, and an
S3-compatible object store (s3proxy, under s3a://). Two nodes of alpha keep their
checkpoints there. A stateful fragment is moved warm from one to the other (its replica's
copy of the state is made inside the store), then the node that runs it is killed -9 and
the other takes it over, resuming in place from the checkpoint in the store instead of
copying files from the dead node's disk. Checked by tuple id against the reference.

`make test` runs it on the object store; the same run on HDFS is a scenario (`make
test-scenarios`): HDFS's own client is tested in `tests/integration`, and the two runs
differ only in the store's Hadoop file system."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import pytest

from medusa.catalog.client import CatalogClient
from medusa.sensor_windows import OutputWatch, SteadyInput
from medusa.settings import kafka_config
from medusa.stack.s3 import LocalS3
from medusa_spark import checkpoint_store as store
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


@dataclass(frozen=True)
class SharedStore:
    name: str
    root: str
    """Where the nodes' checkpoint roots go."""
    holds_commits: Callable[[str], bool]
    """Whether the store holds Spark's commit log of a checkpoint."""
    env: dict[str, str] = field(default_factory=dict)
    """What a node needs to reach the store."""


@dataclass
class SharedRun:
    store: SharedStore
    expected: dict[str, dict]
    results: list[str]
    checkpoints: list[str]
    """The fragment's checkpoint: at the start, after the move, after the takeover."""
    committed_in_store: list[bool]
    node_logs: str


def in_object_store(s3: LocalS3, location: str) -> Path:
    """Where the store's file system backend keeps the objects under an s3a:// location."""
    uri = urlparse(location)
    return s3.bucket_dir(uri.netloc) / uri.path.lstrip("/")


@pytest.fixture(scope="module", params=[pytest.param("hdfs", marks=pytest.mark.scenario), "s3"])
def shared_store(request, spark) -> SharedStore:
    if request.param == "hdfs":
        hdfs = request.getfixturevalue("hdfs")
        return SharedStore("hdfs", f"{hdfs.uri}/medusa/checkpoints/alpha",
                           lambda c: bool(store.list_names(f"{c}/commits", spark)))
    s3: LocalS3 = request.getfixturevalue("s3_store")

    def holds_commits(checkpoint: str) -> bool:  # as the store itself keeps them
        commits = in_object_store(s3, f"{checkpoint}/commits")
        return commits.is_dir() and any(commits.iterdir())
    return SharedStore("s3", f"s3a://{BUCKET}/checkpoints/alpha", holds_commits, s3_env(s3))


@pytest.fixture(scope="module")
def shared_run(federation, shared_store, spark, registry_module, tmp_path_factory
               ) -> Iterator[SharedRun]:
    run_dir = tmp_path_factory.mktemp(f"{shared_store.name}-nodes")
    names = [f"{shared_store.name}-{i}" for i in (1, 2)]
    by_name = {name: NodeProcess(name, "alpha", federation, run_dir, secondary=f"alpha/{other}",
                                 checkpoint_root=f"{shared_store.root}/{name}")
               for name, other in zip(names, reversed(names), strict=True)}
    for node in by_name.values():
        node.env.update(shared_store.env)
    name = f"shared-{uuid.uuid4().hex[:6]}"
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
        committed = [shared_store.holds_commits(c) for c in checkpoints]
        yield SharedRun(shared_store, expected, watch.ids(results_topic), checkpoints,
                        committed,
                        "\n".join(n.log.read_text(errors="replace") for n in nodes))
        undeploy(catalog, f"alpha/{name}", report=lambda _: None)


def test_every_result_reaches_the_output_exactly_once(shared_run) -> None:
    assert_exactly_once(shared_run.results, shared_run.expected, "the move and the takeover")


def test_the_checkpoints_live_in_the_store(shared_run) -> None:
    root = shared_run.store.root
    assert all(c.startswith(root) for c in shared_run.checkpoints), shared_run.checkpoints
    assert all(shared_run.committed_in_store), shared_run.checkpoints


def test_the_takeover_resumed_in_place_from_the_shared_store(shared_run) -> None:
    _, moved, taken_over = shared_run.checkpoints
    # The survivor went on from the dead node's checkpoint itself, not from a copy.
    assert taken_over == moved, shared_run.checkpoints
    assert "resumes in place from its checkpoint on the shared store" in shared_run.node_logs


def test_the_warm_move_copied_the_state_inside_the_store(shared_run) -> None:
    start, moved, _ = shared_run.checkpoints
    assert moved != start and moved.endswith(".replica"), shared_run.checkpoints
    assert "of its checkpoint for a replica" in shared_run.node_logs
