"""The distribution commands' errors: what was expected, and nothing half-done."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind
from medusa_spark.networks import SENSOR_WINDOWS, network_file
from tests.federation_processes import federation_env

pytestmark = pytest.mark.integration

NETWORK = network_file(SENSOR_WINDOWS)


def _medusa(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "medusa_apps", *args], capture_output=True,
                          text=True, env=env, timeout=300, check=False)


@pytest.fixture
def env(federation, tmp_path) -> dict[str, str]:
    return {**federation_env(federation, tmp_path), "COLUMNS": "200"}


def test_a_placement_naming_an_unknown_box_is_refused(env, tmp_path, federation) -> None:
    placement = tmp_path / "placement.yaml"
    placement.write_text("plausible: beta/nowhere\nper_sensor_typo: beta/nowhere\n")
    result = _medusa(env, "deploy", str(NETWORK), "--placement", str(placement))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "box 'per_sensor_typo': the network has no such box" in result.stderr
    with CatalogClient(federation.catalog_url) as catalog:
        assert catalog.list(Kind.FRAGMENTS, network="alpha/sensor-windows") == []


def test_a_placement_on_a_partner_without_a_contract_is_refused_naming_what_is_missing(
        env, tmp_path, federation) -> None:
    name = f"nocontract-{uuid.uuid4().hex[:6]}"
    placement = tmp_path / "placement.yaml"
    placement.write_text(f"plausible: beta/{name}\nper_sensor: beta/{name}\n")
    result = _medusa(env, "deploy", str(NETWORK), "--placement", str(placement),
                     "--name", name)
    assert result.returncode == 2, result.stdout + result.stderr
    said = " ".join(result.stderr.split())
    assert f"box 'plausible': placed on beta (node beta/{name}), but no contract in force " \
           "lets alpha's load run on beta's nodes" in said, said
    assert f"medusa contract propose alpha beta --price P --movable alpha/{name}" in said
    with CatalogClient(federation.catalog_url) as catalog:
        assert catalog.get(Kind.NETWORKS, f"alpha/{name}") is None
        assert catalog.list(Kind.FRAGMENTS, network=f"alpha/{name}") == []


def test_a_malformed_placement_file_says_what_was_expected(env, tmp_path) -> None:
    placement = tmp_path / "placement.yaml"
    placement.write_text("plausible: nowhere\n")
    result = _medusa(env, "deploy", str(NETWORK), "--placement", str(placement))
    assert result.returncode == 2
    assert "expected a node as participant/node" in result.stderr


def test_move_names_what_is_wrong(env) -> None:
    result = _medusa(env, "move", "alpha/per_sensor", "--to", "nowhere")
    assert result.returncode == 2
    assert "--to: expected participant/node" in result.stderr
    result = _medusa(env, "move", "alpha/no_such_box", "--to", "beta/node-1")
    assert result.returncode == 1
    assert "no fragment or box alpha/no_such_box in the catalog" in result.stderr


def test_status_lists_participants_nodes_and_fragments(env, federation) -> None:
    import json

    with CatalogClient(federation.catalog_url) as catalog:
        catalog.update(Kind.NODES, "beta/status-probe", lambda spec: spec or {})
    result = _medusa(env, "status", "--json")
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert {p["name"] for p in status["participants"]} >= {"alpha", "beta"}
    assert "beta/status-probe" in {n["name"] for n in status["nodes"]}
    table = _medusa(env, "status")
    assert "beta/status-probe" in table.stdout and "participants" in table.stdout
