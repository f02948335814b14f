"""Linear Road's L-rating: the most expressways whose tolls come within 5 s, and correct.

Step L runs the Linear Road network (one fragment with its SUnion, as on a node:
``LocalNetworkRun``) on topics of its own and feeds it L expressways at the
benchmark's peak rate, in real time, for ``hold_s`` seconds. How L maps to a
rate: the traffic simulation keeps 1,700 x 30 = 51,000 cars per expressway,
each reporting every 30 s, i.e. 1,700 position reports per second per
expressway (``PEAK_REPORTS_PER_S_PER_XWAY``, the benchmark's rate at the end
of its 3-hour ramp); cars enter at most 1,701 per second per expressway, so the
rate climbs to L x 1,700/s over the first 30 s and holds there. About 1% of
reports bring a historical query on top (not read by this network).

The publisher and the collector of toll notifications run as processes of
their own, like the producers and consumers of a real deployment, so they do
not share this process (the Spark driver and the fragment's writer). A toll
notification's latency is its arrival at the collector (committed, read with
``read_committed``) minus the moment its position report was due to be sent
(second t of the run goes out t seconds after the start). A notification the
reference expects but that never arrived counts as infinitely late.

After the input ends (with a BOUNDARY past its end, so every window closes)
the step waits until the outputs stop coming, then compares every output,
record for record, with the independent reference computation. A step meets
the bound when its p99 latency is at most 5 s and all its outputs equal the
reference; the steps go L = 1, 2, 3, ... and stop at the first that does not.
The L-rating is the highest L met.

Where a batch's time goes comes from the query's progress reports (Spark's
``durationMs`` per phase and each stateful operator's update, removal and
commit times) and from the writer: the time its Kafka transactions took.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from pyspark.sql import SparkSession
from rich.console import Console

from medusa.consuming import TupleConsumer
from medusa.envelope import TupleType
from medusa.linear_road.traffic import PEAK_REPORTS_PER_S_PER_XWAY, TrafficProfile
from medusa.progress import RateProgress
from medusa.settings import REPO_ROOT, kafka_config
from medusa.stack.endpoints import Endpoints
from medusa_apps.bench.live import LatencyProgress, percentile, rounded, with_missing
from medusa_spark.local_run import LocalNetworkRun
from medusa_spark.network.model import load_network

NETWORK = REPO_ROOT / "spark_apps" / "medusa_spark" / "networks" / "linear_road.yaml"
LATENCY_BOUND_S = 5.0
OUTPUTS = ("segment_statistics", "toll_notifications", "accident_alerts",
           "tow_truck_dispatches")
TOLLS = "toll_notifications"


FLOOR_REPORTS_PER_S = 100
"""The rate of the floor step: a seventeenth of one expressway's, so a batch's time is
what the query costs whatever the data (its planning, operators and state commits)."""


def profile_for(xways: int, hold_s: int,
                rate_per_xway: int = PEAK_REPORTS_PER_S_PER_XWAY) -> TrafficProfile:
    """L expressways at ``rate_per_xway`` (by default the peak rate) from the start (the
    cars still take 30 s to enter)."""
    return TrafficProfile(xways=xways, duration_s=hold_s, peak_rate=rate_per_xway,
                          start_rate=rate_per_xway, seed=xways)


# -- results -------------------------------------------------------------------------------


@dataclass
class StepResult:
    xways: int
    hold_s: int
    rate_per_xway: int = PEAK_REPORTS_PER_S_PER_XWAY
    sent: int = 0
    input_rate: float = 0.0
    latencies_s: list[tuple[float, float]] = field(default_factory=list)
    """(second of the run the report was sent, latency) per toll notification received."""
    expected_notifications: int | None = None
    outputs_match: bool | None = None
    mismatches: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per output that differs from the reference: records missing and extra."""
    breakdown: dict[str, Any] = field(default_factory=dict)
    drained: bool = True
    """False when the outputs were still coming when the step gave up waiting."""
    error: str | None = None

    @property
    def notifications(self) -> int:
        return len(self.latencies_s)

    def counted(self) -> list[float]:
        """Latencies, with each expected notification that never came as ``inf``."""
        return with_missing((latency for _, latency in self.latencies_s),
                            self.expected_notifications)

    def percentile(self, share: float) -> float | None:
        return percentile(self.counted(), share)

    @property
    def met(self) -> bool:
        return step_met(self.percentile(0.99), self.outputs_match, self.error)

    def as_dict(self) -> dict[str, Any]:
        return {"xways": self.xways, "hold_s": self.hold_s, "sent": self.sent,
                "target_rate_per_s": self.xways * self.rate_per_xway,
                "input_rate_per_s": round(self.input_rate, 1),
                "notifications": self.notifications,
                "expected_notifications": self.expected_notifications,
                "p50_latency_s": rounded(self.percentile(0.5)),
                "p99_latency_s": rounded(self.percentile(0.99)),
                "max_latency_s": rounded(self.percentile(1.0)),
                "outputs_match_reference": self.outputs_match, "mismatches": self.mismatches,
                "drained": self.drained, "error": self.error, "met": self.met,
                "batch_breakdown": self.breakdown}


