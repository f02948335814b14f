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


def test_a_moves_pause_is_counted_beyond_the_normal_gap_between_results() -> None:
    from medusa_apps.bench.state_migration import Migration, summary

    warm = Migration("warm", 1000, 1_050_000_000, 60.0, pause_s=3.2, gap_before_s=2.0,
                     longest_gap_before_s=2.9, switch_gap_s=2.4, batch_before_s=1.3)
    cold = Migration("cold", 1000, 1_050_000_000, 9.0, pause_s=8.0, gap_before_s=2.0,
                     longest_gap_before_s=2.9)
    timed = Migration("warm", 1000, 800_000_000, 60.0, pause_s=4.5, gap_before_s=2.5,
                      longest_gap_before_s=3.0, ballast_expiry="timers")
    got = summary([Migration("warm", 10, 9_000_000, 20.0, 2.5, 2.0, 2.2, 2.1), warm, cold,
                   timed])
    assert got["largest_state_mb"] == 1050.0
    assert got["pause_at_largest_s"] == 1.2 and got["longest_gap_at_largest_s"] == 3.2
    assert got["switch_beyond_normal_at_largest_s"] == 0.4
    assert got["batch_at_largest_s"] == 1.3, "one batch: how much the gaps vary without a move"
    assert got["pause_beyond_longest_normal_at_largest_s"] == 0.3
    assert got["cold_pause_at_largest_s"] == 8.0
    assert got["pause_at_largest_timers_s"] == 2.0, "the same move, windows expiring by timers"


def test_the_gap_at_a_switch_spans_the_old_nodes_last_result_and_the_new_nodes_next_two(
        ) -> None:
    from medusa_apps.bench.state_migration import _switch_gap

    # Old node: 0, 2000; done at 3000; new node: 3100 (catch-up), 3200 (same burst), 5600.
    assert _switch_gap([0, 2000, 3100, 3200, 5600, 7600], 3000) == 2.5
    assert _switch_gap([0, 2000], 3000) is None


def test_a_moves_longest_gap_says_when_it_began() -> None:
    from medusa_apps.bench.state_migration import _longest_gap

    # Bursts at 0 (and 100), 2000, 5800, 7800: the longest gap is 3.8 s, from 2000.
    assert _longest_gap([7800, 0, 100, 2000, 5800]) == (3.8, 2000)
    assert _longest_gap([0, 100]) is None, "one burst: no gap"


def test_a_moves_pause_curve_lists_each_gap_and_those_over_the_normal_one() -> None:
    from medusa_apps.bench.state_migration import Migration, _gap_timeline

    asked = 100_000
    # Bursts every 2 s, one 3.6 s gap during the move, the move done at +8 s; a result
    # 70 s before the request is left out.
    written = [asked - 70_000, asked - 4_000, asked - 3_900, asked - 2_000, asked,
               asked + 3_600, asked + 5_600, asked + 7_600, asked + 9_600]
    timeline = _gap_timeline(written, asked, asked + 8_000)
    assert timeline == ((-2.0, 1.9), (0.0, 2.0), (3.6, 3.6), (5.6, 2.0), (7.6, 2.0),
                        (9.6, 2.0))
    move = Migration("warm", 1000, 10**9, 8.0, 3.6, 2.0, 2.0, done_s=8.0,
                     gap_timeline=timeline)
    assert move.long_gaps() == [(0.0, 3.6)]
    assert move.as_dict()["long_gaps"] == [(0.0, 3.6)]


def test_a_moves_control_is_the_longest_gap_of_stretches_as_long_without_a_move() -> None:
    from medusa_apps.bench.state_migration import Migration, _longest_gap_without_move

    asked = 200_000
    # Every 2 s for two minutes before, but one 3.5 s gap 100 s before the request: of the
    # 10 s stretches, only those holding it say 3.5 s; the median says the usual 2.0.
    written = [t for t in range(asked - 120_000, asked, 2_000) if t != asked - 100_000]
    written.append(asked - 101_500)
    assert _longest_gap_without_move(written, asked, 10_000) == 2.0
    assert _longest_gap_without_move(written, asked, 130_000) == 3.5, "longer: the whole"
    move = Migration("warm", 1000, 10**9, 8.0, 3.6, 2.0, 3.5,
                     longest_gap_without_move_s=2.6)
    assert (move.no_move_pause_s, move.pause_beyond_no_move_s) == (0.6, 1.0)


