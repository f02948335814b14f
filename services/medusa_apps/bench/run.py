"""``medusa bench``: every benchmark in one run, with progress, ratios, JSON and plots.

Parts (``--only`` picks some): ``producers`` (Medusa's producer, a bare
confluent-kafka producer, Kafka's tool), ``spark`` (Kafka's consumer tool, a
plain Spark passthrough through one topic and through two, the one-filter fragment with
and without its SUnion),
``sunion`` (the SUnion next to a bare transactional consume-produce loop),
``low-rate`` (a stateful fragment's batches at a few rows a second against Spark's own
query), ``latency`` (a stateless fragment's produce-to-readable latency against plain
Spark's, micro-batch and Real-time Mode),
``linear-road`` (the L-rating), ``move``, ``failover``, ``dpc`` (a 30 s partition
between the participants under steady input), ``dpc-matrix`` (the availability bound
over placements, faults and their lengths, ``dpc_matrix``) and ``bpm``. The keys of
``bench.json`` stay the same whichever parts run; a part not run leaves its
figures null.
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from rich.markup import escape

from medusa.endpoints import Endpoints, resolve
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
    gap_timeline_plot,
    latency_plot,
    path_latency_plot,
    pause_plot,
    scale_plot,
    write_json,
)

PARTS = ("producers", "spark", "sunion", "low-rate", "latency", "linear-road", "move", "scale",
         "failover", "dpc", "dpc-matrix", "bpm")
WARM_UP_RECORDS = 20_000
"""Records of the Spark part's warm-up: after 3,000 its first passthrough of 200,000 ran at
half the speed of the same copy a minute later (55,000 against 108,000 records/s)."""


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


@dataclass
class _Bench:
    """What every step of one run works with."""

    records: int
    hold_s: int
    max_xways: int
    state_mb: list[int] | None
    say: Callable[[str], None]
    errors: dict[str, str]
    """A part that fails leaves its error here; the parts after it still run."""
    layout: StackLayout
    endpoints: Endpoints
    bootstrap: str
    registry: SchemaRegistryClient
    spark: Any = None
    """The Spark session of the parts that need one (None until it is made)."""
    checkpoints: Path | None = None
    """The scratch folder of the Spark and Linear Road parts' checkpoints."""
    linear_road_network: str = "linear_road.yaml"
    """The shipped network the Linear Road steps run."""
    linear_road_sunion: str = "process"
    """Where its fragments' SUnions run (``sunion`` of the network)."""
    started: list[str] = field(default_factory=list)
    """The parts begun, in order: a run stopped with Ctrl-C keeps the figures of these."""

    def scratch(self) -> Path:
        """The scratch folder of checkpoints; only while the steps that use it run."""
        if self.checkpoints is None:
            raise RuntimeError("the bench's scratch folder is made by _measure")
        return self.checkpoints


@dataclass
class _Figures:
    """What the steps measured; a part not run (or failed) leaves its figures empty."""

    perf: Throughput | None = None
    bare: Throughput | None = None
    medusa: Throughput | None = None
    avro_client: Throughput | None = None
    value_size: int | None = None
    sunion: dict[str, float] | None = None
    consumer_perf: Throughput | None = None
    passthrough: Throughput | None = None
    passthrough_again: Throughput | None = None
    two_hop: Throughput | None = None
    filtered: Throughput | None = None
    filtered_realtime: Throughput | None = None
    """The same filter fragment in Real-time Mode (where Spark has it)."""
    in_query: Throughput | None = None
    """The same filter fragment with its SUnion in the query (mean of two runs)."""
    spark_filter: Throughput | None = None
    """Plain Spark running the fragment's query: decode, filter, encode, Kafka."""
    direct: Throughput | None = None
    low_rate: Any = None
    latency: Any = None
    latency_high: Any = None
    """The same paths at ``stateless_latency.HIGH_RATE`` readings a second."""
    steps: list[Any] = field(default_factory=list)
    floor: Any = None
    moves: list[Any] = field(default_factory=list)
    scale: Any = None
    outcomes: list[Any] = field(default_factory=list)
    load: Any = None
    dpc: Any = None
    matrix: list[Any] = field(default_factory=list)
    spike: Any = None
    unbalanced: Any = None


