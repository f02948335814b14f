"""The schema registry, through its Confluent-compatible API."""

from __future__ import annotations

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


def register(client: SchemaRegistryClient, topic: str, schema: AvroSchema | str) -> Registration:
    """Register a value schema for ``topic`` under BACKWARD compatibility.

    An incompatible change is refused by the registry and raised as SchemaRefusedError.
    """
    subject = subject_for(topic)
    text = schema.text if isinstance(schema, AvroSchema) else schema
    try:
        _set_compatibility(client, subject)
        schema_id = client.register_schema(subject, Schema(text, "AVRO"))
        registered = client.lookup_schema(subject, Schema(text, "AVRO"))
    except SchemaRegistryError as error:
        raise SchemaRefusedError(subject, error.http_status_code, error.error_message) from error
    return Registration(subject, schema_id, registered.version or 0)