def step_met(p99_s: float | None, outputs_match: bool | None, error: str | None = None) -> bool:
    return (error is None and p99_s is not None and p99_s <= LATENCY_BOUND_S
            and outputs_match is True)


def l_rating(steps: Iterable[StepResult]) -> int | None:
    """The highest L met, counting only the steps from L = 1 up to the first failure."""
    rating = None
    for step in sorted(steps, key=lambda s: s.xways):
        if not step.met:
            break
        rating = step.xways
    return rating


def compare(expected: dict[str, list[dict[str, Any]]],
            got: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, int]]:
    """Per output that differs, how many records are missing and how many extra."""
    differing = {}
    for name, rows in expected.items():
        want = Counter(json.dumps(row, sort_keys=True) for row in rows)
        have = Counter(json.dumps(row, sort_keys=True) for row in got.get(name, []))
        missing, extra = sum((want - have).values()), sum((have - want).values())
        if missing or extra:
            differing[name] = {"missing": missing, "extra": extra}
    return differing


def batch_breakdown(progresses: Sequence[dict[str, Any]], writer_ms: float = 0.0,
                    writer_transactions: int = 0) -> dict[str, Any]:
    """Where the query's batches spent their time, from Spark's progress reports.

    ``durationMs`` phases summed over the batches (``addBatch`` is the batch's own work,
    the writer's included; ``writer_ms`` is the part spent in the writer's Kafka
    transactions), and each stateful operator's update, removal and commit times.
    ``input_rows`` is Spark's count, which counts a source record once per scan of it in
    the plan (``sources``: the sources of the progress report).
    """
    phases: Counter[str] = Counter()
    operators: dict[int, dict[str, Any]] = {}
    triggers: list[float] = []
    rows = scans = 0
    for progress in progresses:
        for phase, ms in (progress.get("durationMs") or {}).items():
            phases[phase] += int(ms or 0)
        triggers.append(float((progress.get("durationMs") or {}).get("triggerExecution", 0)))
        rows += int(progress.get("numInputRows") or 0)
        scans = max(scans, len(progress.get("sources") or []))
        for index, operator in enumerate(progress.get("stateOperators") or []):
            entry = operators.setdefault(index, {
                "operator": operator.get("operatorName", f"#{index}"), "updates_ms": 0,
                "removals_ms": 0, "commit_ms": 0, "rows_updated": 0, "rows_removed": 0,
                "rows_total": 0, "memory_bytes": 0})
            entry["updates_ms"] += int(operator.get("allUpdatesTimeMs") or 0)
            entry["removals_ms"] += int(operator.get("allRemovalsTimeMs") or 0)
            entry["commit_ms"] += int(operator.get("commitTimeMs") or 0)
            entry["rows_updated"] += int(operator.get("numRowsUpdated") or 0)
            entry["rows_removed"] += int(operator.get("numRowsRemoved") or 0)
            entry["rows_total"] = int(operator.get("numRowsTotal") or 0)
            entry["memory_bytes"] = max(entry["memory_bytes"],
                                        int(operator.get("memoryUsedBytes") or 0))
    batches = len(progresses)
    add_batch = phases.get("addBatch", 0)
    return {
        "batches": batches, "input_rows": rows, "sources": scans,
        "phase_ms_total": dict(phases),
        "phase_ms_per_batch": {k: round(v / batches, 1) for k, v in phases.items()}
        if batches else {},
        "trigger_ms_p50": percentile(triggers, 0.5), "trigger_ms_p99": percentile(triggers, 0.99),
        "writer_kafka_ms_total": round(writer_ms, 1),
        "writer_transactions": writer_transactions,
        "add_batch_without_kafka_ms_total": round(add_batch - writer_ms, 1),
        "state_operators": [operators[i] for i in sorted(operators)],
    }