def _producers(bench: _Bench, got: _Figures) -> None:
    with _part("producers", bench.errors, bench.say):
        bench.say(f"producers: preparing {bench.records:,} Linear Road position reports")
        reports = producers.position_reports(bench.records)
        bench.say("producers: Medusa's (Avro, envelope, BOUNDARY), confluent-kafka's "
                  "AvroSerializer, bare confluent-kafka, Kafka's tool")
        # The two Avro producers in the order A B B A, each figure the mean of its two runs:
        # the broker's warm-up and drift fall on both alike.
        medusa_first, got.value_size = producers.medusa_producer(bench.bootstrap,
                                                                 bench.registry, reports)
        avro = [producers.avro_client_producer(bench.bootstrap, bench.registry, reports)
                for _ in range(2)]
        medusa_second, _ = producers.medusa_producer(bench.bootstrap, bench.registry, reports)
        got.medusa = producers.mean_of(medusa_first, medusa_second)
        got.avro_client = producers.mean_of(*avro)
        got.bare = producers.bare_producer(bench.bootstrap, bench.records, got.value_size)
        got.perf = producers.kafka_perf_tool(bench.layout, bench.bootstrap, bench.records,
                                             got.value_size)


def _sunion(bench: _Bench, got: _Figures) -> None:
    from medusa.sunion import bench as sunion_bench

    bench.say(f"SUnion: {bench.records:,} records through a bare transactional consume-produce "
              "loop, then through the SUnion")
    with _part("sunion", bench.errors, bench.say):
        got.sunion = sunion_bench.measure(bench.bootstrap, bench.records)


def _low_rate(bench: _Bench, got: _Figures) -> None:
    from medusa_apps.bench import low_rate

    with _part("low-rate", bench.errors, bench.say):
        got.low_rate = low_rate.measure(bench.spark, bench.endpoints, bench.registry,
                                        bench.scratch(), say=bench.say)


def _latency(bench: _Bench, got: _Figures) -> None:
    from medusa_apps.bench import stateless_latency

    with _part("latency", bench.errors, bench.say):
        got.latency = stateless_latency.measure_in_phases(
            bench.spark, bench.endpoints, bench.registry, bench.scratch(), say=bench.say)
    with _part("latency", bench.errors, bench.say):
        got.latency_high = stateless_latency.measure_in_phases(
            bench.spark, bench.endpoints, bench.registry, bench.scratch(),
            rows_per_s=stateless_latency.HIGH_RATE, seconds=40.0, say=bench.say)


def _spark_paths(bench: _Bench, got: _Figures) -> None:
    from medusa.progress import RateProgress
    from medusa_apps.bench import spark_paths
    from medusa_spark.realtime import realtime_supported

    spark, records, say = bench.spark, bench.records, bench.say
    bootstrap, endpoints, registry = bench.bootstrap, bench.endpoints, bench.registry
    checkpoints = bench.scratch()
    with _part("spark", bench.errors, say):
        source = f"bench.source.{uuid.uuid4().hex[:8]}"
        say(f"Spark: filling {source} with {records:,} position reports")
        spark_paths.fill_topic(bootstrap, registry, source, records)
        got.consumer_perf = producers.kafka_consumer_perf_tool(bench.layout, bootstrap, source,
                                                               records)
        say("Spark: warming up (a passthrough and the filter fragment over "
            f"{WARM_UP_RECORDS:,} records)")
        warm = f"bench.warm.{uuid.uuid4().hex[:8]}"
        spark_paths.fill_topic(bootstrap, registry, warm, WARM_UP_RECORDS)
        spark_paths.passthrough(spark, bootstrap, warm, WARM_UP_RECORDS, checkpoints)
        spark_paths.filter_fragment(spark, endpoints, registry, warm, WARM_UP_RECORDS,
                                    checkpoints)
        say("Spark: passthrough")
        got.passthrough = spark_paths.passthrough(spark, bootstrap, source, records,
                                                  checkpoints)
        say("Spark: passthrough through a second topic (two queries at once)")
        got.two_hop = spark_paths.two_hop_passthrough(spark, bootstrap, source, records,
                                                      checkpoints)
        say("Spark: plain Spark running the same filter (decode, filter, encode)")
        spark_filters = [spark_paths.spark_filter(spark, bootstrap, registry, source, records,
                                                  checkpoints)]
        say("Spark: the filter fragment with its SUnion")
        with RateProgress("filter fragment", total=float(records)) as progress:
            got.filtered = spark_paths.filter_fragment(
                spark, endpoints, registry, source, records, checkpoints,
                on_progress=lambda n: progress.update(n, 0, completed=float(n)))
        # A B B A: the in-query path between two runs of the others, the mean its figure.
        say("Spark: the filter fragment with its SUnion in the query")
        in_query = [spark_paths.filter_fragment(spark, endpoints, registry, source, records,
                                                checkpoints, sunion_in_query=True)]
        if realtime_supported():
            say("Spark: the filter fragment with its SUnion, in Real-time Mode")
            got.filtered_realtime = spark_paths.filter_fragment_realtime(
                spark, endpoints, registry, source, records, checkpoints)
        say("Spark: the filter fragment without its SUnion")
        got.direct = spark_paths.filter_fragment_without_sunion(
            spark, endpoints, registry, source, records, checkpoints)
        say("Spark: the filter fragment with its SUnion in the query, again")
        in_query.append(spark_paths.filter_fragment(spark, endpoints, registry, source,
                                                    records, checkpoints, sunion_in_query=True))
        got.in_query = _mean_with_cpu(*in_query)
        say("Spark: plain Spark running the same filter, again")
        spark_filters.append(spark_paths.spark_filter(spark, bootstrap, registry, source,
                                                      records, checkpoints))
        got.spark_filter = _mean_with_cpu(*spark_filters)
        say("Spark: passthrough again")
        got.passthrough_again = replace(
            spark_paths.passthrough(spark, bootstrap, source, records, checkpoints),
            name="Spark passthrough, again (after the fragments)")


