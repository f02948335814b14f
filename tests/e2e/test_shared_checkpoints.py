"""Checkpoints on a shared store, a real HDFS started locally: two nodes of alpha keep
their checkpoints there. A stateful fragment is moved warm from one to the other (its
replica's copy of the state is made inside HDFS), then the node that runs it is killed
-9 and the other takes it over, resuming in place from the checkpoint in HDFS instead of
copying files from the dead node. Checked by tuple id against the reference."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from medusa.catalog.client import CatalogClient
from medusa.sensor_windows import OutputWatch, SteadyInput
from medusa.settings import kafka_config
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

pytestmark = pytest.mark.e2e

SENSORS = 12
SECONDS = 20
"""At least; the input goes on until the takeover is done."""


@dataclass
class SharedRun:
    expected: dict[str, dict]
    results: list[str]
    checkpoints: list[str]
    """The fragment's checkpoint: at the start, after the move, after the takeover."""
    committed_in_hdfs: list[bool]
    node_logs: str


@pytest.fixture(scope="module")
def shared_run(federation, hdfs, spark, registry_module, tmp_path_factory
               ) -> Iterator[SharedRun]:
    run_dir = tmp_path_factory.mktemp("hdfs-nodes")
    names = [f"hdfs-{i}" for i in (1, 2)]
    by_name = {name: NodeProcess(name, "alpha", federation, run_dir, secondary=f"alpha/{other}",
                                 checkpoint_root=f"{hdfs.uri}/medusa/checkpoints/alpha/{name}")
               for name, other in zip(names, reversed(names), strict=True)}
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
        committed = [bool(store.list_names(f"{c}/commits", spark)) for c in checkpoints]
        yield SharedRun(expected, watch.ids(results_topic), checkpoints, committed,
                        "\n".join(n.log.read_text(errors="replace") for n in nodes))
        undeploy(catalog, f"alpha/{name}", report=lambda _: None)


def test_every_result_reaches_the_output_exactly_once(shared_run) -> None:
    assert_exactly_once(shared_run.results, shared_run.expected, "the move and the takeover")


def test_the_checkpoints_live_in_hdfs(shared_run, hdfs) -> None:
    assert all(c.startswith(hdfs.uri) for c in shared_run.checkpoints), shared_run.checkpoints
    assert all(shared_run.committed_in_hdfs), shared_run.checkpoints


def test_the_takeover_resumed_in_place_from_the_shared_store(shared_run) -> None:
    _, moved, taken_over = shared_run.checkpoints
    # The survivor went on from the dead node's checkpoint itself, not from a copy.
    assert taken_over == moved, shared_run.checkpoints
    assert "resumes in place from its checkpoint on the shared store" in shared_run.node_logs


def test_the_warm_move_copied_the_state_inside_the_store(shared_run) -> None:
    start, moved, _ = shared_run.checkpoints
    assert moved != start and moved.endswith(".replica"), shared_run.checkpoints
    assert "of its checkpoint for a replica" in shared_run.node_logs
