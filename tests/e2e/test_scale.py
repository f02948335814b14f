"""Scaling a keyed stateful fragment out and in under continuous input: the sensor-windows
aggregate goes from one instance to two (on two nodes), the network is redeployed with a
box of its own added (both instances go on running), one instance's node is killed -9
and the instance is restored on the other node, then the fragment goes back to one
instance, and last a redeploy with a changed definition replaces it beside itself
(``--make-before-break``). Every result is checked by tuple id against the reference."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind
from medusa.consuming import TupleConsumer
from medusa.envelope import TupleType
from medusa.linear_road.reference import compute
from medusa.linear_road.sources import publish_traffic
from medusa.linear_road.traffic import TrafficProfile, TrafficSimulation
from medusa.progress import RateProgress
from medusa.sensor_windows import OutputWatch, SteadyInput
from medusa.settings import REPO_ROOT
from medusa.settings import kafka_config as client_config
from medusa.trace_view import recent, roots
from medusa_spark.deploy import deploy, undeploy
from medusa_spark.networks import network_yaml
from medusa_spark.scaling import ScaleError, ScaleResult, instances_of, scale
from tests.federation_processes import SharedNodes, federation_env
from tests.fragment_checks import (
    TAIL_S,
    assert_exactly_once,
    wait_first_result,
    wait_fragment_running,
    wait_network_running,
    wait_result_after,
)
from tests.waiting import first_within

pytestmark = pytest.mark.e2e

SENSORS = 16
SECONDS = 20
"""At least; the input goes on until the last step is done."""
NODES = (SharedNodes.A1, SharedNodes.A2)


@dataclass
class ScaledRun:
    expected: dict[str, dict]
    results: list[tuple[str, dict, int]]
    steps: list[ScaleResult]
    instances: list[list[tuple[str, str, str]]]
    """After each step: (instance, node, phase) of each instance."""
    restored_on: str
    """Where the killed node's instance ran after the takeover."""
    by_partition: list[bool]
    """Whether each instance after the scale-out read only its share of the partitions."""
    node_logs: str
    redeployed: list[tuple[str, str, str]]
    """The instances after the redeploy."""
    replaced: list[tuple[str, str, str]]
    """The instances after the redeploy of a changed definition."""
    deploy_report: list[str]
    loud: list[str]
    """Result ids of ``loud``, an unkeyed filter, whose definition that redeploy changed
    too (its results stay the same)."""
    loud_expected: set[str]