def _linear_road(bench: _Bench, got: _Figures) -> None:
    from medusa_apps.bench import linear_road_latency

    say = bench.say
    say(f"Linear Road: L = 1, 2, ... up to {bench.max_xways}, {bench.hold_s}s per step, until "
        "a step fails validation (an output missing, wrong, duplicated or later "
        f"than {linear_road_latency.LATENCY_BOUND_S:g}s)")
    # The floor first: it also pays the Spark session's first-query warm-up
    # (JIT, Python workers), which is not the steps' to carry.
    with _part("linear-road-floor", bench.errors, say):
        got.floor = linear_road_latency.run_floor(bench.spark, bench.endpoints, bench.registry,
                                                  min(bench.hold_s, 90), bench.scratch(), say,
                                                  bench.linear_road_network,
                                                  bench.linear_road_sunion)
    with _part("linear-road", bench.errors, say):
        got.steps = linear_road_latency.run_steps(bench.spark, bench.endpoints, bench.registry,
                                                  bench.hold_s, bench.max_xways,
                                                  bench.scratch(), say,
                                                  bench.linear_road_network,
                                                  bench.linear_road_sunion)


def _move(bench: _Bench, got: _Figures) -> None:
    from medusa_apps.bench import state_migration

    if not bench.state_mb:
        return
    sizes = sorted(bench.state_mb)
    migrations = [("warm", size, "scan") for size in sizes] + \
        [("warm", sizes[-1], "timers")] + \
        [("cold", size, "scan") for size in dict.fromkeys([sizes[0], sizes[-1]])] + \
        [("partner", sizes[0], "scan")]
    bench.say(f"moving a stateful fragment between nodes, warm and cold, state of "
              f"{', '.join(map(str, sizes))} MB; warm at {sizes[-1]} MB with the ballast's "
              f"windows expiring by timers too; and warm onto a partner's node at "
              f"{sizes[0]} MB")
    failed: list[str] = []
    with _part("move", bench.errors, bench.say):
        state_migration.measure(bench.endpoints, bench.registry, bench.spark, bench.layout,
                                migrations, bench.say, failed, into=got.moves)
        if failed:  # the part's error; the moves that ran keep their figures
            raise RuntimeError("; ".join(failed))


def _scale(bench: _Bench, got: _Figures) -> None:
    from medusa_apps.bench import scale_steps

    bench.say("scale steps under steady input: a keyed window fragment out to two "
              "instances on two nodes, then back in to one")
    with _part("scale", bench.errors, bench.say):
        got.scale = scale_steps.measure(bench.endpoints, bench.registry, bench.spark,
                                        bench.layout, bench.say)


def _failover(bench: _Bench, got: _Figures) -> None:
    from medusa_apps.bench import failover as failover_bench

    bench.say("failover: a node killed -9 mid-stream (upstream backup, active standby), "
              "then false suspicions under CPU load")
    with _part("failover", bench.errors, bench.say):
        got.outcomes, got.load = failover_bench.measure(bench.endpoints, bench.registry,
                                                        bench.spark, bench.layout, bench.say)


def _dpc(bench: _Bench, got: _Figures) -> None:
    from medusa_apps.bench import dpc_partition

    bench.say("DPC: a 30 s partition between alpha and beta under steady input "
              f"(D = {dpc_partition.BENCH_DELAY_S:g} s)")
    with _part("dpc", bench.errors, bench.say):
        got.dpc = dpc_partition.measure(bench.endpoints, bench.registry, bench.spark,
                                        bench.layout, bench.say)


