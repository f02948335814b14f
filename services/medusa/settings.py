"""Typed settings: the only place that reads the environment.

Every field maps to an environment variable with the ``MEDUSA_`` prefix
(``stack_participants`` <- ``MEDUSA_STACK_PARTICIPANTS``); CLI flags fall back
to these values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parents[2]

DEFAULT_PARTICIPANT_NAMES = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")


class KafkaClientSettings(BaseSettings):
    """Client settings shared by producers, consumers and the admin client."""

    model_config = SettingsConfigDict(env_prefix="MEDUSA_KAFKA_", extra="ignore")

    bootstrap_servers: str = "127.0.0.1:19092"
    client_id: str = "medusa"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None

    def librdkafka(self, **overrides: Any) -> dict[str, Any]:
        """The one mapping from snake_case fields to librdkafka keys."""
        config: dict[str, Any] = {}
        for name, value in self.model_dump().items():
            if value is None:
                continue
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            config[name.replace("_", ".")] = value
        for name, value in overrides.items():
            config[name.replace("_", ".")] = value
        return config


class StackSettings(BaseSettings):
    """Where the local federation runs: participants, ports, folders, endpoints."""

    model_config = SettingsConfigDict(env_prefix="MEDUSA_", extra="ignore")

    stack_participants: int = Field(2, ge=1, le=len(DEFAULT_PARTICIPANT_NAMES))
    kafka_base_port: int = Field(19092, ge=1024, le=65000)
    registry_port: int = Field(18081, ge=1024, le=65535)
    registry_management_port: int = Field(18082, ge=1024, le=65535)
    jaeger_otlp_grpc_port: int = Field(14317, ge=1024, le=65535)
    jaeger_otlp_http_port: int = Field(14318, ge=1024, le=65535)
    jaeger_query_port: int = Field(16686, ge=1024, le=65535)
    jaeger_query_grpc_port: int = Field(16685, ge=1024, le=65535)
    jaeger_health_port: int = Field(13133, ge=1024, le=65535)
    jaeger_metrics_port: int = Field(18888, ge=1024, le=65535)
    toxiproxy_port: int = Field(18474, ge=1024, le=65535)
    catalog_port: int = Field(18090, ge=1024, le=65535)
    detector_port: int = Field(18091, ge=1024, le=65535)
    catalog_participant: str | None = None
    """Whose Kafka cluster keeps the catalog's topic; the first participant when unset."""
    run_dir: Path = REPO_ROOT / ".run"
    cache_dir: Path = REPO_ROOT / ".cache"
    java_home: Path | None = None
    registry_java: Path | None = None
    """A Java 21+ binary for the registry; found among the installed JDKs when unset."""
    kafka_heap: str = "-Xms256m -Xmx768m"
    registry_heap: str = "-Xms128m -Xmx512m"
    startup_timeout_s: float = Field(120.0, gt=0)

    # Existing endpoints: when set, nothing is started for that component.
    # external_kafka: "alpha=host:9092,beta=host2:9092" (or a single bootstrap for one participant)
    external_kafka: str | None = None
    external_registry_url: str | None = None
    external_otlp_endpoint: str | None = None
    external_jaeger_query_url: str | None = None
    external_catalog_url: str | None = None

    @field_validator("run_dir", "cache_dir")
    @classmethod
    def _absolute(cls, path: Path) -> Path:
        return path.expanduser().resolve()


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

    heartbeat_interval_s: float = Field(0.5, gt=0, le=60)
    policy: Literal["timeout", "phi"] = "phi"
    acceptable_pause_s: float = Field(3.0, ge=0, le=600)
    """Silence a live but slow node may show before it can be declared failed."""
    suspect_after_s: float = Field(1.5, gt=0, le=600)
    """timeout policy: silence after which a node is suspected."""
    phi_suspect: float = Field(3.0, gt=0)
    phi_failed: float = Field(8.0, gt=0)