@pytest.fixture(scope="module")
def scaled_run(federation, alpha_nodes, spark, registry_module) -> Iterator[ScaledRun]:
    name = f"scaled-{uuid.uuid4().hex[:6]}"
    prefix = f"{name}."
    network = f"alpha/{name}"
    alpha = client_config(federation.bootstrap("alpha"))
    results_topic = f"{prefix}medusa.{name}.per_sensor"
    log_sizes = [node.log_size() for node in alpha_nodes]
    try:
        with CatalogClient(federation.catalog_url) as catalog:
            first = alpha_nodes[0].global_name
            deploy(network_yaml(name, prefix, box_participant="alpha"), name, federation,
                   registry_module, spark, catalog, {"plausible": first, "per_sensor": first},
                   report=lambda _: None)
            fragment = catalog.list(Kind.FRAGMENTS, network=network)[0].name
            wait_network_running(catalog, network)
            watch = OutputWatch(alpha, registry_module, [results_topic]).start()
            steady = SteadyInput(alpha, registry_module, f"{prefix}sensors.readings", SENSORS,
                                 SECONDS, open_ended=True)
            steady.start()
            wait_first_result(watch, results_topic)
            steps, instances = [], []
            both = [n.global_name for n in alpha_nodes]
            steps.append(scale(catalog, federation, fragment, 2, both, report=lambda _: None))
            instances.append(_instances(catalog, network, fragment))
            by_partition = [bool(e.spec["instance"]["by_partition"])
                            for e in instances_of(catalog, network, fragment.rsplit("/")[-1])]
            wait_result_after(watch, results_topic)
            # A redeploy that leaves the fragment as it was keeps both instances running.
            deploy(_with_a_box_of_its_own(network_yaml(name, prefix, box_participant="alpha")),
                   name, federation, registry_module, spark, catalog,
                   {"plausible": first, "per_sensor": first, "loud": first},
                   report=lambda _: None)
            wait_fragment_running(catalog, f"{network}/loud", on=first)
            redeployed = _instances(catalog, network, fragment)
            wait_result_after(watch, results_topic)
            # One instance's node dies: the instance is restored on the other node.
            victim = next(e for e in instances_of(catalog, network, fragment.rsplit("/")[-1])
                          if e.spec["node"] == alpha_nodes[1].global_name)
            alpha_nodes[1].kill()
            restored_on = str(wait_fragment_running(
                catalog, victim.name, away_from=alpha_nodes[1].global_name,
                timeout_s=120).spec["node"])
            wait_result_after(watch, results_topic)
            steps.append(scale(catalog, federation, fragment, 1, [first],
                               report=lambda _: None))
            instances.append(_instances(catalog, network, fragment))
            wait_result_after(watch, results_topic)
            # A changed definition (a wider filter, the same results) replaces it beside
            # itself.
            deploy_report: list[str] = []
            deploy(_with_a_box_of_its_own(network_yaml(name, prefix, box_participant="alpha"),
                                          wider=True),
                   name, federation, registry_module, spark, catalog, {"loud": first},
                   report=deploy_report.append, make_before_break=True)
            replaced = _instances(catalog, network, fragment)
            wait_result_after(watch, results_topic)
            expected = steady.finish(TAIL_S)
            loud_topic = f"{prefix}medusa.{name}.loud"
            loud_expected = {r.tuple_id for r in steady.sent if r.value > 0}
            loud = OutputWatch(alpha, registry_module, [loud_topic]).start()
            # One settle for both watches, which read side by side.
            watch.wait_for(results_topic, set(expected), timeout_s=300, settle_s=0)
            loud.wait_for(loud_topic, loud_expected, timeout_s=120)
            watch.stop()
            loud.stop()
            alpha_nodes[1].start().wait_registered()  # back for the tests after this one
            yield ScaledRun(expected, [(a.tuple_id, a.value, a.appended_ms)
                                       for a in watch.arrivals[results_topic]],
                            steps, instances, restored_on, by_partition,
                            "\n".join(n.log_since(size)
                                      for n, size in zip(alpha_nodes, log_sizes, strict=True)),
                            redeployed, replaced, deploy_report, loud.ids(loud_topic),
                            loud_expected)
            undeploy(catalog, network, report=lambda _: None)
    finally:
        if alpha_nodes[1].process is None:
            alpha_nodes[1].start().wait_registered()


def _with_a_box_of_its_own(text: str, wider: bool = False) -> str:
    """The network with one more box, in a fragment of its own, reading the input;
    ``wider``: with a filter that lets more through (none of the readings it had kept
    out), and the new box split in two: ``in_range``, a box new to the network in its
    fragment, keeps readings below 2,000,000 and ``loud`` those of them above 0 (the same
    results)."""
    raw = yaml.safe_load(text)
    if wider:
        raw["boxes"]["plausible"]["params"]["predicate"] = \
            "value > -2000000 AND value < 2000000"
        raw["boxes"]["in_range"] = {"type": "filter", "participant": "alpha",
                                    "fragment": "loud",
                                    "params": {"predicate": "value < 2000000"}}
        raw["arrows"].append({"from": "readings", "to": "in_range"})
    raw["boxes"]["loud"] = {"type": "filter", "participant": "alpha", "fragment": "loud",
                            "params": {"predicate": "value > 0"}}
    raw["arrows"].append({"from": "in_range" if wider else "readings", "to": "loud"})
    return yaml.safe_dump(raw, sort_keys=False)


def _instances(catalog: CatalogClient, network: str, fragment: str
               ) -> list[tuple[str, str, str]]:
    return [(e.name, e.spec["node"], e.spec.get("phase", ""))
            for e in instances_of(catalog, network, fragment.rsplit("/")[-1])]


def test_every_result_reaches_the_output_exactly_once(scaled_run) -> None:
    assert_exactly_once([i for i, _, _ in scaled_run.results], scaled_run.expected,
                        "the scale steps")


