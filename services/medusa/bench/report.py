"""Writing benchmark results: JSON for machines, a plot for people."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def bar_plot(path: Path, title: str, labels: list[str], values: list[float],
             unit: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(8, 0.8 + 0.7 * len(labels)))
    bars = axes.barh(labels, values, color="#4c72b0")
    axes.bar_label(bars, labels=[f"{v:,.0f}" for v in values], padding=4)
    axes.set_xlabel(unit)
    axes.set_title(title)
    axes.invert_yaxis()
    axes.set_xlim(0, max(values) * 1.25)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
