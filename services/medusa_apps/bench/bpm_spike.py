"""BPM through a load spike on three participants; the BPM spike test and ``make bench``
share it.

Alpha runs three copies of the sensor-windows network, one fragment each, on one node of
its own; beta and gamma each have a node with room. Before the spike only the first copy
has input. The spike starts the other two at the same rate: alpha's input triples and its
node's load goes over its capacity. Alpha's contract with beta covers the second copy, its
contract with gamma the third; no contract covers the first, which must stay at home. The
participants' BPM agents (``medusa bpm``, real processes) move load until no participant is
over capacity. Then the spike ends (the two copies' input stops) and, their load gone, the
agents bring them home.

Measured from the catalog, the nodes' load reports and the output topics:
- the moves (each change of a fragment's node) and the offers behind them;
- utilisation per participant over time;
- the demand the spike puts on alpha: its three fragments' loads over its capacity (what
  it would carry if nothing moved; above 1, the spike overloads it);
- seconds from the spike to an acceptable allocation: to the moment, once the last move
  is done, from which no participant is over capacity until the end of the run;
- each result's latency: when it was written, minus when the input that closed its window
  went out; its p99 before the spike, during it (until acceptable) and after;
- seconds from the spike's end until every fragment is home again;
- the results against the reference, by tuple id.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind
from medusa.contracts import accept, propose, revoke
from medusa.endpoints import Endpoints
from medusa.federation_status import latest_load_reports
from medusa.latency_stats import percentile
from medusa.schemas import epoch_ms
from medusa.sensor_windows import WINDOW_MS, OutputWatch, SteadyInput
from medusa.settings import kafka_config
from medusa_apps.bench.dpc_partition import wait_running
from medusa_apps.bench.nodes import start_node
from medusa_apps.services import SERVICE_COMMANDS
from medusa_spark.networks import network_yaml

PARTICIPANTS = ("alpha", "beta", "gamma")
COPIES = 3
"""Alpha's networks: the first has input from the start, the others from the spike on."""
HOSTS = {1: "beta", 2: "gamma"}
"""Copy -> the partner whose contract with alpha covers it (copy 0: none)."""
REPORT_MAX_AGE_MS = 30_000
"""A node's report older than this counts for nothing (as for the agents)."""


@dataclass(frozen=True)
class SpikePlan:
    sensors: int = 8
    """Sensors per copy, one reading each per second."""
    before_s: int = 60
    """Input on the first copy alone before the spike."""
    settle_s: int = 60
    """How long the allocation stays acceptable before the run ends."""
    min_spike_s: int = 150
    """The spike lasts this long at least: the agents' time to act."""
    home_timeout_s: int = 300
    """After the spike, how long the run waits for the moved fragments to come home."""
    max_spike_s: int = 420
    """The run ends this long after the spike at the latest."""
    master: str = "local[2]"
    capacity: Mapping[str, float] = field(default_factory=lambda: {
        "alpha": 2.0, "beta": 2.0, "gamma": 2.0})
    """Each participant's node's capacity (slots, the unit of a fragment's load): its
    cores, given so that the plan does not depend on the machine."""
    price: float = 3.0
    """Per unit of load and period. Alpha offers load when D'(u) / capacity exceeds it:
    above u = 0.59 with two slots, so nothing moves before the spike (one fragment, about
    one slot of load on this example: u = 0.5) and load moves during it."""
    delta: float = 0.5
    period_s: int = 60
    agent_interval_s: float = 2.0
    offer_timeout_s: float = 30.0


@dataclass(frozen=True)
class Move:
    at_ms: int
    fragment: str
    source: str
    target: str


@dataclass(frozen=True)
class Sample:
    """The scenario's nodes' newest reports at one moment."""

    at_ms: int
    utilisation: dict[str, float]
    """Participant -> load over capacity of its node (absent: no fresh report)."""
    running: dict[str, list[str]]
    """Node -> the fragments its report lists as running."""
    loads: dict[str, float] = field(default_factory=dict)
    """Fragment -> its load where it runs."""