# -- the processes beside the driver ----------------------------------------------------------


class _SharedProgress(RateProgress):
    """A progress that shows nothing and tells the parent process its count."""

    def __init__(self, shared: Synchronized[int], total: float) -> None:
        super().__init__("publish", total=total,
                         console=Console(file=open(os.devnull, "w")))  # noqa: SIM115
        self._shared = shared

    def update(self, count: int, failed: int, completed: float | None = None) -> None:
        super().update(count, failed, completed)
        self._shared.value = count


def _publish(profile: TrafficProfile, config: dict[str, Any], registry_url: str, prefix: str,
             speedup: float, sent: Synchronized[int], started: Synchronized[float],
             result: Any) -> None:
    from medusa.linear_road.sources import publish_traffic
    from medusa.registry import registry_client

    registry = registry_client(registry_url)
    with _SharedProgress(sent, profile.duration_s - 1.0) as progress:
        started.value = time.time()
        summary = publish_traffic(profile, kafka_config=config, registry=registry,
                                  speedup=speedup, progress=progress, topic_prefix=prefix,
                                  boundary_interval_s=1.0, end_of_stream=True)
    result.put(summary.as_dict())


def _collect(config: dict[str, Any], registry_url: str, topic: str, path: str,
             stop: EventType, count: Synchronized[int]) -> None:
    """Writes each STABLE result as a line: [arrival time in epoch ms, value]."""
    from medusa.registry import registry_client

    registry = registry_client(registry_url)
    with TupleConsumer(config, registry, [topic], f"bench-{uuid.uuid4()}") as consumer, \
            open(path, "w") as out:
        flushed = time.monotonic()
        while not stop.is_set():
            consumed = consumer.poll(0.2)
            if consumed is not None and consumed.record.type is TupleType.STABLE:
                arrived = time.time_ns() // 1_000_000
                value = dict(consumed.record.value)
                value.pop("emit_time", None)
                out.write(json.dumps([arrived, value]) + "\n")
                count.value += 1
            if time.monotonic() - flushed > 0.5:
                out.flush()
                flushed = time.monotonic()


