"""Linear Road's L-rating: the most expressways whose outputs are all correct and within 5 s.

Step L runs the Linear Road network (its fragments with their SUnions, as on a
node: ``LocalNetworkRun``) on topics of its own and feeds it L expressways in real
time: rising over ``RAMP_S`` from the floor's rate to the benchmark's peak rate,
then holding that for ``hold_s`` seconds. How L maps to a rate: the traffic
simulation keeps 1,700 x 30 = 51,000 cars per expressway, each reporting every
30 s, i.e. 1,700 position reports per second per expressway
(``PEAK_REPORTS_PER_S_PER_XWAY``, the benchmark's rate at the end of its 3-hour
ramp). About 1% of
reports bring a query (account balance or daily expenditure) on top, and each
new car its historical tolls first: every input topic of the network is fed, each
with a BOUNDARY every second (its SUnion waits on every input).

The publisher and the collector of the four outputs (toll notifications, accident
alerts, account balances, daily expenditures) run as processes of their own, like
the producers and consumers of a real deployment, so they do not share this
process (the Spark driver and the fragment's writer). The collector keeps every
committed (``read_committed``) STABLE output with its ``emit_time`` and its
arrival.

After the input ends (with a BOUNDARY past its end, so every window closes) the
step waits until the outputs stop coming, reads its input topics back (each
record with its Kafka timestamp, i.e. when it was published), computes the
independent reference from them and validates the collected outputs
(``medusa.linear_road.validation``, the benchmark's validator): per output type
expected, got, missing, wrong, duplicated and late (response above 5 s) outputs,
and the response times, the output's arrival at the collector (a ``read_committed``
reader: the writer's transaction commit counts) minus the publish time of the input the
output answers (a missing output counts as infinitely late). A step is met when
the validation passes: every output correct, none missing or duplicated, every
response within 5 s. The steps go L = 1, 2, 3, ... and stop at the first that is
not met; the L-rating is the highest L met.

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

import yaml
from confluent_kafka.schema_registry import SchemaRegistryClient
from pyspark.sql import SparkSession
from rich.console import Console

from medusa.batch_phases import WriterTimes, median_phases
from medusa.consuming import TupleConsumer
from medusa.endpoints import Endpoints
from medusa.envelope import TupleType
from medusa.latency_stats import percentile, rounded
from medusa.linear_road import records as lr
from medusa.linear_road.traffic import PEAK_REPORTS_PER_S_PER_XWAY, TrafficProfile
from medusa.linear_road.validation import (
    LATE_AFTER_S,
    OUTPUT_KINDS,
    READ_TIME,
    OutputKind,
    TypeResult,
    Validation,
)
from medusa.progress import RateProgress
from medusa.settings import kafka_config
from medusa_apps.bench.live import LatencyProgress
from medusa_spark.local_run import LocalNetworkRun
from medusa_spark.network.model import parse_network
from medusa_spark.networks import LINEAR_ROAD, network_file

LATENCY_BOUND_S = LATE_AFTER_S
"""The benchmark's response rule: every output within 5 s of its input."""
OUTPUTS = tuple(kind.field for kind in OUTPUT_KINDS)
"""The network's output streams: toll_notifications, accident_alerts, account_balances,
daily_expenditures (``OutputKind.field``, also the network's stream names)."""
TOLLS = "toll_notifications"
TYPE_FIGURES = ("expected", "got", "matched", "missing", "wrong", "duplicated", "late",
                "untimed", "p50_s", "p99_s", "max_s", "passed", "missing_examples",
                "unexpected_examples")
"""The figures of one output type in a step's JSON (``TypeResult.as_dict``), all None
when the step was not validated."""


FLOOR_REPORTS_PER_S = 100
"""The rate of the floor step: a seventeenth of one expressway's, so a batch's time is
what the query costs whatever the data (its planning, operators and state commits)."""


RAMP_S = 60
"""Seconds a step's rate takes to rise from the floor's to its own: the benchmark's input
rises from a trickle too (over its 3 hours), and every car entering brings its historical
tolls and a first toll notification, so all entering at once would double the load."""