def test_the_results_equal_the_reference(scaled_run) -> None:
    for tuple_id, value, _ in scaled_run.results:
        assert value == scaled_run.expected[tuple_id], tuple_id


def test_the_fragment_ran_as_two_instances_on_two_nodes_then_one(scaled_run) -> None:
    out, back = scaled_run.instances
    assert len(out) == 2 and {node for _, node, _ in out} == set(NODES)
    assert [phase for _, _, phase in out] == ["running", "running"]
    assert len(back) == 1 and back[0][1] == NODES[0]
    # Results came out before, between and after the steps.
    written = [at for _, _, at in scaled_run.results]
    assert written and max(written) > min(written)


def test_each_instance_read_its_share_of_the_partitions(scaled_run) -> None:
    # The readings are keyed by sensor_id, the fragment's key: split by partition.
    assert scaled_run.by_partition == [True, True]


def test_the_instance_of_the_killed_node_was_restored_on_the_other(scaled_run) -> None:
    assert scaled_run.restored_on == NODES[0]


def test_a_fragment_without_a_key_is_refused_naming_why(federation, spark, registry_module
                                                        ) -> None:
    name = f"unkeyed-{uuid.uuid4().hex[:6]}"
    raw = yaml.safe_load(network_yaml(name, f"{name}.", box_participant="alpha"))
    raw["boxes"]["per_sensor"]["key"] = []
    text = yaml.safe_dump(raw)
    with CatalogClient(federation.catalog_url) as catalog:
        deploy(text, name, federation, registry_module, spark, catalog, report=lambda _: None)
        try:
            fragment = catalog.list(Kind.FRAGMENTS, network=f"alpha/{name}")[0].name
            with pytest.raises(ScaleError, match="no box declares a key"):
                scale(catalog, federation, fragment, 2, report=lambda _: None)
        finally:
            undeploy(catalog, f"alpha/{name}", report=lambda _: None)


LR_NETWORK = REPO_ROOT / "spark_apps" / "medusa_spark" / "networks" / "linear_road.yaml"
LR_PROFILE = TrafficProfile(xways=1, duration_s=180, peak_rate=150, seed=5)
LR_SPEEDUP = 3


def _statistics_network(name: str, prefix: str) -> str:
    """Linear Road's segment statistics (rule 1): each car's mean speed per segment and
    minute, then per segment the cars and the mean of their means. Two keyed, windowed
    boxes in one fragment, fed by the position reports keyed by car."""
    minute = "CAST((unix_millis(window_end) - 86400000) DIV 60000 AS INT)"
    streams = yaml.safe_load(LR_NETWORK.read_text())["streams"]
    return yaml.safe_dump({
        "name": name, "participant": "alpha", "topic_prefix": prefix,
        "streams": {
            "position_reports": streams["position_reports"],
            "segment_statistics": {"topic": "linear-road.segment-statistics",
                                   "participant": "alpha", "schema": "segment_statistics"}},
        "boxes": {
            "car_speeds": {"type": "aggregate", "key": ["xway", "dir", "seg"], "params": {
                "window": {"type": "tumbling", "size": "60 seconds"},
                "group_by": ["xway", "dir", "seg", "vid"],
                "aggregates": {"speed": {"avg": "speed"}}}},
            "segment_stats": {"type": "aggregate", "key": ["xway", "dir", "seg"], "params": {
                "window": {"type": "tumbling", "size": "60 seconds"},
                "group_by": ["xway", "dir", "seg"],
                "aggregates": {"car_count": {"count": "*"}, "avg_speed": {"avg": "speed"}},
                "fields": {"xway": "xway", "dir": "dir", "seg": "seg", "minute": minute,
                           "car_count": "CAST(car_count AS INT)", "avg_speed": "avg_speed"}}}},
        "arrows": [{"from": "position_reports", "to": "car_speeds"},
                   {"from": "car_speeds", "to": "segment_stats"},
                   {"from": "segment_stats", "to": "segment_statistics"}],
    }, sort_keys=False)


