"""A node killed mid-stream, and what the sink saw: the failover scenario of the HA tests
and benchmark.

The sensor-windows network runs on one node under steady input, as two fragments
(the check, whose output is the continuous stream watched, and the windows), both
``ha: passive`` (restored from their checkpoints on the secondary) or ``ha: active``
(replicas on the secondary take over). Some seconds after results flow, the node
is killed; the input keeps flowing until results written after the kill have
been seen on both outputs, whatever the machine's speed; the scenario then waits
for every expected result and reports detection time, time to the first result
after the kill, the output gap, and the results lost, duplicated or wrong, by
tuple id against the reference.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from pyspark.sql import SparkSession

from medusa.catalog.client import CatalogClient, CatalogError
from medusa.catalog.model import Kind
from medusa.endpoints import Endpoints
from medusa.federation_status import federation_status
from medusa.sensor_windows import Arrival, OutputWatch, SteadyInput
from medusa.settings import kafka_config
from medusa_spark.deploy import deploy, undeploy
from medusa_spark.networks import network_yaml

BOXES = ("plausible", "per_sensor")
FRAGMENTS = {"plausible": "check", "per_sensor": "windows"}
AFTER_RECOVERY_S = 12.0
REHEARSED_WITHIN_S = 180.0
"""How long a passive standby is given to rehearse the fragments it backs up before the
kill (once their input flows): a pre-warmed standby is what the takeover is measured on."""
"""Input sent once recovery has been seen: the windows then open close after it too."""


@dataclass
class FailoverOutcome:
    mode: str
    primary: str
    secondary: str
    kill_ms: int
    declared_ms: int | None
    """When the catalog marked the node failed."""
    placement_after: dict[str, str]
    passed: dict[str, list[Arrival]]
    """Arrivals of the continuous stream (out of ``plausible``) and of the windowed results."""
    sent_ids: list[str]
    expected_windows: dict[str, dict[str, Any]]
    executions: dict[str, str | None] = field(default_factory=dict)
    """How each fragment's query ran before the failure (micro-batch or real-time), as
    ``medusa status`` said."""
    rehearsed_s: float | None = None
    """Passive: how long after the first results the secondary had rehearsed the
    fragments' queries (the kill waits for it); None if it had not within the bound."""

    @property
    def detection_s(self) -> float | None:
        return None if self.declared_ms is None else (self.declared_ms - self.kill_ms) / 1000

    def _written(self, box: str) -> list[int]:
        return sorted(a.appended_ms for a in self.passed[box])

    @property
    def first_after_kill_s(self) -> float | None:
        """From the kill to the first tuple of the continuous stream written after it."""
        after = [t for t in self._written("plausible") if t > self.kill_ms]
        return (after[0] - self.kill_ms) / 1000 if after else None

    @property
    def output_gap_s(self) -> float | None:
        """The longest pause in the continuous stream around the kill."""
        written = self._written("plausible")
        before = [t for t in written if t <= self.kill_ms]
        after = [t for t in written if t > self.kill_ms]
        return (after[0] - before[-1]) / 1000 if before and after else None

    def lost(self) -> list[str]:
        passed = {a.tuple_id for a in self.passed["plausible"]}
        windows = {a.tuple_id for a in self.passed["per_sensor"]}
        return sorted((set(self.sent_ids) - passed) | (set(self.expected_windows) - windows))

    def duplicated(self) -> list[str]:
        counts = Counter(a.tuple_id for box in BOXES for a in self.passed[box])
        return sorted(i for i, n in counts.items() if n > 1)

    def wrong(self) -> list[str]:
        return sorted(a.tuple_id for a in self.passed["per_sensor"]
                      if self.expected_windows.get(a.tuple_id) != a.value)

    def written_ms(self) -> list[int]:
        """When each tuple of the continuous stream was written (Kafka timestamps)."""
        return self._written("plausible")

    def summary(self) -> dict[str, Any]:
        return {"mode": self.mode, "detection_s": self.detection_s,
                "first_output_after_kill_s": self.first_after_kill_s,
                "output_gap_s": self.output_gap_s, "lost": len(self.lost()),
                "duplicated": len(self.duplicated()), "wrong": len(self.wrong()),
                "kill_ms": self.kill_ms, "declared_ms": self.declared_ms}


def wait_placed(catalog: CatalogClient, network: str, node: str, replica: str | None,
                timeout_s: float = 240.0, interval_s: float = 0.5) -> None:
    """Until every fragment runs on ``node`` (and, for ``ha: active``, its replica runs),
    asking the catalog every ``interval_s``."""
    deadline = time.monotonic() + timeout_s
    specs: dict[str, Any] = {}
    while time.monotonic() < deadline:
        specs = {e.name: e.spec for e in catalog.list(Kind.FRAGMENTS, network=network)}
        if specs and all(s["node"] == node and s.get("phase") == "running" and
                         (replica is None or s.get("replica_ready")) for s in specs.values()):
            return
        time.sleep(interval_s)
    raise TimeoutError(f"{network} did not run on {node} within {timeout_s:.0f}s: {specs}")


