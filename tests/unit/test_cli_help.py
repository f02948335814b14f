"""What `--help` shows: the defaults a help text names (Rich would take a bare
"[default: ...]" for markup and drop it), and the HA settings' real defaults."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from medusa.settings import HaSettings
from medusa_apps.cli import app

pytestmark = pytest.mark.unit


def _help(*command: str) -> str:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_a_help_texts_own_default_shows() -> None:
    assert "Consumer group [default: a new one]." in _help("consume")
    assert "Participant whose Kafka cluster to use [default: the first]." in _help("consume")


def test_the_failure_detectors_defaults_are_the_settings() -> None:
    defaults = HaSettings.model_fields
    shown = _help("detector")
    for field in ("acceptable_pause_s", "suspect_after_s", "phi_failed"):
        assert f"else {defaults[field].default:g}]" in shown, field
    assert f"else {defaults['heartbeat_interval_s'].default:g}]" in _help("node")