def _row(value: dict) -> str:
    """A statistics row as compared: the mean of means to 9 places (Spark sums doubles in
    its own order)."""
    value = {k: v for k, v in value.items() if k != "emit_time"}
    value["avg_speed"] = round(value["avg_speed"], 9)
    return json.dumps(value, sort_keys=True)


@pytest.mark.scenario  # the partitioned road's scale test below covers its path in `make test`
def test_linear_road_statistics_scaled_out_and_in_equal_the_reference(
        federation, alpha_nodes, spark, registry_module, kafka_config) -> None:
    name = f"lrstats-{uuid.uuid4().hex[:6]}"
    prefix = f"{name}."
    network = f"alpha/{name}"
    expected = compute(r for _, rs in TrafficSimulation(LR_PROFILE).run() for r in rs)
    first = alpha_nodes[0].global_name
    with CatalogClient(federation.catalog_url) as catalog:
        deploy(_statistics_network(name, prefix), name, federation, registry_module, spark,
               catalog, {"car_speeds": first, "segment_stats": first}, report=lambda _: None)
        try:
            fragment = catalog.list(Kind.FRAGMENTS, network=network)[0].name
            wait_network_running(catalog, network)
            outcome: dict[str, object] = {}

            def publish() -> None:
                with RateProgress("linear road", total=LR_PROFILE.duration_s - 1.0) as progress:
                    outcome["summary"] = publish_traffic(
                        LR_PROFILE, kafka_config=kafka_config, registry=registry_module,
                        speedup=LR_SPEEDUP, progress=progress, topic_prefix=prefix,
                        end_of_stream=True)
            feeder = threading.Thread(target=publish, daemon=True)
            feeder.start()
            time.sleep(10)  # state to split: the first minute's cars
            scale(catalog, federation, fragment, 2, [n.global_name for n in alpha_nodes],
                  report=lambda _: None)
            # Reports are keyed by car, not by segment: each instance reads them all and
            # keeps its segments' rows.
            assert [e.spec["instance"]["by_partition"] for e in instances_of(
                catalog, network, fragment.rsplit("/")[-1])] == [False, False]
            time.sleep(5)
            scale(catalog, federation, fragment, 1, [first], report=lambda _: None)
            feeder.join(LR_PROFILE.duration_s)
            assert not feeder.is_alive(), "the traffic did not finish"
            topic = prefix + "linear-road.segment-statistics"
            want = Counter(_row(row) for row in expected.segment_statistics)
            got, ids = Counter[str](), list[str]()

            def complete() -> bool:
                nonlocal got, ids
                got_rows, ids = _statistics(kafka_config, registry_module, topic)
                got = Counter(got_rows)
                return got == want

            first_within(complete, 240, interval_s=2)  # the checks below say what differs
            duplicated = [i for i, n in Counter(ids).items() if n > 1]
            assert not duplicated, f"statistics written twice: {duplicated[:5]}"
            missing, extra = want - got, got - want
            assert not missing and not extra, (
                f"{sum(missing.values())} missing, e.g. {list(missing)[:3]}; "
                f"{sum(extra.values())} extra, e.g. {list(extra)[:3]}")
        finally:
            undeploy(catalog, network, report=lambda _: None)


# One expressway (two road groups to split, one per direction), with tolls, accidents and
# charged balances. Two took the scale-out two minutes (a rebuild of 40,000 rows per
# instance), so that the scale-in came after the traffic had ended.
LR_ROAD_PROFILE = TrafficProfile(xways=1, duration_s=390, peak_rate=150, ramp_s=30,
                                 breakdown_probability=0.0003, accident_probability=1.0,
                                 seed=6)


