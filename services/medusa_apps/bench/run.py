"""``medusa bench``: every benchmark in one run, with progress, ratios, JSON and plots.

Parts (``--only`` picks some): ``producers`` (Medusa's producer, a bare
confluent-kafka producer, Kafka's tool), ``spark`` (Kafka's consumer tool, a
plain Spark passthrough, the one-filter fragment with and without its SUnion),
``sunion`` (the SUnion next to a bare transactional consume-produce loop),
``linear-road`` (the L-rating), ``move``, ``failover``, ``dpc`` (a 30 s partition
between the participants under steady input), ``dpc-matrix`` (the availability bound
over placements, faults and their lengths, ``dpc_matrix``) and ``bpm``. The keys of
``bench.json`` stay the same whichever parts run; a part not run leaves its
figures null.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.markup import escape

from medusa.endpoints import resolve
from medusa.registry import registry_client
from medusa.settings import StackSettings
from medusa.stack.launcher import recorded_layout
from medusa.stack.layout import StackLayout
from medusa_apps.bench import producers
from medusa_apps.bench.producers import Throughput
from medusa_apps.bench.report import (
    bar_plot,
    bpm_spike_plot,
    breakdown_plot,
    dpc_matrix_plot,
    dpc_timeline_plot,
    failover_plot,
    latency_plot,
    pause_plot,
    write_json,
)

PARTS = ("producers", "spark", "sunion", "linear-road", "move", "failover", "dpc",
         "dpc-matrix", "bpm")
WARM_UP_RECORDS = 3000


def _ratio(numerator: Throughput | None, denominator: Throughput | None) -> float | None:
    if numerator is None or denominator is None:
        return None
    return round(numerator.per_second / denominator.per_second, 3)


def _ratio_of(numerator: float | None, denominator: float | None) -> float | None:
    return round(numerator / denominator, 3) if numerator and denominator else None


@contextmanager
def _part(name: str, errors: dict[str, str], say: Callable[[str], None]) -> Iterator[None]:
    """Runs one part; its failure is recorded and said, and the run goes on."""
    try:
        yield
    except Exception as error:
        errors[name] = f"{type(error).__name__}: {error}"
        say(f"[red]{name} failed:[/] {escape(errors[name])}")


def run_all(out: Path, records: int, hold_s: int, max_xways: int, linear_road: bool,
            say: Callable[[str], None], state_mb: list[int] | None = None,
            failover: bool = True, only: Collection[str] | None = None) -> dict[str, Any]:
    from medusa.progress import RateProgress
    from medusa.sunion import bench as sunion_bench
    from medusa_apps.bench import (
        bpm_spike,
        dpc_matrix,
        dpc_partition,
        linear_road_latency,
        spark_paths,
        state_migration,
    )
    from medusa_apps.bench import failover as failover_bench
    from medusa_spark.session import spark_session

    parts = set(only or PARTS)
    if not linear_road:
        parts.discard("linear-road")
    if not state_mb:
        parts.discard("move")
    if not failover:
        parts.discard("failover")
    settings = StackSettings()
    layout = recorded_layout(StackLayout.from_settings(settings))
    endpoints = resolve(settings)
    bootstrap = endpoints.bootstrap("alpha")
    registry = registry_client(endpoints.registry_url)
    say(f"parts: {', '.join(p for p in PARTS if p in parts)}")

    errors: dict[str, str] = {}
    """A part that fails leaves its error here; the parts after it still run."""
    perf = bare = medusa = None
    value_size = None
    if "producers" in parts:
        with _part("producers", errors, say):
            say(f"producers: preparing {records:,} Linear Road position reports")
            reports = producers.position_reports(records)
            say("producers: Medusa's (Avro, envelope, BOUNDARY), bare confluent-kafka, "
                "Kafka's tool")
            medusa, value_size = producers.medusa_producer(bootstrap, registry, reports)
            bare = producers.bare_producer(bootstrap, records, value_size)
            perf = producers.kafka_perf_tool(layout, bootstrap, records, value_size)

    sunion: dict[str, float] | None = None
    if "sunion" in parts:
        say(f"SUnion: {records:,} records through a bare transactional consume-produce loop, "
            "then through the SUnion")
        with _part("sunion", errors, say):
            sunion = sunion_bench.measure(bootstrap, records)

    consumer_perf = passthrough = passthrough_again = filtered = direct = None
    steps: list[Any] = []
    floor: Any = None
    moves: list[Any] = []
    outcomes: list[Any] = []
    load = None
    dpc = None
    matrix: list[Any] = []
    spike = unbalanced = None
    needs_spark = parts & {"spark", "linear-road", "move", "failover", "dpc", "dpc-matrix",
                           "bpm"}
    spark = spark_session("medusa-bench") if needs_spark else None
    try:
        with tempfile.TemporaryDirectory(prefix="medusa-bench-") as scratch:
            checkpoints = Path(scratch)
            if spark is not None:
                spark.sparkContext.setLogLevel("ERROR")
            if "spark" in parts and spark is not None:
                with _part("spark", errors, say):
                    source = f"bench.source.{uuid.uuid4().hex[:8]}"
                    say(f"Spark: filling {source} with {records:,} position reports")
                    spark_paths.fill_topic(bootstrap, registry, source, records)
                    consumer_perf = producers.kafka_consumer_perf_tool(layout, bootstrap, source,
                                                                       records)
                    say("Spark: warming up (a passthrough and the filter fragment over "
                        f"{WARM_UP_RECORDS:,} records)")
                    warm = f"bench.warm.{uuid.uuid4().hex[:8]}"
                    spark_paths.fill_topic(bootstrap, registry, warm, WARM_UP_RECORDS)
                    spark_paths.passthrough(spark, bootstrap, warm, WARM_UP_RECORDS, checkpoints)
                    spark_paths.filter_fragment(spark, endpoints, registry, warm, WARM_UP_RECORDS,
                                                checkpoints)
                    say("Spark: passthrough")
                    passthrough = spark_paths.passthrough(spark, bootstrap, source, records,
                                                          checkpoints)
                    say("Spark: the filter fragment with its SUnion")
                    with RateProgress("filter fragment", total=float(records)) as progress:
                        filtered = spark_paths.filter_fragment(
                            spark, endpoints, registry, source, records, checkpoints,
                            on_progress=lambda n: progress.update(n, 0, completed=float(n)))
                    say("Spark: the filter fragment without its SUnion")
                    direct = spark_paths.filter_fragment_without_sunion(
                        spark, endpoints, registry, source, records, checkpoints)
                    say("Spark: passthrough again")
                    passthrough_again = replace(
                        spark_paths.passthrough(spark, bootstrap, source, records, checkpoints),
                        name="Spark passthrough, again (after the fragments)")
            if "linear-road" in parts and spark is not None:
                say(f"Linear Road: L = 1, 2, ... up to {max_xways}, {hold_s}s per step, until "
                    "a step fails validation (an output missing, wrong, duplicated or later "
                    f"than {linear_road_latency.LATENCY_BOUND_S:g}s)")
                # The floor first: it also pays the Spark session's first-query warm-up
                # (JIT, Python workers), which is not the steps' to carry.
                with _part("linear-road-floor", errors, say):
                    floor = linear_road_latency.run_floor(spark, endpoints, registry,
                                                          min(hold_s, 90), checkpoints, say)
                with _part("linear-road", errors, say):
                    steps = linear_road_latency.run_steps(spark, endpoints, registry, hold_s,
                                                          max_xways, checkpoints, say)
        if "move" in parts and spark is not None and state_mb:
            sizes = sorted(state_mb)
            migrations = [("warm", size) for size in sizes] + \
                [("cold", size) for size in dict.fromkeys([sizes[0], sizes[-1]])]
            say(f"moving a stateful fragment between nodes, warm and cold, state of "
                f"{', '.join(map(str, sizes))} MB")
            with _part("move", errors, say):
                moves = state_migration.measure(endpoints, registry, spark, layout, migrations,
                                                say)
        if "failover" in parts and spark is not None:
            say("failover: a node killed -9 mid-stream (upstream backup, active standby), "
                "then false suspicions under CPU load")
            with _part("failover", errors, say):
                outcomes, load = failover_bench.measure(endpoints, registry, spark, layout,
                                                        say)
        if "dpc" in parts and spark is not None:
            say("DPC: a 30 s partition between alpha and beta under steady input "
                f"(D = {dpc_partition.BENCH_DELAY_S:g} s)")
            with _part("dpc", errors, say):
                dpc = dpc_partition.measure(endpoints, registry, spark, layout, say)
        if "dpc-matrix" in parts and spark is not None:
            say(f"DPC matrix: {len(dpc_matrix.cells())} cells (placement x fault x length), "
                f"D = {dpc_matrix.D_S:g} s")
            with _part("dpc-matrix", errors, say):
                matrix = dpc_matrix.measure(endpoints, registry, spark, layout, say)
        if "bpm" in parts and spark is not None:
            say("BPM: a 3x input spike on alpha, with contracts to beta and gamma")
            with _part("bpm", errors, say):
                spike, unbalanced = bpm_spike.measure(endpoints, registry, spark, layout,
                                                      layout.run_dir, say)
    finally:
        if spark is not None:
            spark.stop()

    passthrough_mean = None
    if passthrough is not None and passthrough_again is not None:
        passthrough_mean = Throughput("Spark passthrough (mean of two runs)", records,
                                      (passthrough.seconds + passthrough_again.seconds) / 2)
    runs = [run for run in (perf, bare, medusa, consumer_perf, passthrough, passthrough_again,
                            filtered, direct) if run is not None]
    for run in runs:
        say(f"  {run.name:<52} {run.per_second:>12,.0f} records/s")
    ratios: dict[str, float | None] = {
        "medusa_producer_over_bare_producer": _ratio(medusa, bare),
        "bare_producer_over_kafka_producer_tool": _ratio(bare, perf),
        "filter_over_passthrough": _ratio(filtered, passthrough_mean),
        "filter_fragment_without_sunion_over_passthrough": _ratio(direct, passthrough_mean),
        "filter_box_over_spark_passthrough": _ratio(filtered, passthrough_mean),
        "spark_passthrough_over_kafka_consumer_tool": _ratio(passthrough_mean, consumer_perf),
        "sunion_over_bare_loop": round(sunion["ratio"], 3) if sunion else None,
    }
    rating = linear_road_latency.l_rating(steps) if steps else None
    result = {
        "records": records, "value_size": value_size, "parts": sorted(parts),
        "runs": [run.as_dict() for run in runs],
        "ratios": ratios,
        "sunion": {k: round(v, 3 if k == "ratio" else 1) for k, v in sunion.items()}
        if sunion else None,
        "linear_road": {
            "l_rating": rating,
            "latency_bound_s": linear_road_latency.LATENCY_BOUND_S,
            "hold_s": hold_s,
            "reports_per_s_per_xway": linear_road_latency.PEAK_REPORTS_PER_S_PER_XWAY,
            "steps": [step.as_dict() for step in steps],
            # The same network at a seventeenth of one expressway's rate: the latency of
            # the query itself, under which no L can go.
            "floor": floor.as_dict() if floor is not None else None,
        },
        "highest_xways_met": rating,
        "move_pause": [move.as_dict() for move in moves],
        # The largest state moved warm, and the output pause of that move (goal: under 2 s,
        # flat in size); cold_over_warm_at_largest: the pause of a cold move of it, over.
        "migration": state_migration.summary(moves),
        "failover": [outcome.summary() for outcome in outcomes],
        "false_positives_under_load": load.as_dict() if load else None,
        # gap_over_delay_s: the largest extra delay of a result over the fault-free one,
        # minus D (goal: at most 1 s).
        "dpc": {**(dpc.summary() if dpc is not None else {"gap_over_delay_s": None}),
                # Per placement x fault x length: the longest extra delay, the first
                # tentative output, tentative and uncorrected counts, stable view equal.
                "matrix": dpc_matrix.summary(matrix) if matrix else None},
        # moves: how many the agents made; seconds_to_acceptable: from the spike until no
        # participant is over capacity for good.
        "bpm": {**spike.summary(), "without_bpm": unbalanced.summary() if unbalanced else None,
                "p99_last_minute_over_without_bpm": _ratio_of(
                    spike.p99_last_s(60), unbalanced.p99_last_s(60) if unbalanced else None)}
        if spike is not None else {"moves": None, "seconds_to_acceptable": None},
        "errors": errors,
    }
    write_json(out / "bench.json", result)
    if runs:
        bar_plot(out / "throughput.png", f"Throughput, {records:,} records, one run",
                 [run.name for run in runs], [run.per_second for run in runs],
                 "records per second")
    if steps:
        latency_plot(out / "linear_road_latency.png",
                     "Linear Road: toll notification response time (emit - report "
                     "published) over time",
                     {**{f"L={step.xways}": step.latencies_s for step in steps},
                      **({f"floor ({floor.rate_per_xway}/s)": floor.latencies_s}
                         if floor is not None else {})},
                     linear_road_latency.LATENCY_BOUND_S)
        breakdown_plot(out / "linear_road_batches.png",
                       "Linear Road: where the batches' time went (ms per batch)",
                       {f"L={step.xways}": step.breakdown for step in steps})
    if moves:
        pause_plot(out / "move_pause.png", "Moving a stateful fragment: output pause",
                   {mode: [(m.state_mb, m.pause_s, m.hand_over_s) for m in moves
                           if m.mode == mode] for mode in ("warm", "cold")},
                   state_migration.SLIDE_S)
    if outcomes:
        failover_plot(out / "failover_timeline.png",
                      "Results written around a node's kill -9",
                      [(f"{o.mode}: detected {o.detection_s} s, first output "
                        f"{o.first_after_kill_s} s, lost {len(o.lost())}, "
                        f"duplicated {len(o.duplicated())}", o.written_ms(),
                        o.kill_ms, o.declared_ms) for o in outcomes])
    if dpc is not None:
        events, faults, delays = dpc.timeline()
        dpc_timeline_plot(out / "dpc_timeline.png", "DPC through a 30 s partition", events,
                          faults, delays, dpc.delay_s)
        figures = dpc.summary()
        say(f"DPC: largest output gap {figures['largest_output_gap_s']} s (D = "
            f"{figures['delay_s']:g} s), {figures['tentative_results']} tentative, "
            f"{figures['corrections']} corrected, heal to REC_DONE "
            f"{figures['heal_to_rec_done_s']} s, lost {figures['lost']}, duplicated "
            f"{figures['duplicated']}")
    if matrix:
        rows = dpc_matrix.summary(matrix)
        dpc_matrix_plot(out / "dpc_matrix.png", "DPC: the longest extra delay of a result, "
                        "per placement, fault and length", rows["cells"], rows["bound_s"])
    if spike is not None:
        bpm_spike_plot(out / "bpm_spike.png", "BPM through a 3x spike on alpha",
                       *spike.timeline())
        figures = spike.summary()
        say(f"BPM: {figures['moves']} move(s) ({'; '.join(figures['moved'])}), acceptable "
            f"{figures['seconds_to_acceptable']} s after the spike; p99 latency "
            f"{figures['p99_before_s']} s before, {figures['p99_during_s']} s during, "
            f"{figures['p99_after_s']} s after (back within "
            f"{figures['seconds_to_latency_back']} s); lost {figures['lost']}, duplicated "
            f"{figures['duplicated']}")
        if unbalanced is not None:
            say(f"BPM: p99 latency over the last minute {figures['p99_last_minute_s']} s with "
                f"the agents, {unbalanced.p99_last_s(60)} s without (everything on alpha)")
    for name, value in ratios.items():
        if value is not None:
            say(f"{name.replace('_', ' ')}: {value:.2f}")
    for step in steps:
        say(f"Linear Road L={step.xways}: {linear_road_latency.describe(step)}")
    if "linear-road" in parts:
        say(f"Linear Road L-rating: {rating}")
    return result
