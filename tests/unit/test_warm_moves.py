"""Warm moves: which fragments move warm, and when a replica's own SUnion (a warm move
onto another cluster) counts as caught up."""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from medusa.sunion.config import SUnionConfig, SUnionInput
from medusa_spark.deploy import warm_move_possible
from medusa_spark.node.moves import JUST_WRITTEN_S, OUTPUT_SWITCH_LIMIT_S, RESULT_WAIT_S, Moves
from medusa_spark.node.state import PACE_WAIT_S, HostedFragment, PendingTakeover, keeping_pace
from medusa_spark.sunion_process import SUnionProcess

pytestmark = pytest.mark.unit


def test_a_running_fragment_moves_warm_within_its_cluster_and_onto_another() -> None:
    running = {"node": "alpha/n1", "phase": "running"}
    assert warm_move_possible(running, "alpha/n2")
    assert warm_move_possible(running, "beta/n1")
    assert not warm_move_possible({**running, "phase": "released"}, "beta/n1")
    assert not warm_move_possible({**running, "replica": "beta/n1"}, "beta/n1")
    assert not warm_move_possible({**running, "reader_replica": "beta/n1"}, "beta/n1")


def _sunion(tmp_path: Path, state: dict | None) -> SUnionProcess:
    config = SUnionConfig(fragment="f", inputs=[SUnionInput(name="in", topic="t",
                                                            bootstrap="127.0.0.1:1")],
                          output_topic="f.in", output_bootstrap="127.0.0.1:2")
    sunion = SUnionProcess(config, tmp_path)
    if state is not None:
        tmp_path.mkdir()
        Path(sunion.config.state_file or "").write_text(json.dumps(state))
    return sunion


def _state(*lags: int | None, opened: bool = True) -> dict:
    return {"opened_at": 1.0 if opened else None, "inputs": {"in": {"topic": "t", "partitions": {
        str(p): {"position": 0, "lag": lag} for p, lag in enumerate(lags)}}}}


def test_a_replica_s_own_sunion_is_caught_up_once_open_and_near_its_inputs_end(
        tmp_path: Path) -> None:
    assert not _sunion(tmp_path / "none", None).caught_up(1000)
    assert not _sunion(tmp_path / "closed", _state(0, opened=False)).caught_up(1000)
    assert not _sunion(tmp_path / "behind", _state(900, 200)).caught_up(1000)
    assert not _sunion(tmp_path / "unknown", _state(0, None)).caught_up(1000)
    assert _sunion(tmp_path / "near", _state(400, 500)).caught_up(1000)


class _Query:
    def __init__(self) -> None:
        self.lastProgress: dict | None = None


def _replica(trigger_ms: int) -> HostedFragment:
    run = SimpleNamespace(query=_Query(), trigger_ms=trigger_ms)
    return HostedFragment("alpha/n/f", 1, run, 0.0)  # type: ignore[arg-type]


def _batch(hosted: HostedFragment, batch_id: int, duration_ms: int) -> bool:
    hosted.run.query.lastProgress = {"batchId": batch_id, "batchDuration": duration_ms}
    return keeping_pace(hosted)


def test_a_replica_keeps_pace_once_its_batches_no_longer_work_off_a_backlog() -> None:
    # After loading 1.8 GB: a long first batch, then the input of the load worked off
    # (batch 98's small drop is no sign of a steady pace).
    replica = _replica(trigger_ms=1000)
    assert not keeping_pace(replica)  # no batch yet
    for batch, duration_ms in ((96, 27_071), (97, 6_962), (98, 6_015), (99, 4_785),
                               (100, 2_792), (101, 2_389)):
        assert not _batch(replica, batch, duration_ms)
    assert not keeping_pace(replica)  # asked again within the same batch
    assert _batch(replica, 102, 1_900)  # within two trigger intervals
    # A fragment whose batches take longer than that anyway: once they stop shrinking.
    slow = _replica(trigger_ms=1000)
    for batch, duration_ms in ((0, 20_000), (1, 9_000), (2, 8_500)):
        assert not _batch(slow, batch, duration_ms)
    assert _batch(slow, 3, 8_700)
    # Without a trigger interval (process what is there), the same.
    untimed = _replica(trigger_ms=0)
    assert not _batch(untimed, 0, 900)
    assert not _batch(untimed, 1, 960)
    assert _batch(untimed, 2, 930)


def test_a_replica_that_never_settles_is_ready_after_a_while_all_the_same() -> None:
    replica = _replica(trigger_ms=1000)
    assert not _batch(replica, 0, 9_000)
    replica.pace_since = time.monotonic() - PACE_WAIT_S
    assert _batch(replica, 1, 4_000)


class _SwitchQuery:
    def __init__(self) -> None:
        self.lastProgress: dict = {"batchId": 40, "timestamp": "2026-11-30T00:00:00.000Z",
                                   "numInputRows": 10}
        self.status: dict = {"isTriggerActive": True}


class _SwitchWriter:
    def __init__(self) -> None:
        self.wrote_at: float | None = None
        self.eviction_held = False

    def is_ahead(self) -> bool:
        return False

    def primary_wrote_at(self) -> float | None:
        return self.wrote_at