def test_the_linear_road_road_scaled_out_and_in_equals_the_reference(
        federation, alpha_nodes, spark, registry_module, kafka_config) -> None:
    """The shipped partitioned Linear Road network on one node; under its traffic the road
    fragment (keyed by expressway and direction) goes to two instances on two nodes, then
    back to one (as the traffic ends: the scale-out's rebuild takes most of it here; a
    scale-in under input is the scaled run's, above). Every output of the four query types
    equals the reference, none missing, wrong or written twice: the new instances rebuilt
    the road's state (cars, statistics, accidents) from the whole input, and the accounts,
    which read the road's charges, saw each partition's promises from one instance at a
    time."""
    from medusa.linear_road.run_records import read_run
    from medusa.linear_road.validation import validate

    name = f"lrscale-{uuid.uuid4().hex[:6]}"
    prefix = f"{name}."
    network = f"alpha/{name}"
    raw = yaml.safe_load(LR_NETWORK.with_name("linear_road_partitioned.yaml").read_text())
    raw.update(name=name, topic_prefix=prefix)
    expected = compute(r for _, rs in TrafficSimulation(LR_ROAD_PROFILE).run() for r in rs)
    assert expected.accident_alerts and any(r["balance"] > 0 for r in expected.account_balances)
    first = alpha_nodes[0].global_name
    with CatalogClient(federation.catalog_url) as catalog:
        deploy(yaml.safe_dump(raw, sort_keys=False), name, federation, registry_module, spark,
               catalog, {box: first for box in raw["boxes"]}, report=lambda _: None)
        try:
            road = f"{network}/road"
            wait_network_running(catalog, network)
            outcome: dict[str, object] = {}

            def publish() -> None:
                with RateProgress("linear road", total=LR_ROAD_PROFILE.duration_s - 1.0
                                  ) as progress:
                    # 3x: at 4x the two cores fall behind while three instances run
                    # during the step (40 s batches), and in CI it outlasted its 300 s.
                    outcome["summary"] = publish_traffic(
                        LR_ROAD_PROFILE, kafka_config=kafka_config, registry=registry_module,
                        speedup=3, progress=progress, topic_prefix=prefix,
                        end_of_stream=True)
            feeder = threading.Thread(target=publish, daemon=True)
            feeder.start()
            time.sleep(15)  # cars, statistics and charges to carry over
            out = scale(catalog, federation, road, 2, [n.global_name for n in alpha_nodes],
                        report=lambda _: None)
            assert out.replay_from_ms == 0, "the road's state is rebuilt from the whole input"
            assert sorted({e.spec["node"] for e in instances_of(catalog, network, "road")}) \
                == sorted(n.global_name for n in alpha_nodes)
            time.sleep(10)
            scale(catalog, federation, road, 1, [first], report=lambda _: None)
            feeder.join(LR_ROAD_PROFILE.duration_s)
            assert not feeder.is_alive(), "the traffic did not finish"

            last: list[Any] = []
            reference: dict[int, Any] = {}  # by the count of inputs read: they are all in

            def complete() -> bool:
                records = read_run(kafka_config, registry_module, prefix)
                count = len(records.inputs)
                if count not in reference:
                    reference.clear()
                    reference[count] = compute(records.reference_input())
                last[:] = [validate(records.inputs, records.outputs, reference[count],
                                    late_after_s=float("inf"))]
                return all(k.missing == 0 for k in last[0].types)

            first_within(complete, 240, interval_s=5)  # the checks below say what differs
            result = last[0]
            for kind in result.types:
                assert kind.expected > 0, kind.kind.name
                assert (kind.missing, kind.wrong, kind.duplicated) == (0, 0, 0), result.text()
        finally:
            undeploy(catalog, network, report=lambda _: None)


def _statistics(kafka_config, registry, topic: str) -> tuple[list[str], list[str]]:
    with TupleConsumer(kafka_config, registry, [topic], f"check-{uuid.uuid4()}") as consumer:
        tuples = consumer.drain()
    rows, ids = [], []
    for consumed in tuples:
        if consumed.record.type is TupleType.STABLE:
            rows.append(_row(dict(consumed.record.value)))
            ids.append(consumed.record.tuple_id)
    return rows, ids


