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


def _save(figure: Any, path: Path) -> None:
    """Lays ``figure`` out, writes it to ``path`` as a PNG, and frees it."""
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


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
    _save(figure, path)


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
    _save(figure, path)


def path_latency_plot(path: Path, title: str,
                      series: dict[str, list[tuple[float, float]]]) -> None:
    """Per path: latency (ms, log scale) over time on the left, its histogram on the right."""
    path.parent.mkdir(parents=True, exist_ok=True)
    figure, (over_time, histogram) = plt.subplots(1, 2, figsize=(12, 4.5))
    measured = {label: points for label, points in series.items() if points}
    every = [latency for points in measured.values() for _, latency in points]
    if every:
        low, high = max(0.1, min(every)), max(every)
        bins = [low * (high / low) ** (i / 40) for i in range(41)] if high > low else 10
        for label, points in measured.items():
            xs, ys = zip(*sorted(points), strict=True)
            over_time.plot(xs, ys, ".", markersize=3, label=label, alpha=0.7)
            histogram.hist(ys, bins=bins, alpha=0.5, label=label)
        over_time.set_yscale("log")
        histogram.set_xscale("log")
    over_time.set_xlabel("second of the run")
    over_time.set_ylabel("produce to readable (ms)")
    histogram.set_xlabel("produce to readable (ms)")
    histogram.set_ylabel("results")
    over_time.set_title(title)
    over_time.legend(loc="upper right", markerscale=4, fontsize=8)
    histogram.legend(loc="upper right", fontsize=8)
    _save(figure, path)


def pause_plot(path: Path, title: str,
               runs: dict[str, list[tuple[float, float | None, float]]], slide_s: float) -> None:
    """The output pause of moves against the moved state's size, a line per kind of move
    (each point: state MB, pause s, hand-over s)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for mode, unsorted in runs.items():
        points = sorted(unsorted)
        measured = [(mb, pause) for mb, pause, _ in points if pause is not None]
        if measured:
            axes.plot(*zip(*measured, strict=True), "o-", label=f"{mode} move: output pause")
        if points:
            axes.plot([mb for mb, _, _ in points], [hand for _, _, hand in points], "s:",
                      alpha=0.6, label=f"{mode} move: request to running")
    axes.axhline(slide_s, color="grey", linestyle=":", label=f"the slide ({slide_s:g} s)")
    axes.set_xscale("log")
    axes.set_xlabel("checkpointed state of the fragment (MB)")
    axes.set_ylabel("seconds")
    axes.set_title(title)
    axes.legend(loc="upper left", fontsize=8)
    _save(figure, path)


def gap_timeline_plot(path: Path, title: str,
                      runs: list[tuple[str, list[tuple[float, float]], float | None,
                                       float | None]]) -> None:
    """The gaps between results around moves, a panel per move: each gap's length at the
    time it ended, the request at 0, the move done, and the normal gap.

    Each run: (label, [(end s, gap s)], done s, normal gap s)."""
    if not runs:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    figure, panels = plt.subplots(len(runs), 1, figsize=(9, 2.4 * len(runs)), sharex=True,
                                  squeeze=False)
    for axes, (label, gaps, done_s, normal_s) in zip(panels[:, 0], runs, strict=True):
        if gaps:
            axes.plot([end for end, _ in gaps], [gap for _, gap in gaps], "o-",
                      markersize=3, color="#4c72b0", label="gap ending then")
        axes.axvline(0, color="red", linewidth=1.2, label="move asked")
        if done_s is not None:
            axes.axvline(done_s, color="green", linestyle="--", linewidth=1.2,
                         label="new node serving")
        if normal_s is not None:
            axes.axhline(normal_s, color="grey", linestyle=":", label="normal gap")
        axes.set_ylabel("gap (s)")
        axes.set_title(label, fontsize=10)
        axes.legend(loc="upper left", fontsize=7)
    panels[-1, 0].set_xlabel("seconds since the move was asked")
    figure.suptitle(title)
    _save(figure, path)


def failover_plot(path: Path, title: str,
                  runs: list[tuple[str, list[int], int, int | None]]) -> None:
    """Results written per half second around a kill, one panel per HA mode.

    Each run: (label, write times in ms, kill time in ms, declaration time in ms).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    figure, panels = plt.subplots(len(runs), 1, figsize=(9, 2.6 * len(runs)), sharex=True,
                                  squeeze=False)
    for axes, (label, written_ms, kill_ms, declared_ms) in zip(panels[:, 0], runs, strict=True):
        seconds = [(t - kill_ms) / 1000 for t in written_ms]
        low, high = -20.0, 40.0
        bins = [low + 0.5 * i for i in range(int((high - low) / 0.5) + 1)]
        axes.hist([s for s in seconds if low <= s <= high], bins=bins, color="#4c72b0")
        axes.axvline(0, color="red", linewidth=1.2, label="kill -9")
        if declared_ms is not None:
            axes.axvline((declared_ms - kill_ms) / 1000, color="orange", linestyle="--",
                         linewidth=1.2, label="declared failed")
        axes.set_ylabel("results / 0.5 s")
        axes.set_title(label, fontsize=10)
        axes.legend(loc="upper right", fontsize=8)
    panels[-1, 0].set_xlabel("seconds since the kill")
    figure.suptitle(title)
    _save(figure, path)


