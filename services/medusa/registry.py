"""The schema registry, through its Confluent-compatible API."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka.schema_registry import (
    Schema,
    SchemaRegistryClient,
    topic_subject_name_strategy,
)
from confluent_kafka.schema_registry.error import SchemaRegistryError

from medusa.credentials import own_token
from medusa.errors import MedusaError
from medusa.schemas import AvroSchema, subject_for

COMPATIBILITY = "BACKWARD"

log = logging.getLogger("medusa.registry")


class SchemaRefusedError(MedusaError, RuntimeError):
    """The registry refused a schema; ``reason`` is the registry's own message."""

    def __init__(self, subject: str, status: int, reason: str) -> None:
        super().__init__(f"registry refused the schema for {subject} (HTTP {status}): {reason}")
        self.subject = subject
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Registration:
    subject: str
    schema_id: int
    version: int


REQUEST_TIMEOUT_S = 30
REGISTRY_WAIT_S = 300.0
"""How long a registration waits for a registry that does not answer (a restart takes
about half a minute)."""
RETRY_S = 2.0


def registry_client(url: str) -> SchemaRegistryClient:
    """A client that writes as this process's principal (``medusa.credentials``)."""
    # Without a timeout the client waits forever on a registry that does not answer.
    config: dict[str, object] = {"url": url, "timeout": REQUEST_TIMEOUT_S}
    token = own_token()
    if token is not None:
        config["basic.auth.user.info"] = ":".join(token)
    return SchemaRegistryClient(config)


# Subjects are "<topic>-value", always: newer clients default to looking up subject
# associations first, an API the Confluent-compatible registries need not have.
SERDE_CONFIG = {"subject.name.strategy": topic_subject_name_strategy}


def _set_compatibility(client: SchemaRegistryClient, subject: str, attempts: int = 5) -> None:
    """Apicurio answers 409 when another client created the subject's rule a moment earlier;
    setting it again then updates the rule, so that race is retried."""
    for attempt in range(attempts):
        try:
            client.set_compatibility(subject_name=subject, level=COMPATIBILITY)
            return
        except SchemaRegistryError as error:
            if error.http_status_code != 409 or attempt == attempts - 1:
                raise
            time.sleep(0.1 * (attempt + 1))


class RegistryUnavailableError(MedusaError, RuntimeError):
    """The registry did not answer within the time a caller waits for it."""


def registry_unavailable(error: Exception) -> bool:
    """Whether the registry is away (down, restarting), not refusing the request."""
    if isinstance(error, SchemaRegistryError):
        return error.http_status_code in (-1, 502, 503, 504)
    # The client's HTTP library may be a copy of httpx of its own: matched by class name.
    return isinstance(error, OSError) or any(
        cls.__name__ == "TransportError" for cls in type(error).__mro__)


def register(client: SchemaRegistryClient, topic: str, schema: AvroSchema | str,
             wait_s: float = REGISTRY_WAIT_S) -> Registration:
    """Register a value schema for ``topic`` under BACKWARD compatibility.

    An incompatible change is refused by the registry and raised as SchemaRefusedError. A
    registry that does not answer (killed, restarting) is waited for up to ``wait_s``,
    saying so in the log, and then is a RegistryUnavailableError.
    """
    subject = subject_for(topic)
    text = schema.text if isinstance(schema, AvroSchema) else schema
    deadline = time.monotonic() + wait_s
    while True:
        try:
            _set_compatibility(client, subject)
            schema_id = client.register_schema(subject, Schema(text, "AVRO"))
            registered = client.lookup_schema(subject, Schema(text, "AVRO"))
            return Registration(subject, schema_id, registered.version or 0)
        except Exception as error:
            if not registry_unavailable(error):
                if isinstance(error, SchemaRegistryError):
                    raise SchemaRefusedError(subject, error.http_status_code,
                                             error.error_message) from error
                raise
            if time.monotonic() > deadline:
                raise RegistryUnavailableError(
                    f"the schema registry did not answer within {wait_s:.0f}s while "
                    f"registering {subject}: {error}") from None
            log.warning("the schema registry does not answer (%s); registering %s again "
                        "in %.0fs", error, subject, RETRY_S)
            time.sleep(RETRY_S)
