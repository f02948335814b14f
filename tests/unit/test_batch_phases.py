"""Where a batch's time goes: Spark's progress and the writer's timings, phase by phase."""

from __future__ import annotations

from typing import Any

import pytest

from medusa.batch_phases import (
    PHASES,
    RECENT_BATCHES,
    RecentWriterTimes,
    WriterTimes,
    batch_phases,
    describe,
    median_phases,
)

pytestmark = pytest.mark.unit


def _progress(batch_id: int, rows: int = 5, add_batch: int = 150) -> dict[str, Any]:
    return {"batchId": batch_id, "numInputRows": rows,
            "durationMs": {"latestOffset": 4, "queryPlanning": 6, "getBatch": 0,
                           "addBatch": add_batch, "walCommit": 12, "commit": 8,
                           "triggerExecution": add_batch + 40},
            "stateOperators": [{"allUpdatesTimeMs": 20, "allRemovalsTimeMs": 3,
                                "commitTimeMs": 9}]}


def test_the_writer_s_timings_split_add_batch() -> None:
    phases = batch_phases(_progress(7), WriterTimes(7, 100.0, 10.0, 5.0, 30.0))
    assert list(phases) == list(PHASES)
    assert phases == {"plan": 10.0, "compute": 100.0, "state_update": 23.0,
                      "state_commit": 9.0, "rows": 10.0, "produce": 5.0,
                      "transaction_commit": 30.0, "spark_commit": 20.0,
                      "other": 15.0, "total": 190.0}


def test_without_the_writer_s_timings_add_batch_is_compute() -> None:
    phases = batch_phases(_progress(7), None)
    assert (phases["compute"], phases["transaction_commit"], phases["other"]) == \
        (150.0, 0.0, 10.0)


def test_the_median_leaves_out_batches_without_input() -> None:
    times = RecentWriterTimes()
    for batch in range(3):
        times.add(WriterTimes(batch, 100.0 + batch, 1.0, 1.0, 20.0))
    progresses = [_progress(0), _progress(1), _progress(2), _progress(3, rows=0, add_batch=5)]
    median = median_phases(progresses, times.by_batch())
    assert median["compute"] == 101.0 and median["total"] == 190.0
    assert median_phases([_progress(3, rows=0)], {}) == {}
    assert "compute 101 (state update 23, state commit 9)" in describe(median)
    assert describe({}) == "-"


def test_only_the_recent_batches_are_kept() -> None:
    times = RecentWriterTimes()
    for batch in range(RECENT_BATCHES + 10):
        times.add(WriterTimes(batch, 1.0, 1.0, 1.0, 1.0))
    kept = times.by_batch()
    assert len(kept) == RECENT_BATCHES and min(kept) == 10