def _switching(waited_s: float) -> HostedFragment:
    run = SimpleNamespace(query=_SwitchQuery(), writer=_SwitchWriter())
    hosted = HostedFragment("alpha/n/f", 1, run, 0.0)  # type: ignore[arg-type]
    hosted.sunion = SimpleNamespace()  # type: ignore[assignment]
    hosted.own_input = True
    hosted.switch_asked_at = time.time() - waited_s
    return hosted


def _moves() -> Moves:
    return Moves(SimpleNamespace(), SimpleNamespace())  # type: ignore[arg-type]


def test_a_replica_takes_the_output_over_just_after_the_old_node_s_result() -> None:
    moves = _moves()
    replica = _switching(0.5)
    assert not moves.ready_to_take_over(replica)  # mid-batch, not ahead, nothing written
    replica.run.writer.wrote_at = time.time() - JUST_WRITTEN_S - 0.5
    assert not moves.ready_to_take_over(replica)  # the old node's next result is near
    replica.run.writer.wrote_at = time.time() - 0.1
    assert not moves.ready_to_take_over(replica)  # no batch of its own read the new input
    replica.run.query.lastProgress = {**replica.run.query.lastProgress, "batchId": 41,
                                      "timestamp": _stamp(time.time() - 0.2)}
    assert moves.ready_to_take_over(replica)  # mid-batch all the same
    assert "after the old node's result" in (replica.switch_reason or "")


def test_a_held_replica_is_released_at_one_result_and_takes_over_at_the_next() -> None:
    # Promoted at the first, a held batch in progress past its scan emits nothing and the
    # windows come a batch later; promoted when that batch ends, it may fence the old node
    # just before its next result.
    moves = _moves()
    replica = _switching(0.5)
    writer = replica.run.writer
    writer.eviction_held = True
    released: list[bool] = []

    def release() -> None:
        released.append(True)
        writer.eviction_held = False
    replica.run.release_eviction = release
    writer.wrote_at = time.time() - 0.1
    replica.run.query.lastProgress = {**replica.run.query.lastProgress, "batchId": 41,
                                      "timestamp": _stamp(time.time() - 0.2)}
    assert not moves.ready_to_take_over(replica)  # released; its batch in progress ran held
    assert released == [True]
    assert not moves.ready_to_take_over(replica)  # that batch still runs
    replica.run.query.lastProgress = {**replica.run.query.lastProgress, "batchId": 42,
                                      "timestamp": _stamp(time.time())}
    assert not moves.ready_to_take_over(replica)  # the old node's next result is near
    writer.wrote_at = time.time()
    assert moves.ready_to_take_over(replica)
    assert released == [True]
    assert "after the old node's result" in (replica.switch_reason or "")
    assert "released" in (replica.switch_reason or "")


def test_without_a_result_of_the_old_node_a_replica_takes_over_at_a_batch_boundary() -> None:
    moves = _moves()
    replica = _switching(RESULT_WAIT_S - 1)
    replica.run.query.status = {"isTriggerActive": False}  # a quiet input
    assert not moves.ready_to_take_over(replica)
    busy = _switching(RESULT_WAIT_S + 0.5)
    assert not moves.ready_to_take_over(busy)  # mid-batch
    assert not moves.ready_to_take_over(busy)
    busy.run.query.lastProgress = {**busy.run.query.lastProgress, "batchId": 41}
    assert moves.ready_to_take_over(busy)
    assert (busy.switch_reason or "").startswith("at a batch boundary")
    idle = _switching(RESULT_WAIT_S + 0.5)
    idle.run.query.status = {"isTriggerActive": False}
    assert moves.ready_to_take_over(idle)
    stalled = _switching(OUTPUT_SWITCH_LIMIT_S + 0.5)
    assert moves.ready_to_take_over(stalled)
    assert (stalled.switch_reason or "").startswith("at the limit")


def _stamp(at_s: float) -> str:
    return datetime.fromtimestamp(at_s, UTC).isoformat().replace("+00:00", "Z")


class _Progress:
    def __init__(self, batch_id: int, started_s: float, duration_ms: int) -> None:
        self.json = json.dumps({"batchId": batch_id, "timestamp": _stamp(started_s),
                                "numInputRows": 5, "batchDuration": duration_ms,
                                "durationMs": {"triggerExecution": duration_ms}})


def test_a_promoted_replica_s_log_breaks_down_the_batches_that_ended_after_its_promotion(
        caplog: pytest.LogCaptureFixture) -> None:
    now = time.time()
    query = SimpleNamespace(recentProgress=[
        _Progress(7, now - 20, 3_000), _Progress(8, now - 3, 2_500),  # caught up before
        _Progress(9, now - 0.5, 3_100), _Progress(10, now + 2.6, 900)])
    replica = HostedFragment("alpha/n/f", 1, SimpleNamespace(  # type: ignore[arg-type]
        query=query, writer=SimpleNamespace(outputs=[])), 0.0)
    replica.takeover = PendingTakeover(None, int(now * 1e9))
    moves = Moves(SimpleNamespace(global_name="alpha/n"), SimpleNamespace())  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="medusa.node"):
        assert moves.report_first_batches(replica)
    assert "batch 9: 3100 ms" in caplog.text and "batch 10" in caplog.text
    assert "batch 8" not in caplog.text and "batch 7" not in caplog.text
