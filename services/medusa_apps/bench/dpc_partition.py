"""DPC under faults: the sensor pair network (one stream per participant, merged and
averaged per window on beta) under steady input, with faults on a timeline (partitions of
the link, kills), observed from its output topic. The DPC tests and ``make bench`` share it.

What a run measures, all from the output and the input's own clock (second i of input is
sent i seconds after the start, so a window ending at second s is complete at ``start+s``):
- the extra delay of a result: how much later than the fault-free median it came out (its
  first version, stable or tentative); the largest over the run is the *output gap*, which
  DPC keeps near D while a partition lasts;
- tentative results, UNDOs, corrected results and REC_DONEs over time, and the time from
  healing to REC_DONE;
- the stable view (UNDO/REC_DONE applied) against the fault-free reference: lost and
  duplicated results.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind
from medusa.consuming import ConsumedTuple, TupleConsumer
from medusa.endpoints import Endpoints
from medusa.envelope import TupleType
from medusa.errors import MedusaError
from medusa.sensor_windows import STIME_ORIGIN_MS, WINDOW_MS, SteadyInput
from medusa.sensor_windows import reference as pair_reference
from medusa.sensors import SensorReading
from medusa.settings import kafka_config
from medusa.stable_view import stable_view
from medusa_spark.networks import pair_network_yaml

SENSORS = 4


@dataclass(frozen=True)
class Fault:
    """Something that goes wrong ``at_s`` seconds into the input, for ``for_s`` seconds."""

    label: str
    at_s: float
    for_s: float
    begin: Callable[[], object]
    end: Callable[[], object]
    once: Callable[[OutputLog], bool] | None = None
    """Begins only once the output so far shows this (checked from ``at_s`` on, for at most
    a minute)."""
    until: Callable[[OutputLog], bool] | None = None
    """Ends as soon as the output so far shows what it was for (``for_s`` at most)."""


@dataclass(frozen=True)
class FaultWindow:
    label: str
    began_ms: int
    ended_ms: int


@dataclass
class OutputLog:
    """Every record of the output topic in the order read (data, BOUNDARY, UNDO, REC_DONE)."""

    records: list[ConsumedTuple] = field(default_factory=list)

    def of(self, kind: TupleType) -> list[ConsumedTuple]:
        return [c for c in list(self.records) if c.record.type is kind]


@dataclass
class ScenarioRun:
    topic: str
    records: list[ConsumedTuple]
    expected: dict[str, dict[str, Any]]
    faults: list[FaultWindow]
    dpc_states: list[tuple[int, str]]
    """(ms, state) each time the catalog showed the fragment's DPC state change, while the
    input flowed (an input that ends is, to DPC, one that failed)."""
    input_started_ms: int

    def of(self, kind: TupleType) -> list[ConsumedTuple]:
        return [c for c in self.records if c.record.type is kind]

    def tentative_output_ms(self) -> list[int]:
        """When tentative output came: TENTATIVE results, and the BOUNDARY records a
        fragment writes while its results are tentative (marked with the period)."""
        return [c.timestamp_ms for c in self.records
                if c.record.type is TupleType.TENTATIVE or (
                    c.record.type is TupleType.BOUNDARY and "/tentative/" in c.record.tuple_id)]

    def state_at(self, ms: int) -> str:
        """The fragment's DPC state as the catalog showed it at ``ms``."""
        shown = [state for at, state in self.dpc_states if at <= ms]
        return shown[-1] if shown else "STABLE"

    def complete_ms(self, consumed: ConsumedTuple) -> int:
        """When the result's window had all its input (wall clock)."""
        window_end = int(consumed.record.value["window_start_ms"]) + WINDOW_MS
        return self.input_started_ms + (window_end - STIME_ORIGIN_MS)

    def first_versions(self) -> list[ConsumedTuple]:
        """Each result's first version (stable or tentative), in arrival order."""
        seen: set[str] = set()
        first = []
        for consumed in self.records:
            if consumed.record.type in (TupleType.STABLE, TupleType.TENTATIVE) and \
                    consumed.record.tuple_id not in seen:
                seen.add(consumed.record.tuple_id)
                first.append(consumed)
        return first

    def _failure_span_ms(self) -> tuple[int, int | None] | None:
        """From the first fault to the last REC_DONE (None: no fault)."""
        began = min((f.began_ms for f in self.faults), default=None)
        if began is None:
            return None
        done = max((c.timestamp_ms for c in self.of(TupleType.REC_DONE)), default=None)
        return began, done

    def _touched(self, consumed: ConsumedTuple) -> bool:
        """Complete while a failure or its correction was under way."""
        span = self._failure_span_ms()
        complete = self.complete_ms(consumed)
        return span is not None and span[0] <= complete and (span[1] is None
                                                             or complete <= span[1])

    def extra_delays_s(self) -> list[tuple[int, float, bool]]:
        """(arrival ms, seconds later than the fault-free median, touched by a failure) of
        each result's first version; the median is over the untouched results."""
        first = self.first_versions()
        latencies = [c.timestamp_ms - self.complete_ms(c) for c in first
                     if not self._touched(c)]
        baseline = statistics.median(latencies) if latencies else 0.0
        return [(c.timestamp_ms, (c.timestamp_ms - self.complete_ms(c) - baseline) / 1000,
                 self._touched(c)) for c in first]

    def largest_gap_s(self) -> float:
        """The largest extra delay of a result a failure touched (the query's start-up is
        not a failure's)."""
        return max((delay for _, delay, touched in self.extra_delays_s() if touched),
                   default=0.0)

    def reconciliation_gap_s(self) -> float | None:
        """The largest extra delay of a result whose input was complete between a fault's
        end and the REC_DONE after it (None: no REC_DONE): what the reconciliation cost
        the readers, beside the failure itself."""
        done = sorted(c.timestamp_ms for c in self.of(TupleType.REC_DONE))
        gaps = []
        for fault in self.faults:
            later = [t for t in done if t >= fault.ended_ms]
            if not later:
                continue
            gaps += [delay for consumed, (_, delay, _) in zip(
                self.first_versions(), self.extra_delays_s(), strict=True)
                if fault.ended_ms <= self.complete_ms(consumed) <= later[0]]
        return max(gaps, default=0.0) if done else None

    def heal_to_rec_done_s(self) -> list[float | None]:
        """Per fault, seconds from its end to the first REC_DONE after it (None: none)."""
        done = sorted(c.timestamp_ms for c in self.of(TupleType.REC_DONE))
        result: list[float | None] = []
        for fault in self.faults:
            later = [t for t in done if t >= fault.ended_ms]
            result.append((later[0] - fault.ended_ms) / 1000 if later else None)
        return result

    def lost_and_duplicated(self) -> tuple[list[str], list[str]]:
        view = stable_view(c.record for c in self.records)
        ids = [r.tuple_id for r in view.stable]
        got = set(ids)
        lost = sorted(set(self.expected) - got)
        duplicated = sorted({i for i in ids if ids.count(i) > 1} | (got - set(self.expected)))
        return lost, duplicated

    def wrong_values(self) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
        view = stable_view(c.record for c in self.records)
        got = {r.tuple_id: r.value for r in view.stable}
        return {i: (got[i], v) for i, v in self.expected.items()
                if i in got and {k: got[i][k] for k in v} != v}

    def unlike_fault_free(self) -> str | None:
        """How the output's stable view differs from the fault-free run (lost, duplicated or
        wrong results, tentative ones left), or None when it equals it."""
        lost, duplicated = self.lost_and_duplicated()
        if lost or duplicated:
            return f"lost {lost[:5]}, duplicated {duplicated[:5]}"
        wrong = self.wrong_values()
        if wrong:
            return f"{len(wrong)} result(s) differ, e.g. {list(wrong.items())[:2]}"
        view = stable_view(c.record for c in self.records)
        if view.tentative or view.reconciling:
            return (f"{len(view.tentative)} tentative result(s) left"
                    + (", still reconciling" if view.reconciling else ""))
        return None