def _dpc_matrix(bench: _Bench, got: _Figures) -> None:
    from medusa_apps.bench import dpc_matrix

    bench.say(f"DPC matrix: {len(dpc_matrix.cells())} cells (placement x fault x length), "
              f"D = {dpc_matrix.D_S:g} s")
    with _part("dpc-matrix", bench.errors, bench.say):
        got.matrix = dpc_matrix.measure(bench.endpoints, bench.registry, bench.spark,
                                        bench.layout, bench.say)


def _bpm(bench: _Bench, got: _Figures) -> None:
    from medusa_apps.bench import bpm_spike

    bench.say("BPM: a 3x input spike on alpha, with contracts to beta and gamma")
    with _part("bpm", bench.errors, bench.say):
        got.spike, got.unbalanced = bpm_spike.measure(bench.endpoints, bench.registry,
                                                      bench.spark, bench.layout,
                                                      bench.layout.run_dir, bench.say)


@dataclass(frozen=True)
class _Step:
    part: str
    run: Callable[[_Bench, _Figures], None]
    spark: bool = False
    """Needs the Spark session (skipped without one)."""
    scratch: bool = False
    """Runs while the scratch folder of checkpoints exists."""


STEPS = (
    _Step("producers", _producers),
    _Step("sunion", _sunion),
    _Step("spark", _spark_paths, spark=True, scratch=True),
    _Step("low-rate", _low_rate, spark=True, scratch=True),
    _Step("latency", _latency, spark=True, scratch=True),
    _Step("linear-road", _linear_road, spark=True, scratch=True),
    _Step("move", _move, spark=True),
    _Step("scale", _scale, spark=True),
    _Step("failover", _failover, spark=True),
    _Step("dpc", _dpc, spark=True),
    _Step("dpc-matrix", _dpc_matrix, spark=True),
    _Step("bpm", _bpm, spark=True),
)
"""The benchmark's steps in the order they run: those without Spark first, then those
with it, the ones with checkpoints of their own while the scratch folder exists."""


def _parts(only: Collection[str] | None, linear_road: bool, state_mb: list[int] | None,
           failover: bool) -> set[str]:
    parts = set(only or PARTS)
    if not linear_road:
        parts.discard("linear-road")
    if not state_mb:
        parts.discard("move")
    if not failover:
        parts.discard("failover")
    return parts


INTERRUPTED = "interrupted (Ctrl-C)"
"""The error of the part a run stopped with Ctrl-C was in."""


def _measure(bench: _Bench, parts: set[str]) -> _Figures:
    """Runs the steps of ``parts``, in ``STEPS``' order; a failing one is recorded."""
    got = _Figures()
    try:
        _run_steps(bench, got, parts)
    except KeyboardInterrupt:
        # Each part's own clean-up has run; what it measured before is kept.
        part = bench.started[-1] if bench.started else "-"
        bench.errors[part] = INTERRUPTED
        bench.say(f"interrupted during {part}: the figures measured so far are kept")
    return got


def _run_steps(bench: _Bench, got: _Figures, parts: set[str]) -> None:
    from medusa_spark.session import spark_session

    for step in STEPS:
        if not step.spark and step.part in parts:
            _run_step(step, bench, got)
    needs_spark = parts & {step.part for step in STEPS if step.spark}
    # Task slots for the latency part's real-time queries (held for good), on top of the
    # two the other queries share.
    bench.spark = spark_session("medusa-bench", realtime_slots=4) if needs_spark else None
    try:
        with tempfile.TemporaryDirectory(prefix="medusa-bench-") as scratch:
            bench.checkpoints = Path(scratch)
            if bench.spark is not None:
                bench.spark.sparkContext.setLogLevel("ERROR")
            _run_spark_steps(bench, got, parts, scratch=True)
        _run_spark_steps(bench, got, parts, scratch=False)
    finally:
        if bench.spark is not None:
            bench.spark.stop()


def _run_spark_steps(bench: _Bench, got: _Figures, parts: set[str], scratch: bool) -> None:
    for step in STEPS:
        if step.spark and step.scratch == scratch and step.part in parts and \
                bench.spark is not None:
            _run_step(step, bench, got)


def _run_step(step: _Step, bench: _Bench, got: _Figures) -> None:
    bench.started.append(step.part)
    step.run(bench, got)