def scale_plot(path: Path, title: str, written_ms: list[int],
               steps: list[tuple[str, int, int]]) -> None:
    """Results written per half second over a run of scale steps, each step shaded from
    its request until it was done."""
    if not written_ms:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    origin = steps[0][1] if steps else written_ms[0]
    seconds = [(t - origin) / 1000 for t in written_ms]
    low, high = max(min(seconds), -60.0), max(seconds)
    figure, axes = plt.subplots(figsize=(10, 3.2))
    bins = [low + 0.5 * i for i in range(int((high - low) / 0.5) + 2)]
    axes.hist([s for s in seconds if s >= low], bins=bins, color="#4c72b0")
    for label, asked_ms, done_ms in steps:
        axes.axvspan((asked_ms - origin) / 1000, (done_ms - origin) / 1000, color="orange",
                     alpha=0.3, label=f"scale {label}")
    axes.set_xlabel("seconds since the first step's request")
    axes.set_ylabel("results / 0.5 s")
    axes.legend(loc="upper right", fontsize=8)
    axes.set_title(title)
    _save(figure, path)


BATCH_PHASES = ("latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit",
                "commitOffsets")


def breakdown_plot(path: Path, title: str, breakdowns: dict[str, dict[str, Any]]) -> None:
    """Per step: the mean batch's phases (the writer's Kafka transactions apart from the
    rest of ``addBatch``), and each stateful operator's time over the step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    labels = [label for label, b in breakdowns.items() if b.get("batches")]
    if not labels:
        return
    figure, (phases_axes, operators_axes) = plt.subplots(
        1, 2, figsize=(12, 2.5 + 0.6 * max(len(labels), 3)))
    for index, label in enumerate(labels):
        breakdown = breakdowns[label]
        batches = breakdown["batches"]
        per_batch = dict(breakdown.get("phase_ms_per_batch") or {})
        kafka = breakdown.get("writer_kafka_ms_total", 0.0) / batches
        segments = []
        for phase in BATCH_PHASES:
            value = per_batch.get(phase, 0.0)
            if phase == "addBatch":
                segments.append(("addBatch (Spark job, writer's Python)", value - kafka))
                segments.append(("writer's Kafka transaction", kafka))
            else:
                segments.append((phase, value))
        left = 0.0
        for number, (name, value) in enumerate(segments):
            phases_axes.barh(index, value, left=left, color=f"C{number}",
                             label=name if index == 0 else None)
            left += value
    phases_axes.set_yticks(range(len(labels)), labels)
    phases_axes.set_xlabel("ms per batch (mean)")
    phases_axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, fontsize=7)
    phases_axes.invert_yaxis()
    width = 0.8 / len(labels)
    names: list[str] = []
    for index, label in enumerate(labels):
        operators = breakdowns[label].get("state_operators") or []
        names = [f"{n}. {op['operator']}" for n, op in enumerate(operators)] or names
        totals = [(op["updates_ms"] + op["removals_ms"] + op["commit_ms"]) / 1000
                  for op in operators]
        operators_axes.barh([n + index * width for n in range(len(totals))], totals,
                            height=width, label=label)
    operators_axes.set_yticks(range(len(names)), names, fontsize=7)
    operators_axes.set_xlabel("s over the step (updates + removals + commit)")
    operators_axes.legend(fontsize=7)
    operators_axes.invert_yaxis()
    figure.suptitle(title)
    _save(figure, path)


DPC_KINDS = {"stable": "#4c72b0", "tentative": "#dd8452", "undo": "#c44e52",
             "corrected": "#55a868", "rec_done": "#8172b3"}


def dpc_timeline_plot(path: Path, title: str, events: dict[str, list[float]],
                      faults: list[tuple[float, float]], delays: list[tuple[float, float]],
                      delay_s: float) -> None:
    """DPC over time: above, the output's records (stable, tentative, UNDO, corrected,
    REC_DONE) each as a tick on its own row; below, each result's extra delay over the
    fault-free one, against D. Faults are shaded. Times in seconds since the input began."""
    path.parent.mkdir(parents=True, exist_ok=True)
    figure, (records_axes, delay_axes) = plt.subplots(
        2, 1, figsize=(11.5, 5.5), sharex=True, gridspec_kw={"height_ratios": [1.2, 1]})
    rows = [kind for kind in DPC_KINDS if kind in events]
    for row, kind in enumerate(rows):
        records_axes.scatter(events[kind], [row] * len(events[kind]), marker="|", s=120,
                             color=DPC_KINDS[kind], label=f"{kind} ({len(events[kind])})")
    records_axes.set_yticks(range(len(rows)), rows)
    records_axes.set_ylim(-0.7, len(rows) - 0.3)
    if delays:
        delay_axes.plot([t for t, _ in delays], [d for _, d in delays], "o", markersize=3,
                        color="#4c72b0", label="result's extra delay")
    delay_axes.axhline(delay_s, color="red", linestyle="--", linewidth=1,
                       label=f"D = {delay_s:g} s")
    delay_axes.axhline(delay_s + 1, color="orange", linestyle=":", linewidth=1,
                       label="goal: D + 1 s")
    delay_axes.set_ylabel("seconds later than fault-free")
    delay_axes.set_xlabel("seconds since the input began")
    for axes in (records_axes, delay_axes):
        for began, ended in faults:
            axes.axvspan(began, ended, color="grey", alpha=0.15)
    delay_axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    records_axes.set_title(title + " (shaded: the partition)", fontsize=11)
    _save(figure, path)


PARTICIPANT_COLOURS = {"alpha": "#4c72b0", "beta": "#dd8452", "gamma": "#55a868"}


def dpc_matrix_plot(path: Path, title: str, cells: list[dict[str, Any]], bound_s: float) -> None:
    """One bar per cell: its longest extra delay, red where it broke the bound, grey where
    the cell failed to run."""
    path.parent.mkdir(parents=True, exist_ok=True)
    labels = [f"{c['placement']} / {c['fault']} / {c['length']}" for c in cells]
    values = [c.get("longest_extra_delay_s") or 0.0 for c in cells]
    colours = ["#999999" if "error" in c else "#4c72b0" if c.get("bound_held") else "#c44e52"
               for c in cells]
    figure, axes = plt.subplots(figsize=(9, 0.8 + 0.35 * len(labels)))
    axes.barh(labels, values, color=colours)
    axes.axvline(bound_s, color="#333333", linestyle="--", label=f"bound ({bound_s:g} s)")
    axes.set_xlabel("seconds later than without the fault")
    axes.set_title(title)
    axes.invert_yaxis()
    axes.legend(loc="lower right")
    _save(figure, path)


def bpm_spike_plot(path: Path, title: str, utilisation: dict[str, list[tuple[float, float]]],
                   latency: list[tuple[float, float]], marks: list[tuple[float, str]],
                   spike_s: float, spike_end_s: float) -> None:
    """BPM through a spike: above, each participant's utilisation (1 = its capacity);
    below, each result's latency; the spike's start shaded on, each move (and what the
    scenario did) a vertical line. Times in seconds since the input began."""
    path.parent.mkdir(parents=True, exist_ok=True)
    figure, (load_axes, latency_axes) = plt.subplots(2, 1, figsize=(11.5, 6), sharex=True)
    for participant, points in utilisation.items():
        load_axes.plot([t for t, _ in points], [u for _, u in points], linewidth=1.5,
                       color=PARTICIPANT_COLOURS.get(participant), label=participant)
    load_axes.axhline(1.0, color="red", linestyle="--", linewidth=1, label="capacity")
    load_axes.set_ylabel("utilisation (load / capacity)")
    latency_axes.plot([t for t, _ in latency], [v for _, v in latency], "o", markersize=2.5,
                      color="#4c72b0", label="result latency")
    latency_axes.set_ylabel("latency (s)")
    latency_axes.set_xlabel("seconds since the input began")
    for axes in (load_axes, latency_axes):
        axes.axvspan(spike_s, spike_end_s, color="grey", alpha=0.1)
        for at, _ in marks:
            axes.axvline(at, color="black", linestyle=":", linewidth=1)
    top = load_axes.get_ylim()[1]
    for at, label in marks:
        load_axes.text(at, top, f" {label}", rotation=90, va="top", fontsize=7)
    load_axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    latency_axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    load_axes.set_title(title + " (shaded: the spike; dotted: moves)", fontsize=11)
    _save(figure, path)