class Publisher:
    """Linear Road traffic published by a process of its own (``publish_traffic``, ending
    with a BOUNDARY past the input so every window closes)."""

    def __init__(self, profile: TrafficProfile, config: dict[str, Any], registry_url: str,
                 prefix: str, speedup: float = 1.0) -> None:
        context = multiprocessing.get_context("spawn")
        self.speedup = speedup
        self._sent, self._started = context.Value("q", 0), context.Value("d", 0.0)
        self._summaries = context.Queue()
        self.process = context.Process(
            target=_publish, name="traffic", daemon=True,
            args=(profile, config, registry_url, prefix, speedup, self._sent, self._started,
                  self._summaries))

    def start(self) -> Publisher:
        self.process.start()
        return self

    @property
    def sent(self) -> int:
        return int(self._sent.value)

    @property
    def started(self) -> float:
        """Epoch seconds when second 0 went out (a few ms early until the end); 0 before."""
        return float(self._started.value)

    def due(self, second: float, started: float | None = None) -> float:
        """When second ``second`` of the traffic was due to be sent (epoch seconds)."""
        base = self.started if started is None else started
        return base + (second / self.speedup if self.speedup > 0 else 0.0)

    def alive(self) -> bool:
        return self.process.is_alive()

    def summary(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """The feed's summary, once it is done (``FeedSummary.as_dict``)."""
        if self.process.exitcode not in (0, None):
            raise RuntimeError(f"the traffic publisher exited with {self.process.exitcode}")
        summary: dict[str, Any] = self._summaries.get(timeout=timeout_s)
        return summary

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(10)


class _Lines:
    """Reads the collector's file as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[tuple[int, dict[str, Any]]] = []
        self._offset = 0
        self._partial = ""

    def read(self) -> None:
        if not self.path.exists():
            return
        with self.path.open() as source:
            source.seek(self._offset)
            text = source.read()
            self._offset = source.tell()
        text = self._partial + text
        lines = text.split("\n")
        self._partial = lines.pop()
        for line in lines:
            if line:
                arrived, value = json.loads(line)
                self.rows.append((arrived, value))


def _progress_dicts(query: Any) -> list[dict[str, Any]]:
    return [json.loads(progress.json) for progress in query.recentProgress]


def _busy(query: Any) -> bool:
    """Whether a query is running a batch, has input waiting, or had input in its last."""
    progress: dict[str, Any] = query.lastProgress or {}
    return bool(query.status.get("isTriggerActive") or query.status.get("isDataAvailable")
                or progress.get("numInputRows", 1) != 0)


def _drain(config: dict[str, Any], registry: SchemaRegistryClient,
           topic: str) -> list[dict[str, Any]]:
    rows = []
    with TupleConsumer(config, registry, [topic], f"bench-check-{uuid.uuid4()}") as consumer:
        for consumed in consumer.drain(idle_s=3.0, timeout_s=300.0):
            if consumed.record.type is TupleType.STABLE:
                value = dict(consumed.record.value)
                value.pop("emit_time", None)
                rows.append(value)
    return rows


# -- one step ---------------------------------------------------------------------------------


def run_step(spark: SparkSession, endpoints: Endpoints, registry: SchemaRegistryClient,
             xways: int, hold_s: int, checkpoints: Path, say: Callable[[str], None],
             drain_s: float | None = None, quiet_s: float = 15.0,
             check_reference: bool = True,
             rate_per_xway: int = PEAK_REPORTS_PER_S_PER_XWAY) -> StepResult:
    from medusa.linear_road.reference import compute
    from medusa.linear_road.traffic import TrafficSimulation

    prefix = f"bench-lr{xways}-{uuid.uuid4().hex[:6]}."
    config = kafka_config(endpoints.bootstrap("alpha"))
    profile = profile_for(xways, hold_s, rate_per_xway)
    result = StepResult(xways, hold_s, rate_per_xway=rate_per_xway)
    drain_s = drain_s if drain_s is not None else max(120.0, 2.0 * hold_s)
    context = multiprocessing.get_context("spawn")
    received = context.Value("q", 0)
    stop = context.Event()
    progresses: dict[tuple[str, int], dict[str, Any]] = {}
    write_ms = [0.0]
    transactions = [0]
    run = LocalNetworkRun(spark, load_network(NETWORK), endpoints, registry, checkpoints,
                          topic_prefix=prefix)
    with tempfile.TemporaryDirectory(prefix="medusa-bench-lr-") as scratch:
        lines = _Lines(Path(scratch) / "tolls.jsonl")
        collector = context.Process(
            target=_collect, name="toll-collector", daemon=True,
            args=(config, endpoints.registry_url, run.topic(TOLLS), str(lines.path), stop,
                  received))
        publisher = Publisher(profile, config, endpoints.registry_url, prefix)

        def latencies() -> list[float]:
            lines.read()
            return [arrived / 1000.0 - publisher.due(value["time"])
                    for arrived, value in lines.rows]

        def observe() -> None:
            for fragment in run.runs:
                failure = fragment.failure()
                if failure is not None:
                    raise RuntimeError(f"fragment {fragment.name} failed: {failure}")
                for progress in _progress_dicts(fragment.query):
                    progresses[(fragment.name, int(progress["batchId"]))] = progress
            for sunion in run.sunions:
                sunion.keep_alive()

        with run:
            for fragment in run.runs:
                _meter(fragment.writer.outputs, write_ms, transactions)
            collector.start()
            publisher.start()
            last_observed = 0.0
            try:
                with LatencyProgress(f"L={xways}", total_s=float(hold_s)) as live:
                    while publisher.alive():
                        time.sleep(1.0)
                        if time.monotonic() - last_observed > 5.0:
                            observe()
                            last_observed = time.monotonic()
                        elapsed = time.time() - publisher.started if publisher.started else 0.0
                        live.update(publisher.sent, received.value, latencies(),
                                    completed=min(elapsed, float(hold_s)))
                    summary = publisher.summary()
                    # The results of the last seconds are still on their way: wait until
                    # they stop coming, so that a slow run is measured, not cut off.
                    deadline = time.monotonic() + drain_s
                    seen, last_change = received.value, time.monotonic()
                    while True:
                        time.sleep(1.0)
                        observe()
                        live.update(publisher.sent, received.value, latencies())
                        if received.value != seen or any(_busy(f.query) for f in run.runs):
                            seen, last_change = received.value, time.monotonic()
                        elif time.monotonic() - last_change > quiet_s:
                            break
                        if time.monotonic() > deadline:
                            result.drained = False
                            break
            except Exception as error:  # the step fails; the steps above it are not tried
                result.error = f"{type(error).__name__}: {error}"
                summary = None
            finally:
                stop.set()
                collector.join(30)
                publisher.stop()
            got = {}
            if check_reference and result.error is None:
                for name in OUTPUTS:
                    if name != TOLLS:
                        got[name] = _drain(config, registry, run.topic(name))
        lines.read()
    if summary is not None:
        result.sent, result.input_rate = summary["sent"], summary["rate_per_s"]
        base = summary["wall_start"]
        result.latencies_s = [(float(value["time"]), arrived / 1000.0 - (base + value["time"]))
                              for arrived, value in lines.rows]
    result.breakdown = batch_breakdown(
        [progresses[key] for key in sorted(progresses)], write_ms[0], transactions[0])
    if result.sent:
        # Above 1 when the plan reads its source more than once per batch.
        result.breakdown["input_rows_per_report_sent"] = round(
            result.breakdown["input_rows"] / result.sent, 2)
    if check_reference and result.error is None:
        say(f"  checking L={xways} against the reference")
        expected = compute(r for _, rs in TrafficSimulation(profile).run() for r in rs)
        got[TOLLS] = [value for _, value in lines.rows]
        wanted = {name: getattr(expected, name) for name in OUTPUTS}
        result.expected_notifications = len(wanted[TOLLS])
        result.mismatches = compare(wanted, got)
        result.outputs_match = not result.mismatches
    return result


def _meter(outputs: Sequence[Any], total_ms: list[float], count: list[int]) -> None:
    """Times each output's ``write`` (one Kafka transaction) without changing what it does."""
    for output in outputs:
        inner = output.write

        def timed(records: Any, inner: Any = inner) -> int:
            began = time.perf_counter()
            try:
                written: int = inner(records)
                return written
            finally:
                total_ms[0] += (time.perf_counter() - began) * 1000
                count[0] += 1

        setattr(output, "write", timed)  # noqa: B010 (an instance attribute, on purpose)


def run_floor(spark: SparkSession, endpoints: Endpoints, registry: SchemaRegistryClient,
              hold_s: int, checkpoints: Path, say: Callable[[str], None]) -> StepResult:
    """The network at ``FLOOR_REPORTS_PER_S`` (one expressway's traffic, a seventeenth of
    its rate), outputs checked: the latency the query gives when data costs next to
    nothing, i.e. the floor under every L."""
    say(f"Linear Road floor: {FLOOR_REPORTS_PER_S} position reports/s for {hold_s}s")
    step = run_step(spark, endpoints, registry, 1, hold_s, checkpoints / "floor", say,
                    rate_per_xway=FLOOR_REPORTS_PER_S)
    batch = step.breakdown.get("trigger_ms_p50")
    say(f"  floor: p50 {rounded(step.percentile(0.5))} s, p99 {rounded(step.percentile(0.99))} s"
        f", a batch takes {batch} ms (p50)")
    return step


def run_steps(spark: SparkSession, endpoints: Endpoints, registry: SchemaRegistryClient,
              hold_s: int, max_xways: int, checkpoints: Path,
              say: Callable[[str], None]) -> list[StepResult]:
    """L = 1, 2, 3, ... up to ``max_xways``, stopping after the first step not met."""
    results: list[StepResult] = []
    for xways in range(1, max_xways + 1):
        say(f"Linear Road L={xways}: {xways * PEAK_REPORTS_PER_S_PER_XWAY:,} position "
            f"reports/s for {hold_s}s (the first 30 s ramp up)")
        step = run_step(spark, endpoints, registry, xways, hold_s, checkpoints / f"l{xways}",
                        say)
        results.append(step)
        p50, p99 = step.percentile(0.5), step.percentile(0.99)
        verdict = "met" if step.met else "not met"
        match = {True: "outputs equal the reference", False: f"outputs differ: "
                 f"{step.mismatches}", None: "outputs not checked"}[step.outputs_match]
        say(f"  L={xways}: {step.notifications:,} toll notifications, p50 {rounded(p50)} s, "
            f"p99 {rounded(p99)} s, {match}"
            + (f", error: {step.error}" if step.error else "") + f" -> {verdict}")
        if not step.met:
            break
    return results
