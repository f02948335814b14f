"""The federation's credentials split by who holds them, for a deployment whose parts run
apart (the compose deployment): each part gets a folder with what it needs and nothing more.

- ``federation/credentials.json``: every principal. The federation's own services hold
  it: the catalog and the registry's gateway check every participant's token, the failure
  detector acts as ``admin``.
- ``<participant>/credentials.json``: that participant's secrets only, for its nodes, its
  BPM agent and its producers. A participant cannot act as another.
- ``kafka-<participant>/``: that participant's brokers. ``kafka_server_jaas.conf`` is the
  brokers' own login (``admin``: SCRAM among brokers, PLAIN to the controller, which cannot
  check SCRAM before its metadata is loaded); ``scram-users`` is every principal's SCRAM
  credential, one ``--add-scram`` argument per line, written into the metadata log when
  the storage is formatted (a partner authenticates as itself on every cluster);
  ``admin-client.properties`` is a client login for the brokers' health check.
- ``registry/kafka-login.properties``: the registry's login to the Kafka that stores its
  schemas.

Secrets that exist are kept, so running it again (every ``docker compose up``) changes
nothing the brokers were formatted with.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from medusa import credentials
from medusa.credentials import ADMIN, SCRAM_MECHANISM, StackCredentials
from medusa.settings import jaas_login

FEDERATION = "federation"
REGISTRY = "registry"


def kafka_folder(participant: str) -> str:
    return f"kafka-{participant}"


def broker_jaas(stack: StackCredentials) -> str:
    """The brokers' ``KafkaServer`` login section: one module per SASL mechanism, as Kafka
    reads a section shared by every listener."""
    password = stack.secret(ADMIN).kafka_password
    return "\n".join([
        "KafkaServer {",
        f'  org.apache.kafka.common.security.scram.ScramLoginModule required '
        f'username="{ADMIN}" password="{password}";',
        f'  org.apache.kafka.common.security.plain.PlainLoginModule required '
        f'username="{ADMIN}" password="{password}" user_{ADMIN}="{password}";',
        "};", ""])


def scram_users(stack: StackCredentials) -> str:
    return "".join(f"{SCRAM_MECHANISM}=[name={name},password={secret.kafka_password}]\n"
                   for name, secret in stack.principals.items())


def admin_client_properties(stack: StackCredentials) -> str:
    return "\n".join([
        "security.protocol=SASL_PLAINTEXT",
        f"sasl.mechanism={SCRAM_MECHANISM}",
        f"sasl.jaas.config={_admin_login(stack)}", ""])


def registry_kafka_login(stack: StackCredentials) -> str:
    """The registry's Kafka login, as Quarkus configuration (a file its
    ``quarkus.config.locations`` names), above the registry's own properties (250)."""
    return "\n".join([
        "config_ordinal=270",
        "apicurio.kafka.common.security.protocol=SASL_PLAINTEXT",
        f"apicurio.kafka.common.sasl.mechanism={SCRAM_MECHANISM}",
        f"apicurio.kafka.common.sasl.jaas.config={_admin_login(stack)}", ""])


def _admin_login(stack: StackCredentials) -> str:
    return jaas_login(SCRAM_MECHANISM, ADMIN, stack.secret(ADMIN).kafka_password)


def write_all(directory: Path, participants: Sequence[str],
              owner: tuple[int, int] | None = None) -> dict[str, list[Path]]:
    """Make (or keep) the federation's secrets under ``directory``, split by holder.

    Returns each holder's folder and the files written in it.
    """
    whole = credentials.ensure(directory / FEDERATION / "credentials.json", participants)
    files: dict[str, dict[str, str]] = {FEDERATION: {"credentials.json": _json(whole)}}
    for participant in participants:
        own = StackCredentials({participant: whole.secret(participant)})
        files[participant] = {"credentials.json": _json(own)}
        files[kafka_folder(participant)] = {
            "kafka_server_jaas.conf": broker_jaas(whole), "scram-users": scram_users(whole),
            "admin-client.properties": admin_client_properties(whole)}
    files[REGISTRY] = {"kafka-login.properties": registry_kafka_login(whole)}
    written: dict[str, list[Path]] = {}
    for holder, named in files.items():
        written[holder] = [directory / holder / name for name in named]
        for path, text in zip(written[holder], named.values(), strict=True):
            credentials.write_private(path, text, owner)
    return written


def _json(stack: StackCredentials) -> str:
    return json.dumps(stack.as_dict(), indent=2)
