"""A network over nodes of both participants: a cross-participant arrow, and a stateful
fragment moved cold to a node of the other participant under continuous input (stopped at a
batch boundary, resumed there from the rebased checkpoint; the BPM test moves one warm),
checked by tuple id against the reference."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from medusa.catalog.client import CatalogClient
from medusa.contracts import hosting
from medusa.sensor_windows import OutputWatch, SteadyInput
from medusa.settings import kafka_config
from medusa_spark.deploy import MoveResult, deploy, move, undeploy
from medusa_spark.networks import network_yaml
from tests.federation_processes import NodeProcess, SharedNodes
from tests.fragment_checks import (
    TAIL_S,
    box_nodes,
    wait_first_result,
    wait_network_running,
    wait_result_after,
)

pytestmark = pytest.mark.e2e

SENSORS = 12
SECONDS = 20
"""At least; the input goes on until the move is done."""
MOVE_AFTER_FIRST_RESULT_S = 3


A_NODE, B_NODE = SharedNodes.A1, SharedNodes.B1
"""The session's shared nodes: one of alpha's, where the stateful fragment starts, and
beta's, where the other runs and the stateful one moves to."""


@pytest.fixture(scope="module")
def nodes(shared_nodes: SharedNodes) -> dict[str, NodeProcess]:
    return shared_nodes.ready()


@dataclass
class MovedRun:
    network: str
    sent_ids: list[str]
    expected: dict[str, dict]
    crossed: list[str]
    """Ids that came out of `plausible`, whose input is on the other participant."""
    results: list[tuple[str, dict, int]]
    """(id, value, written at ms) out of `per_sensor`, the box that was moved."""
    move: MoveResult
    move_started_ms: int
    placement_after: dict[str, str]


@pytest.fixture(scope="module")
def moved_run(federation, nodes, spark, registry_module) -> Iterator[MovedRun]:
    name = f"sw-{uuid.uuid4().hex[:6]}"
    prefix = f"{name}."
    text = network_yaml(name, prefix)
    alpha = kafka_config(federation.bootstrap("alpha"))
    beta = kafka_config(federation.bootstrap("beta"))
    crossed_topic = f"{prefix}medusa.{name}.plausible"
    results_topic = f"{prefix}medusa.{name}.per_sensor"
    with CatalogClient(federation.catalog_url) as catalog:
        # Two fragments, one per node: the arrow between them is a topic on beta's cluster.
        hosting(catalog, "alpha", "beta", f"alpha/{name}")  # beta hosts alpha's load
        deploy(text, name, federation, registry_module, spark, catalog,
               {"plausible": B_NODE, "per_sensor": A_NODE})
        wait_network_running(catalog, f"alpha/{name}", {"plausible": B_NODE,
                                                  "per_sensor": A_NODE})
        watch = OutputWatch(beta, registry_module, [crossed_topic, results_topic]).start()
        steady = SteadyInput(alpha, registry_module, f"{prefix}sensors.readings", SENSORS,
                             SECONDS, open_ended=True)
        steady.start()
        # Moved once results flow: the first windows have closed and more are open.
        wait_first_result(watch, results_topic)
        time.sleep(MOVE_AFTER_FIRST_RESULT_S)
        move_started_ms = int(time.time() * 1000)
        # To a node of the other participant: the fragment's SUnion topic changes cluster,
        # its output stays on beta's. Cold, so that the released checkpoint's rebase is
        # checked here (a BPM move, warm, is checked in test_bpm).
        moved = move(catalog, f"alpha/{name}/per_sensor", B_NODE, timeout_s=300,
                     warm=False)
        wait_result_after(watch, results_topic)
        expected = steady.finish(TAIL_S)
        # One settle for both: the watch reads the two topics side by side.
        watch.wait_for(results_topic, set(expected), timeout_s=300, settle_s=0)
        watch.wait_for(crossed_topic, {r.tuple_id for r in steady.sent}, timeout_s=180)
        watch.stop()
        placement_after = box_nodes(catalog, f"alpha/{name}")
        yield MovedRun(
            network=f"alpha/{name}", sent_ids=[r.tuple_id for r in steady.sent],
            expected=expected, crossed=watch.ids(crossed_topic),
            results=[(a.tuple_id, a.value, a.appended_ms)
                     for a in watch.arrivals[results_topic]],
            move=moved, move_started_ms=move_started_ms, placement_after=placement_after)
        undeploy(catalog, f"alpha/{name}", report=lambda _: None)


def test_the_cross_participant_arrow_loses_and_duplicates_nothing(moved_run) -> None:
    crossed = Counter(moved_run.crossed)
    sent = Counter(moved_run.sent_ids)
    assert len(sent) >= SENSORS * SECONDS and len(sent) % SENSORS == 0
    assert crossed - sent == Counter(), "tuples that were never sent"
    assert sent - crossed == Counter(), f"lost on the way: {list(sent - crossed)[:5]}"
    assert max(crossed.values()) == 1, f"duplicated: {[i for i, n in crossed.items() if n > 1]}"


def test_the_moved_fragment_emits_every_result_exactly_once(moved_run) -> None:
    counts = Counter(tuple_id for tuple_id, _, _ in moved_run.results)
    duplicated = [i for i, n in counts.items() if n > 1]
    missing = set(moved_run.expected) - set(counts)
    assert not duplicated, f"results written twice across the move: {duplicated[:5]}"
    assert not missing, f"results lost across the move: {sorted(missing)[:5]}"
    assert set(counts) == set(moved_run.expected)


def test_the_results_equal_the_reference(moved_run) -> None:
    for tuple_id, value, _ in moved_run.results:
        assert value == moved_run.expected[tuple_id], tuple_id


def test_the_fragment_was_moved_while_results_were_flowing(moved_run) -> None:
    assert moved_run.placement_after == {"plausible": B_NODE, "per_sensor": B_NODE}
    written = [at for _, _, at in moved_run.results]
    assert any(at < moved_run.move_started_ms for at in written), "no result before the move"
    assert any(at > moved_run.move_started_ms for at in written), "no result after the move"


def test_automatic_placement_puts_the_fragment_on_a_node_of_its_participant(
        federation, nodes, spark, registry_module) -> None:
    name = f"auto-{uuid.uuid4().hex[:6]}"
    with CatalogClient(federation.catalog_url) as catalog:
        hosting(catalog, "alpha", "beta", f"alpha/{name}")  # its boxes are beta's to run
        try:
            placed = deploy(network_yaml(name, f"{name}."), name, federation, registry_module,
                            spark, catalog, report=lambda _: None)
        finally:
            undeploy(catalog, f"alpha/{name}", report=lambda _: None)
    # Both boxes write to beta's cluster: one fragment, on one of beta's nodes.
    assert list(placed) == ["beta"], placed
    assert placed["beta"].startswith("beta/"), placed
