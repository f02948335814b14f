"""Where a fragment's batch spends its time, phase by phase.

Spark's progress report (``durationMs``) gives the batch's planning, its ``addBatch`` (the
fragment's writer, which runs the query) and its own commits; the writer times what it
does inside ``addBatch``: the Spark job that reads the SUnion's topic, decodes it, runs the
boxes and encodes the results (one whole-stage pipeline, so these four are timed as one:
``compute``, with the state stores' update and commit, from ``stateOperators``, as parts
of it), its pass over the result rows in Python, handing them to Kafka, and the Kafka
transaction's commit (after which a ``read_committed`` reader sees them).
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

PHASES = ("plan", "compute", "state_update", "state_commit", "rows", "produce",
          "transaction_commit", "spark_commit", "other", "total")
"""The keys of a breakdown, in the order a batch goes through them. ``state_update`` and
``state_commit`` are parts of ``compute``; ``other`` is what the others leave of ``total``
(Spark's bookkeeping between phases, the writer's DPC marks); ``total`` is Spark's
``triggerExecution``."""

LABELS = {"plan": "plan", "compute": "compute", "state_update": "state update",
          "state_commit": "state commit", "rows": "rows", "produce": "produce",
          "transaction_commit": "Kafka commit", "spark_commit": "Spark commit",
          "other": "other", "total": "batch"}

RECENT_BATCHES = 64
"""Writer timings kept per fragment (Spark keeps about 100 progress reports)."""


@dataclass(frozen=True)
class WriterTimes:
    """What one batch's writer spent, in ms."""

    batch_id: int
    compute_ms: float
    rows_ms: float
    produce_ms: float
    transaction_commit_ms: float


class RecentWriterTimes:
    """The writer timings of a fragment's last ``RECENT_BATCHES`` batches, by batch id."""

    def __init__(self) -> None:
        self._times: deque[WriterTimes] = deque(maxlen=RECENT_BATCHES)

    def add(self, times: WriterTimes) -> None:
        self._times.append(times)

    def by_batch(self) -> dict[int, WriterTimes]:
        return {t.batch_id: t for t in list(self._times)}


def batch_phases(progress: Mapping[str, Any], writer: WriterTimes | None) -> dict[str, float]:
    """One batch's breakdown (``PHASES``, in ms) from its progress report and, when known,
    its writer's timings (without them, ``compute`` is the whole ``addBatch``)."""
    durations = progress.get("durationMs") or {}

    def ms(*names: str) -> float:
        return float(sum(int(durations.get(name) or 0) for name in names))
    operators = progress.get("stateOperators") or []
    add_batch = ms("addBatch")
    phases = {
        "plan": ms("latestOffset", "getBatch", "queryPlanning", "setOffsetRange",
                   "getEndOffset"),
        "state_update": float(sum(int(o.get("allUpdatesTimeMs") or 0)
                                  + int(o.get("allRemovalsTimeMs") or 0) for o in operators)),
        "state_commit": float(sum(int(o.get("commitTimeMs") or 0) for o in operators)),
        "spark_commit": ms("walCommit", "commit"),
        "total": ms("triggerExecution"),
    }
    if writer is None:
        phases.update(compute=add_batch, rows=0.0, produce=0.0, transaction_commit=0.0)
    else:
        phases.update(compute=writer.compute_ms, rows=writer.rows_ms,
                      produce=writer.produce_ms,
                      transaction_commit=writer.transaction_commit_ms)
    counted = sum(phases[p] for p in ("plan", "compute", "rows", "produce",
                                      "transaction_commit", "spark_commit"))
    phases["other"] = max(0.0, phases["total"] - counted)
    return {phase: round(phases[phase], 1) for phase in PHASES}


def median_phases(progresses: Iterable[Mapping[str, Any]],
                  writer: Mapping[int, WriterTimes]) -> dict[str, float]:
    """Each phase's median over the batches that read input (a batch with none is the
    idle fragment's, not a batch's cost); empty when there is none."""
    breakdowns = [batch_phases(p, writer.get(int(p.get("batchId", -1))))
                  for p in progresses if int(p.get("numInputRows") or 0) > 0]
    if not breakdowns:
        return {}
    return {phase: round(statistics.median(b[phase] for b in breakdowns), 1)
            for phase in PHASES}


def describe(phases: Mapping[str, float]) -> str:
    """``batch 203 ms: plan 12, compute 120 (state update 30, state commit 8), ...``."""
    if not phases:
        return "-"
    parts = []
    for phase in ("plan", "compute", "rows", "produce", "transaction_commit",
                  "spark_commit", "other"):
        text = f"{LABELS[phase]} {phases.get(phase, 0):.0f}"
        if phase == "compute" and (phases.get("state_update") or phases.get("state_commit")):
            text += (f" (state update {phases.get('state_update', 0):.0f}, "
                     f"state commit {phases.get('state_commit', 0):.0f})")
        parts.append(text)
    return f"batch {phases.get('total', 0):.0f} ms: " + ", ".join(parts)