def test_a_run_of_some_parts_keeps_the_latest_figures_of_the_others() -> None:
    from medusa_apps.bench.run import keep_unmeasured

    previous = {
        "records": 100, "value_size": 16, "parts": ["dpc-matrix", "producers"],
        "runs": [{"name": "bare", "per_second": 9.0}, {"name": "spark", "per_second": 3.0}],
        "ratios": {"a": 1.5, "b": None}, "failover": {"detection_s": 1.3},
        "dpc": {"gap_over_delay_s": 0.4, "matrix": [1]},
        "measured_at": {"producers": "then"}, "errors": {"producers": "x"}}
    result = {
        "records": 200, "value_size": 16, "parts": ["failover"],
        "runs": [{"name": "bare", "per_second": 10.0}], "ratios": {"a": None, "b": 2.0},
        "failover": {"detection_s": 1.2}, "dpc": {"gap_over_delay_s": None, "matrix": None},
        "measured_at": {"failover": "now"}, "errors": {}}
    merged = keep_unmeasured(previous, result, {"failover"})
    assert merged["records"] == 100  # the producers did not run this time
    assert merged["failover"] == {"detection_s": 1.2}
    assert merged["ratios"] == {"a": 1.5, "b": 2.0}
    assert merged["runs"] == [{"name": "spark", "per_second": 3.0},
                              {"name": "bare", "per_second": 10.0}]
    assert merged["dpc"] == {"gap_over_delay_s": 0.4, "matrix": [1]}
    assert merged["parts"] == ["dpc-matrix", "failover", "producers"]
    assert merged["measured_at"] == {"producers": "then", "failover": "now"}
    assert merged["errors"] == {"producers": "x"}


def test_a_scale_steps_pause_is_its_longest_gap_beyond_the_normal_one() -> None:
    from medusa_apps.bench.scale_steps import ScaleRun, ScaleStep

    run = ScaleRun([ScaleStep("out", 30.0, 2.6, 2.0), ScaleStep("in", 25.0, 3.5, 2.0)],
                   results=100, lost=0, duplicated=0, result_times_ms=[], step_times_ms=[])
    got = run.summary()
    assert got["pause_s"] == 1.5
    assert [s["pause_s"] for s in got["steps"]] == [0.6, 1.5]


def test_a_scale_run_counts_each_sensors_missing_windows_and_repeats() -> None:
    from medusa_apps.bench.scale_steps import _lost_and_duplicated

    ids = [f"per_sensor/{sensor}/{start}" for start in (0, 2000, 4000, 6000)
           for sensor in ("s1", "s2")]
    ids.remove("per_sensor/s2/2000")
    ids.append("per_sensor/s1/4000")
    assert _lost_and_duplicated(ids) == (1, 1)


def test_the_low_rate_summary_keeps_the_fragments_median_and_its_ratio_to_spark() -> None:
    from medusa_apps.bench.low_rate import LowRate, _percentile

    assert _percentile([], 50) is None
    assert _percentile([300.0, 100.0, 200.0], 50) == 200.0
    result = LowRate(5, 60.0, 58, 210.0, 260.0, 59, 140.0, 170.0, {"addBatch": 120.0},
                     {"compute": 90.0, "transaction_commit": 20.0, "total": 210.0})
    summary = result.summary()
    assert summary["low_rate_batch_ms"] == 210.0
    assert summary["spark_low_rate_batch_ms"] == 140.0
    assert summary["low_rate_over_spark"] == 1.5
    assert summary["low_rate_rows_per_s"] == 5
    assert summary["runs"]["fragment_batch_phases_ms"]["transaction_commit"] == 20.0
    assert summary["runs"]["fragment_phases_ms_p50"] == {"addBatch": 120.0}