def profile_for(xways: int, hold_s: int,
                rate_per_xway: int = PEAK_REPORTS_PER_S_PER_XWAY) -> TrafficProfile:
    """L expressways rising over ``RAMP_S`` from the floor's rate to ``rate_per_xway`` (by
    default the peak rate), then holding it for ``hold_s``."""
    start = min(rate_per_xway, FLOOR_REPORTS_PER_S)
    return TrafficProfile(xways=xways, duration_s=RAMP_S + hold_s, peak_rate=rate_per_xway,
                          start_rate=start, ramp_s=RAMP_S if start < rate_per_xway else None,
                          seed=xways)


# -- results -------------------------------------------------------------------------------


def type_figures(kind: OutputKind, result: TypeResult | None) -> dict[str, Any]:
    """One output type's figures for the JSON; the same keys (None) when not validated."""
    if result is None:
        return {"type": kind.type, "name": kind.name, **dict.fromkeys(TYPE_FIGURES)}
    full = result.as_dict()
    return {"type": kind.type, "name": kind.name, **{key: full[key] for key in TYPE_FIGURES}}


@dataclass
class StepResult:
    xways: int
    hold_s: int
    rate_per_xway: int = PEAK_REPORTS_PER_S_PER_XWAY
    sent: int = 0
    input_rate: float = 0.0
    validation: Validation | None = None
    """The collected outputs against the reference; None when the step did not get as far."""
    inputs_read: int | None = None
    """Input records read back from the step's topics (all of them: ``sent``)."""
    delivery_s: list[float] = field(default_factory=list)
    """Per collected output: its arrival at the collector minus its ``emit_time`` (the
    writer's transaction commit and the consumer's fetch, the end of each response)."""
    breakdown: dict[str, Any] = field(default_factory=dict)
    drained: bool = True
    """False when the outputs were still coming when the step gave up waiting."""
    error: str | None = None

    @property
    def tolls(self) -> TypeResult | None:
        return self.validation.result(0) if self.validation is not None else None

    @property
    def latencies_s(self) -> list[tuple[float, float]]:
        """(second of the report, response time) per toll notification timed by the
        validator: its arrival at the collector minus its report's Kafka timestamp."""
        tolls = self.tolls
        if tolls is None:
            return []
        return [(float(timing.time), timing.response_s) for timing in tolls.timings]

    @property
    def notifications(self) -> int:
        return self.tolls.got if self.tolls is not None else 0

    @property
    def expected_notifications(self) -> int | None:
        return self.tolls.expected if self.tolls is not None else None

    def percentile(self, share: float) -> float | None:
        """A toll notification response-time percentile (missing ones infinitely late)."""
        return self.tolls.percentile(share) if self.tolls is not None else None

    @property
    def validation_passed(self) -> bool | None:
        return self.validation.passed if self.validation is not None else None

    @property
    def mismatches(self) -> dict[str, dict[str, int]]:
        """Per output type with outputs missing, wrong or duplicated: how many."""
        if self.validation is None:
            return {}
        return {r.kind.field: {"missing": r.missing, "wrong": r.wrong,
                               "duplicated": r.duplicated}
                for r in self.validation.types if r.missing or r.wrong or r.duplicated}

    @property
    def outputs_match(self) -> bool | None:
        """Every output equals the reference's (late or not); None when not validated."""
        return None if self.validation is None else not self.mismatches

    @property
    def met(self) -> bool:
        return step_met(self.validation_passed, self.error)

    def as_dict(self) -> dict[str, Any]:
        results = {r.kind.type: r for r in self.validation.types} if self.validation else {}
        return {"xways": self.xways, "hold_s": self.hold_s, "sent": self.sent,
                "target_rate_per_s": self.xways * self.rate_per_xway,
                "input_rate_per_s": round(self.input_rate, 1),
                "inputs_read": self.inputs_read,
                "notifications": self.notifications,
                "expected_notifications": self.expected_notifications,
                "p50_latency_s": rounded(self.percentile(0.5)),
                "p99_latency_s": rounded(self.percentile(0.99)),
                "max_latency_s": rounded(self.percentile(1.0)),
                "types": {kind.field: type_figures(kind, results.get(kind.type))
                          for kind in OUTPUT_KINDS},
                "validation_passed": self.validation_passed,
                "outputs_match_reference": self.outputs_match, "mismatches": self.mismatches,
                "delivery_p99_s": rounded(percentile(self.delivery_s, 0.99)),
                "drained": self.drained, "error": self.error, "met": self.met,
                "batch_breakdown": self.breakdown}


