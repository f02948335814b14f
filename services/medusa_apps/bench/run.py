"""``medusa bench``: every benchmark in one run, with progress, ratios, JSON and plots."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from medusa.registry import registry_client
from medusa.settings import StackSettings
from medusa.stack.endpoints import resolve
from medusa.stack.launcher import recorded_layout
from medusa.stack.layout import StackLayout
from medusa_apps.bench import producers
from medusa_apps.bench.report import bar_plot, failover_plot, latency_plot, pause_plot, write_json


def run_all(out: Path, records: int, hold_s: int, max_xways: int, linear_road: bool,
            say: Callable[[str], None], move_sizes: list[int] | None = None,
            failover: bool = True) -> dict[str, Any]:
    from medusa_apps.bench import failover as failover_bench
    from medusa_apps.bench import linear_road_latency, move_pause, spark_paths
    from medusa_spark.session import spark_session

    settings = StackSettings()
    layout = recorded_layout(StackLayout.from_settings(settings))
    endpoints = resolve(settings)
    bootstrap = endpoints.bootstrap()
    registry = registry_client(endpoints.registry_url)

    say(f"preparing {records:,} Linear Road position reports")
    reports = producers.position_reports(records)
    say("1. producers: Medusa's (Avro, envelope, BOUNDARY), bare confluent-kafka, Kafka's tool")
    medusa, value_size = producers.medusa_producer(bootstrap, registry, reports)
    bare = producers.bare_producer(bootstrap, records, value_size)
    perf = producers.kafka_perf_tool(layout, bootstrap, records, value_size)

    say("2. consumers and Spark over one topic of position reports")
    source = f"bench.source.{uuid.uuid4().hex[:8]}"
    spark_paths.fill_topic(bootstrap, registry, source, records)
    consumer_perf = producers.kafka_consumer_perf_tool(layout, bootstrap, source, records)
    spark = spark_session("medusa-bench")
    spark.sparkContext.setLogLevel("ERROR")
    steps: list[Any] = []
    try:
        with tempfile.TemporaryDirectory(prefix="medusa-bench-") as scratch:
            checkpoints = Path(scratch)
            passthrough = spark_paths.passthrough(spark, bootstrap, source, records, checkpoints)
            filtered = spark_paths.filter_box(spark, endpoints, registry, source, records,
                                              checkpoints)
            if linear_road:
                say(f"3. Linear Road, {hold_s}s per step, until p99 > "
                    f"{linear_road_latency.LATENCY_BOUND_S:g}s")
                steps = linear_road_latency.run_steps(spark, endpoints, registry, hold_s,
                                                      max_xways, checkpoints, say)
        moves: list[Any] = []
        if move_sizes:
            say(f"4. moving a windowed aggregate between nodes, state of "
                f"{', '.join(map(str, move_sizes))} sensors")
            moves = move_pause.measure(endpoints, registry, spark, layout, move_sizes, say)
        outcomes: list[Any] = []
        load = None
        if failover:
            say("5. failover: a node killed -9 mid-stream (upstream backup, active standby), "
                "then false suspicions under CPU load")
            outcomes, load = failover_bench.measure(endpoints, registry, spark, layout, say)
    finally:
        spark.stop()

    runs = [perf, bare, medusa, consumer_perf, passthrough, filtered]
    for run in runs:
        say(f"  {run.name:<40} {run.per_second:>12,.0f} records/s")
    met = [step.xways for step in steps if step.met]
    ratios = {
        "medusa_producer_over_bare_producer": medusa.per_second / bare.per_second,
        "bare_producer_over_kafka_producer_tool": bare.per_second / perf.per_second,
        "filter_box_over_spark_passthrough": filtered.per_second / passthrough.per_second,
        "spark_passthrough_over_kafka_consumer_tool":
            passthrough.per_second / consumer_perf.per_second,
    }
    result = {
        "records": records, "value_size": value_size,
        "runs": [run.as_dict() for run in runs],
        "ratios": {name: round(value, 3) for name, value in ratios.items()},
        "linear_road": [step.as_dict() for step in steps],
        "highest_xways_met": max(met) if met else None,
        "move_pause": [move.as_dict() for move in moves],
        "failover": [outcome.summary() for outcome in outcomes],
        "false_positives_under_load": load.as_dict() if load else None,
    }
    write_json(out / "bench.json", result)
    bar_plot(out / "throughput.png", f"Throughput, {records:,} records, one run",
             [run.name for run in runs], [run.per_second for run in runs], "records per second")
    if steps:
        latency_plot(out / "linear_road_latency.png",
                     "Linear Road: toll notification latency over time",
                     {f"L={step.xways}": step.latencies_s for step in steps},
                     linear_road_latency.LATENCY_BOUND_S)
    if moves:
        pause_plot(out / "move_pause.png", "Moving a windowed aggregate: output pause",
                   [m.state_bytes / 1e6 for m in moves], [m.pause_s for m in moves],
                   [m.hand_over_s for m in moves], move_pause.SLIDE_S)
    if outcomes:
        failover_plot(out / "failover_timeline.png",
                      "Results written around a node's kill -9",
                      [(f"{o.mode}: detected {o.detection_s} s, first output "
                        f"{o.first_after_kill_s} s, lost {len(o.lost())}, "
                        f"duplicated {len(o.duplicated())}", o.written_ms(),
                        o.kill_ms, o.declared_ms) for o in outcomes])
    for name, value in ratios.items():
        say(f"{name.replace('_', ' ')}: {value:.2f}")
    say(f"highest L met: {result['highest_xways_met']}")
    return result
