from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from medusa.settings import (
    KafkaClientSettings,
    KafkaSettingsError,
    StackSettings,
    kafka_client_settings,
    kafka_config,
    spark_kafka_options,
)
from medusa.stack.layout import StackLayout

pytestmark = pytest.mark.unit


def test_librdkafka_keys_come_from_field_names() -> None:
    settings = KafkaClientSettings(bootstrap_servers="h:1", sasl_mechanism="PLAIN",
                                   sasl_username="u", sasl_password=SecretStr("p"))
    config = settings.librdkafka(linger_ms=5)
    assert config == {"bootstrap.servers": "h:1", "client.id": "medusa",
                      "security.protocol": "PLAINTEXT", "sasl.mechanism": "PLAIN",
                      "sasl.username": "u", "sasl.password": "p", "log_level": 5,
                      "linger.ms": 5}


def test_stack_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDUSA_STACK_PARTICIPANTS", "3")
    monkeypatch.setenv("MEDUSA_KAFKA_BASE_PORT", "30000")
    layout = StackLayout.from_settings(StackSettings())
    assert [p.name for p in layout.participants] == ["alpha", "beta", "gamma"]
    assert [p.bootstrap for p in layout.participants] == [
        "127.0.0.1:30000", "127.0.0.1:30010", "127.0.0.1:30020"]
    # brokers and controllers; per link (6 ordered pairs) a listener and a proxy; registry
    # (gateway, itself, health), Jaeger, catalog, detector, toxiproxy: all distinct
    assert len(layout.all_ports()) == 6 + 6 * 2 + 12
    assert {link.name for link in layout.links} == {
        "alpha-from-beta", "alpha-from-gamma", "beta-from-alpha", "beta-from-gamma",
        "gamma-from-alpha", "gamma-from-beta"}


def test_bad_setting_names_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDUSA_STACK_PARTICIPANTS", "zero")
    with pytest.raises(ValidationError, match="stack_participants"):
        StackSettings()


def test_nodes_run_a_spark_ui_from_port_4040_unless_told_not_to(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEDUSA_NODE_SPARK_UI_PORT", raising=False)
    assert StackSettings().node_spark_ui_port == 4040
    monkeypatch.setenv("MEDUSA_NODE_SPARK_UI_PORT", "14040")
    assert StackSettings().node_spark_ui_port == 14040
    monkeypatch.setenv("MEDUSA_NODE_SPARK_UI_PORT", "0")
    assert StackSettings().node_spark_ui_port == 0  # no UI


@pytest.mark.parametrize("port", ["80", "1023", "65536", "-1"])
def test_a_spark_ui_port_is_unprivileged_or_zero(monkeypatch: pytest.MonkeyPatch,
                                                 port: str) -> None:
    monkeypatch.setenv("MEDUSA_NODE_SPARK_UI_PORT", port)
    with pytest.raises(ValidationError, match="node_spark_ui_port"):
        StackSettings()


@pytest.fixture
def kafka_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path
              ) -> Iterator[pytest.MonkeyPatch]:
    """A clean ``MEDUSA_KAFKA_*`` environment, read afresh by the cached settings, and a
    run folder without a stack's credentials."""
    for name in ("SECURITY_PROTOCOL", "SASL_MECHANISM", "SASL_USERNAME", "SASL_PASSWORD",
                 "CLIENT_ID", "BOOTSTRAP_SERVERS"):
        monkeypatch.delenv(f"MEDUSA_KAFKA_{name}", raising=False)
    monkeypatch.setenv("MEDUSA_RUN_DIR", str(tmp_path))
    monkeypatch.delenv("MEDUSA_PARTICIPANT", raising=False)
    monkeypatch.delenv("MEDUSA_CREDENTIALS_FILE", raising=False)
    kafka_client_settings.cache_clear()
    yield monkeypatch
    kafka_client_settings.cache_clear()


def _sasl(monkeypatch: pytest.MonkeyPatch, mechanism: str, password: str = "s3cr3t") -> None:
    monkeypatch.setenv("MEDUSA_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("MEDUSA_KAFKA_SASL_MECHANISM", mechanism)
    monkeypatch.setenv("MEDUSA_KAFKA_SASL_USERNAME", "medusa-user")
    monkeypatch.setenv("MEDUSA_KAFKA_SASL_PASSWORD", password)


def test_kafka_config_without_sasl(kafka_env) -> None:
    config = kafka_config("h:9092", {"transactional.id": "t-1", "log_level": 0},
                          enable_idempotence=True, group_id="g")
    assert config == {"bootstrap.servers": "h:9092", "client.id": "medusa",
                      "security.protocol": "PLAINTEXT", "enable.idempotence": True,
                      "group.id": "g", "transactional.id": "t-1", "log_level": 0}


def test_kafka_config_carries_the_sasl_settings_and_hides_the_password(kafka_env) -> None:
    _sasl(kafka_env, "SCRAM-SHA-512")
    config = kafka_config("h:9092", linger_ms=5)
    assert config["bootstrap.servers"] == "h:9092"  # the argument, not the environment's
    assert {k: config[k] for k in ("security.protocol", "sasl.mechanism", "sasl.username",
                                   "sasl.password", "linger.ms")} == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "medusa-user", "sasl.password": "s3cr3t", "linger.ms": 5}
    assert "s3cr3t" not in repr(config) and "s3cr3t" not in str(config)
    assert "s3cr3t" not in f"{config}" and "s3cr3t" not in repr(kafka_client_settings())


