"""Linear Road split over two participants, with DPC, on the real stack: direction 0's cars
report to alpha's cluster and direction 1's to beta's, and the network runs on a node of
beta behind a union of the two. The link between alpha and beta is cut (toxiproxy) while
traffic flows, then healed. While it is cut, beta keeps answering for its own direction
(tentative results); after healing, every output's stable view equals the independent
reference of the whole input, row for row."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import yaml

from medusa.catalog.client import CatalogClient
from medusa.consuming import ConsumedTuple
from medusa.envelope import TupleType
from medusa.linear_road.records import PositionReport
from medusa.linear_road.reference import ReferenceOutput, compute
from medusa.linear_road.traffic import TrafficProfile
from medusa.progress import RateProgress
from medusa.settings import kafka_config
from medusa.stable_view import StableView, stable_view
from medusa_apps.bench.dpc_partition import FaultWindow, OutputRecorder, wait_running
from tests.federation_processes import NodeProcess, running
from tests.linear_road_split import DIRECTION_OF, SplitInput, split_network_yaml
from tests.waiting import wait_until

# The shared run (the first test's set-up) takes 8 to 25 minutes on 2 cores: a batch of this
# network takes 35 to 180 s there, and the cut lasts until beta has answered from one. A
# scenario, then: `make test-scenarios`, not `make test`.
pytestmark = [pytest.mark.e2e, pytest.mark.scenario, pytest.mark.timeout(3600)]

OUTPUTS = ("toll_notifications", "accident_alerts")
"""The outputs of position reports (the split network takes no queries)."""
# Simulated traffic at five times real time (a minute's statistics every 12 s), ramping up
# over five simulated minutes, with breakdowns and accidents; it runs until the test has
# seen what it needs and then a little longer.
PROFILE = TrafficProfile(xways=1, duration_s=3600, peak_rate=40, start_rate=15, ramp_s=300,
                         breakdown_probability=0.004, accident_probability=0.6,
                         query_probability=0.0, seed=5)
SPEEDUP = 5
BOUND = "5 seconds"
"""The benchmark's own response bound; the one fragment's D is 5 s - one 0.5 s trigger."""
D_S = 4.5
WARM_TIMEOUT_S = 300.0
"""The network's first results (Spark's first batches of a network this size are slow)."""
CUT_AT_LEAST_S = 3 * D_S
CUT_AT_MOST_S = 300.0
"""The cut lasts until beta notified a car tentatively of a report made while cut off (a
batch of this network takes tens of seconds on a small machine), and at least a few D."""
AFTER_HEAL_S = 20.0
IN_FLIGHT_S = 2 * SPEEDUP
"""Simulated seconds of alpha's reports that may have crossed just before the cut."""
SETTLE_S = 1200.0


@dataclass
class SplitRun:
    records: dict[str, list[ConsumedTuple]]
    """Each output's records in the order written."""
    expected: ReferenceOutput
    cut: FaultWindow
    cut_second: int
    """The simulated second being published when the link was cut."""


def _row(value: dict) -> str:
    row = dict(value)
    row.pop("emit_time", None)
    return json.dumps(row, sort_keys=True)


def _differences(view: StableView, want: list[dict]) -> tuple[Counter, Counter]:
    got = Counter(_row(r.value) for r in view.stable)
    expected = Counter(_row(row) for row in want)
    return expected - got, got - expected


@pytest.fixture(scope="module")
def node(federation, tmp_path_factory) -> Iterator[NodeProcess]:
    run_dir = tmp_path_factory.mktemp("dpc-lr-node")
    started = NodeProcess("dpc-lr-b1", "beta", federation, run_dir, master="local[2]")
    with running({started.global_name: started}):
        yield started


@pytest.fixture(scope="module")
def split_run(federation, node, links, spark, registry_module) -> Iterator[SplitRun]:
    from medusa_spark.deploy import deploy, undeploy

    name = f"lrs-{uuid.uuid4().hex[:6]}"
    prefix = f"{name}."
    text = split_network_yaml(name, prefix, BOUND)
    raw = yaml.safe_load(text)
    network = f"beta/{name}"
    with CatalogClient(federation.catalog_url) as catalog:
        deploy(text, name, federation, registry_module, spark, catalog,
               {box: node.global_name for box in raw["boxes"]})
        try:
            wait_running(catalog, network)
            beta = kafka_config(federation.bootstrap("beta"))
            recorders = {out: OutputRecorder(beta, registry_module,
                                             prefix + raw["streams"][out]["topic"])
                         for out in OUTPUTS}
            try:
                sent, cut, cut_second = _run_with_a_cut(federation, registry_module, links,
                                                        prefix, recorders)
                run = SplitRun({out: list(r.log.records) for out, r in recorders.items()},
                               compute(sent), cut, cut_second)
                _print_timeline(run)
                yield run
            finally:
                for recorder in recorders.values():
                    recorder.close()
        finally:
            undeploy(catalog, network)


