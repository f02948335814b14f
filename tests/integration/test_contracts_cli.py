"""`medusa contract` against the real catalog: propose, accept, list and revoke, and the
actions the terms or the contract's state refuse, each with its reason."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind
from medusa.contracts import Contract
from tests.federation_processes import federation_env

pytestmark = pytest.mark.integration


def _medusa(federation, tmp_path, *arguments: str) -> subprocess.CompletedProcess[str]:
    env = {**federation_env(federation, tmp_path), "COLUMNS": "250"}
    return subprocess.run([sys.executable, "-m", "medusa_apps", "contract", *arguments],
                          env=env, capture_output=True, text=True, timeout=120, check=False)


def _said(done: subprocess.CompletedProcess[str]) -> str:
    return " ".join((done.stdout + done.stderr).split())


def test_a_contract_is_proposed_accepted_listed_and_revoked(federation, tmp_path) -> None:
    name = f"c-{uuid.uuid4().hex[:6]}"
    proposed = _medusa(federation, tmp_path, "propose", "alpha", "beta", "--price", "10",
                       "--delta", "2", "--movable", "alpha/linear-road", "--period", "10m",
                       "--name", name)
    assert proposed.returncode == 0, _said(proposed)
    assert f"proposed alpha/{name}" in _said(proposed)
    assert f"medusa contract accept alpha/{name} --by beta" in _said(proposed)

    listed = _medusa(federation, tmp_path, "list", "--participant", "beta")
    row = next(line for line in listed.stdout.splitlines() if name in line)
    assert "alpha -> beta" in row and "8 .. 10" in row and "600s" in row and "proposed" in row

    own = _medusa(federation, tmp_path, "accept", f"alpha/{name}", "--by", "alpha")
    assert own.returncode == 2 and "the other party (beta) accepts it" in _said(own)
    accepted = _medusa(federation, tmp_path, "accept", f"alpha/{name}", "--by", "beta")
    assert accepted.returncode == 0, _said(accepted)
    again = _medusa(federation, tmp_path, "accept", f"alpha/{name}", "--by", "beta")
    assert again.returncode == 2 and "is active, not proposed" in _said(again)

    revoked = _medusa(federation, tmp_path, "revoke", f"alpha/{name}", "--by", "beta")
    assert revoked.returncode == 0, _said(revoked)
    with CatalogClient(federation.catalog_url) as catalog:
        entry = catalog.get(Kind.CONTRACTS, f"alpha/{name}")
    assert entry is not None
    contract = Contract.of(entry)
    assert contract.spec.ends_at == contract.period_end(contract.spec.accepted_at or 0), \
        "an active contract ends with its first period"
    listed = _medusa(federation, tmp_path, "list")
    assert "ending" in next(line for line in listed.stdout.splitlines() if name in line)
    twice = _medusa(federation, tmp_path, "revoke", f"alpha/{name}", "--by", "alpha")
    assert twice.returncode == 2 and "revoked already" in _said(twice)


@pytest.mark.parametrize(("arguments", "message"), [
    (["--price", "1", "--delta", "2", "--movable", "alpha/lr"],
     "delta must not exceed price"),
    (["--price", "1", "--movable", "beta/lr"], "not load of the origin 'alpha'"),
    (["--price", "1", "--movable", "alpha/lr", "--by", "gamma"], "neither the origin"),
    (["--price", "1", "--movable", "alpha/lr", "--period", "soon"],
     "expected a duration such as 30s"),
])
def test_bad_terms_are_refused_with_the_reason(federation, tmp_path, arguments,
                                               message) -> None:
    refused = _medusa(federation, tmp_path, "propose", "alpha", "beta", *arguments)
    assert refused.returncode == 2, _said(refused)
    assert message in _said(refused)


def test_a_contract_with_an_unknown_participant_is_refused(federation, tmp_path) -> None:
    refused = _medusa(federation, tmp_path, "propose", "alpha", "omega", "--price", "1",
                      "--movable", "alpha/lr")
    assert refused.returncode == 2
    assert "host: there is no participant 'omega'" in _said(refused)
