"""The compose deployment, for real: `docker-compose.yml` up on this machine's Docker
engine (images built here by `infra/compose.sh images`), driven through testcontainers'
DockerCompose and the Docker SDK as its users drive it through `docker compose`.

One deployment for the module, on host ports and a project name of its own. In order:
sensor data into both participants; the DPC pair network deployed through the CLI in a
container under a contract; its windows read from the output; the link between the
participants cut with `medusa fault` (tentative results, then UNDO, corrections and
REC_DONE); the node container running the fragment killed with SIGKILL (its secondary takes
over); the stable view equal to a fault-free run of the same network (`medusa verify`); the
node failure's trace in Jaeger's API. Every container's logs are written to
artifacts/compose-logs/ when a test fails.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind
from medusa.settings import REPO_ROOT
from tests.fragment_checks import runs
from tests.waiting import wait_until

pytestmark = pytest.mark.compose

PROJECT = "medusa-compose-test"
HOST_PORTS = {"ALPHA_PORT": 39092, "BETA_PORT": 39102, "REGISTRY_PORT": 38081,
              "JAEGER_OTLP_GRPC_PORT": 34317, "JAEGER_OTLP_HTTP_PORT": 34318,
              "JAEGER_UI_PORT": 36686, "CATALOG_PORT": 38090, "DETECTOR_PORT": 38091,
              "TOXIPROXY_PORT": 38474}
"""Apart from a user's deployment (.env) and the test suite's local stack."""
NETWORK = "alpha/sensor-pair"
OUTPUT = "medusa.sensor-pair.per_sensor"
PAIR = "spark_apps/medusa_spark/networks/sensor_pair.yaml"
OPERATOR = "catalog"
"""The container whose CLI acts as the federation's operator (it holds every secret)."""
LOGS = REPO_ROOT / "artifacts" / "compose-logs"
READINGS = 3000
"""Readings per participant: 20 sensors, one reading a second each, 150 s of input."""