def run_all(out: Path, records: int, hold_s: int, max_xways: int, linear_road: bool,
            say: Callable[[str], None], state_mb: list[int] | None = None,
            failover: bool = True, only: Collection[str] | None = None,
            linear_road_network: str = "linear_road.yaml",
            linear_road_sunion: str = "process") -> dict[str, Any]:
    parts = _parts(only, linear_road, state_mb, failover)
    settings = StackSettings()
    layout = recorded_layout(StackLayout.from_settings(settings))
    endpoints = resolve(settings)
    bootstrap = endpoints.bootstrap("alpha")
    registry = registry_client(endpoints.registry_url)
    say(f"parts: {', '.join(p for p in PARTS if p in parts)}")
    bench = _Bench(records, hold_s, max_xways, state_mb, say, {}, layout, endpoints,
                   bootstrap, registry, linear_road_network=linear_road_network,
                   linear_road_sunion=linear_road_sunion)
    got = _measure(bench, parts)
    runs = _runs(got, records)
    for run in runs:
        say(f"  {run.name:<52} {run.per_second:>12,.0f} records/s")
    result = _result(got, runs, records, hold_s, parts, bench.errors)
    interrupted = INTERRUPTED in bench.errors.values()
    if interrupted:
        # The parts not begun, and one stopped before its first figure, keep their latest.
        parts = {part for part in bench.started
                 if part != bench.started[-1] or holds_figures(result, part)}
        result["parts"] = sorted(parts)
    result["linear_road"]["network"] = linear_road_network
    result["linear_road"]["sunion"] = linear_road_sunion
    result["measured_at"] = dict.fromkeys(sorted(parts), time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                        time.gmtime()))
    if (only or interrupted) and (out / "bench.json").exists():
        result = keep_unmeasured(json.loads((out / "bench.json").read_text()), result, parts)
    write_json(out / "bench.json", result)
    _plot(out, got, runs, records, say)
    _say_ratios(result["ratios"], got, parts, result["linear_road"]["l_rating"], say)
    if interrupted:  # kept and written; the caller still learns the run was stopped
        raise KeyboardInterrupt
    return result


def _mean_with_cpu(first: Throughput, second: Throughput) -> Throughput:
    """Two runs of one path as one figure, with their CPU seconds' mean."""
    mean = producers.mean_of(first, second)
    cpu = [float(run.details["cpu_s"]) for run in (first, second) if "cpu_s" in run.details]
    return replace(mean, details={"cpu_s": round(sum(cpu) / 2, 3)} if len(cpu) == 2 else {})


def _cpu_per_record_ratio(path: Throughput | None, spark: Throughput | None) -> float | None:
    """CPU seconds per record of ``path`` over plain Spark's (the same records)."""
    if path is None or spark is None:
        return None
    mine, theirs = path.details.get("cpu_s"), spark.details.get("cpu_s")
    if not mine or not theirs:
        return None
    return round((mine / path.records) / (theirs / spark.records), 2)


def _passthrough_mean(got: _Figures, records: int) -> Throughput | None:
    if got.passthrough is None or got.passthrough_again is None:
        return None
    return Throughput("Spark passthrough (mean of two runs)", records,
                      (got.passthrough.seconds + got.passthrough_again.seconds) / 2)


def _runs(got: _Figures, records: int) -> list[Throughput]:
    """The throughputs measured, in the order the report lists them."""
    return [run for run in (got.perf, got.bare, got.avro_client, got.medusa, got.consumer_perf,
                            got.passthrough, got.passthrough_again, got.two_hop, got.filtered,
                            got.in_query, got.spark_filter, got.filtered_realtime,
                            got.direct)
            if run is not None]


