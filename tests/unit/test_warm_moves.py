"""Warm moves: which fragments move warm, and when a replica's own SUnion (a warm move
onto another cluster) counts as caught up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medusa.sunion.config import SUnionConfig, SUnionInput
from medusa_spark.deploy import warm_move_possible
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