@dataclass
class SpikeRun:
    plan: SpikePlan
    nodes: dict[str, str]
    """Participant -> the scenario's node of it."""
    fragments: list[str]
    """Copy i's fragment at index i."""
    contracts: dict[str, str]
    """Host -> the contract from alpha to it."""
    started_ms: int
    spike_ms: int
    spike_end_ms: int = 0
    """When the two copies' input stopped (0: not yet)."""
    home_ms: int | None = None
    """When, after the spike, every fragment ran at home again (None: not within the run)."""
    ended_ms: int = 0
    samples: list[Sample] = field(default_factory=list)
    placements: list[tuple[int, str, str, str]] = field(default_factory=list)
    """(at, fragment, node, phase), each change as the catalog showed it."""
    results: dict[str, list[Any]] = field(default_factory=dict)
    """Copy's fragment -> its output's arrivals (``Arrival``), in the order written."""
    expected: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    sent_at_ms: dict[str, dict[int, int]] = field(default_factory=dict)
    offers: list[dict[str, Any]] = field(default_factory=list)
    events: list[tuple[int, str]] = field(default_factory=list)
    """(at, what the scenario did), e.g. an agent killed."""

    @property
    def moves(self) -> list[Move]:
        last: dict[str, str] = {}
        moves = []
        for at, fragment, node, _phase in self.placements:
            if fragment in last and last[fragment] != node:
                moves.append(Move(at, fragment, last[fragment], node))
            last[fragment] = node
        return moves

    def final_placements(self) -> dict[str, tuple[str, str]]:
        """Fragment -> (node, phase), as the catalog last showed them during the run."""
        return {fragment: (node, phase) for _, fragment, node, phase in self.placements}

    def over_capacity(self, sample: Sample) -> list[str]:
        return [p for p, u in sample.utilisation.items() if u > 1.0]

    def demand(self, sample: Sample) -> float:
        """What alpha would carry if nothing had moved: its fragments' loads over its
        capacity."""
        return sum(sample.loads.get(f, 0.0) for f in self.fragments) / \
            self.plan.capacity["alpha"]

    @property
    def _spike_end(self) -> int:
        return self.spike_end_ms or 2**62

    @property
    def _measured_end(self) -> int:
        """Where the spike's latency figures end: its end, or the run's if sooner."""
        return min(self._spike_end, self.ended_ms + 1)

    @property
    def acceptable_ms(self) -> int | None:
        """When, after the spike began and the last move during it, the allocation became
        acceptable until the spike's end (None: a participant was still over capacity)."""
        last_change = max((at for at, *_ in self.placements if at < self._spike_end),
                          default=0)
        after = [s for s in self.samples
                 if max(self.spike_ms, last_change) <= s.at_ms < self._spike_end]
        overloaded = [i for i, s in enumerate(after) if self.over_capacity(s)]
        start = overloaded[-1] + 1 if overloaded else 0
        return after[start].at_ms if start < len(after) else None

    @property
    def seconds_to_acceptable(self) -> float | None:
        at = self.acceptable_ms
        return None if at is None else (at - self.spike_ms) / 1000

    def latencies(self) -> list[tuple[int, float]]:
        """(written at, seconds from the input closing its window to the result)."""
        found = []
        for fragment, arrivals in self.results.items():
            sent = self.sent_at_ms[fragment]
            for arrival in arrivals:
                closed = sent.get(int(arrival.value["window_start_ms"]) + WINDOW_MS)
                if closed is not None:
                    found.append((arrival.appended_ms, (arrival.appended_ms - closed) / 1000))
        return sorted(found)

    def p99_s(self, begin_ms: int, end_ms: int) -> float | None:
        return percentile([v for at, v in self.latencies() if begin_ms <= at < end_ms], 0.99)

    def latency_phases(self) -> dict[str, float | None]:
        """p99 before the spike (its second half on: the first results of a fresh query
        are slower), during it until acceptable, and after."""
        end = self._measured_end
        acceptable = self.acceptable_ms or end
        warm = self.spike_ms - (self.spike_ms - self.started_ms) // 2
        return {"before": self.p99_s(warm, self.spike_ms),
                "during": self.p99_s(self.spike_ms, acceptable),
                "after": self.p99_s(acceptable, end)}

    def p99_last_s(self, seconds: float) -> float | None:
        """p99 latency of the results written in the spike's last ``seconds``."""
        end = self._measured_end
        return self.p99_s(end - int(seconds * 1000), end)

    def seconds_to_latency_back(self) -> float | None:
        """From the allocation becoming acceptable to the first moment from which on the
        p99 latency of the results is within the pre-spike p99 (None: it never got back)."""
        before = self.latency_phases()["before"]
        acceptable = self.acceptable_ms
        if before is None or acceptable is None:
            return None
        later = [(at, v) for at, v in self.latencies()
                 if self.spike_ms <= at < self._measured_end]
        for index, (at, _) in enumerate(later):
            rest = percentile([v for _, v in later[index:]], 0.99)
            if rest is not None and rest <= before:
                return max(0.0, (at - acceptable) / 1000)
        return None

    def lost_and_duplicated(self) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        lost, duplicated = {}, {}
        for fragment, expected in self.expected.items():
            counts = Counter(a.tuple_id for a in self.results.get(fragment, []))
            duplicated[fragment] = sorted(i for i, n in counts.items() if n > 1)
            lost[fragment] = sorted(set(expected) - set(counts))
        return lost, duplicated

    def summary(self) -> dict[str, Any]:
        lost, duplicated = self.lost_and_duplicated()
        phases = self.latency_phases()
        return {
            "moves": len(self.moves),
            "moves_home": sum(m.target == self.nodes["alpha"] for m in self.moves),
            "seconds_to_acceptable": self.seconds_to_acceptable,
            "p99_before_s": phases["before"], "p99_during_s": phases["during"],
            "p99_after_s": phases["after"],
            "seconds_to_latency_back": self.seconds_to_latency_back(),
            "p99_last_minute_s": self.p99_last_s(60),
            "seconds_home_after_the_spike": None if self.home_ms is None or not
            self.spike_end_ms else round((self.home_ms - self.spike_end_ms) / 1000, 1),
            "peak_utilisation": {p: max((s.utilisation.get(p, 0.0) for s in self.samples),
                                        default=0.0) for p in PARTICIPANTS},
            "peak_demand_on_alpha": max((self.demand(s) for s in self.samples
                                         if s.at_ms >= self.spike_ms), default=None),
            "lost": sum(len(v) for v in lost.values()),
            "duplicated": sum(len(v) for v in duplicated.values()),
            "moved": [f"{m.fragment.split('/')[1]}: {m.source} -> {m.target}"
                      for m in self.moves],
        }

    def timeline(self) -> tuple[dict[str, list[tuple[float, float]]],
                                list[tuple[float, float]], list[tuple[float, str]], float,
                                float]:
        """For the plot, in seconds from the start: utilisation per participant, latency,
        moves (and what the scenario did), the spike's start and end."""
        def at(ms: int) -> float:
            return (ms - self.started_ms) / 1000

        utilisation: dict[str, list[tuple[float, float]]] = {p: [] for p in PARTICIPANTS}
        for sample in self.samples:
            for participant, value in sample.utilisation.items():
                utilisation[participant].append((at(sample.at_ms), value))
        latency = [(at(ms), value) for ms, value in self.latencies()]
        marks = [(at(m.at_ms), f"{m.fragment.split('/')[1]} to {m.target.split('/')[0]}")
                 for m in self.moves]
        marks += [(at(ms), what) for ms, what in self.events]
        return (utilisation, latency, sorted(marks), at(self.spike_ms),
                at(self.spike_end_ms or self.ended_ms))


