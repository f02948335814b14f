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
import os
from collections.abc import Sequence
from pathlib import Path

from medusa import credentials
from medusa.credentials import ADMIN, SCRAM_MECHANISM, StackCredentials

FEDERATION = "federation"
REGISTRY = "registry"


def kafka_folder(participant: str) -> str:
    return f"kafka-{participant}"


def _scram_login(principal: str, password: str) -> str:
    return ("org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{principal}" password="{password}";')


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
        f"sasl.jaas.config={_scram_login(ADMIN, stack.secret(ADMIN).kafka_password)}", ""])


def registry_kafka_login(stack: StackCredentials) -> str:
    """Quarkus configuration (a file named by ``QUARKUS_CONFIG_LOCATIONS``)."""
    return "\n".join([
        "apicurio.kafka.common.security.protocol=SASL_PLAINTEXT",
        f"apicurio.kafka.common.sasl.mechanism={SCRAM_MECHANISM}",
        "apicurio.kafka.common.sasl.jaas.config="
        f"{_scram_login(ADMIN, stack.secret(ADMIN).kafka_password)}", ""])


def _write(path: Path, text: str, owner: tuple[int, int] | None) -> None:
    """Readable by its owner only; with ``owner``, by that user and group (the containers'
    user, which the writer, root, is not)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as sink:
        sink.write(text)
    if owner is not None:
        os.chown(temporary, *owner)
        os.chmod(temporary, 0o440)
    temporary.replace(path)


def write_all(directory: Path, participants: Sequence[str],
              owner: tuple[int, int] | None = None) -> dict[str, list[Path]]:
    """Make (or keep) the federation's secrets under ``directory``, split by holder.

    Returns each holder's folder and the files written in it.
    """
    whole = credentials.ensure(directory / FEDERATION / "credentials.json", participants)
    if owner is not None:
        os.chown(directory / FEDERATION / "credentials.json", *owner)
        os.chmod(directory / FEDERATION / "credentials.json", 0o440)
    written: dict[str, list[Path]] = {FEDERATION: [directory / FEDERATION / "credentials.json"]}
    for participant in participants:
        own = StackCredentials({participant: whole.secret(participant)})
        path = directory / participant / "credentials.json"
        _write(path, json.dumps(own.as_dict(), indent=2), owner)
        written[participant] = [path]
        folder = directory / kafka_folder(participant)
        files = {"kafka_server_jaas.conf": broker_jaas(whole),
                 "scram-users": scram_users(whole),
                 "admin-client.properties": admin_client_properties(whole)}
        for name, text in files.items():
            _write(folder / name, text, owner)
        written[kafka_folder(participant)] = [folder / name for name in files]
    path = directory / REGISTRY / "kafka-login.properties"
    _write(path, registry_kafka_login(whole), owner)
    written[REGISTRY] = [path]
    return written