def _ratios(got: _Figures, records: int) -> dict[str, float | None]:
    passthrough_mean = _passthrough_mean(got, records)
    return {
        "medusa_producer_over_bare_producer": _ratio(got.medusa, got.bare),
        "producer_over_avro_client": _ratio(got.medusa, got.avro_client),
        "bare_producer_over_kafka_producer_tool": _ratio(got.bare, got.perf),
        "filter_over_passthrough": _ratio(got.filtered, passthrough_mean),
        # A fragment's records pass through Kafka twice (its SUnion's topic): the plain
        # Spark copy through two topics is the most that path could reach here.
        "filter_over_two_hop_passthrough": _ratio(got.filtered, got.two_hop),
        "two_hop_passthrough_over_passthrough": _ratio(got.two_hop, passthrough_mean),
        # With the SUnion in the query there is one Kafka hop and no SUnion process.
        "filter_in_query_over_passthrough": _ratio(got.in_query, passthrough_mean),
        "filter_in_query_over_filter": _ratio(got.in_query, got.filtered),
        # Against plain Spark running the same decode, filter and encode (Spark's sink).
        "filter_over_spark_filter": _ratio(got.filtered, got.spark_filter),
        "filter_in_query_over_spark_filter": _ratio(got.in_query, got.spark_filter),
        # The stateless fragment's throughput in Real-time Mode against micro-batches: its
        # latency is not bought with throughput.
        "realtime_filter_over_passthrough": _ratio(got.filtered_realtime, passthrough_mean),
        "realtime_filter_over_microbatch_filter": _ratio(got.filtered_realtime, got.filtered),
        "filter_fragment_without_sunion_over_passthrough": _ratio(got.direct, passthrough_mean),
        "filter_box_over_spark_passthrough": _ratio(got.filtered, passthrough_mean),
        "spark_passthrough_over_kafka_consumer_tool": _ratio(passthrough_mean,
                                                             got.consumer_perf),
        "sunion_over_bare_loop": round(got.sunion["ratio"], 3) if got.sunion else None,
        # A stateless micro-batch fragment's p50 over plain Spark's micro-batch p50 (20
        # readings a second, the network's default buckets), the SUnion a process or in
        # the query.
        "microbatch_fragment_over_spark_microbatch_latency":
            got.latency.microbatch_fragment_over_spark_microbatch()
            if got.latency is not None else None,
        "microbatch_in_query_fragment_over_spark_microbatch_latency":
            got.latency.microbatch_fragment_over_spark_microbatch("fragment_in_query")
            if got.latency is not None else None,
        # The stateless fragment's p50 latency over plain Spark's in Real-time Mode.
        "fragment_over_spark_realtime_latency":
            got.latency.fragment_over_spark_realtime() if got.latency is not None else None,
    }


def _result(got: _Figures, runs: list[Throughput], records: int, hold_s: int, parts: set[str],
            errors: dict[str, str]) -> dict[str, Any]:
    """What ``bench.json`` holds: the same keys whichever parts ran."""
    from medusa_apps.bench import dpc_matrix, linear_road_latency, state_migration

    steps, floor, spike, unbalanced = got.steps, got.floor, got.spike, got.unbalanced
    rating = linear_road_latency.l_rating(steps) if steps else None
    return {
        "records": records, "value_size": got.value_size, "parts": sorted(parts),
        "runs": [run.as_dict() for run in runs],
        "ratios": _ratios(got, records),
        # CPU seconds per record of every process on a filter fragment's path (the JVM,
        # its Python, the SUnion process) over plain Spark's for the same filter (goal: at
        # most 1.3), with the SUnion a process (as deployed by default) and in the query.
        "cpu": {
            "fragment_over_spark_cpu_per_record":
                _cpu_per_record_ratio(got.filtered, got.spark_filter),
            "in_query_fragment_over_spark_cpu_per_record":
                _cpu_per_record_ratio(got.in_query, got.spark_filter),
            "fragment_cpu_s": got.filtered.details.get("cpu_s") if got.filtered else None,
            "in_query_fragment_cpu_s": got.in_query.details.get("cpu_s")
            if got.in_query else None,
            "spark_filter_cpu_s": got.spark_filter.details.get("cpu_s")
            if got.spark_filter else None,
        },
        "sunion": {k: round(v, 3 if k == "ratio" else 1) for k, v in got.sunion.items()}
        if got.sunion else None,
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
        # A stateful fragment at a few rows a second: its batches' median time (goal: at
        # most 150 ms), against Spark's own query doing the same on the same session.
        "fragment": got.low_rate.summary() if got.low_rate is not None
        else {"low_rate_batch_ms": None},
        # Produce to readable by a read_committed reader, in ms (goals for the stateless
        # fragment at 20 readings a second: p50 at most 50, p99 at most 250), beside plain
        # Spark's micro-batch and Real-time Mode in the same run.
        "latency": {**(got.latency.summary() if got.latency is not None
                       else {"stateless_fragment_p50_ms": None}),
                    # The same paths at 2,000 readings a second: latency not bought with
                    # throughput.
                    "at_high_rate": got.latency_high.summary()
                    if got.latency_high is not None else None},
        "move_pause": [move.as_dict() for move in got.moves],
        # The largest state moved warm, and the output pause of that move (goal: under 2 s,
        # flat in size); cold_over_warm_at_largest: the pause of a cold move of it, over.
        "migration": state_migration.summary(got.moves),
        # Scale out (1 -> 2 instances) and in under steady input: the longest output gap
        # of each step beyond the normal gap (goal: at most 1 s), lost and duplicated.
        "scale": got.scale.summary() if got.scale is not None else {"pause_s": None},
        # The kill -9 of a node per HA mode (goals: detection at most 1.5 s, first output
        # at most 2 s active and 5 s passive, nothing lost or duplicated), each run in full.
        "failover": _failover_summary(got.outcomes),
        "false_positives_under_load": got.load.as_dict() if got.load else None,
        # gap_over_delay_s: the largest extra delay of a result over the fault-free one,
        # minus D (goal: at most 1 s).
        "dpc": {**(got.dpc.summary() if got.dpc is not None else {"gap_over_delay_s": None}),
                # Per placement x fault x length: the longest extra delay, the first
                # tentative output, tentative and uncorrected counts, stable view equal.
                "matrix": dpc_matrix.summary(got.matrix) if got.matrix else None},
        # moves: how many the agents made; seconds_to_acceptable: from the spike until no
        # participant is over capacity for good.
        "bpm": {**spike.summary(), "without_bpm": unbalanced.summary() if unbalanced else None,
                "p99_last_minute_over_without_bpm": _ratio_of(
                    spike.p99_last_s(60), unbalanced.p99_last_s(60) if unbalanced else None)}
        if spike is not None else {"moves": None, "seconds_to_acceptable": None},
        "errors": errors,
    }