class AgentProcess:
    """``medusa bpm`` for one participant, in a process group of its own."""

    def __init__(self, participant: str, endpoints: Endpoints, run_dir: Path,
                 plan: SpikePlan) -> None:
        self.participant = participant
        self.env = endpoints.environment(run_dir)
        self.log = run_dir / "logs" / f"bpm-spike-{participant}.log"
        self.command = [sys.executable, "-m", "medusa_apps", "bpm", "--participant",
                        participant, "--interval", f"{plan.agent_interval_s:g}",
                        "--offer-timeout", f"{plan.offer_timeout_s:g}"]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> AgentProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                            env=self.env, start_new_session=True)
        return self

    def kill(self) -> None:
        """kill -9, as when its machine dies: nothing of it finishes."""
        if self.process is not None:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
            self.process = None


@contextmanager
def agents_running(endpoints: Endpoints, run_dir: Path, plan: SpikePlan
                   ) -> Iterator[dict[str, AgentProcess]]:
    started = {p: AgentProcess(p, endpoints, run_dir, plan).start() for p in PARTICIPANTS}
    try:
        yield started
    finally:
        for agent in started.values():
            agent.stop()


def utilisation_of(reports: Mapping[str, Mapping[str, Any]], nodes: Mapping[str, str],
                   now_ms: int) -> Sample:
    utilisation: dict[str, float] = {}
    running: dict[str, list[str]] = {}
    loads: dict[str, float] = {}
    for participant, node in nodes.items():
        report = reports.get(node)
        if report is None or now_ms - epoch_ms(report["reported_at"]) > REPORT_MAX_AGE_MS:
            continue
        capacity = float(report.get("capacity") or 0.0)
        if capacity > 0:
            utilisation[participant] = float(report.get("load") or 0.0) / capacity
        running[node] = sorted(f["fragment"] for f in report.get("fragments") or []
                               if f.get("state") == "running")
        for fragment in report.get("fragments") or []:
            loads[str(fragment["fragment"])] = float(fragment.get("load") or 0.0)
    return Sample(now_ms, utilisation, running, loads)