class OutputRecorder:
    """Reads a topic from its beginning into an ``OutputLog`` as it is written."""

    def __init__(self, kafka_config: dict[str, Any], registry: SchemaRegistryClient,
                 topic: str) -> None:
        self.log = OutputLog()
        self._consumer = TupleConsumer(kafka_config, registry, [topic], f"dpc-{uuid.uuid4()}")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            consumed = self._consumer.poll(0.5)
            if consumed is not None:
                self.log.records.append(consumed)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def wait_running(catalog: CatalogClient, network: str, timeout_s: float = 240.0) -> list[str]:
    """Waits until every fragment of ``network`` runs; returns their names."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        entries = catalog.list(Kind.FRAGMENTS, network=network)
        if entries and all(e.spec.get("phase") == "running" for e in entries):
            return sorted(e.name for e in entries)
        time.sleep(0.5)
    raise TimeoutError(f"{network} did not run within {timeout_s:.0f}s")


@contextmanager
def deployed_pair(endpoints: Endpoints, registry: SchemaRegistryClient, spark: Any,
                  catalog: CatalogClient, node: str, bound: str) -> Iterator[tuple[str, str]]:
    """The pair network on topics of its own, both boxes on ``node`` (a node of beta);
    yields (its catalog name, its output topic) and undeploys it afterwards."""
    with deployed(endpoints, registry, spark, catalog, pair_network_yaml, bound,
                  {"merged": node, "per_sensor": node}, "per_sensor") as deployment:
        yield deployment


@contextmanager
def deployed(endpoints: Endpoints, registry: SchemaRegistryClient, spark: Any,
             catalog: CatalogClient, network_yaml: Callable[[str, str, str], str], bound: str,
             placement: dict[str, str], output_box: str) -> Iterator[tuple[str, str]]:
    """A network of alpha (``network_yaml(name, topic prefix, bound)``) on topics of its own,
    its boxes on the nodes ``placement`` names; yields (its catalog name, the topic of
    ``output_box``) and undeploys it afterwards."""
    from medusa.contracts import hosting
    from medusa_spark.deploy import deploy, undeploy

    name = f"dpc-{uuid.uuid4().hex[:6]}"
    network = f"alpha/{name}"
    for host in sorted({node.split("/", 1)[0] for node in placement.values()} - {"alpha"}):
        hosting(catalog, "alpha", host, network)  # a partner hosts alpha's load by contract
    deploy(network_yaml(name, f"{name}.", bound), name, endpoints, registry, spark, catalog,
           placement)
    try:
        yield network, f"{name}.medusa.{name}.{output_box}"
    finally:
        undeploy(catalog, network)


def run_scenario(endpoints: Endpoints, registry: SchemaRegistryClient, catalog_url: str,
                 network: str, output_topic: str, seconds: int, faults: list[Fault],
                 say: Callable[[str], None] = lambda _: None,
                 settle_timeout_s: float = 240.0, output_participant: str = "beta",
                 reference: Callable[[list[SensorReading]], dict[str, dict[str, Any]]] =
                 pair_reference, tail_s: float = 8.0,
                 sensor_prefixes: dict[str, str] | None = None) -> ScenarioRun:
    """Steady input on both participants for ``seconds`` and on until ``tail_s`` after the
    fragment has reconciled from the last fault, the faults on their timeline; then waits
    until the output's stable view (on ``output_participant``'s cluster) holds every result
    ``reference`` expects of the input, with nothing left to reconcile. The DPC state
    sampled is that of the fragment writing the output (on a node of
    ``output_participant``). ``sensor_prefixes``: each participant's sensor ids begin so
    (``sensor_readings``), where the two inputs must share no tuple id."""
    prefix = output_topic.split("medusa.")[0]
    with CatalogClient(catalog_url) as catalog:
        names = wait_running(catalog, network)
        fragment = next((name for name in names
                         if name.rsplit("/", 1)[1].startswith(f"{output_participant}-")),
                        names[0])  # one fragment, wherever it runs
    recorder = OutputRecorder(kafka_config(endpoints.bootstrap(output_participant)),
                              registry, output_topic)
    inputs = {p: SteadyInput(kafka_config(endpoints.bootstrap(p)), registry,
                             f"{prefix}{p}.sensors.readings", SENSORS, seconds,
                             open_ended=True,
                             sensor_prefix=(sensor_prefixes or {}).get(p, "s"))
              for p in ("alpha", "beta")}
    states: list[tuple[int, str]] = []
    sampling = threading.Event()

    def sample() -> None:
        with CatalogClient(catalog_url) as sampler_catalog:
            while not sampling.wait(0.3):
                entry = sampler_catalog.get(Kind.FRAGMENTS, fragment)
                state = str((entry.spec if entry else {}).get("dpc_state", "STABLE"))
                if not states or states[-1][1] != state:
                    states.append((_now_ms(), state))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    windows: list[FaultWindow] = []
    try:
        started = time.monotonic()
        input_started_ms = _now_ms()
        for steady in inputs.values():
            steady.start()
        for fault in sorted(faults, key=lambda f: f.at_s):
            time.sleep(max(0.0, started + fault.at_s - time.monotonic()))
            waited_until = time.monotonic() + 60
            while fault.once is not None and not fault.once(recorder.log) and \
                    time.monotonic() < waited_until:
                time.sleep(0.2)
            say(f"{fault.label} for {fault.for_s:.0f}s ({fault.at_s:.0f}s into the input)")
            began = _now_ms()
            fault.begin()
            try:
                ends = time.monotonic() + fault.for_s
                while time.monotonic() < ends and not (
                        fault.until is not None and fault.until(recorder.log)):
                    time.sleep(0.2)
            finally:
                fault.end()
            windows.append(FaultWindow(fault.label, began, _now_ms()))
        # The input flows until the fragment is STABLE again with nothing left to
        # reconcile: a silent input is, to DPC, a failed one. One budget for both waits,
        # so that a run which never settles says what it lacks within a test's timeout.
        settle_by = time.monotonic() + settle_timeout_s
        while True:
            view = stable_view(c.record for c in list(recorder.log.records))
            if states and states[-1][1] == "STABLE" and not view.reconciling \
                    and not view.tentative:
                break
            if time.monotonic() >= settle_by:
                raise ScenarioUnsettled(_unsettled(
                    f"the fragment {fragment} did not settle (STABLE, nothing tentative, "
                    f"nothing left to reconcile) within {settle_timeout_s:.0f}s of the "
                    f"last fault's end", recorder.log, None, states, input_started_ms))
            time.sleep(0.5)
        for steady in inputs.values():
            steady.end_in(tail_s)
        for steady in inputs.values():
            steady.finish(tail_s)
        sampling.set()
        sampler.join(5)
        expected = reference([*inputs["alpha"].sent, *inputs["beta"].sent])
        say("input done; waiting for the stable view to be complete")
        while True:
            view = stable_view(c.record for c in list(recorder.log.records))
            if {r.tuple_id for r in view.stable} >= set(expected) and not view.reconciling \
                    and not view.tentative:
                break
            if time.monotonic() >= settle_by:
                raise ScenarioUnsettled(_unsettled(
                    f"the stable view of {output_topic} was not complete within "
                    f"{settle_timeout_s:.0f}s of the last fault's end", recorder.log,
                    expected, states, input_started_ms))
            time.sleep(1.0)
        time.sleep(3.0)  # any duplicate would come now
        return ScenarioRun(output_topic, list(recorder.log.records), expected, windows,
                           list(states), input_started_ms)
    finally:
        for steady in inputs.values():  # a run stopped early stops its input too
            if not steady.finished.is_set():
                steady.end_in(0)
        sampling.set()
        sampler.join(5)
        recorder.close()


class ScenarioUnsettled(MedusaError, AssertionError):
    """A scenario's output never came to its fault-free stable view."""


