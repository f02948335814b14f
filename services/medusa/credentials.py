"""Who a process is in the federation, and the secrets that prove it.

Each participant has one principal, named after it, with a SCRAM password that is the
same on every participant's Kafka cluster (a partner authenticates as itself wherever it
reads) and a token for the catalog's and the registry's write APIs. ``admin`` is the
operator of the federation's own services: the brokers among themselves, the registry's
storage, the catalog and the failure detector.

``medusa up`` makes the secrets once and keeps them in ``<run_dir>/credentials.json``,
readable by its owner only (``MEDUSA_CREDENTIALS_FILE`` names another place). A process
acts as the participant ``MEDUSA_PARTICIPANT`` names (nodes and BPM agents set it),
otherwise as ``admin``. Explicit ``MEDUSA_KAFKA_SASL_*`` settings win over the file.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from medusa.errors import MedusaError

ADMIN = "admin"
"""The principal of the federation's own services; a super user on every cluster."""

SCRAM_MECHANISM = "SCRAM-SHA-256"

PARTICIPANT_VARIABLE = "MEDUSA_PARTICIPANT"


class CredentialsError(MedusaError, RuntimeError):
    """The credentials file is missing a principal, or cannot be read."""


@dataclass(frozen=True)
class Secret:
    """One principal's secrets. Its repr hides them, so a log line cannot show them."""

    kafka_password: str
    token: str

    def __repr__(self) -> str:
        return "Secret(**********)"

    @classmethod
    def generate(cls) -> Secret:
        return cls(secrets.token_urlsafe(24), secrets.token_urlsafe(32))


@dataclass(frozen=True)
class StackCredentials:
    principals: dict[str, Secret] = field(default_factory=dict)

    def secret(self, principal: str) -> Secret:
        try:
            return self.principals[principal]
        except KeyError:
            raise CredentialsError(
                f"no credentials for {principal!r} (known: {', '.join(self.principals)}); "
                "`medusa up` makes them for every participant it starts") from None

    def principal_of(self, token: str) -> str | None:
        """Whose token this is (compared in constant time), or None."""
        return principal_of_token(self.tokens(), token)

    def tokens(self) -> dict[str, str]:
        """Token -> principal, for the services that check tokens."""
        return {secret.token: principal for principal, secret in self.principals.items()}

    def with_principals(self, names: Iterable[str]) -> StackCredentials:
        """These credentials plus fresh secrets for ``admin`` and any name not known yet."""
        principals = dict(self.principals)
        for name in (ADMIN, *names):
            principals.setdefault(name, Secret.generate())
        return StackCredentials(principals)

    def as_dict(self) -> dict[str, Any]:
        return {name: asdict(secret) for name, secret in self.principals.items()}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> StackCredentials:
        return cls({name: Secret(**value) for name, value in raw.items()})


def credentials_file(run_dir: Path) -> Path:
    return run_dir / "credentials.json"


def load(path: Path) -> StackCredentials | None:
    """The credentials at ``path``; None when the stack made none (an unsecured one)."""
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise CredentialsError(f"cannot read the credentials in {path}: {error}") from None
    return StackCredentials.from_dict(raw)


def principal_of_token(tokens: Mapping[str, str], presented: str) -> str | None:
    """Whose token ``presented`` is (``tokens``: token -> principal), or None. Compared with
    every token, in constant time, so timing tells nothing of them."""
    offered = presented.encode()
    found = None
    for token, principal in tokens.items():
        if secrets.compare_digest(token.encode(), offered):
            found = principal
    return found


def write_private(path: Path, text: str, owner: tuple[int, int] | None = None) -> None:
    """A file with secrets in it, replaced in one step: readable by its owner only; with
    ``owner`` (uid, gid), by that user and group only (the containers' user, which the
    writer, root, is not)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as sink:
        sink.write(text)
    if owner is not None:
        os.chown(temporary, *owner)
        os.chmod(temporary, 0o440)
    temporary.replace(path)


def save(path: Path, credentials: StackCredentials, owner: tuple[int, int] | None = None
         ) -> None:
    write_private(path, json.dumps(credentials.as_dict(), indent=2), owner)


def ensure(path: Path, participants: Iterable[str]) -> StackCredentials:
    """The stack's credentials, made (or completed) for ``participants``."""
    current = load(path) or StackCredentials()
    completed = current.with_principals(participants)
    if completed != current:
        save(path, completed)
    return completed


def acting_principal() -> str:
    """The principal this process acts as: its participant, or ``admin``."""
    return os.environ.get(PARTICIPANT_VARIABLE) or ADMIN


FILE_VARIABLE = "MEDUSA_CREDENTIALS_FILE"


def process_credentials_file() -> Path:
    """Where this process finds the stack's credentials: ``MEDUSA_CREDENTIALS_FILE``, else
    the run folder's (a node or service started for another run folder is told the file)."""
    named = os.environ.get(FILE_VARIABLE)
    if named:
        return Path(named)
    from medusa.settings import StackSettings

    return credentials_file(StackSettings().run_dir)


def process_credentials() -> StackCredentials | None:
    """The stack's credentials as this process finds them; None for an unsecured stack."""
    return load(process_credentials_file())


def own_token() -> tuple[str, str] | None:
    """(principal, token) of this process for the catalog's and the registry's write APIs;
    None when the stack made no credentials (an unsecured one)."""
    stack = process_credentials()
    if stack is None:
        return None
    principal = acting_principal()
    return principal, stack.secret(principal).token


def act_as(participant: str) -> None:
    """From now on this process (and what it starts, such as Spark's JVM) is ``participant``."""
    os.environ[PARTICIPANT_VARIABLE] = participant
