"""Typed settings: the only place that reads the environment.

Every field maps to an environment variable with the ``MEDUSA_`` prefix
(``stack_participants`` <- ``MEDUSA_STACK_PARTICIPANTS``); CLI flags fall back
to these values.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from medusa.errors import MedusaError

REPO_ROOT = Path(__file__).resolve().parents[2]

DEFAULT_PARTICIPANT_NAMES = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")


class KafkaSettingsError(MedusaError, ValueError):
    """``MEDUSA_KAFKA_*`` settings that do not describe a usable client."""


UNDERSCORED_KEYS = frozenset({"log_level"})
"""The few librdkafka keys spelt with an underscore, not a dot."""


class KafkaClientSettings(BaseSettings):
    """Client settings shared by producers, consumers and the admin client."""

    model_config = SettingsConfigDict(env_prefix="MEDUSA_KAFKA_", extra="ignore")

    bootstrap_servers: str = "127.0.0.1:19092"
    client_id: str = "medusa"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    log_level: int = 5
    """librdkafka's syslog level: 5 keeps errors, warnings and notices, and leaves out the
    informational lines a client prints as it closes (librdkafka's default is 6)."""

    def librdkafka(self, **overrides: Any) -> dict[str, Any]:
        """The one mapping from snake_case fields to librdkafka keys, with this process's
        credentials (see ``authenticated``)."""
        config: dict[str, Any] = {}
        for name, value in authenticated(self).model_dump().items():
            if value is None:
                continue
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            config[name if name in UNDERSCORED_KEYS else name.replace("_", ".")] = value
        for name, value in overrides.items():
            config[name.replace("_", ".")] = value
        return config


SECRET_KEYS = frozenset({"sasl.password", "sasl.jaas.config", "ssl.key.password",
                         "ssl.keystore.password", "kafka.sasl.jaas.config"})
"""Client configuration keys whose values are secrets (``KafkaConfig`` hides them)."""

JAAS_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
"""The Java client's login module of each SASL mechanism that takes a username and password."""


class KafkaConfig(dict[str, Any]):
    """A Kafka client configuration; its repr (and so any log line) hides the secrets."""

    def __repr__(self) -> str:
        shown = {key: "**********" if key in SECRET_KEYS and value is not None else value
                 for key, value in self.items()}
        return repr(shown)

    __str__ = __repr__


@functools.cache
def kafka_client_settings() -> KafkaClientSettings:
    """The ``MEDUSA_KAFKA_*`` settings, read from the environment once per process."""
    return KafkaClientSettings()


def kafka_config(bootstrap: str, librdkafka_keys: Mapping[str, Any] | None = None, /,
                 **overrides: Any) -> dict[str, Any]:
    """The configuration of a confluent-kafka client (producer, consumer, admin) of the
    cluster at ``bootstrap``: the ``MEDUSA_KAFKA_*`` settings (client id, security protocol,
    SASL) plus what this client adds.

    Additions come as snake_case keywords, which name librdkafka keys with dots
    (``kafka_config(b, group_id="g", enable_auto_commit=False)``), and/or as a mapping of
    keys used as given, for the dotted keys and the Python client's own ones
    (``kafka_config(b, {"transactional.id": t, "error_cb": on_error})``). The mapping wins
    over the keywords, and both over the settings.
    """
    config = KafkaConfig(kafka_client_settings().librdkafka(bootstrap_servers=bootstrap,
                                                            **overrides))
    config.update(librdkafka_keys or {})
    return config


END_OF_LOG_FETCH_WAIT_MS = 10
"""``fetch.wait.max.ms`` of a consumer that reads a log to its end: it learns it got there
only from an empty fetch, which the broker holds this long for more records to come (the
client's default, 500 ms, would be paid on every read-back)."""


CONSUMER_ONLY_KEYS = frozenset({
    "group.id", "group.instance.id", "isolation.level", "auto.offset.reset",
    "enable.auto.commit", "enable.auto.offset.store", "auto.commit.interval.ms",
    "enable.partition.eof", "session.timeout.ms", "max.poll.interval.ms",
    "fetch.wait.max.ms", "fetch.min.bytes", "fetch.max.bytes", "partition.assignment.strategy",
})
"""librdkafka's consumer properties: a producer or admin client given one warns that it
ignores it."""


def for_producer(config: Mapping[str, Any]) -> dict[str, Any]:
    """A consumer's configuration made fit for a producer or an admin client of the same
    cluster (its dead-letter writer, its topic set-up): without the consumer properties."""
    kept = KafkaConfig(config)
    for key in CONSUMER_ONLY_KEYS & kept.keys():
        del kept[key]
    return kept


def authenticated(settings: KafkaClientSettings) -> KafkaClientSettings:
    """The settings, with this process's principal and SCRAM password from the stack's
    credentials file when ``MEDUSA_KAFKA_SASL_*`` name none (see ``medusa.credentials``)."""
    if settings.sasl_mechanism is not None:
        return settings
    from medusa import credentials

    stack = credentials.process_credentials()
    if stack is None:
        return settings  # a stack without authentication
    principal = credentials.acting_principal()
    return settings.model_copy(update={
        "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": credentials.SCRAM_MECHANISM,
        "sasl_username": principal,
        "sasl_password": SecretStr(stack.secret(principal).kafka_password)})


def spark_kafka_options(bootstrap: str) -> dict[str, str]:
    """The same settings as options of Spark's Kafka source and sink (``kafka.*``).

    For SASL PLAIN or SCRAM the username and password become a ``kafka.sasl.jaas.config``
    with the Java client's login module; other mechanisms (GSSAPI, OAUTHBEARER) need a JAAS
    configuration of their own, which these settings do not describe.
    """
    settings = authenticated(kafka_client_settings())
    options = KafkaConfig({"kafka.bootstrap.servers": bootstrap,
                           "kafka.security.protocol": settings.security_protocol})
    mechanism = settings.sasl_mechanism
    if mechanism is None:
        return options
    options["kafka.sasl.mechanism"] = mechanism
    module = JAAS_LOGIN_MODULES.get(mechanism.upper())
    if module is not None:
        if settings.sasl_username is None or settings.sasl_password is None:
            raise KafkaSettingsError(f"MEDUSA_KAFKA_SASL_MECHANISM={mechanism} needs "
                                     "MEDUSA_KAFKA_SASL_USERNAME and MEDUSA_KAFKA_SASL_PASSWORD")
        options["kafka.sasl.jaas.config"] = jaas_login(
            mechanism, settings.sasl_username, settings.sasl_password.get_secret_value())
    return options


def jaas_login(mechanism: str, username: str, password: str) -> str:
    """A Java Kafka client's ``sasl.jaas.config`` for a username and password (PLAIN, SCRAM)."""
    module = JAAS_LOGIN_MODULES[mechanism.upper()]
    return (f"{module} required username={_jaas_quoted(username)} "
            f"password={_jaas_quoted(password)};")


def _jaas_quoted(value: str) -> str:
    """A JAAS option value in double quotes, with quotes and backslashes escaped."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


class StackSettings(BaseSettings):
    """Where the local federation runs: participants, ports, folders, endpoints."""

    model_config = SettingsConfigDict(env_prefix="MEDUSA_", extra="ignore")

    stack_participants: int = Field(2, ge=1, le=len(DEFAULT_PARTICIPANT_NAMES))
    kafka_brokers: int = Field(1, ge=1, le=5)
    """Brokers (each also a KRaft controller) per participant's cluster; from 3, topics
    have 3 replicas and need 2 in sync to take a write."""
    credentials_file: Path | None = None
    """The principals' secrets; ``<run_dir>/credentials.json`` when unset."""
    kafka_base_port: int = Field(19092, ge=1024, le=65000)
    registry_port: int = Field(18081, ge=1024, le=65535)
    registry_management_port: int = Field(18082, ge=1024, le=65535)
    registry_internal_port: int = Field(18083, ge=1024, le=65535)
    """The registry itself; clients reach it through its gateway on ``registry_port``."""
    jaeger_otlp_grpc_port: int = Field(14317, ge=1024, le=65535)
    jaeger_otlp_http_port: int = Field(14318, ge=1024, le=65535)
    jaeger_query_port: int = Field(16686, ge=1024, le=65535)
    jaeger_query_grpc_port: int = Field(16685, ge=1024, le=65535)
    jaeger_health_port: int = Field(13133, ge=1024, le=65535)
    jaeger_metrics_port: int = Field(18888, ge=1024, le=65535)
    toxiproxy_port: int = Field(18474, ge=1024, le=65535)
    catalog_port: int = Field(18090, ge=1024, le=65535)
    detector_port: int = Field(18091, ge=1024, le=65535)
    node_spark_ui_port: int = Field(4040, ge=0, le=65535)
    """The port of each node's Spark web UI, on the loopback interface; a node that finds
    it taken tries the next ones (up to Spark's ``spark.port.maxRetries``, 16), so several
    nodes on one machine each have their own. 0: the nodes run without a UI."""
    catalog_participant: str | None = None
    """Whose Kafka cluster keeps the catalog's topic; the first participant when unset."""
    jaeger_ui_url: str | None = None
    """Jaeger's own web UI, as the operator's browser reaches it (the compose deployment
    has one; the locally built Jaeger has none): the console links each trace there too."""
    run_dir: Path = REPO_ROOT / ".run"
    cache_dir: Path = REPO_ROOT / ".cache"
    java_home: Path | None = None
    registry_java: Path | None = None
    """A Java 21+ binary for the registry; found among the installed JDKs when unset."""
    kafka_heap: str = "-Xms256m -Xmx768m"
    registry_heap: str = "-Xms128m -Xmx512m"
    startup_timeout_s: float = Field(120.0, gt=0)
    stack_bpm_agents: bool = True
    """Whether ``medusa up`` starts each participant's BPM agent (``medusa bpm``)."""
    bpm_interval_s: float = Field(5.0, ge=0.5)
    """Seconds between the started BPM agents' steps."""
    stack_hdfs: bool = False
    """Whether ``medusa up`` starts a local HDFS (a NameNode and a DataNode) for checkpoints."""
    hdfs_base_port: int = Field(18760, ge=1024, le=65000)
    """The first of the local HDFS's six ports."""
    stack_s3: bool = False
    """Whether ``medusa up`` starts a local S3-compatible object store (s3proxy) for
    checkpoints on ``s3a://``."""
    s3_port: int = Field(18750, ge=1024, le=65535)
    """The local object store's S3 API, on 127.0.0.1."""
    s3_bucket: str = "medusa"
    """The bucket ``medusa up --s3`` creates for the checkpoints (``s3a://medusa/...``)."""
    s3_endpoint: str | None = None
    """The S3 API a node's ``s3a://`` checkpoints go to; the local store's
    (``http://127.0.0.1:<s3_port>``) when unset."""
    s3_region: str = "us-east-1"
    """The region requests are signed for (the local store accepts any)."""
    s3_access_key: str = "medusa"
    """The access key id of the object store's one identity."""
    s3_secret_key: SecretStr | None = None
    """Its secret key; when unset, the stack's: the ``admin`` principal's token in the
    credentials file (the local store is started with it)."""

    # Existing endpoints: when set, nothing is started for that component.
    # external_kafka: "alpha=host:9092,beta=host2:9092" (or a single bootstrap for one participant)
    external_kafka: str | None = None
    external_registry_url: str | None = None
    external_otlp_endpoint: str | None = None
    external_jaeger_query_url: str | None = None
    external_catalog_url: str | None = None
    # external_kafka_links: "beta-from-alpha=proxy:port,..." (how each participant's services
    # reach the others' clusters); external_toxiproxy_url: the proxies' API (medusa fault)
    external_kafka_links: str | None = None
    external_toxiproxy_url: str | None = None

    @field_validator("node_spark_ui_port")
    @classmethod
    def _unprivileged(cls, port: int) -> int:
        if 0 < port < 1024:
            raise ValueError(f"{port} is a privileged port; use 1024-65535, or 0 for no UI")
        return port

    @field_validator("run_dir", "cache_dir")
    @classmethod
    def _absolute(cls, path: Path) -> Path:
        return path.expanduser().resolve()


EXTERNAL_ENDPOINT_FIELDS = tuple(name for name in StackSettings.model_fields
                                 if name.startswith("external_"))
"""The settings that point at existing endpoints instead of the local stack's."""


class ProducerSettings(BaseSettings):
    """How the producers publish: registry, BOUNDARY cadence, delivery guarantees."""

    model_config = SettingsConfigDict(env_prefix="MEDUSA_PRODUCER_", extra="ignore")

    boundary_interval_s: float = Field(1.0, gt=0)
    linger_ms: int = Field(20, ge=0)
    flush_timeout_s: float = Field(30.0, gt=0)
    trace_every: int = Field(1000, ge=0)
    """Trace one tuple in this many from the producer through the boxes to the sink
    (0: none); its context rides in the ``traceparent`` header."""


class HaSettings(BaseSettings):
    """Heartbeats and failure detection (``MEDUSA_HA_*``)."""

    model_config = SettingsConfigDict(env_prefix="MEDUSA_HA_", extra="ignore")

    heartbeat_interval_s: float = Field(0.25, gt=0, le=60)
    policy: Literal["timeout", "phi"] = "phi"
    acceptable_pause_s: float = Field(0.45, ge=0, le=600)
    """Silence a live but slow node may show before it can be declared failed. Chosen
    from the heartbeat gaps measured under load (``docs/concepts/high-availability.md``):
    a dead node is declared failed about 1.2 s after its last heartbeat."""
    suspect_after_s: float = Field(0.6, gt=0, le=600)
    """timeout policy: silence after which a node is suspected."""
    phi_suspect: float = Field(7.0, gt=0)
    """phi (without the pause) at which a node is suspected: about 0.5 s late."""
    phi_failed: float = Field(8.0, gt=0)