def _unsettled(what: str, log: OutputLog, expected: dict[str, dict[str, Any]] | None,
               states: list[tuple[int, str]], started_ms: int, last: int = 12) -> str:
    """``what`` went wrong, with what the output and the fragment's states showed."""
    records = list(log.records)
    view = stable_view(c.record for c in records)
    undo = "reconciling (an UNDO without its REC_DONE)" if view.reconciling else "no UNDO open"
    lines = [f"{what}:",
             "  DPC states: " + ", ".join(f"{state} at {(ms - started_ms) / 1000:.1f}s"
                                          for ms, state in states),
             f"  output: {len(records)} records, {len(view.stable)} stable, "
             f"{len(view.tentative)} tentative after the last UNDO, "
             f"{undo}"]
    if expected is not None:
        missing = sorted(set(expected) - {r.tuple_id for r in view.stable})
        lines.append(f"  {len(missing)} of {len(expected)} expected results missing"
                     + (f", e.g. {', '.join(missing[:5])}" if missing else ""))
    if view.tentative:
        lines.append("  tentative left: " + ", ".join(r.tuple_id for r in view.tentative[:5]))
    marks = [c for c in records if c.record.type is not TupleType.BOUNDARY][-last:]
    lines.append(f"  its last {len(marks)} records other than BOUNDARY:")
    lines += [f"    {(c.timestamp_ms - started_ms) / 1000:7.1f}s p{c.partition} "
              f"{c.record.type.value} {c.record.tuple_id}" for c in marks]
    return "\n".join(lines)