class Deployment:
    """The running deployment: commands in its containers, as its users run them."""

    def __init__(self, compose: Any) -> None:
        import docker

        self.compose = compose
        self.docker = docker.from_env()
        self.catalog_url = f"http://127.0.0.1:{HOST_PORTS['CATALOG_PORT']}"
        self.jaeger_url = f"http://127.0.0.1:{HOST_PORTS['JAEGER_UI_PORT']}"

    def container(self, service: str) -> Any:
        return self.docker.containers.get(
            self.compose.get_container(service, include_all=True).ID)

    def run(self, service: str, *args: str) -> tuple[int, str, str]:
        """`docker compose exec SERVICE medusa ARGS`: its exit code, stdout and stderr."""
        result = self.container(service).exec_run(["medusa", *args], demux=True)
        return (result.exit_code, (result.output[0] or b"").decode(),
                (result.output[1] or b"").decode())

    def medusa(self, service: str, *args: str) -> str:
        """The same, failing with its output unless it exits 0; its stdout."""
        code, out, err = self.run(service, *args)
        assert code == 0, (f"{service}: medusa {shlex.join(args)} exited {code}:\n"
                           f"{out[-3000:]}\n{err[-3000:]}")
        return out

    def medusa_detached(self, service: str, *args: str) -> None:
        self.container(service).exec_run(["medusa", *args], detach=True)

    def fragments(self) -> list[Any]:
        with CatalogClient(self.catalog_url) as catalog:
            return catalog.list(Kind.FRAGMENTS, network=NETWORK)

    def output_types(self) -> list[str]:
        """The type of every record of the output so far (STABLE, TENTATIVE, UNDO, ...)."""
        text = self.medusa(OPERATOR, "consume", OUTPUT, "--participant", "beta",
                           "--count", "1000000", "--timeout", "10")
        return [json.loads(line)["type"] for line in text.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def deployment(request: pytest.FixtureRequest) -> Iterator[Deployment]:
    from testcontainers.compose import DockerCompose

    saved = {name: os.environ.get(name) for name in [*HOST_PORTS, "COMPOSE_PROJECT_NAME"]}
    os.environ.update({name: str(port) for name, port in HOST_PORTS.items()})
    os.environ["COMPOSE_PROJECT_NAME"] = PROJECT
    compose = DockerCompose(REPO_ROOT, compose_file_name="docker-compose.yml", wait=True)
    failed_before = request.session.testsfailed
    try:
        compose.start()
        yield Deployment(compose)
    finally:
        if request.session.testsfailed > failed_before:
            _keep_logs(compose)
        compose.stop(down=True)  # and its volumes: the next run starts afresh
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _keep_logs(compose: Any) -> None:
    import docker

    LOGS.mkdir(parents=True, exist_ok=True)
    client = docker.from_env()
    for container in client.containers.list(
            all=True, filters={"label": f"com.docker.compose.project={PROJECT}"}):
        service = container.labels.get("com.docker.compose.service", container.name)
        (LOGS / f"{service}.log").write_bytes(container.logs(timestamps=True))


def test_every_part_is_healthy_and_published_on_loopback_only(deployment: Deployment) -> None:
    for container in deployment.compose.get_containers():
        state = deployment.container(container.Service).attrs["State"]
        health = state.get("Health", {}).get("Status", "none")
        assert state["Running"] and health in ("healthy", "none"), \
            f"{container.Service}: {state['Status']}, {health}"
        for bindings in (deployment.container(container.Service).attrs["HostConfig"]
                         .get("PortBindings") or {}).values():
            assert all(b["HostIp"] == "127.0.0.1" for b in bindings), container.Service


def test_a_node_reaches_the_deployment_and_nothing_outside_it(deployment: Deployment) -> None:
    probe = ("import socket, sys\n"
             "try:\n"
             "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()\n"
             "except OSError as error:\n"
             "    sys.exit(f'unreachable: {error}')\n")
    node = deployment.container("node-alpha-1")
    inside = node.exec_run(["python", "-c", probe, "kafka-beta", "9092"])
    assert inside.exit_code == 0, inside.output
    outside = node.exec_run(["python", "-c", probe, "deb.debian.org", "80"])
    assert outside.exit_code != 0, "a node reached deb.debian.org"


def test_the_pair_network_deploys_under_a_contract_and_answers(deployment: Deployment) -> None:
    deployment.medusa(OPERATOR, "contract", "propose", "alpha", "beta", "--price", "1",
                      "--movable", NETWORK, "--movable", "alpha/sensor-pair-check",
                      "--name", "sensor-pair")
    deployment.medusa(OPERATOR, "contract", "accept", "alpha/sensor-pair", "--by", "beta")
    said = deployment.medusa(OPERATOR, "deploy", PAIR)
    assert "beta/node-" in said and "alpha/sensor-pair" in said, said
    for participant, service in (("alpha", "bpm-alpha"), ("beta", "bpm-beta")):
        deployment.medusa_detached(service, "produce", "sensors", "--participant", participant,
                                   "--topic-prefix", f"{participant}.", "--sensors", "20",
                                   "--count", str(READINGS))
    wait_until("a window out of the pair network",
               lambda: "STABLE" in deployment.output_types(), at_most_s=300)


def test_a_cut_link_gives_tentative_results_then_corrections(deployment: Deployment) -> None:
    deployment.medusa(OPERATOR, "fault", "partition", "alpha", "beta", "--for", "30s")

    def corrected() -> bool:
        types = deployment.output_types()
        return "TENTATIVE" in types and "UNDO" in types and "REC_DONE" in types
    wait_until("TENTATIVE results, then UNDO and REC_DONE, after the cut", corrected,
               at_most_s=240)


def test_a_killed_node_container_is_taken_over(deployment: Deployment) -> None:
    [fragment] = deployment.fragments()
    node = fragment.spec["node"]
    service = "node-" + node.replace("/node-", "-")  # beta/node-1 runs as node-beta-1
    deployment.container(service).kill(signal="SIGKILL")

    def moved() -> bool:
        [now] = deployment.fragments()
        return runs(now, away_from=node)
    wait_until(f"{fragment.name} taken over after {service} was killed", moved,
               at_most_s=180)
    deployment.container(service).start()  # rejoins as a new incarnation


def test_the_stable_view_equals_a_fault_free_run(deployment: Deployment) -> None:
    # The input ends; a second instance of the network reads it all with no fault.
    wait_until("the sensors' end", lambda: _input_done(deployment), at_most_s=400)
    deployment.medusa(OPERATOR, "deploy", PAIR, "--name", "sensor-pair-check")

    def equal() -> bool:
        code, _, _ = deployment.run(OPERATOR, "verify", OUTPUT, "--against",
                                    "medusa.sensor-pair-check.per_sensor", "--participant",
                                    "beta")
        return code == 0
    wait_until("the stable view equal to the fault-free run", equal, at_most_s=400)


def _input_done(deployment: Deployment) -> bool:
    for service in ("bpm-alpha", "bpm-beta"):
        top = deployment.container(service).top(ps_args="-eo pid,args")
        if any("produce sensors" in " ".join(p) for p in top.get("Processes") or []):
            return False
    return True


def test_the_node_failure_is_one_trace_in_jaeger(deployment: Deployment) -> None:
    def traces() -> list[dict[str, Any]]:
        response = httpx.get(f"{deployment.jaeger_url}/api/traces",
                             params={"service": "medusa-detector", "limit": 20,
                                     "lookback": "1h"}, timeout=10)
        response.raise_for_status()
        return [t for t in response.json().get("data") or []
                if any(s["operationName"].startswith("node failure")
                       for s in t.get("spans", []))]
    wait_until("a node failure trace in Jaeger", lambda: bool(traces()), at_most_s=120)
    [trace, *_] = traces()
    operations = {span["operationName"] for span in trace["spans"]}
    services = {process["serviceName"] for process in trace["processes"].values()}
    # The detector's declaration and the takeover by the node that took the fragment.
    assert any(op.startswith("node failure") for op in operations), operations
    assert any(service.startswith("medusa-node") for service in services), services
