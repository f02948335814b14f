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


def latency_plot(path: Path, title: str, series: dict[str, list[tuple[float, float]]],
                 bound_s: float) -> None:
    """Latency over time, one series per step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(9, 4.5))
    for label, points in series.items():
        if points:
            xs, ys = zip(*sorted(points), strict=True)
            axes.plot(xs, ys, ".", markersize=2, label=label, alpha=0.6)
    axes.axhline(bound_s, color="red", linestyle="--", linewidth=1, label=f"{bound_s:g} s bound")
    axes.set_xlabel("simulated second of the step")
    axes.set_ylabel("latency (s)")
    axes.set_title(title)
    axes.legend(loc="upper left", markerscale=4)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def pause_plot(path: Path, title: str, state_mb: list[float], pauses_s: list[float | None],
               hand_overs_s: list[float], slide_s: float) -> None:
    """The output pause of a move against the moved state's size."""
    path.parent.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(7, 4.5))
    measured = [(x, y) for x, y in zip(state_mb, pauses_s, strict=True) if y is not None]
    if measured:
        axes.plot(*zip(*measured, strict=True), "o-", label="output pause")
    axes.plot(state_mb, hand_overs_s, "s--", label="hand-over (request to running)")
    axes.axhline(slide_s, color="grey", linestyle=":", label=f"gap without a move ({slide_s:g} s)")
    axes.set_xlabel("checkpointed state of the box (MB)")
    axes.set_ylabel("seconds")
    axes.set_title(title)
    axes.legend(loc="upper left")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