def step_met(validation_passed: bool | None, error: str | None = None) -> bool:
    """Met when the step's outputs passed validation (all correct, none missing or
    duplicated, every response within 5 s) and nothing failed."""
    return error is None and validation_passed is True


def l_rating(steps: Iterable[StepResult]) -> int | None:
    """The highest L met, counting only the steps L = 1, 2, ... up to the first not met
    (or the first L not run)."""
    rating = None
    for expected, step in enumerate(sorted(steps, key=lambda s: s.xways), start=1):
        if step.xways != expected or not step.met:
            break
        rating = step.xways
    return rating


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
    operators: dict[tuple[str, int], dict[str, Any]] = {}
    triggers: list[float] = []
    rows = scans = 0
    for progress in progresses:
        for phase, ms in (progress.get("durationMs") or {}).items():
            phases[phase] += int(ms or 0)
        triggers.append(float((progress.get("durationMs") or {}).get("triggerExecution", 0)))
        rows += int(progress.get("numInputRows") or 0)
        scans = max(scans, len(progress.get("sources") or []))
        query = str(progress.get("name") or "")  # a network may run several queries
        for index, operator in enumerate(progress.get("stateOperators") or []):
            entry = operators.setdefault((query, index), {
                "query": query,
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


def _collect(config: dict[str, Any], registry_url: str, topics: dict[str, str], path: str,
             stop: EventType, count: Synchronized[int]) -> None:
    """Writes each STABLE output of ``topics`` (topic -> output name) as a line:
    [arrival time in epoch ms, output name, value with its emit_time]."""
    from medusa.registry import registry_client

    registry = registry_client(registry_url)
    with TupleConsumer(config, registry, list(topics), f"bench-{uuid.uuid4()}") as consumer, \
            open(path, "w") as out:
        flushed = time.monotonic()
        while not stop.is_set():
            consumed = consumer.poll(0.2)
            if consumed is not None and consumed.record.type is TupleType.STABLE:
                arrived = time.time_ns() // 1_000_000
                value = dict(consumed.record.value)
                out.write(json.dumps([arrived, topics[consumed.topic], value]) + "\n")
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
        self.rows: list[tuple[int, str, dict[str, Any]]] = []
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
                arrived, name, value = json.loads(line)
                self.rows.append((arrived, name, value))

    def outputs(self) -> dict[str, list[dict[str, Any]]]:
        """The collected outputs per name, each with its ``emit_time`` and its arrival at
        the collector (``READ_TIME``)."""
        found: dict[str, list[dict[str, Any]]] = {name: [] for name in OUTPUTS}
        for arrived, name, value in self.rows:
            found.setdefault(name, []).append({**value, READ_TIME: arrived})
        return found


def delivery_s(rows: Iterable[tuple[int, str, dict[str, Any]]]) -> list[float]:
    """Per output: arrival minus ``emit_time`` (seconds)."""
    return [(arrived - int(value["emit_time"])) / 1000.0 for arrived, _, value in rows
            if value.get("emit_time") is not None]


def output_topics(run: LocalNetworkRun) -> dict[str, str]:
    """The step's output topics, each with its output name."""
    return {run.topic(name): name for name in OUTPUTS}


def run_prefix(run: LocalNetworkRun) -> str:
    """What the step's topics have before the network's own topic names."""
    return run.topic("position_reports").removesuffix(lr.POSITION_REPORTS)


def validate_step(result: StepResult, config: dict[str, Any], registry: SchemaRegistryClient,
                  prefix: str, outputs: dict[str, list[dict[str, Any]]],
                  say: Callable[[str], None]) -> None:
    """Reads the step's inputs back (with their Kafka timestamps), computes the reference
    from them and validates ``outputs`` (what the collector got) against it."""
    from medusa.linear_road.reference import compute
    from medusa.linear_road.run_records import read_run
    from medusa.linear_road.validation import validate

    console = Console(stderr=True)
    with console.status(f"L={result.xways}: reading the step's topics back"):
        run = read_run(config, registry, prefix)
    result.inputs_read = len(run.inputs)
    if not run.complete or (result.sent and len(run.inputs) < result.sent):
        result.error = (f"read back {len(run.inputs):,} of the {result.sent:,} input records "
                        "sent" + ("" if run.complete else " (reading timed out)"))
        return
    if not run.inputs:
        result.error = "no input read back"
        return
    read_back = {name: len(rows) for name, rows in run.outputs.items()}
    collected = {name: len(rows) for name, rows in outputs.items()}
    if read_back != collected:
        say(f"  note: the topics hold {read_back} outputs, the collector got {collected}")
    with console.status(f"L={result.xways}: computing the reference from "
                        f"{len(run.inputs):,} inputs and validating"):
        reference = compute(run.reference_input())
        # Answered when a read_committed reader gets it: the transaction's commit counts.
        result.validation = validate(run.inputs, outputs, reference, LATENCY_BOUND_S,
                                     answered_at=READ_TIME)


def _progress_dicts(query: Any) -> list[dict[str, Any]]:
    return [json.loads(progress.json) for progress in query.recentProgress]


def _busy(query: Any) -> bool:
    """Whether a query is running a batch, has input waiting, or had input in its last."""
    progress: dict[str, Any] = query.lastProgress or {}
    return bool(query.status.get("isTriggerActive") or query.status.get("isDataAvailable")
                or progress.get("numInputRows", 1) != 0)


# -- one step ---------------------------------------------------------------------------------


def run_step(spark: SparkSession, endpoints: Endpoints, registry: SchemaRegistryClient,
             xways: int, hold_s: int, checkpoints: Path, say: Callable[[str], None],
             drain_s: float | None = None, quiet_s: float = 15.0,
             rate_per_xway: int = PEAK_REPORTS_PER_S_PER_XWAY,
             network_name: str = LINEAR_ROAD, sunion: str = "process") -> StepResult:
    prefix = f"bench-lr{xways}-{uuid.uuid4().hex[:6]}."
    config = kafka_config(endpoints.bootstrap("alpha"))
    profile = profile_for(xways, hold_s, rate_per_xway)
    result = StepResult(xways, hold_s, rate_per_xway=rate_per_xway)
    drain_s = drain_s if drain_s is not None else max(120.0, 2.0 * hold_s)
    context = multiprocessing.get_context("spawn")
    received = context.Value("q", 0)
    stop = context.Event()
    progresses: dict[tuple[str, int], dict[str, Any]] = {}
    writer_times: dict[str, dict[int, WriterTimes]] = {}
    write_ms = [0.0]
    transactions = [0]
    summary: dict[str, Any] | None = None
    definition = network_file(network_name)
    text = definition.read_text()
    if sunion != "process":  # the shipped network with its SUnions in the queries
        text = yaml.safe_dump({**yaml.safe_load(text), "sunion": sunion}, sort_keys=False)
    network = parse_network(text, origin=str(definition))
    run = LocalNetworkRun(spark, network, endpoints, registry, checkpoints, topic_prefix=prefix)
    with tempfile.TemporaryDirectory(prefix="medusa-bench-lr-") as scratch:
        lines = _Lines(Path(scratch) / "outputs.jsonl")
        collector = context.Process(
            target=_collect, name="output-collector", daemon=True,
            args=(config, endpoints.registry_url, output_topics(run), str(lines.path), stop,
                  received))
        publisher = Publisher(profile, config, endpoints.registry_url, prefix)
        live_latencies: list[float] = []

        def latencies() -> list[float]:
            """Live, every output's arrival at the collector minus the time its input
            second was due."""
            seen = len(lines.rows)
            lines.read()
            live_latencies.extend(arrived / 1000.0 - publisher.due(value["time"])
                                  for arrived, _, value in lines.rows[seen:])
            return live_latencies

        def observe() -> None:
            for fragment in run.runs:
                failure = fragment.failure()
                if failure is not None:
                    raise RuntimeError(f"fragment {fragment.name} failed: {failure}")
                for progress in _progress_dicts(fragment.query):
                    progresses[(fragment.name, int(progress["batchId"]))] = progress
                writer_times.setdefault(fragment.name, {}).update(
                    fragment.writer.recent_times.by_batch())
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
            finally:
                stop.set()
                collector.join(30)
                publisher.stop()
        lines.read()
        if summary is not None:
            result.sent, result.input_rate = summary["sent"], summary["rate_per_s"]
        result.delivery_s = delivery_s(lines.rows)
        if result.error is None:
            say(f"  validating L={xways}: {len(lines.rows):,} outputs against the reference")
            try:
                validate_step(result, config, registry, run_prefix(run), lines.outputs(), say)
            except Exception as error:  # a step that cannot be validated is not met
                result.error = f"validation: {type(error).__name__}: {error}"
    result.breakdown = batch_breakdown(
        [progresses[key] for key in sorted(progresses)], write_ms[0], transactions[0])
    result.breakdown["batch_phases_ms"] = {
        name: median_phases([progresses[key] for key in sorted(progresses) if key[0] == name],
                            writer_times.get(name, {}))
        for name in sorted({name for name, _ in progresses})}
    if result.sent:
        # Above 1 when the plan reads its source more than once per batch.
        result.breakdown["input_rows_per_report_sent"] = round(
            result.breakdown["input_rows"] / result.sent, 2)
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


def describe(step: StepResult) -> str:
    """One line: the step's toll notification figures, validation and verdict."""
    verdict = "met" if step.met else "not met"
    check = {True: "validation passed", False: "validation failed",
             None: "not validated"}[step.validation_passed]
    return (f"{step.notifications:,} toll notifications, p50 {rounded(step.percentile(0.5))} s, "
            f"p99 {rounded(step.percentile(0.99))} s, {check}"
            + (f", error: {step.error}" if step.error else "") + f" -> {verdict}")


def _say_validation(step: StepResult, say: Callable[[str], None]) -> None:
    if step.validation is not None:
        for line in step.validation.text().splitlines():
            say(f"    {line}")


def run_floor(spark: SparkSession, endpoints: Endpoints, registry: SchemaRegistryClient,
              hold_s: int, checkpoints: Path, say: Callable[[str], None],
              network_name: str = LINEAR_ROAD, sunion: str = "process") -> StepResult:
    """The network at ``FLOOR_REPORTS_PER_S`` (one expressway's traffic, a seventeenth of
    its rate), validated like a step: the latency the query gives when data costs next to
    nothing, i.e. the floor under every L."""
    say(f"Linear Road floor: {FLOOR_REPORTS_PER_S} position reports/s for {hold_s}s")
    step = run_step(spark, endpoints, registry, 1, hold_s, checkpoints / "floor", say,
                    rate_per_xway=FLOOR_REPORTS_PER_S, network_name=network_name,
                    sunion=sunion)
    batch = step.breakdown.get("trigger_ms_p50")
    _say_validation(step, say)
    say(f"  floor: {describe(step)}; a batch takes {batch} ms (p50)")
    return step


def run_steps(spark: SparkSession, endpoints: Endpoints, registry: SchemaRegistryClient,
              hold_s: int, max_xways: int, checkpoints: Path,
              say: Callable[[str], None], network_name: str = LINEAR_ROAD,
              sunion: str = "process") -> list[StepResult]:
    """L = 1, 2, 3, ... up to ``max_xways``, stopping after the first step not met."""
    results: list[StepResult] = []
    for xways in range(1, max_xways + 1):
        say(f"Linear Road L={xways}: {xways * PEAK_REPORTS_PER_S_PER_XWAY:,} position "
            f"reports/s for {hold_s}s, after rising to it over {RAMP_S}s")
        step = run_step(spark, endpoints, registry, xways, hold_s, checkpoints / f"l{xways}",
                        say, network_name=network_name, sunion=sunion)
        results.append(step)
        _say_validation(step, say)
        say(f"  L={xways}: {describe(step)}")
        if not step.met:
            break
    return results