def run_spike(endpoints: Endpoints, registry: SchemaRegistryClient, spark: Any,
              nodes: Mapping[str, str], agents: Mapping[str, AgentProcess],
              plan: SpikePlan = SpikePlan(), say: Callable[[str], None] = lambda _: None,
              on_placement: Callable[[SpikeRun, str, str, str], None] | None = None,
              before_spike: Callable[[SpikeRun], None] | None = None,
              spike_s: float | None = None) -> SpikeRun:
    """The spike on ``nodes`` (participant -> a running node of it, started with
    ``plan.capacity``), with ``agents`` running; they are stopped before the networks and
    contracts are withdrawn. ``on_placement(run, fragment, node, phase)`` is called at each
    change the catalog shows (e.g. to kill an agent mid-move); ``before_spike(run)`` once
    the input on the first network flows. ``spike_s``: how long the spike lasts (default:
    until the allocation has been acceptable for ``plan.settle_s``)."""
    from medusa_spark.deploy import deploy, undeploy

    tag = uuid.uuid4().hex[:6]
    names = [f"spike-{tag}-{i}" for i in range(COPIES)]
    alpha = kafka_config(endpoints.bootstrap("alpha"))
    with CatalogClient(endpoints.catalog_url) as catalog, ExitStack() as cleanup:
        for name in names:
            deploy(network_yaml(name, f"{name}.", box_participant="alpha"), name, endpoints,
                   registry, spark, catalog, {"plausible": nodes["alpha"],
                                              "per_sensor": nodes["alpha"]},
                   report=lambda _: None)
            cleanup.callback(undeploy, catalog, f"alpha/{name}", report=lambda _: None)
        fragments = []
        for name in names:
            [fragment] = wait_running(catalog, f"alpha/{name}")  # one fragment each
            fragments.append(fragment)
        contracts = {}
        for copy, host in HOSTS.items():
            contract = propose(catalog, f"spike-{tag}-{host}", origin="alpha", host=host,
                               price=plan.price, delta=plan.delta,
                               movable=[f"alpha/{names[copy]}"], period_s=plan.period_s,
                               by="alpha")
            accept(catalog, contract.name, by=host)
            cleanup.callback(revoke, catalog, contract.name, by="alpha")
            contracts[host] = contract.name
        say(f"bpm spike: {COPIES} networks on {nodes['alpha']}; contracts "
            + ", ".join(f"{names[c]} to {h}" for c, h in HOSTS.items()))
        topics = {f: f"{n}.medusa.{n}.per_sensor" for f, n in zip(fragments, names, strict=True)}
        watch = OutputWatch(alpha, registry, list(topics.values())).start()
        cleanup.callback(watch.stop)
        stop_first, stop_spike = threading.Event(), threading.Event()
        inputs = [SteadyInput(alpha, registry, f"{name}.sensors.readings", plan.sensors, 0,
                              keep_going=partial(_running, stop),
                              max_seconds=plan.before_s + plan.max_spike_s
                              + plan.home_timeout_s + 60)
                  for name, stop in zip(names, (stop_first, stop_spike, stop_spike),
                                        strict=True)]
        now = _now_ms()
        run = SpikeRun(plan, dict(nodes), fragments, contracts, started_ms=now,
                       spike_ms=now + plan.before_s * 1000)
        watching = threading.Event()
        threads = [threading.Thread(target=_watch_placements,
                                    args=(run, endpoints.catalog_url, watching, on_placement),
                                    daemon=True),
                   threading.Thread(target=_watch_load, args=(run, endpoints, registry,
                                                              watching), daemon=True)]
        for thread in threads:
            thread.start()
        try:
            inputs[0].start()
            if before_spike is not None:
                before_spike(run)
            _sleep_until(run.spike_ms)
            say(f"bpm spike: input tripled ({COPIES} x {plan.sensors} sensors)")
            for steady in inputs[1:]:
                steady.start()
            if spike_s is not None:
                _sleep_until(run.spike_ms + int(spike_s * 1000))
            else:
                _wait_acceptable(run, plan)
            say(f"bpm spike: {len(run.moves)} move(s); acceptable after "
                f"{run.seconds_to_acceptable} s; the spike ends")
            stop_spike.set()
            run.spike_end_ms = _now_ms()
            run.home_ms = _wait_home(run, plan.home_timeout_s)
            say(f"bpm spike: every fragment home {run.summary()['seconds_home_after_the_spike']}"
                " s after the spike's end" if run.home_ms else
                "bpm spike: not every fragment came home")
            stop_first.set()
            for steady in inputs:
                if not steady.finished.wait(120):
                    raise TimeoutError(f"{steady.topic}: the input did not finish")
                if steady.error is not None:
                    raise steady.error
            run.ended_ms = _now_ms()
            for fragment, steady in zip(fragments, inputs, strict=True):
                run.expected[fragment] = steady.expected()
                run.sent_at_ms[fragment] = dict(steady.sent_at_ms)
                watch.wait_for(topics[fragment], set(run.expected[fragment]), timeout_s=180,
                               settle_s=0)
            time.sleep(5)  # for any duplicate
            run.results = {f: watch.arrived(topics[f]) for f in fragments}
        finally:
            stop_first.set()
            stop_spike.set()
            for agent in agents.values():
                agent.stop()  # before the contracts end: no agent brings load home now
            watching.set()
            for thread in threads:
                thread.join(30)
        run.offers = [e.spec for e in catalog.list(Kind.OFFERS)
                      if e.spec.get("contract") in contracts.values()]
    return run


