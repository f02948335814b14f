"""The compose deployment's Kafka broker, run here without a container: its start script
(infra/kafka/compose-broker.sh) with the environment docker-compose.yml gives kafka-alpha,
its addresses moved to free local ports, and the secrets `medusa credentials init` writes.

It is the real broker of the pinned Kafka: a client without credentials and a partner
without an ACL are turned away; the cluster's participant and the admin's health check get
in. The rest of the compose file is checked in tests/unit/test_compose.py."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from medusa.settings import REPO_ROOT, StackSettings
from medusa.stack import components
from medusa.stack.layout import StackLayout
from tests.federation_processes import free_port
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

SCRIPT = REPO_ROOT / "infra" / "kafka" / "compose-broker.sh"


def _kafka_alpha_environment() -> dict[str, str]:
    text = (REPO_ROOT / "docker-compose.yml").read_text()
    text = re.sub(r"\$\{[A-Z_]+\}", "0", text)  # host ports: replaced below anyway
    environment: dict[str, Any] = yaml.safe_load(text)["services"]["kafka-alpha"]["environment"]
    return {name: str(value) for name, value in environment.items()}


def _local(environment: dict[str, str], ports: dict[str, int]) -> dict[str, str]:
    """Every listener on 127.0.0.1 at a free port, advertised there too."""
    moved = dict(environment)
    for key in ("KAFKA_LISTENERS", "KAFKA_ADVERTISED_LISTENERS"):
        moved[key] = ",".join(
            f"{name}://127.0.0.1:{ports[name]}"
            for name, _, _ in (part.partition("://") for part in environment[key].split(",")))
    moved["KAFKA_CONTROLLER_QUORUM_VOTERS"] = (
        f"{environment['KAFKA_NODE_ID']}@127.0.0.1:{ports['CONTROLLER']}")
    return moved


def _java_wrapper(path: Path, java: str, libs: Path, main_class: str) -> Path:
    """What the image's bin/ script does: Kafka's class with KAFKA_OPTS (the JAAS file)."""
    path.write_text("#!/usr/bin/env bash\n"
                    f"exec {shlex.quote(java)} -Xmx384m $KAFKA_OPTS "
                    f"-cp {shlex.quote(str(libs))}'/*' {main_class} \"$@\"\n")
    path.chmod(0o755)
    return path


@pytest.fixture(scope="module")
def compose_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("compose-broker")
    secrets = root / "secrets"
    made = subprocess.run([sys.executable, "-m", "medusa_apps", "credentials", "init",
                           "--participants", "alpha,beta", "--dir", str(secrets)],
                          capture_output=True, text=True, check=False)
    assert made.returncode == 0, made.stderr
    compose_env = _kafka_alpha_environment()
    names = [part.partition("://")[0] for part in compose_env["KAFKA_LISTENERS"].split(",")]
    # free_port answers the same port until it is bound: a range each.
    ports = {name: free_port(28100 + 60 * index) for index, name in enumerate(names)}
    assert len(set(ports.values())) == len(ports)
    layout = StackLayout.from_settings(StackSettings())
    java = components.java_binary(layout)
    libs = components.kafka_libs(layout)
    data = root / "data"
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("KAFKA_")},
        **_local(compose_env, ports),
        "KAFKA_LOG_DIRS": str(data),
        "MEDUSA_BROKER_SECRETS": str(secrets / "kafka-alpha"),
        "MEDUSA_BROKER_CONFIG": str(root / "server.properties"),
        "MEDUSA_KAFKA_STORAGE": str(_java_wrapper(root / "storage", java, libs,
                                                  "kafka.tools.StorageTool")),
        "MEDUSA_KAFKA_START": str(_java_wrapper(root / "start", java, libs, "kafka.Kafka")),
    }
    log = (root / "broker.log").open("w")
    broker = subprocess.Popen(["bash", str(SCRIPT)], env=environment, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    bootstrap = f"127.0.0.1:{ports['EXTERNAL']}"
    stack = yaml.safe_load((secrets / "federation" / "credentials.json").read_text())
    try:
        def admin_ready() -> bool:
            assert broker.poll() is None, (root / "broker.log").read_text()[-3000:]
            return _metadata(bootstrap, "admin", stack["admin"]["kafka_password"]) is None
        wait_until("the compose broker to let admin in", admin_ready, at_most_s=90)
        yield {"bootstrap": bootstrap, "stack": stack, "secrets": secrets, "root": root,
               "ports": ports, "java": java, "libs": libs}
    finally:
        broker.terminate()
        try:
            broker.wait(30)
        except subprocess.TimeoutExpired:
            broker.kill()
        log.close()


def _login(principal: str | None, password: str | None) -> dict[str, Any]:
    if principal is None:
        return {"security.protocol": "PLAINTEXT"}
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": principal, "sasl.password": password}


def _metadata(bootstrap: str, principal: str | None, password: str | None) -> str | None:
    """None when the principal gets the cluster's metadata, else the error."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0,
                         **_login(principal, password)})
    try:
        admin.list_topics(timeout=5)
    except KafkaException as error:
        return str(error)
    return None


def _produce(bootstrap: str, topic: str, principal: str, password: str) -> KafkaError | None:
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0,
                         "message.timeout.ms": 15000, **_login(principal, password)})
    producer.produce(topic, b"reading", on_delivery=lambda error, _: error and errors.append(
        error))
    producer.flush(20)
    return errors[0] if errors else None


def test_the_formatted_cluster_knows_every_principal_and_its_owner_writes(
        compose_broker) -> None:
    stack = compose_broker["stack"]
    topic = f"compose.{uuid.uuid4().hex[:8]}"
    assert _produce(compose_broker["bootstrap"], topic, "alpha",
                    stack["alpha"]["kafka_password"]) is None
    # A partner authenticates (its SCRAM credential was formatted in) but has no ACL.
    refused = _produce(compose_broker["bootstrap"], topic, "beta",
                       stack["beta"]["kafka_password"])
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_client_without_credentials_or_with_a_wrong_password_is_turned_away(
        compose_broker) -> None:
    assert _metadata(compose_broker["bootstrap"], None, None) is not None
    assert _metadata(compose_broker["bootstrap"], "alpha", "not-the-password") is not None


def test_the_health_check_of_the_compose_file_answers(compose_broker) -> None:
    """The check docker-compose.yml runs (the image's kafka-ready), with this broker's
    address and secrets folder."""
    check = yaml.safe_load(re.sub(r"\$\{[A-Z_]+\}", "0", (REPO_ROOT / "docker-compose.yml")
                                  .read_text()))["x-kafka"]["healthcheck"]["test"]
    assert check == ["CMD", "kafka-ready"]
    script = REPO_ROOT / "infra" / "docker" / "bin" / "kafka-ready"
    client_properties = compose_broker["secrets"] / "kafka-alpha" / "admin-client.properties"
    ran = subprocess.run(
        [sys.executable, str(script)],
        env={**os.environ, "MEDUSA_KAFKA_READY_LOGIN": str(client_properties),
             "MEDUSA_KAFKA_READY_BOOTSTRAP": f"127.0.0.1:{compose_broker['ports']['BROKER']}"},
        capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0, ran.stderr[-2000:]
