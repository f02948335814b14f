"""Every network the project ships, deployed as a user deploys it: `medusa deploy FILE` with
default placement, input from `medusa produce`, outputs checked against a reference.
(The Linear Road network is deployed so by the demo's test, `test_demo.py`, and the sensor
pair by the README's DPC walk-through, `test_readme_dpc.py`.)"""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import datetime

import pytest
import yaml

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind
from medusa.consuming import TupleConsumer
from medusa.contracts import hosting
from medusa.envelope import TupleType
from medusa.sensor_windows import WINDOW_MS, reference
from medusa.sensors import SensorReading
from medusa.settings import REPO_ROOT, kafka_config
from medusa.stable_view import StableView
from tests.federation_processes import SharedNodes, federation_env
from tests.fragment_checks import wait_network_running
from tests.waiting import first_within, wait_for

pytestmark = pytest.mark.e2e

SHIPPED = REPO_ROOT / "spark_apps" / "medusa_spark" / "networks"
DEPLOYED_BY_OTHER_TESTS = {"linear_road.yaml": "test_demo.py",
                           "linear_road_partitioned.yaml": "test_scale.py",
                           "sensor_pair.yaml": "test_readme_dpc.py"}
REAL_TIME = {"sensor_alerts.yaml"}
"""Deployed by ``test_a_real_time_network_passes_each_reading_on_once`` below."""
SENSORS = 4
ROUNDS = 25
"""Readings per sensor, a second apart, sent in real time: two 10-second windows close."""
MOVED_ROUNDS = 150
"""Readings per sensor for the real-time network, 200 ms apart: 30 s, across its move."""


def test_every_shipped_network_has_a_deployment_test() -> None:
    shipped = {path.name for path in SHIPPED.glob("*.yaml")}
    assert shipped == set(INPUTS) | set(DEPLOYED_BY_OTHER_TESTS) | REAL_TIME


def _medusa(env: dict[str, str], *args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "medusa_apps", *args], capture_output=True,
                            text=True, env=env, timeout=300, check=False)
    assert result.returncode == 0, f"medusa {' '.join(args)}:\n{result.stdout}{result.stderr}"
    return result.stdout


INPUTS = {
    # network file: the participants whose sensors feed it, and their topics' prefixes
    "sensor_windows.yaml": {"alpha": ""},
}


def _readings(federation, registry, topics: dict[str, str]
              ) -> dict[str, list[SensorReading]]:
    """The readings in each input topic (participant -> topic), as published."""
    found = {}
    for participant, topic in topics.items():
        with TupleConsumer(kafka_config(federation.bootstrap(participant)), registry, [topic],
                           f"shipped-{uuid.uuid4().hex[:6]}") as consumer:
            found[participant] = [_reading(dict(c.record.value))
                                  for c in consumer.drain(idle_s=3)
                                  if c.record.type is TupleType.STABLE]
    return found


def _reading(value: dict) -> SensorReading:
    """A reading as decoded (its time a datetime: Avro's timestamp-millis)."""
    at = value["measured_at"]
    if isinstance(at, datetime):
        at = round(at.timestamp() * 1000)
    return SensorReading(**{**value, "measured_at": at})


# The in-query variant is a long scenario (`make test-scenarios`): the suite's time.
@pytest.mark.parametrize("sunion", ["process",
                                    pytest.param("in-query", marks=pytest.mark.scenario)])
@pytest.mark.parametrize("network_file", sorted(INPUTS))
def test_a_shipped_network_deploys_with_default_placement_and_answers(
        network_file, sunion, alpha_beta_nodes, federation, registry, tmp_path) -> None:
    """As shipped, and with its SUnions in the queries (``sunion: in-query``): beta's
    fragment then reads alpha's readings across the link itself."""
    raw = yaml.safe_load((SHIPPED / network_file).read_text())
    prefix = f"shipped{uuid.uuid4().hex[:6]}."
    raw["topic_prefix"] = prefix  # the run's own topics; the network is as shipped
    if sunion != raw.get("sunion", "process"):
        raw["sunion"] = sunion
    network = tmp_path / network_file
    network.write_text(yaml.safe_dump(raw, sort_keys=False))
    env = {**federation_env(federation, tmp_path), "COLUMNS": "200"}
    name = f"{raw['participant']}/{raw['name']}"
    # Its boxes run on beta's nodes, which beta allows under a contract only.
    contract = prefix.rstrip(".")
    _medusa(env, "contract", "propose", "alpha", "beta", "--price", "1", "--movable", name,
            "--period", "1s", "--name", contract)
    _medusa(env, "contract", "accept", f"alpha/{contract}", "--by", "beta")
    deployed = _medusa(env, "deploy", str(network))
    assert f"deployed {name}" in deployed
    assert f"under contract alpha/{contract}" in deployed, deployed
    with CatalogClient(federation.catalog_url) as catalog:
        try:
            wait_network_running(catalog, name, timeout_s=240)
            output = f"{prefix}medusa.{raw['name']}.per_sensor"
            outputs = kafka_config(federation.bootstrap("beta"))
            # Every input at once and in real time, as sensors send: an input whose
            # boundaries stop for longer than D is a failed input to DPC.
            inputs, producers = {}, []
            for participant, topic_prefix in INPUTS[network_file].items():
                producers.append(subprocess.Popen(
                    [sys.executable, "-m", "medusa_apps", "produce", "sensors",
                     "--participant", participant, "--topic-prefix", prefix + topic_prefix,
                     "--sensors", str(SENSORS), "--count", str(SENSORS * ROUNDS),
                     "--speedup", "1"], env=env, stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, text=True))
                inputs[participant] = f"{prefix}{topic_prefix}sensors.readings"
            for producer in producers:
                out, _ = producer.communicate(timeout=180)
                assert producer.returncode == 0, out
            per_input = _readings(federation, registry, inputs)
            assert [len(found) for found in per_input.values()] == [SENSORS * ROUNDS] * len(
                inputs)
            readings = [r for found in per_input.values() for r in found]
            # The windows that every input's readings have passed: their boundaries close
            # them (the last one stays open, as no boundary passes it).
            closed_before = min(max(r.measured_at for r in found)
                                for found in per_input.values())
            expected = {key: value for key, value in reference(readings).items()
                        if value["window_start_ms"] + WINDOW_MS <= closed_before}
            assert len(expected) >= SENSORS
            view = StableView()
            with TupleConsumer(outputs, registry, [output],
                               f"shipped-{uuid.uuid4().hex[:6]}") as consumer:
                def complete() -> bool:
                    if set(expected) <= {r.tuple_id for r in view.stable}:
                        return True
                    consumed = consumer.poll(1.0)
                    if consumed is not None:
                        view.apply(consumed.record)
                    return False

                first_within(complete, 180, interval_s=0)  # poll waits; checks below say
            got = {r.tuple_id: dict(r.value) for r in view.stable}
            for key, value in expected.items():
                assert key in got, f"{key} missing; got {sorted(got)}"
                assert {k: got[key][k] for k in value} == value
        finally:
            _medusa(env, "undeploy", name)
            _medusa(env, "contract", "revoke", f"alpha/{contract}", "--by", "alpha")