PART_KEYS = {"producers": ("records", "value_size"), "sunion": ("sunion",), "spark": ("cpu",),
             "linear-road": ("linear_road", "highest_xways_met"), "low-rate": ("fragment",),
             "latency": ("latency",),
             "move": ("move_pause", "migration"), "scale": ("scale",),
             "failover": ("failover", "false_positives_under_load"), "bpm": ("bpm",)}
"""The keys of ``bench.json`` each part alone measures (``runs``, ``ratios`` and ``dpc``
are shared, and merged finer)."""


def holds_figures(result: dict[str, Any], part: str) -> bool:
    """Whether ``result`` holds any figure of ``part`` (one stopped before its first holds
    none)."""
    def filled(value: Any) -> bool:
        if isinstance(value, dict):
            return any(filled(v) for v in value.values())
        if isinstance(value, list):
            return bool(value)
        return value is not None
    return any(filled(result.get(key)) for key in PART_KEYS.get(part, ()))


def keep_unmeasured(previous: dict[str, Any], result: dict[str, Any], parts: set[str]
                    ) -> dict[str, Any]:
    """``result`` of a run of some parts, with the figures of the parts it did not run kept
    from ``previous``: ``bench.json`` holds the latest figure of every part."""
    merged = dict(result)
    for part, keys in PART_KEYS.items():
        if part not in parts:
            merged.update({key: previous[key] for key in keys if key in previous})
    names = {run["name"] for run in result["runs"]}
    merged["runs"] = [r for r in previous.get("runs", []) if r["name"] not in names] + \
        result["runs"]
    merged["ratios"] = {**result["ratios"], **{
        k: v for k, v in (previous.get("ratios") or {}).items()
        if v is not None and result["ratios"].get(k) is None}}
    dpc, before = dict(result["dpc"]), previous.get("dpc") or {}
    if "dpc" not in parts:
        dpc.update({k: v for k, v in before.items() if k != "matrix"})
    if "dpc-matrix" not in parts and "matrix" in before:
        dpc["matrix"] = before["matrix"]
    merged["dpc"] = dpc
    merged["parts"] = sorted(set(previous.get("parts", [])) | parts)
    merged["measured_at"] = {**previous.get("measured_at", {}), **result["measured_at"]}
    merged["errors"] = {**{k: v for k, v in previous.get("errors", {}).items()
                           if k not in parts}, **result["errors"]}
    return merged


def _failover_summary(outcomes: list[Any]) -> dict[str, Any]:
    runs = [outcome.summary() for outcome in outcomes]
    by_mode = {run["mode"]: run for run in runs}
    return {
        "detection_s": max((run["detection_s"] for run in runs
                            if run["detection_s"] is not None), default=None),
        "active_first_output_s": by_mode.get("active", {}).get("first_output_after_kill_s"),
        "passive_first_output_s": by_mode.get("passive", {}).get("first_output_after_kill_s"),
        "lost": sum(run["lost"] for run in runs) if runs else None,
        "duplicated": sum(run["duplicated"] for run in runs) if runs else None,
        "runs": runs,
    }


