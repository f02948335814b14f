"""The federation's secrets split by holder (`medusa credentials init`, the compose
deployment's credentials service)."""

from __future__ import annotations

import json
import os
import stat

import pytest

from medusa.credential_files import write_all

pytestmark = pytest.mark.unit


def test_each_participant_holds_only_its_own_secrets_and_the_brokers_know_everyone(
        tmp_path) -> None:
    write_all(tmp_path, ["alpha", "beta"])
    everyone = json.loads((tmp_path / "federation" / "credentials.json").read_text())
    assert set(everyone) == {"admin", "alpha", "beta"}
    alpha = json.loads((tmp_path / "alpha" / "credentials.json").read_text())
    assert alpha == {"alpha": everyone["alpha"]}
    users = (tmp_path / "kafka-beta" / "scram-users").read_text().splitlines()
    assert users == [f"SCRAM-SHA-256=[name={name},password={secret['kafka_password']}]"
                     for name, secret in everyone.items()]
    jaas = (tmp_path / "kafka-beta" / "kafka_server_jaas.conf").read_text()
    assert everyone["admin"]["kafka_password"] in jaas
    assert everyone["alpha"]["kafka_password"] not in jaas
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_a_second_run_keeps_the_secrets_the_brokers_were_formatted_with(tmp_path) -> None:
    write_all(tmp_path, ["alpha"])
    first = (tmp_path / "kafka-alpha" / "scram-users").read_text()
    write_all(tmp_path, ["alpha", "beta"])  # a participant added later gets its own
    second = (tmp_path / "kafka-alpha" / "scram-users").read_text()
    assert second.startswith(first.splitlines()[0]) and "name=beta," in second
    assert first.splitlines()[1] in second


def test_an_owner_gets_files_its_user_and_group_can_read(tmp_path) -> None:
    owner = (os.getuid(), os.getgid())
    written = write_all(tmp_path, ["alpha"], owner)
    for files in written.values():
        for path in files:
            assert (path.stat().st_uid, path.stat().st_gid) == owner
            assert stat.S_IMODE(path.stat().st_mode) == 0o440, path