def _autoscale_once(env: dict[str, str], *options: str) -> str:
    done = subprocess.run([sys.executable, "-m", "medusa_apps", "autoscale", "--once", *options],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _autoscale_until(env: dict[str, str], said: str, *options: str) -> str:
    """``medusa autoscale --once`` again until it says ``said`` (180 s at most); what it
    said last."""
    out = [""]

    def says_it() -> bool:
        out[0] = _autoscale_once(env, *options)
        return said in out[0]

    first_within(says_it, 180, interval_s=0)
    return out[0]


def test_autoscale_scales_a_bottleneck_out_and_an_idle_fragment_in_with_a_trace_each(
        federation, alpha_nodes, spark, registry_module, tmp_path) -> None:
    name = f"auto-{uuid.uuid4().hex[:6]}"
    network = f"alpha/{name}"
    env = {**federation_env(federation, tmp_path), "COLUMNS": "200"}
    alpha = client_config(federation.bootstrap("alpha"))
    # A trigger no batch keeps up with: the fragment is a bottleneck from its first batches.
    text = network_yaml(name, f"{name}.", box_participant="alpha", trigger="100 milliseconds")
    with CatalogClient(federation.catalog_url) as catalog:
        deploy(text, name, federation, registry_module, spark, catalog,
               {"plausible": alpha_nodes[0].global_name, "per_sensor": alpha_nodes[0].global_name},
               report=lambda _: None)
        steady = SteadyInput(alpha, registry_module, f"{name}.sensors.readings", SENSORS, 200)
        try:
            wait_network_running(catalog, network)
            steady.start()
            fragment = catalog.list(Kind.FRAGMENTS, network=network)[0].name
            out = _autoscale_until(env, f"{fragment}: 1 -> 2 instance(s)",
                                   "--out-after", "5", "--cooldown", "0")
            assert f"{fragment}: 1 -> 2 instance(s)" in out, out
            assert len(instances_of(catalog, network, fragment.rsplit("/")[-1])) == 2
            # Reported by both nodes, each instance needs less than 100 slots: idle.
            out = _autoscale_until(env, f"{fragment}: 2 -> 1 instance(s)",
                                   "--out-after", "100000", "--in-below", "100",
                                   "--in-after", "0", "--cooldown", "0")
            assert f"{fragment}: 2 -> 1 instance(s)" in out, out
            assert len(instances_of(catalog, network, fragment.rsplit("/")[-1])) == 1
            found: list[str] = []

            def both_traced() -> bool:
                found[:] = [r.name for t in recent(federation.jaeger_query_url, "autoscale",
                                                   20, 900)
                            for r in roots(t) if r.name.endswith(fragment)]
                return len(found) >= 2

            first_within(both_traced, 60, interval_s=2)
            assert sorted(found) == [f"autoscale in {fragment}", f"autoscale out {fragment}"], \
                found
        finally:
            steady.paused.set()  # nothing more goes out
            undeploy(catalog, network, report=lambda _: None)


def test_a_redeploy_keeps_the_instances_of_an_unchanged_scaled_fragment(scaled_run) -> None:
    """Both instances stay, on their nodes, and neither is stopped: only the new box's
    fragment starts (the exactly-once check above spans the redeploy)."""
    out = scaled_run.instances[0]
    assert [(name, node) for name, node, _ in scaled_run.redeployed] == \
        [(name, node) for name, node, _ in out]
    assert scaled_run.node_logs.count("this fragment is unchanged; it keeps running") >= 2


def test_a_changed_definition_replaces_the_fragment_beside_itself(scaled_run) -> None:
    """The redeploy ran a scale step to one instance of the new definition on the same
    node; the old instance wrote until the new one took over, and never restarted."""
    (before,) = scaled_run.instances[1]
    (after,) = scaled_run.replaced
    assert after[0] != before[0] and after[1] == before[1] and after[2] == "running", after
    report = "\n".join(scaled_run.deploy_report)
    assert report.count("its new definition takes over beside the running one") == 2, report
    assert "restarts with its new definition" not in report, report
    assert "keeps writing until the new definition's instances take over" in \
        scaled_run.node_logs
    assert "starts afresh" not in scaled_run.node_logs


def test_an_unkeyed_fragment_is_replaced_beside_itself_exactly_once(scaled_run) -> None:
    """``loud`` declares no key, and its new definition adds a box new to the network
    (``in_range``): one instance of it replaced it (the report's second "takes over
    beside", above), its output has each result once, and no node lost the network's
    plan while the new box was in the definition and not yet in a new instance."""
    assert_exactly_once(scaled_run.loud, scaled_run.loud_expected,
                        "the replacement of an unkeyed fragment")
    assert "is in no fragment" not in scaled_run.node_logs