def _watch_placements(run: SpikeRun, catalog_url: str, stop: threading.Event,
                      on_placement: Callable[[SpikeRun, str, str, str], None] | None) -> None:
    last: dict[str, tuple[str, str]] = {}
    with CatalogClient(catalog_url) as catalog:
        while not stop.wait(0.3):
            for fragment in run.fragments:
                with suppress(Exception):  # a slow catalog: the next look
                    entry = catalog.get(Kind.FRAGMENTS, fragment)
                    if entry is None:
                        continue
                    now = (str(entry.spec.get("node")), str(entry.spec.get("phase")))
                    if last.get(fragment) != now:
                        last[fragment] = now
                        run.placements.append((_now_ms(), fragment, *now))
                        if on_placement is not None:
                            on_placement(run, fragment, *now)


def _running(stop: threading.Event) -> bool:
    return not stop.is_set()


def _wait_home(run: SpikeRun, timeout_s: float) -> int | None:
    """Waits until every fragment runs on alpha's node again; returns when (None: not
    within ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        placed = run.final_placements()
        if all(placed.get(f) == (run.nodes["alpha"], "running") for f in run.fragments):
            return _now_ms()
        time.sleep(1)
    return None


def _watch_load(run: SpikeRun, endpoints: Endpoints, registry: SchemaRegistryClient,
                stop: threading.Event) -> None:
    while not stop.wait(2.0):
        with suppress(Exception):  # Kafka slow to answer: the next sample
            reports = latest_load_reports(endpoints, registry)
            run.samples.append(utilisation_of(reports, run.nodes, _now_ms()))


def _wait_acceptable(run: SpikeRun, plan: SpikePlan) -> None:
    """Until the allocation has been acceptable for ``plan.settle_s`` and the spike has
    lasted ``plan.min_spike_s``, or at most ``plan.max_spike_s``."""
    deadline = run.spike_ms + plan.max_spike_s * 1000
    while _now_ms() < deadline:
        acceptable = run.acceptable_ms
        if acceptable is not None and _now_ms() - acceptable >= plan.settle_s * 1000 \
                and _now_ms() - run.spike_ms >= plan.min_spike_s * 1000:
            return
        time.sleep(2)


def _sleep_until(at_ms: int) -> None:
    delay = (at_ms - _now_ms()) / 1000
    if delay > 0:
        time.sleep(delay)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@contextmanager
def stack_agents_paused(layout: Any, say: Callable[[str], None]) -> Iterator[None]:
    """The local stack's own BPM agents stopped while the scenario runs its own (two agents
    of one participant would both offer its load), and started again afterwards."""
    from medusa.stack import launcher, processes

    recorded = launcher._load_state(layout) if layout is not None else {}
    paused = [name for name, process in recorded.items()
              if name.startswith("bpm-") and process.alive()]
    for name in paused:
        processes.stop(recorded[name])
    if paused:
        say(f"bpm spike: the stack's agents ({', '.join(paused)}) pause meanwhile")
    try:
        yield
    finally:
        if paused:
            launcher.up(layout, SERVICE_COMMANDS, report=lambda _: None)


def measure(endpoints: Endpoints, registry: SchemaRegistryClient, spark: Any, layout: Any,
            run_dir: Path, say: Callable[[str], None], plan: SpikePlan = SpikePlan()
            ) -> tuple[SpikeRun, SpikeRun]:
    """The spike on nodes started for it (and stopped afterwards), with agents of its own;
    then the same spike, as long, with no agent (nothing moves), side by side."""
    from medusa_spark.deploy import wait_for_node

    missing = [p for p in PARTICIPANTS if p not in endpoints.kafka]
    if missing:
        raise RuntimeError(f"the BPM spike needs participants {', '.join(PARTICIPANTS)}; "
                           f"{', '.join(missing)} missing: medusa up --participants 3")
    started = []
    nodes = {p: f"{p}/bench-spike" for p in PARTICIPANTS}
    try:
        for participant in PARTICIPANTS:
            started.append(start_node(layout, nodes[participant], plan.master,
                                      capacity=plan.capacity[participant]))
        with CatalogClient(endpoints.catalog_url) as catalog:
            for node in nodes.values():
                wait_for_node(catalog, node, timeout_s=240)
        with stack_agents_paused(layout, say):
            with agents_running(endpoints, run_dir, plan) as agents:
                with_bpm = run_spike(endpoints, registry, spark, nodes, agents, plan, say)
            say("bpm spike: again without agents, as long, for comparison")
            without = run_spike(endpoints, registry, spark, nodes, {}, plan, say,
                                spike_s=(with_bpm.ended_ms - with_bpm.spike_ms) / 1000)
        return with_bpm, without
    finally:
        for process in started:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