class _FailureWatch:
    """Notes when the catalog first shows ``node`` failed (the detector's declaration)."""

    def __init__(self, catalog_url: str, node: str) -> None:
        self.catalog_url, self.node = catalog_url, node
        self.declared_ms: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with CatalogClient(self.catalog_url) as catalog:
            while not self._stop.is_set() and self.declared_ms is None:
                try:
                    entry = catalog.get(Kind.NODES, self.node)
                except CatalogError:
                    entry = None
                if entry is not None and entry.spec.get("status") == "failed":
                    self.declared_ms = entry.updated_at
                self._stop.wait(0.1)

    def start(self) -> _FailureWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def _wait_rehearsed(catalog: CatalogClient, network: str, secondary: str,
                    executions: dict[str, str | None], say: Callable[[str], None]
                    ) -> float | None:
    """Waits until ``secondary`` says it has rehearsed every micro-batch fragment of
    ``network`` (a takeover's first batch not yet compiled took seconds more; a real-time
    query is not rehearsed); how long that took, None if not within the bound."""
    fragments = {e.name for e in catalog.list(Kind.FRAGMENTS, network=network)
                 if executions.get(e.name.rsplit("/", 1)[-1]) == "micro-batch"}
    started = time.monotonic()
    while time.monotonic() - started < REHEARSED_WITHIN_S:
        node = catalog.get(Kind.NODES, secondary)
        if node is not None and fragments <= set(node.spec.get("rehearsed") or []):
            waited_s = round(time.monotonic() - started, 1)
            say(f"  passive: {secondary} had rehearsed the fragments {waited_s} s later")
            return waited_s
        time.sleep(0.5)
    say(f"  passive: {secondary} had not rehearsed every fragment within "
        f"{REHEARSED_WITHIN_S:.0f} s; failing it anyway")
    return None


def run_failover(endpoints: Endpoints, registry: SchemaRegistryClient, spark: SparkSession,
                 catalog: CatalogClient, mode: str, primary: str, secondary: str,
                 fail: Callable[[], None], sensors: int = 10, seconds: int = 50,
                 fail_after_first_s: float = 8.0, say: Callable[[str], None] = lambda _: None,
                 trace_every: int = 0, after_recovery_s: float = AFTER_RECOVERY_S,
                 execution: str = "micro-batch", sunion: str = "process") -> FailoverOutcome:
    """Runs the scenario; ``fail`` brings ``primary`` down (kill -9, or a pause).
    ``execution``: the network's (with ``real-time``, its stateless fragment runs in
    Spark's Real-time Mode); ``sunion``: where its fragments' SUnions run."""
    tags = ("rt-" if execution == "real-time" else "") + ("iq-" if sunion != "process" else "")
    name = f"ha-{mode[:3]}-{tags}{uuid.uuid4().hex[:6]}"
    network = f"alpha/{name}"
    prefix = f"{name}."
    alpha = kafka_config(endpoints.bootstrap("alpha"))
    beta = kafka_config(endpoints.bootstrap("beta"))
    topics = {box: f"{prefix}medusa.{name}.{box}" for box in BOXES}
    deploy(network_yaml(name, prefix, ha=mode, fragments=FRAGMENTS, execution=execution,
                        sunion=sunion),
           name, endpoints,
           registry, spark, catalog, dict.fromkeys(BOXES, primary), report=lambda _: None)
    try:
        wait_placed(catalog, network, primary, secondary if mode == "active" else None)
        say(f"  {mode}: running on {primary}" +
            (f", replicas on {secondary}" if mode == "active" else ""))
        watch = OutputWatch(beta, registry, list(topics.values())).start()
        killed: list[int] = []
        recovered: list[float] = []

        def keep_going() -> bool:
            """Until both outputs have shown results written after the kill, and a while."""
            if not killed:
                return True
            if not recovered:
                if all(any(a.appended_ms > killed[0] for a in watch.arrived(topic))
                       for topic in topics.values()):
                    recovered.append(time.monotonic())
                return True
            return time.monotonic() - recovered[0] < after_recovery_s
        steady = SteadyInput(alpha, registry, f"{prefix}sensors.readings", sensors, seconds,
                             trace_every=trace_every, keep_going=keep_going)
        steady.start()
        deadline = time.monotonic() + 180
        while not watch.ids(topics["per_sensor"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(fail_after_first_s)
        executions = {f.name.rsplit("/", 1)[-1]: f.execution
                      for f in federation_status(endpoints, registry).fragments
                      if f.network == network}
        rehearsed_s = (_wait_rehearsed(catalog, network, secondary, executions, say)
                       if mode == "passive" else None)
        failures = _FailureWatch(endpoints.catalog_url, primary).start()
        kill_ms = int(time.time() * 1000)
        fail()
        killed.append(kill_ms)
        say(f"  {mode}: {primary} brought down")
        if not steady.finished.wait(steady.max_seconds + 60):
            raise TimeoutError("the input did not finish")
        if steady.error is not None:
            raise steady.error
        expected = steady.expected()
        # One settle for both: the watch reads the two topics side by side.
        watch.wait_for(topics["per_sensor"], set(expected), timeout_s=300, settle_s=0)
        watch.wait_for(topics["plausible"], {r.tuple_id for r in steady.sent}, timeout_s=60)
        watch.stop()
        failures.stop()
        placement = {box: e.spec["node"]
                     for e in catalog.list(Kind.FRAGMENTS, network=network)
                     for box in e.spec["boxes"]}
        passed = {box: watch.arrived(topic) for box, topic in topics.items()}
        outcome = FailoverOutcome(mode, primary, secondary, kill_ms, failures.declared_ms,
                                  placement, passed, [r.tuple_id for r in steady.sent],
                                  expected, executions, rehearsed_s)
        say(f"  {mode}: detected in {outcome.detection_s} s, first output after "
            f"{outcome.first_after_kill_s} s, gap {outcome.output_gap_s} s, "
            f"lost {len(outcome.lost())}, duplicated {len(outcome.duplicated())}")
        return outcome
    finally:
        undeploy(catalog, network, report=lambda _: None)
