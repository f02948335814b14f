"""Kafka as it is run in production: a participant's cluster of three brokers, each also a
KRaft controller (`medusa up --brokers 3`: every topic has 3 replicas and a write needs 2
in sync; producers use acks=all and idempotence). Under steady input to a running network,
one broker is killed -9 and brought back, then the active controller is: every result
reaches the output exactly once and equals the reference.

The three brokers are a stack of their own (one participant, on ports of its own), which
shares the session stack's credentials."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from medusa import credentials
from medusa.catalog.client import CatalogClient
from medusa.endpoints import Endpoints, resolve
from medusa.faults import kill
from medusa.registry import registry_client
from medusa.sensor_windows import OutputWatch, SteadyInput
from medusa.settings import EXTERNAL_ENDPOINT_FIELDS, StackSettings, kafka_config
from medusa.stack.launcher import down, running_processes, up
from medusa.stack.layout import StackLayout
from medusa.stack.quorum import active_controller
from medusa_apps.services import SERVICE_COMMANDS
from medusa_spark.deploy import deploy, undeploy
from medusa_spark.networks import network_yaml
from tests.federation_processes import NodeProcess, running
from tests.fragment_checks import (
    TAIL_S,
    assert_exactly_once,
    wait_first_result,
    wait_result_after,
    wait_running_on,
)

# Its own stack of three brokers, two kills and restarts: about three minutes, so a
# scenario (`make test-scenarios`) rather than part of `make test`.
pytestmark = [pytest.mark.e2e, pytest.mark.scenario]

SENSORS = 12
SECONDS = 20
"""At least; the input goes on until both brokers are back."""
DOWN_S = 12.0
"""How long a killed broker stays down before it is started again."""

PORTS = {
    "kafka_base_port": 25092, "registry_port": 25081, "registry_management_port": 25082,
    "registry_internal_port": 25083, "jaeger_otlp_grpc_port": 25317,
    "jaeger_otlp_http_port": 25318, "jaeger_query_port": 25686,
    "jaeger_query_grpc_port": 25685, "jaeger_health_port": 25133,
    "jaeger_metrics_port": 25888, "toxiproxy_port": 25474, "catalog_port": 25090,
    "detector_port": 25091,
}


@dataclass
class BrokerFailureRun:
    expected: dict[str, dict]
    results: list[str]
    killed: list[str]
    """The brokers killed, in order: one that did not lead the quorum, then the leader."""


@pytest.fixture(scope="module")
def three_brokers(federation, tmp_path_factory) -> Iterator[tuple[StackLayout, Endpoints]]:
    run_dir = tmp_path_factory.mktemp("three-brokers")
    # Its own endpoints, whatever MEDUSA_EXTERNAL_* name for the session's stack.
    external = dict.fromkeys(EXTERNAL_ENDPOINT_FIELDS)
    settings = StackSettings(run_dir=run_dir, stack_participants=1, kafka_brokers=3,
                             stack_bpm_agents=False,
                             credentials_file=credentials.process_credentials_file(),
                             **PORTS, **external)
    layout = StackLayout.from_settings(settings)
    try:
        up(layout, SERVICE_COMMANDS, report=lambda _: None)
        yield layout, resolve(settings)
    finally:
        down(layout, purge=True, report=lambda _: None)


def _kill_and_restart(layout: StackLayout, component: str) -> None:
    kill(running_processes(layout)[component].pid)
    time.sleep(DOWN_S)
    # starts what is not running: the killed broker
    up(layout, SERVICE_COMMANDS, report=lambda _: None)


@pytest.fixture(scope="module")
def broker_failure_run(three_brokers, spark, tmp_path_factory) -> Iterator[BrokerFailureRun]:
    layout, endpoints = three_brokers
    registry = registry_client(endpoints.registry_url)
    participant = layout.participants[0]
    node = NodeProcess("brokers-1", "alpha", endpoints, tmp_path_factory.mktemp("node"))
    name = f"brokers-{uuid.uuid4().hex[:6]}"
    prefix = f"{name}."
    alpha = kafka_config(endpoints.bootstrap("alpha"))
    results_topic = f"{prefix}medusa.{name}.per_sensor"
    box = f"alpha/{name}/per_sensor"
    with running({"brokers-1": node}) as started, \
            CatalogClient(endpoints.catalog_url) as catalog:
        where = started["brokers-1"].global_name
        deploy(network_yaml(name, prefix, box_participant="alpha"), name, endpoints, registry,
               spark, catalog, {"plausible": where, "per_sensor": where}, report=lambda _: None)
        wait_running_on(catalog, box, where)
        watch = OutputWatch(alpha, registry, [results_topic]).start()
        steady = SteadyInput(alpha, registry, f"{prefix}sensors.readings", SENSORS, SECONDS,
                             open_ended=True)
        steady.start()
        wait_first_result(watch, results_topic)
        leader = active_controller(layout, participant)
        follower = next(b for b in participant.broker_layouts if b != leader)
        _kill_and_restart(layout, follower.component)
        leader = active_controller(layout, participant)
        _kill_and_restart(layout, leader.component)
        wait_result_after(watch, results_topic)
        expected = steady.finish(TAIL_S)
        watch.wait_for(results_topic, set(expected), timeout_s=300)
        watch.stop()
        yield BrokerFailureRun(expected, watch.ids(results_topic),
                               [follower.component, leader.component])
        undeploy(catalog, f"alpha/{name}", report=lambda _: None)


def test_every_result_arrives_exactly_once_through_a_broker_and_a_controller_failure(
        broker_failure_run) -> None:
    assert len(broker_failure_run.killed) == 2
    assert_exactly_once(broker_failure_run.results, broker_failure_run.expected,
                        f"kill -9 of {' then '.join(broker_failure_run.killed)}")


def test_every_topic_of_the_cluster_has_three_replicas(three_brokers) -> None:
    from confluent_kafka.admin import AdminClient

    _, endpoints = three_brokers
    metadata = AdminClient(kafka_config(endpoints.bootstrap("alpha"))).list_topics(timeout=30)
    assert len(metadata.brokers) == 3
    short = {name: [len(p.replicas) for p in topic.partitions.values()]
             for name, topic in metadata.topics.items()
             if any(len(p.replicas) != 3 for p in topic.partitions.values())}
    assert short == {}, short