def test_the_settings_are_read_once(kafka_env) -> None:
    assert kafka_config("h:1")["security.protocol"] == "PLAINTEXT"
    kafka_env.setenv("MEDUSA_KAFKA_SECURITY_PROTOCOL", "SSL")
    assert kafka_config("h:1")["security.protocol"] == "PLAINTEXT"
    kafka_client_settings.cache_clear()
    assert kafka_config("h:1")["security.protocol"] == "SSL"


def test_spark_kafka_options_without_sasl(kafka_env) -> None:
    assert spark_kafka_options("h:9092") == {"kafka.bootstrap.servers": "h:9092",
                                             "kafka.security.protocol": "PLAINTEXT"}


@pytest.mark.parametrize(("mechanism", "module"), [
    ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule"),
    ("SCRAM-SHA-256", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    ("SCRAM-SHA-512", "org.apache.kafka.common.security.scram.ScramLoginModule"),
])
def test_spark_kafka_options_with_sasl(kafka_env, mechanism: str, module: str) -> None:
    _sasl(kafka_env, mechanism, password='pa"ss\\word')
    options = spark_kafka_options("h:9092")
    assert options == {
        "kafka.bootstrap.servers": "h:9092", "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": mechanism,
        "kafka.sasl.jaas.config": f'{module} required username="medusa-user" '
                                  'password="pa\\"ss\\\\word";'}
    assert all(isinstance(value, str) for value in options.values())
    assert "pa" + '"ss' not in repr(options) and "word" not in str(options)


def test_spark_kafka_options_need_a_username_and_password_for_plain(kafka_env) -> None:
    kafka_env.setenv("MEDUSA_KAFKA_SASL_MECHANISM", "PLAIN")
    with pytest.raises(KafkaSettingsError, match="MEDUSA_KAFKA_SASL_PASSWORD"):
        spark_kafka_options("h:9092")


def test_up_starts_one_bpm_agent_per_participant_unless_told_not_to(tmp_path) -> None:
    from medusa.stack.components import agent_components, health_checks
    from medusa_apps.services import SERVICE_COMMANDS

    layout = StackLayout.from_settings(StackSettings(run_dir=tmp_path, stack_participants=3,
                                                     bpm_interval_s=2))
    agents = agent_components(layout, SERVICE_COMMANDS)
    assert [a.name for a in agents] == ["bpm-alpha", "bpm-beta", "bpm-gamma"]
    assert agents[1].command[-6:] == ["--participant", "beta", "--interval", "2",
                                      "--alive-file", str(tmp_path / "bpm-beta.alive")]
    assert not agents[0].ready()  # no heartbeat yet
    (tmp_path / "bpm-alpha.alive").touch()
    assert agents[0].ready() and health_checks(layout)["bpm-alpha"][1]()
    quiet = StackLayout.from_settings(StackSettings(run_dir=tmp_path, stack_bpm_agents=False))
    assert agent_components(quiet, SERVICE_COMMANDS) == []
    assert "bpm-alpha" not in health_checks(quiet)


def test_a_stacks_credentials_authenticate_the_acting_participant(kafka_env,
                                                                   tmp_path: Path) -> None:
    from medusa import credentials

    stack = credentials.ensure(credentials.credentials_file(tmp_path), ["alpha", "beta"])
    assert credentials.credentials_file(tmp_path).stat().st_mode & 0o777 == 0o600
    config = kafka_config("h:9092")
    assert (config["security.protocol"], config["sasl.mechanism"], config["sasl.username"]) \
        == ("SASL_PLAINTEXT", "SCRAM-SHA-256", "admin")
    kafka_env.setenv("MEDUSA_PARTICIPANT", "beta")
    config = kafka_config("h:9092")
    assert config["sasl.username"] == "beta"
    assert config["sasl.password"] == stack.secret("beta").kafka_password
    assert stack.secret("beta").kafka_password not in repr(config)
    assert stack.secret("beta").token not in repr(stack)
    options = spark_kafka_options("h:9092")
    assert 'username="beta"' in options["kafka.sasl.jaas.config"]
    assert stack.secret("beta").kafka_password not in str(options)


def test_an_external_cluster_of_several_brokers_keeps_them_all() -> None:
    from medusa.endpoints import parse_external_kafka, parse_external_links

    assert parse_external_kafka("alpha=h:1,h:2,h:3,beta=g:1") == {"alpha": "h:1,h:2,h:3",
                                                                   "beta": "g:1"}
    assert parse_external_links("beta-from-alpha=p:1,p:2") == {"beta-from-alpha": "p:1,p:2"}
    with pytest.raises(ValueError, match="expected name=host:port"):
        parse_external_kafka("h:1,=h:2")


def test_a_new_kafka_cluster_id_never_reads_as_an_option(monkeypatch):
    """kafka-storage took an id starting with "-" for an option, and CI's stack failed to start."""
    import uuid

    from medusa.stack import components

    # The first draw encodes to "-wAA..."; the second does not.
    draws = iter([uuid.UUID(bytes=b"\xfb" + bytes(15)), uuid.UUID(bytes=b"\x01" + bytes(15))])
    monkeypatch.setattr(components.uuid, "uuid4", lambda: next(draws))
    cluster_id = components.new_cluster_id()
    assert not cluster_id.startswith("-") and len(cluster_id) == 22