def _run_with_a_cut(federation, registry, links, prefix: str,
                    recorders: dict[str, OutputRecorder]
                    ) -> tuple[list[PositionReport], FaultWindow, int]:
    """Traffic on both participants; once results flow, the link is cut until tentative
    results came out, then healed; the traffic ends a little later. Returns what was sent
    once every output's stable view holds its reference with nothing left to correct."""
    configs = {p: kafka_config(federation.bootstrap(p)) for p in DIRECTION_OF}
    failed: list[BaseException] = []
    with RateProgress("linear road, two participants") as progress:
        traffic = SplitInput(PROFILE, kafka_configs=configs, registry=registry,
                             speedup=SPEEDUP, topic_prefix=prefix, progress=progress)

        def publish() -> None:
            try:
                traffic.run()
            except BaseException as error:  # re-raised below
                failed.append(error)

        def written(kind: TupleType) -> bool:
            return any(r.log.of(kind) for r in recorders.values())

        publisher = threading.Thread(target=publish, daemon=True)
        publisher.start()
        try:
            wait_until("the first results", lambda: written(TupleType.STABLE), WARM_TIMEOUT_S)
            began, cut_second = time.time_ns() // 1_000_000, traffic.second
            links.partition("alpha", "beta")
            try:
                wait_until("a tentative notification of a report made while cut off",
                           lambda: any(c.record.value["time"] > cut_second + IN_FLIGHT_S
                                      for c in recorders["toll_notifications"].log.of(
                                          TupleType.TENTATIVE)),
                          CUT_AT_MOST_S, CUT_AT_LEAST_S)
            finally:
                links.heal("alpha", "beta")
            cut = FaultWindow("partition alpha-beta", began, time.time_ns() // 1_000_000)
        finally:
            traffic.stop_after(AFTER_HEAL_S)
            publisher.join(AFTER_HEAL_S + 120)
    if failed:
        raise failed[0]
    assert not publisher.is_alive(), "the input did not finish"
    expected = compute(traffic.sent)
    wait_until("the corrected results",
              lambda: all(_settled(list(recorders[out].log.records), getattr(expected, out))
                          for out in OUTPUTS), SETTLE_S)
    time.sleep(3.0)  # any duplicate would come now
    return traffic.sent, cut, cut_second


def _print_timeline(run: SplitRun) -> None:
    """Each output's records by type, before, during and after the cut (shown on failure)."""
    for out in OUTPUTS:
        phases: dict[str, Counter] = {"before": Counter(), "during": Counter(),
                                      "after": Counter()}
        for consumed in run.records[out]:
            phase = ("before" if consumed.timestamp_ms < run.cut.began_ms else
                     "during" if consumed.timestamp_ms <= run.cut.ended_ms else "after")
            phases[phase][consumed.record.type.value] += 1
        print(out, {phase: dict(kinds) for phase, kinds in phases.items()})


def _settled(records: list[ConsumedTuple], want: list[dict]) -> bool:
    view = stable_view(c.record for c in records)
    missing, _ = _differences(view, want)
    return not missing and not view.tentative and not view.reconciling


def test_every_rule_fires_on_this_input(split_run: SplitRun) -> None:
    for out in OUTPUTS:
        assert getattr(split_run.expected, out), out
    directions = {row["dir"] for row in split_run.expected.toll_notifications}
    assert directions == set(DIRECTION_OF.values()), "cars drive both ways"


def test_beta_answers_for_its_own_direction_while_cut_off(split_run: SplitRun) -> None:
    """While cut off, beta goes on notifying its own direction's cars of reports made
    after the cut began (tentatively), and nobody of alpha's, whose reports it lacks."""
    cut = split_run.cut
    during = [c.record for c in split_run.records["toll_notifications"]
              if c.record.type in (TupleType.STABLE, TupleType.TENTATIVE)
              and cut.began_ms <= c.timestamp_ms <= cut.ended_ms]
    later = [r for r in during if r.value["time"] > split_run.cut_second + IN_FLIGHT_S]
    directions = Counter(r.value["dir"] for r in later)
    assert directions[DIRECTION_OF["beta"]] > 0, (
        f"no notification of reports made after the cut began ({len(during)} during it)")
    assert directions[DIRECTION_OF["alpha"]] == 0, directions
    assert all(r.type is TupleType.TENTATIVE for r in later)


def test_every_output_is_corrected_with_undo_then_rec_done(split_run: SplitRun) -> None:
    records = split_run.records["toll_notifications"]
    types = [c.record.type for c in records]
    assert TupleType.UNDO in types and TupleType.REC_DONE in types, Counter(types)
    first_undo = types.index(TupleType.UNDO)
    assert TupleType.REC_DONE in types[first_undo:]
    assert all(c.timestamp_ms >= split_run.cut.ended_ms
               for c in records if c.record.type is TupleType.UNDO), "UNDO before healing"


@pytest.mark.parametrize("output", OUTPUTS)
def test_the_stable_view_equals_the_reference(split_run: SplitRun, output: str) -> None:
    view = stable_view(c.record for c in split_run.records[output])
    missing, extra = _differences(view, getattr(split_run.expected, output))
    assert not missing and not extra, (
        f"{output}: {sum(missing.values())} missing, e.g. {list(missing)[:3]}; "
        f"{sum(extra.values())} extra, e.g. {list(extra)[:3]}")
    assert view.tentative == [] and not view.reconciling
