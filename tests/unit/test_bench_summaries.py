"""The benchmark's summaries under their stable keys in ``bench.json``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from medusa_apps.bench.run import _failover_summary

pytestmark = pytest.mark.unit


@dataclass
class _Run:
    mode: str
    detection_s: float | None
    first_s: float | None
    lost: int = 0

    def summary(self) -> dict[str, Any]:
        return {"mode": self.mode, "detection_s": self.detection_s,
                "first_output_after_kill_s": self.first_s, "lost": self.lost,
                "duplicated": 0}


def test_the_failover_summary_names_the_slowest_detection_and_each_modes_first_output() -> None:
    summary = _failover_summary([_Run("passive", 1.07, 7.4), _Run("active", 1.23, 3.8, 2)])
    assert summary["detection_s"] == 1.23
    assert summary["passive_first_output_s"] == 7.4
    assert summary["active_first_output_s"] == 3.8
    assert (summary["lost"], summary["duplicated"], len(summary["runs"])) == (2, 0, 2)


def test_a_failover_part_not_run_leaves_its_figures_empty() -> None:
    summary = _failover_summary([])
    assert summary["detection_s"] is None and summary["lost"] is None
    assert summary["runs"] == []
