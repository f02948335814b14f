"""Warm moves within a participant: the target node runs a standby replica of the fragment
from a copy of its checkpoint until it has caught up, then the old node stops and the
replica takes the output over. Moved there and back under continuous input, then the
network is redeployed with a new reader of the fragment's output, which leaves the
fragment running; checked by tuple id against the reference."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import yaml

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind
from medusa.sensor_windows import OutputWatch, SteadyInput
from medusa.settings import kafka_config
from medusa_spark.deploy import MoveResult, deploy, move, resolve_fragment, undeploy
from medusa_spark.networks import network_yaml
from tests.federation_processes import SharedNodes
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
"""At least; the input goes on until both moves are done."""
NODES = (SharedNodes.A1, SharedNodes.A2)


@dataclass
class WarmRun:
    expected: dict[str, dict]
    results: list[tuple[str, dict, int]]
    moves: list[MoveResult]
    checkpoints: list[str]
    """The fragment's checkpoint after each move, then after the redeploy."""
    node_logs: str
    reader_results: int
    """Results of the box the redeploy added."""
    fragment: str
    """The moved fragment's catalog name."""


@pytest.fixture(scope="module")
def warm_run(federation, alpha_nodes, spark, registry_module) -> Iterator[WarmRun]:
    name = f"warm-{uuid.uuid4().hex[:6]}"
    prefix = f"{name}."
    alpha = kafka_config(federation.bootstrap("alpha"))
    results_topic = f"{prefix}medusa.{name}.per_sensor"
    box = f"alpha/{name}/per_sensor"
    log_sizes = [node.log_size() for node in alpha_nodes]
    with CatalogClient(federation.catalog_url) as catalog:
        deploy(network_yaml(name, prefix, box_participant="alpha"), name, federation,
               registry_module, spark, catalog,
               {"plausible": NODES[0], "per_sensor": NODES[0]}, report=lambda _: None)
        try:
            wait_running_on(catalog, box, NODES[0])
            watch = OutputWatch(alpha, registry_module, [results_topic]).start()
            steady = SteadyInput(alpha, registry_module, f"{prefix}sensors.readings", SENSORS,
                                 SECONDS, open_ended=True)
            steady.start()
            wait_first_result(watch, results_topic)
            moves, checkpoints = [], []
            for target in (NODES[1], NODES[0]):  # there and back, both warm
                moves.append(move(catalog, box, target, timeout_s=300, report=lambda _: None))
                checkpoints.append(resolve_fragment(catalog, box).spec["checkpoint"])
                wait_result_after(watch, results_topic)
            deploy(_with_a_reader(network_yaml(name, prefix, box_participant="alpha")), name,
                   federation, registry_module, spark, catalog,
                   {"plausible": NODES[0], "per_sensor": NODES[0], "busy": NODES[1]},
                   report=lambda _: None)
            wait_running_on(catalog, f"alpha/{name}/busy", NODES[1])
            reader_topic = f"{prefix}medusa.{name}.busy"
            reader = OutputWatch(alpha, registry_module, [reader_topic]).start()
            wait_first_result(reader, reader_topic)
            wait_result_after(watch, results_topic)
            checkpoints.append(resolve_fragment(catalog, box).spec["checkpoint"])
            expected = steady.finish(TAIL_S)
            watch.wait_for(results_topic, set(expected), timeout_s=300)
            watch.stop()
            reader.stop()
            logs = "\n".join(node.log_since(size)
                             for node, size in zip(alpha_nodes, log_sizes, strict=True))
            yield WarmRun(expected, [(a.tuple_id, a.value, a.appended_ms)
                                     for a in watch.arrivals[results_topic]],
                          moves, checkpoints, logs, len(reader.ids(reader_topic)),
                          resolve_fragment(catalog, box).name)
        finally:
            undeploy(catalog, f"alpha/{name}", report=lambda _: None)


def _with_a_reader(text: str) -> str:
    """The network with one more box, in a fragment of its own, reading ``per_sensor``,
    and an active standby for ``per_sensor`` (a change of ``ha`` alone: its replica starts
    on the node's secondary, and the fragment's query goes on)."""
    raw = yaml.safe_load(text)
    raw["boxes"]["per_sensor"]["ha"] = "active"
    raw["boxes"]["busy"] = {"type": "filter", "participant": "alpha", "fragment": "busy",
                            "params": {"predicate": "readings > 0"}}
    raw["arrows"].append({"from": "per_sensor", "to": "busy"})
    return yaml.safe_dump(raw, sort_keys=False)


def test_every_result_reaches_the_output_exactly_once(warm_run) -> None:
    assert_exactly_once([i for i, _, _ in warm_run.results], warm_run.expected, "the moves")
    for tuple_id, value, _ in warm_run.results:
        assert value == warm_run.expected[tuple_id], tuple_id


def test_each_move_went_through_a_replica_that_had_caught_up(warm_run) -> None:
    assert [m.target for m in warm_run.moves] == [NODES[1], NODES[0]]
    # The fragment runs from its replica's checkpoint after each move.
    assert all(c.endswith(".replica") for c in warm_run.checkpoints[:2]), \
        warm_run.checkpoints
    assert warm_run.node_logs.count("has caught up; ready to take it over") >= 2
    assert warm_run.node_logs.count("for its warm replica") >= 2
    assert warm_run.node_logs.count("promoted the replica of") >= 2


def test_the_catalog_shows_the_fragment_on_its_last_node_and_no_move_pending(
        federation, warm_run) -> None:
    with CatalogClient(federation.catalog_url) as catalog:
        fragments = [e for e in catalog.list(Kind.FRAGMENTS) if "warm-" in e.spec["network"]]
    for entry in fragments:
        assert entry.spec.get("warm_target") is None, entry.spec
        assert not entry.spec.get("warm_ready"), entry.spec


def test_a_redeploy_that_adds_a_reader_leaves_the_fragment_running(warm_run) -> None:
    """The fragment's definition did not change, only its standby: no stop, no restart,
    the same checkpoint (the output's exactly-once check above spans the redeploy), and an
    active replica beside it."""
    assert warm_run.reader_results > 0
    assert "this fragment is unchanged; it keeps running" in warm_run.node_logs
    assert any(f"running the standby replica of {warm_run.fragment}" in line and
               "take it over" not in line for line in warm_run.node_logs.splitlines()), \
        "no active replica started after the redeploy"
    # Only this fragment: the shared nodes also stop other modules' fragments meanwhile.
    assert f"stopped {warm_run.fragment} at a batch boundary" not in warm_run.node_logs
    assert warm_run.checkpoints[2] == warm_run.checkpoints[1]
