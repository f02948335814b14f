"""BPM on the real stack: alpha's node is given a tiny capacity, so the sensor-windows
fragment it runs overloads it; beta's node has room. With a contract from alpha to beta,
the two participants' agents (`medusa bpm`, real processes) move the fragment to beta under
continuous input: offer, acceptance, hand-over (warm: a replica on beta's node, with its
own SUnion on beta's cluster, catches up beside the fragment and then takes the output
over). Every result reaches the output exactly once, equal to the reference (by tuple id);
the fragment moves once and stays; the offer and the ledger record the move at the
contract's price."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from medusa.bpm.ledger import read_entries
from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind
from medusa.contracts import accept, propose, revoke
from medusa.jaeger_client import Trace
from medusa.sensor_windows import OutputWatch, SteadyInput
from medusa.settings import kafka_config
from medusa_apps.bench.dpc_partition import wait_running
from medusa_spark.deploy import deploy, undeploy
from medusa_spark.networks import network_yaml
from tests.federation_processes import NodeProcess, federation_env, running
from tests.fragment_checks import TAIL_S
from tests.waiting import first_within, wait_for

pytestmark = pytest.mark.e2e

SENSORS = 8
SECONDS = 20
"""At least; the input goes on until the fragment has moved and stayed."""
STAYS_S = 10.0
"""How long the fragment must stay on the host (five rounds of the agents) to count."""
PRICE, DELTA = 10.0, 2.0
ALPHA_NODE, BETA_NODE = "alpha/bpm-a1", "beta/bpm-b1"


@pytest.fixture(scope="module")
def nodes(federation, tmp_path_factory) -> Iterator[dict[str, NodeProcess]]:
    run_dir = tmp_path_factory.mktemp("bpm-nodes")
    started = {
        ALPHA_NODE: NodeProcess("bpm-a1", "alpha", federation, run_dir,
                                options=("--capacity", "0.02")),
        BETA_NODE: NodeProcess("bpm-b1", "beta", federation, run_dir,
                               options=("--capacity", "8")),
    }
    with running(started):
        yield started


@dataclass
class BpmRun:
    network: str
    fragment: str
    contract: str
    expected: dict[str, dict]
    results: list[str]
    """Result ids in the order written."""
    nodes_seen: list[str]
    """Where the fragment ran, each change as the catalog showed it."""
    offers: list[dict]
    agents_log: str


def _agent(federation, tmp_path, participant: str) -> subprocess.Popen[bytes]:
    log = (tmp_path / f"bpm-{participant}.log").open("ab")
    return subprocess.Popen([sys.executable, "-m", "medusa_apps", "bpm", "--participant",
                             participant, "--interval", "2", "--offer-timeout", "30"],
                            stdout=log, stderr=subprocess.STDOUT,
                            env=federation_env(federation, tmp_path))


@pytest.fixture(scope="module")
def bpm_run(federation, nodes, spark, registry_module, tmp_path_factory) -> Iterator[BpmRun]:
    run_dir = tmp_path_factory.mktemp("bpm-agents")
    name = f"bpm-{uuid.uuid4().hex[:6]}"
    prefix = f"{name}."
    network = f"alpha/{name}"
    results_topic = f"{prefix}medusa.{name}.per_sensor"  # the example's boxes are beta's
    alpha = kafka_config(federation.bootstrap("alpha"))
    with CatalogClient(federation.catalog_url) as catalog:
        deploy(network_yaml(name, prefix), name, federation, registry_module, spark, catalog,
               {"plausible": ALPHA_NODE, "per_sensor": ALPHA_NODE})
        [fragment] = wait_running(catalog, network)
        contract = propose(catalog, f"bpm-{uuid.uuid4().hex[:6]}", origin="alpha",
                           host="beta", price=PRICE, delta=DELTA, movable=[network],
                           period_s=3600, by="alpha")
        accept(catalog, contract.name, by="beta")
        watch = OutputWatch(kafka_config(federation.bootstrap("beta")),
                            registry_module, [results_topic]).start()
        steady = SteadyInput(alpha, registry_module, f"{prefix}sensors.readings", SENSORS,
                             SECONDS, open_ended=True)
        agents = [_agent(federation, run_dir, p) for p in ("alpha", "beta")]
        seen: list[str] = []
        since = [time.monotonic()]

        def stayed_on_beta() -> bool:
            """Samples where the fragment runs; whether it stayed on beta long enough."""
            if seen and seen[-1] == BETA_NODE and time.monotonic() - since[0] > STAYS_S:
                return True
            entry = catalog.get(Kind.FRAGMENTS, fragment)
            node = str(entry.spec.get("node")) if entry else "-"
            if not seen or seen[-1] != node:
                seen.append(node)
                since[0] = time.monotonic()
            return False

        try:
            steady.start()
            first_within(stayed_on_beta, 240)  # the checks below say where it went
            expected = steady.finish(TAIL_S)
            watch.wait_for(results_topic, set(expected), timeout_s=240)
            watch.stop()
        finally:
            for agent in agents:
                agent.terminate()
                agent.wait(30)
            revoke(catalog, contract.name, by="alpha")
        offers = [e.spec for e in catalog.list(Kind.OFFERS)
                  if e.spec.get("contract") == contract.name]
        logs = "\n".join(p.read_text() for p in run_dir.glob("bpm-*.log"))
        yield BpmRun(network, fragment, contract.name, expected, watch.ids(results_topic),
                     seen, offers, logs)
        undeploy(catalog, network, report=lambda _: None)


def test_the_overloaded_fragment_moves_to_the_partner_once_and_stays(bpm_run: BpmRun) -> None:
    assert bpm_run.nodes_seen[0] == ALPHA_NODE, bpm_run.nodes_seen
    assert bpm_run.nodes_seen[-1] == BETA_NODE, (bpm_run.nodes_seen, bpm_run.agents_log[-3000:])
    assert len(bpm_run.nodes_seen) == 2, f"moved more than once: {bpm_run.nodes_seen}"
    done = [o for o in bpm_run.offers if o["status"] == "done"]
    assert len(done) == 1, bpm_run.offers
    assert done[0]["fragment"] == bpm_run.fragment and done[0]["node"] == BETA_NODE
    assert PRICE - DELTA <= done[0]["unit_price"] <= PRICE


def test_the_hand_over_loses_and_duplicates_nothing(bpm_run: BpmRun) -> None:
    duplicated = [i for i, n in Counter(bpm_run.results).items() if n > 1]
    missing = set(bpm_run.expected) - set(bpm_run.results)
    assert not duplicated, f"results written twice across the move: {duplicated[:5]}"
    assert not missing, f"results lost across the move: {sorted(missing)[:5]}"


def test_the_ledger_records_the_move_at_the_contract_price(bpm_run: BpmRun, federation,
                                                           registry_module) -> None:
    entries = [e for e in read_entries([kafka_config(federation.bootstrap(p))
                                        for p in ("alpha", "beta")], registry_module)
               if e["contract"] == bpm_run.contract]
    moves = [e for e in entries if e["kind"] == "move"]
    assert len(moves) == 1, entries
    [move] = moves
    assert (move["origin"], move["host"], move["fragment"]) == ("alpha", "beta",
                                                               bpm_run.fragment)
    assert move["amount"] == pytest.approx(move["unit_price"] * move["load"])


def test_the_move_is_one_trace_from_the_offer_to_the_first_output(bpm_run: BpmRun,
                                                                    federation) -> None:
    from medusa.trace_view import recent, roots

    root_name = f"move {bpm_run.fragment}"
    stages = ["offer", "accept", "hand-over", f"takeover {bpm_run.fragment}", "first output"]
    seen: list[list[str]] = []

    def complete() -> Trace | None:
        found = [t for t in recent(federation.jaeger_query_url, "move", 10, 3600)
                 if any(r.name == root_name for r in roots(t))]
        seen[:] = [sorted(s.name for s in t.spans) for t in found]
        return next((t for t in found if all(t.named(stage) for stage in stages)), None)

    trace = wait_for(lambda: f"a move trace of {bpm_run.fragment} with {stages} (found {seen})",
                     complete, 90, interval_s=2)
    [root] = roots(trace)
    assert root.service == "medusa-bpm"
    for stage in ("offer", "accept", "hand-over"):
        assert trace.parent(trace.one(stage)) == root, stage
    handover = trace.one("hand-over")
    assert trace.parent(trace.one(f"takeover {bpm_run.fragment}")) == handover
    takeover = trace.one(f"takeover {bpm_run.fragment}")
    assert takeover.service == f"medusa-node {BETA_NODE}"
    # Warm: a replica on the partner's node caught up beside the fragment, then took over.
    assert takeover.attributes.get("medusa.ha") == "warm move", takeover.attributes