def test_a_move_that_fails_leaves_the_others_figures(monkeypatch) -> None:
    """A node declared failed during one move's fill (the disk saturated) fails that move;
    the moves before and after it still count."""
    from types import SimpleNamespace

    from medusa_apps.bench import state_migration

    class _Catalog:
        def __init__(self, url: str) -> None: ...
        def __enter__(self) -> _Catalog: return self
        def __exit__(self, *exc: object) -> None: ...
        def list(self, kind: object) -> list: return []

    def one(endpoints, registry, spark, catalog, mode, asked_mb, expiry, say):
        if expiry == "timers":
            raise RuntimeError("runs on alpha/bench-move-2 already")
        return (mode, asked_mb, expiry)

    monkeypatch.setattr(state_migration, "CatalogClient", _Catalog)
    monkeypatch.setattr(state_migration, "start_nodes", lambda *args: [])
    monkeypatch.setattr(state_migration, "_one", one)
    runs = [("warm", 1000, "scan"), ("warm", 1000, "timers"), ("cold", 1000, "scan")]
    failed: list[str] = []
    said: list[str] = []
    done = state_migration.measure(SimpleNamespace(catalog_url=""), None, None, None, runs,
                                   said.append, failed)
    assert done == [("warm", 1000, "scan"), ("cold", 1000, "scan")]
    assert failed == ["warm 1000 MB (timers): RuntimeError: runs on alpha/bench-move-2 already"]
    with pytest.raises(RuntimeError, match="already"):
        state_migration.measure(SimpleNamespace(catalog_url=""), None, None, None, runs,
                                said.append)



def test_a_move_run_withdraws_what_an_interrupted_one_left_deployed(monkeypatch) -> None:
    """Its nodes have the same names: they would run the old ballast beside the new."""
    from types import SimpleNamespace

    from medusa_apps.bench import state_migration

    networks = [SimpleNamespace(name="alpha/bench-migrate-60498d"),
                SimpleNamespace(name="alpha/sensors"), SimpleNamespace(name="beta/bench-migrate-1")]
    catalog = SimpleNamespace(list=lambda kind: networks)
    withdrawn: list[str] = []
    deleted: list[tuple[str, str]] = []
    monkeypatch.setattr(state_migration, "undeploy",
                        lambda _catalog, name, report: withdrawn.append(name))
    monkeypatch.setattr(state_migration, "delete_topics_named",
                        lambda config, prefix: deleted.append((config["bootstrap.servers"],
                                                               prefix)))
    endpoints = SimpleNamespace(bootstrap=lambda cluster: f"{cluster}:9092")
    said: list[str] = []
    state_migration._clear_interrupted(endpoints, catalog, said.append)
    assert withdrawn == ["alpha/bench-migrate-60498d"]
    assert deleted == [("alpha:9092", "bench-migrate-60498d."),
                       ("beta:9092", "bench-migrate-60498d.")]
    assert said == ["  withdrew alpha/bench-migrate-60498d, left deployed by an interrupted run"]


def test_a_part_stopped_before_its_first_figure_holds_none() -> None:
    from medusa_apps.bench.run import holds_figures

    assert not holds_figures({"move_pause": [], "migration": {"largest_state_mb": None,
                                                              "pause_at_largest_s": None}},
                             "move")
    assert holds_figures({"move_pause": [], "migration": {"largest_state_mb": 1500.0}},
                         "move")


def test_ctrl_c_keeps_what_the_parts_begun_measured(monkeypatch) -> None:
    """A run stopped with Ctrl-C: the part it was in says so, the figures measured before
    are kept (each part's own clean-up runs as the interruption passes through it)."""
    from medusa_apps.bench import run

    def first(bench, got) -> None:
        got.moves.append("a move measured")

    def second(bench, got) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "STEPS", (run._Step("producers", first),
                                       run._Step("sunion", second),
                                       run._Step("bpm", first)))
    said: list[str] = []
    bench = run._Bench(1000, 10, 1, None, said.append, {}, None, None, "", None)
    got = run._measure(bench, {"producers", "sunion", "bpm"})
    assert got.moves == ["a move measured"], "the part after the interruption did not run"
    assert bench.started == ["producers", "sunion"]
    assert bench.errors == {"sunion": run.INTERRUPTED}
    assert said and "interrupted during sunion" in said[-1]


def test_medusa_bench_stopped_with_ctrl_c_exits_130_and_says_where_its_figures_are(
        monkeypatch, tmp_path) -> None:
    from typer.testing import CliRunner

    from medusa_apps import cli
    from medusa_apps.bench import run

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt  # run_all raises it again once it has written its figures

    monkeypatch.setattr(run, "run_all", stopped)
    invoked = CliRunner().invoke(cli.app, ["bench", "--only", "move", "--out", str(tmp_path)])
    assert invoked.exit_code == 130, invoked.output
    assert "what was measured is in" in invoked.output