# -- the benchmark ---------------------------------------------------------------------

BENCH_BOUND = "4 seconds"
BENCH_DELAY_S = 3.0
"""D of the pair network's one fragment: (X - k x trigger) / k = (4 s - 1 s) / 1."""
BENCH_INPUT_S = 110
BENCH_PARTITION = (30.0, 30.0)
"""(after, for) seconds: the issue's 30 s partition, once the query runs steadily."""
BENCH_NODE = "beta/bench-dpc"


@dataclass
class DpcOutcome:
    run: ScenarioRun
    delay_s: float

    def corrections(self) -> int:
        """STABLE results written between an UNDO and its REC_DONE (the corrected ones)."""
        count = 0
        reconciling: set[int] = set()
        for consumed in self.run.records:
            kind = consumed.record.type
            if kind is TupleType.UNDO:
                reconciling.add(consumed.partition)
            elif kind is TupleType.REC_DONE:
                reconciling.discard(consumed.partition)
            elif kind is TupleType.STABLE and consumed.partition in reconciling:
                count += 1
        return count

    def timeline(self) -> tuple[dict[str, list[float]], list[tuple[float, float]],
                                list[tuple[float, float]]]:
        """For the plot, in seconds since the input began: the output's records by kind,
        the faults, and each result's extra delay."""
        start = self.run.input_started_ms
        events: dict[str, list[float]] = {kind: [] for kind in
                                          ("stable", "tentative", "undo", "corrected",
                                           "rec_done")}
        reconciling: set[int] = set()
        for consumed in self.run.records:
            kind, at = consumed.record.type, (consumed.timestamp_ms - start) / 1000
            if kind is TupleType.UNDO:
                reconciling.add(consumed.partition)
                events["undo"].append(at)
            elif kind is TupleType.REC_DONE:
                reconciling.discard(consumed.partition)
                events["rec_done"].append(at)
            elif kind is TupleType.TENTATIVE:
                events["tentative"].append(at)
            elif kind is TupleType.STABLE:
                events["corrected" if consumed.partition in reconciling else "stable"].append(at)
        faults = [((f.began_ms - start) / 1000, (f.ended_ms - start) / 1000)
                  for f in self.run.faults]
        delays = [((t - start) / 1000, d) for t, d, _ in self.run.extra_delays_s()]
        return events, faults, delays

    def summary(self) -> dict[str, Any]:
        fault = self.run.faults[0]
        lost, duplicated = self.run.lost_and_duplicated()
        gap = self.run.largest_gap_s()
        heal_to_done = self.run.heal_to_rec_done_s()[0]
        reconciling = self.run.reconciliation_gap_s()
        return {
            "partition_s": round((fault.ended_ms - fault.began_ms) / 1000, 1),
            "delay_s": self.delay_s,
            "largest_output_gap_s": round(gap, 2),
            "gap_over_delay_s": round(gap - self.delay_s, 2),
            "tentative_results": len(self.run.of(TupleType.TENTATIVE)),
            "corrections": self.corrections(),
            "undos": len(self.run.of(TupleType.UNDO)),
            "rec_dones": len(self.run.of(TupleType.REC_DONE)),
            "heal_to_rec_done_s": None if heal_to_done is None else round(heal_to_done, 1),
            # The largest extra delay of a result that came out between the heal and
            # REC_DONE (goal: at most D).
            "reconciliation_gap_s": None if reconciling is None else round(reconciling, 2),
            "lost": len(lost),
            "duplicated": len(duplicated),
            "wrong_values": len(self.run.wrong_values()),
        }


def measure(endpoints: Endpoints, registry: SchemaRegistryClient, spark: Any,
            layout: Any, say: Callable[[str], None]) -> DpcOutcome:
    """A 30 s partition between alpha and beta under steady input, on a node of beta
    started for it (and stopped afterwards)."""
    from medusa.faults import Links
    from medusa_apps.bench.nodes import bench_nodes

    with CatalogClient(endpoints.catalog_url) as catalog, \
            bench_nodes(layout, catalog, [BENCH_NODE]), \
            Links(endpoints.toxiproxy_url) as links, \
            deployed_pair(endpoints, registry, spark, catalog, BENCH_NODE,
                          BENCH_BOUND) as (network, topic):
        cut = Fault("partition alpha-beta", *BENCH_PARTITION,
                    lambda: links.partition("alpha", "beta"),
                    lambda: links.heal("alpha", "beta"))
        try:
            run = run_scenario(endpoints, registry, endpoints.catalog_url, network,
                               topic, BENCH_INPUT_S, [cut], say)
        finally:
            links.heal()
    return DpcOutcome(run, BENCH_DELAY_S)