def test_a_real_time_network_passes_each_reading_on_once(alpha_beta_nodes, federation,
                                                        registry, tmp_path) -> None:
    """sensor_alerts.yaml: its filter runs in Spark's Real-time Mode (``medusa status``
    says so), and the hot readings come out each once, as the reference says, across a
    ``medusa move`` to beta's node while they flow (cold: a real-time fragment keeps no
    state, and its replica would run on micro-batches; its relay writes all it staged
    before the new node, on another cluster, starts)."""
    raw = yaml.safe_load((SHIPPED / "sensor_alerts.yaml").read_text())
    prefix = f"shipped{uuid.uuid4().hex[:6]}."
    raw["topic_prefix"] = prefix
    network = tmp_path / "sensor_alerts.yaml"
    network.write_text(yaml.safe_dump(raw, sort_keys=False))
    env = {**federation_env(federation, tmp_path), "COLUMNS": "200",
           "MEDUSA_PRODUCER_BOUNDARY_INTERVAL_S": "0.05"}
    name = f"alpha/{raw['name']}"
    deployed = _medusa(env, "deploy", str(network))
    assert f"deployed {name}" in deployed
    with CatalogClient(federation.catalog_url) as catalog:
        hosting(catalog, "alpha", "beta", name)  # beta may run it
        try:
            wait_network_running(catalog, name, timeout_s=240)
            producing = subprocess.Popen(
                [sys.executable, "-m", "medusa_apps", "produce", "sensors", "--participant",
                 "alpha", "--topic-prefix", prefix, "--sensors", str(SENSORS), "--count",
                 str(SENSORS * MOVED_ROUNDS), "--interval-ms", "200", "--speedup", "1"],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            with TupleConsumer(kafka_config(federation.bootstrap("alpha")), registry,
                               [f"{prefix}sensors.hot"],
                               f"shipped-{uuid.uuid4().hex[:6]}") as consumer:
                got: list[str] = []

                def some() -> bool:
                    consumed = consumer.poll(1.0)
                    if consumed is not None and consumed.record.type is TupleType.STABLE:
                        got.append(consumed.record.tuple_id)
                    return bool(got)

                first_within(some, 180, interval_s=0)
                (fragment,) = catalog.list(Kind.FRAGMENTS, network=name)
                moved = _medusa(env, "move", fragment.name, "--to", SharedNodes.B1)
                assert "moved cold" in moved and f"to {SharedNodes.B1}" in moved, moved
                _, errors = producing.communicate(timeout=300)
                assert producing.returncode == 0, errors
                readings = _readings(federation, registry,
                                     {"alpha": f"{prefix}sensors.readings"})["alpha"]
                hot = {r.tuple_id for r in readings
                       if r.kind == "temperature" and r.value > 21}
                assert hot, "the walk never went above 21"

                def complete() -> bool:
                    consumed = consumer.poll(1.0)
                    if consumed is not None and consumed.record.type is TupleType.STABLE:
                        got.append(consumed.record.tuple_id)
                    return set(got) >= hot

                first_within(complete, 180, interval_s=0)
                got += [c.record.tuple_id for c in consumer.drain(idle_s=3)
                        if c.record.type is TupleType.STABLE]
            assert sorted(got) == sorted(hot), "each hot reading once, and no other"

            def says_real_time() -> str | None:
                shown = _medusa(env, "status")
                return shown if "real-time" in shown else None

            shown = wait_for("medusa status to say the filter runs in real time",
                             says_real_time, 60)
            assert "stateless" in shown, shown
        finally:
            _medusa(env, "undeploy", name)
