"""`medusa status`: where a fragment's batches spend their time, a row per phase."""

from __future__ import annotations

import pytest
from rich.console import Console

from medusa.batch_phases import PHASES
from medusa.federation_status import FragmentStatus
from medusa_apps.cli.stack import _phase_tables

pytestmark = pytest.mark.unit


def _shown(fragments: list[FragmentStatus]) -> str:
    console = Console(width=80, record=True)
    for table in _phase_tables("alpha/lr", fragments, lambda n: n.removeprefix("alpha/lr/"),
                               lambda v: "-" if v is None else f"{v:,.0f}"):
        console.print(table)
    return console.export_text()


def test_each_phase_is_a_row_and_each_fragment_a_column() -> None:
    phases = dict.fromkeys(PHASES, 1.0) | {"compute": 1103.0, "total": 1400.0}
    running = FragmentStatus("alpha/lr/road", "alpha/lr", "alpha/n1", "running",
                             batch_phases_ms=phases)
    idle = FragmentStatus("alpha/lr/expenditures", "alpha/lr", "alpha/n1", "running")
    text = _shown([running, idle])
    assert "road" in text and "expenditures" not in text, text
    assert "compute" in text and "1,103" in text and "Kafka commit" in text, text
    assert "1,400" in text, text  # the whole batch, on a row of its own


def test_no_table_before_a_batch_with_input() -> None:
    assert _shown([FragmentStatus("alpha/lr/road", "alpha/lr", "alpha/n1", "placed")]) == ""