def _plot(out: Path, got: _Figures, runs: list[Throughput], records: int,
          say: Callable[[str], None]) -> None:
    """The plots of what was measured, with the DPC and BPM figures said as they are drawn."""
    if runs:
        bar_plot(out / "throughput.png", f"Throughput, {records:,} records, one run",
                 [run.name for run in runs], [run.per_second for run in runs],
                 "records per second")
    if got.steps:
        _plot_linear_road(out, got)
    for measured, file in ((got.latency, "stateless_latency.png"),
                           (got.latency_high, "stateless_latency_high_rate.png")):
        if measured is not None:
            path_latency_plot(out / file,
                              f"A stateless fragment against plain Spark, "
                              f"{measured.rows_per_s:,} readings/s: produce to readable",
                              {path.name: path.over_time for path in measured.paths.values()})
    if got.moves:
        _plot_moves(out, got)
    if got.scale is not None:
        scale_plot(out / "scale_steps.png", "Results written through scale steps "
                   + ", ".join(f"{s.label}: {s.pause_s} s beyond the normal gap"
                               for s in got.scale.steps),
                   got.scale.result_times_ms, got.scale.step_times_ms)
    if got.outcomes:
        failover_plot(out / "failover_timeline.png",
                      "Results written around a node's kill -9",
                      [(f"{o.mode}: detected {o.detection_s} s, first output "
                        f"{o.first_after_kill_s} s, lost {len(o.lost())}, "
                        f"duplicated {len(o.duplicated())}", o.written_ms(),
                        o.kill_ms, o.declared_ms) for o in got.outcomes])
    if got.dpc is not None:
        _plot_dpc(out, got, say)
    if got.matrix:
        _plot_dpc_matrix(out, got)
    if got.spike is not None:
        _plot_bpm(out, got, say)


def _plot_linear_road(out: Path, got: _Figures) -> None:
    from medusa_apps.bench import linear_road_latency

    steps, floor = got.steps, got.floor
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


def _plot_moves(out: Path, got: _Figures) -> None:
    from medusa_apps.bench import state_migration

    pause_plot(out / "move_pause.png", "Moving a stateful fragment: output pause",
               {label: [(m.state_mb, m.pause_s, m.hand_over_s) for m in got.moves
                        if (m.mode, m.ballast_expiry) == (mode, expiry)]
                for label, mode, expiry in (("warm", "warm", "scan"), ("cold", "cold", "scan"),
                                            ("partner", "partner", "scan"),
                                            ("warm, expiry by timers", "warm", "timers"))},
               state_migration.SLIDE_S)
    gap_timeline_plot(out / "move_gaps.png", "Gaps between results around each move",
                      [(f"{m.mode} ({m.ballast_expiry}), {m.state_mb:.0f} MB",
                        list(m.gap_timeline), m.done_s, m.gap_before_s)
                       for m in got.moves if m.gap_timeline])


def _plot_dpc(out: Path, got: _Figures, say: Callable[[str], None]) -> None:
    dpc = got.dpc
    events, faults, delays = dpc.timeline()
    dpc_timeline_plot(out / "dpc_timeline.png", "DPC through a 30 s partition", events,
                      faults, delays, dpc.delay_s)
    figures = dpc.summary()
    say(f"DPC: largest output gap {figures['largest_output_gap_s']} s (D = "
        f"{figures['delay_s']:g} s), {figures['tentative_results']} tentative, "
        f"{figures['corrections']} corrected, heal to REC_DONE "
        f"{figures['heal_to_rec_done_s']} s, lost {figures['lost']}, duplicated "
        f"{figures['duplicated']}")


def _plot_dpc_matrix(out: Path, got: _Figures) -> None:
    from medusa_apps.bench import dpc_matrix

    rows = dpc_matrix.summary(got.matrix)
    dpc_matrix_plot(out / "dpc_matrix.png", "DPC: the longest extra delay of a result, "
                    "per placement, fault and length", rows["cells"], rows["bound_s"])


def _plot_bpm(out: Path, got: _Figures, say: Callable[[str], None]) -> None:
    spike, unbalanced = got.spike, got.unbalanced
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


def _say_ratios(ratios: dict[str, float | None], got: _Figures, parts: set[str],
                rating: Any, say: Callable[[str], None]) -> None:
    from medusa_apps.bench import linear_road_latency

    for name, value in ratios.items():
        if value is not None:
            say(f"{name.replace('_', ' ')}: {value:.2f}")
    for step in got.steps:
        say(f"Linear Road L={step.xways}: {linear_road_latency.describe(step)}")
    if "linear-road" in parts:
        say(f"Linear Road L-rating: {rating}")
