"""The launcher: up/down/status, idempotent up, port clashes, the registry's durable storage."""

import json
import socket
import subprocess
import sys

import pytest

from medusa.registry import register
from medusa.schemas import schema_for_topic
from medusa.settings import StackSettings
from medusa.stack import launcher, processes
from medusa.stack.layout import StackLayout
from medusa_apps.services import SERVICE_COMMANDS

pytestmark = pytest.mark.integration


@pytest.fixture
def launched(local_federation):
    if local_federation is None:
        pytest.skip("the stack was not started by the local launcher in this session")
    return local_federation


def test_status_reports_every_component_answering(launched) -> None:
    rows = {row.name: row for row in launcher.status(launched.layout)}
    assert set(rows) == {"kafka-alpha", "kafka-beta", "kafka-gamma", "registry",
                         "registry-gateway", "jaeger", "catalog", "detector", "toxiproxy"}
    assert all(row.running and row.answering for row in rows.values()), rows


def test_participants_are_separate_clusters(launched) -> None:
    ids = {p.cluster_id_file.read_text().strip() for p in launched.layout.participants}
    assert len(ids) == 3


def test_a_second_up_is_harmless(launched) -> None:
    before = {row.name: row.pid for row in launcher.status(launched.layout)}
    messages: list[str] = []
    launcher.up(launched.layout, SERVICE_COMMANDS, report=messages.append)
    after = {row.name: row.pid for row in launcher.status(launched.layout)}
    assert before == after
    assert sum("already running" in m for m in messages) == 9


def test_a_taken_port_is_named_in_the_error(tmp_path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        settings = StackSettings(run_dir=tmp_path, kafka_base_port=port, stack_participants=1)
        with pytest.raises(launcher.PortInUseError, match=rf"port {port} \(Kafka broker of "
                                                          r"participant alpha, kafka-alpha\)"):
            launcher.up(StackLayout.from_settings(settings), SERVICE_COMMANDS,
                        report=lambda _: None)
    assert not (tmp_path / "stack.json").exists(), "nothing was started"


def test_the_registry_keeps_its_schemas_across_a_restart(launched, registry, topic) -> None:
    registration = register(registry, topic, schema_for_topic("sensors.readings"))
    recorded = launcher._load_state(launched.layout)["registry"]
    processes.stop(recorded)
    launcher.up(launched.layout, SERVICE_COMMANDS, report=lambda _: None)  # only what is missing
    assert launcher._load_state(launched.layout)["registry"].pid != recorded.pid
    from medusa.registry import registry_client

    fresh = registry_client(launched.layout.registry_url)
    latest = fresh.get_latest_version(f"{topic}-value")
    assert latest.schema_id == registration.schema_id
    assert json.loads(latest.schema.schema_str) == json.loads(
        schema_for_topic("sensors.readings").text)


def _medusa(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "medusa_apps", *args], capture_output=True,
                          text=True, env=env, timeout=600)


def test_cli_up_status_down_on_a_one_participant_stack(launched, tmp_path) -> None:
    import os

    # Below the ephemeral range (32768 and up), clear of the session stack's ports.
    env = {**os.environ, "MEDUSA_RUN_DIR": str(tmp_path / "run"),
           "MEDUSA_KAFKA_BASE_PORT": "31092", "MEDUSA_REGISTRY_PORT": "30081",
           "MEDUSA_REGISTRY_MANAGEMENT_PORT": "30082", "MEDUSA_REGISTRY_INTERNAL_PORT": "30083",
           "MEDUSA_JAEGER_OTLP_GRPC_PORT": "30317", "MEDUSA_JAEGER_OTLP_HTTP_PORT": "30318",
           "MEDUSA_JAEGER_QUERY_PORT": "30686", "MEDUSA_JAEGER_QUERY_GRPC_PORT": "30685",
           "MEDUSA_JAEGER_HEALTH_PORT": "30133", "MEDUSA_JAEGER_METRICS_PORT": "30888",
           "MEDUSA_CATALOG_PORT": "30090", "MEDUSA_DETECTOR_PORT": "30091"}
    started = _medusa("up", "--participants", "1", "--skip-install", env=env)
    try:
        assert started.returncode == 0, started.stderr + started.stdout
        assert "127.0.0.1:31092" in started.stdout
        status = json.loads(_medusa("status", "--json", env=env).stdout)["components"]
        assert {row["name"]: row["answering"] for row in status} == {
            "kafka-alpha": True, "registry": True, "registry-gateway": True, "jaeger": True,
            "catalog": True, "detector": True,
            "bpm-alpha": True}  # `up` starts the participant's BPM agent
        pids = [row["pid"] for row in status]
    finally:
        stopped = _medusa("down", env=env)
    assert stopped.returncode == 0
    assert "stopped 7 process(es)" in stopped.stdout
    assert all(processes.process_start_ticks(pid) is None for pid in pids)
    assert not processes.port_in_use(31092)
    status = json.loads(_medusa("status", "--json", env=env).stdout)
    assert not any(row["running"] for row in status["components"])
    assert "did not answer" in status["error"]
