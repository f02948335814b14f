"""DPC on the real stack: two sensor streams, one per participant, merged and averaged
per window by a fragment on beta with an availability bound. Alpha's stream fails twice:
once for less than D (nothing tentative may come of it), then for much longer (tentative
results while it lasts; after it comes back, UNDO, the corrected results and REC_DONE,
and a stable view equal to the fault-free reference, tuple for tuple)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind
from medusa.consuming import ConsumedTuple, TupleConsumer
from medusa.envelope import TupleType
from medusa.sensor_windows import SteadyInput, pair_network_yaml
from medusa.stable_view import stable_view
from medusa_spark.deploy import deploy, undeploy
from tests.federation_processes import NodeProcess, federation_env, running

pytestmark = pytest.mark.e2e

SENSORS = 4
SECONDS = 70
BOUND = "4 seconds"
D_S = 3.0
"""The fragment's delay: (4 s - one 1 s trigger) / one fragment."""
SHORT_FAILURE = (8.0, 1.5)
"""(after, for) seconds: shorter than D."""
LONG_FAILURE = (22.0, 25.0)
"""Long enough that two 10-second windows close on tentative boundaries while it lasts,
however slow the machine's batches are."""


@pytest.fixture(scope="module")
def node(federation, tmp_path_factory) -> Iterator[NodeProcess]:
    run_dir = tmp_path_factory.mktemp("dpc-node")
    started = NodeProcess("dpc-b1", "beta", federation, run_dir)
    with running({started.global_name: started}):
        yield started


class OutputLog:
    """Every record of a topic in the order read (data, BOUNDARY, UNDO, REC_DONE)."""

    def __init__(self, kafka_config: dict, registry, topic: str) -> None:
        self.records: list[ConsumedTuple] = []
        self._consumer = TupleConsumer(kafka_config, registry, [topic], f"dpc-{uuid.uuid4()}")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            consumed = self._consumer.poll(0.5)
            if consumed is not None:
                self.records.append(consumed)

    def of(self, kind: TupleType) -> list[ConsumedTuple]:
        return [c for c in list(self.records) if c.record.type is kind]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


@dataclass
class DpcRun:
    topic: str
    records: list[ConsumedTuple]
    expected: dict[str, dict]
    short_failure_ms: tuple[int, int]
    long_failure_ms: tuple[int, int]
    dpc_states: list[str]


def _fail(steady: SteadyInput, after_s: float, for_s: float, started: float) -> tuple[int, int]:
    time.sleep(max(0.0, started + after_s - time.monotonic()))
    steady.paused.set()
    began = time.time_ns() // 1_000_000
    time.sleep(for_s)
    steady.paused.clear()
    return began, time.time_ns() // 1_000_000


@pytest.fixture(scope="module")
def dpc_run(federation, node, spark, registry_module) -> Iterator[DpcRun]:
    name = f"dpc-{uuid.uuid4().hex[:6]}"
    prefix = f"{name}."
    network = f"alpha/{name}"
    alpha = {"bootstrap.servers": federation.bootstrap("alpha")}
    beta = {"bootstrap.servers": federation.bootstrap("beta")}
    with CatalogClient(federation.catalog_url) as catalog:
        deploy(pair_network_yaml(name, prefix, BOUND), name, federation, registry_module,
               spark, catalog, {"merged": node.global_name, "per_sensor": node.global_name})
        fragment = _wait_running(catalog, network)
        output_topic = f"{prefix}medusa.{name}.per_sensor"
        output = OutputLog(beta, registry_module, output_topic)
        inputs = {"alpha": SteadyInput(alpha, registry_module, f"{prefix}sensors.alpha",
                                       SENSORS, SECONDS),
                  "beta": SteadyInput(beta, registry_module, f"{prefix}sensors.beta",
                                      SENSORS, SECONDS)}
        states: list[str] = []
        sampling = threading.Event()

        def sample() -> None:  # the fragment's DPC state as the catalog shows it
            while not sampling.wait(0.3):
                entry = catalog_for_samples.get(Kind.FRAGMENTS, fragment)
                state = (entry.spec if entry else {}).get("dpc_state", "STABLE")
                if not states or states[-1] != state:
                    states.append(state)

        catalog_for_samples = CatalogClient(federation.catalog_url)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            started = time.monotonic()
            for steady in inputs.values():
                steady.start()
            short = _fail(inputs["alpha"], *SHORT_FAILURE, started)
            long_ = _fail(inputs["alpha"], *LONG_FAILURE, started)
            for steady in inputs.values():
                assert steady.finished.wait(SECONDS + 60), "the input did not finish"
                assert steady.error is None, steady.error
            expected_ids = set(_reference(inputs))
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                view = stable_view(c.record for c in list(output.records))
                if {r.tuple_id for r in view.stable} >= expected_ids and \
                        output.of(TupleType.REC_DONE) and not view.reconciling:
                    break
                time.sleep(1.0)
            time.sleep(3.0)  # any duplicate would come now
            expected = _reference(inputs)
            yield DpcRun(output_topic, list(output.records), expected, short, long_, states)
        finally:
            sampling.set()
            sampler.join(5)
            catalog_for_samples.close()
            output.close()
            undeploy(catalog, network)


def _reference(inputs: dict[str, SteadyInput]) -> dict[str, dict]:
    from medusa.sensor_windows import reference

    return reference([*inputs["alpha"].sent, *inputs["beta"].sent])


def _wait_running(catalog: CatalogClient, network: str, timeout_s: float = 240.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for entry in catalog.list(Kind.FRAGMENTS, network=network):
            if entry.spec.get("phase") == "running":
                return entry.name
        time.sleep(0.5)
    raise TimeoutError(f"{network} did not run within {timeout_s:.0f}s")


def test_a_failure_shorter_than_d_gives_no_tentative_tuple(dpc_run: DpcRun) -> None:
    long_began = dpc_run.long_failure_ms[0]
    early = [c for c in dpc_run.records if c.record.type is TupleType.TENTATIVE
             and c.timestamp_ms < long_began]
    assert early == [], f"{len(early)} tentative result(s) before the long failure"


def test_a_longer_failure_gives_tentative_results_while_it_lasts(dpc_run: DpcRun) -> None:
    began, healed = dpc_run.long_failure_ms
    tentative = [c for c in dpc_run.records if c.record.type is TupleType.TENTATIVE]
    assert tentative, "no tentative result during a 25 s failure with D = 3 s"
    first = min(c.timestamp_ms for c in tentative)
    assert began < first < healed, (
        f"the first tentative result came {(first - began) / 1000:.1f}s after the failure "
        f"began, which lasted {(healed - began) / 1000:.1f}s")


def test_after_healing_undo_corrections_and_rec_done_come_in_order(dpc_run: DpcRun) -> None:
    by_partition: dict[int, list[TupleType]] = {}
    for consumed in dpc_run.records:
        if consumed.record.type is not TupleType.BOUNDARY:
            by_partition.setdefault(consumed.partition, []).append(consumed.record.type)
    for partition, types in by_partition.items():
        assert TupleType.UNDO in types and TupleType.REC_DONE in types, (partition, types)
        undo, done = types.index(TupleType.UNDO), types.index(TupleType.REC_DONE)
        assert undo < done
        assert TupleType.TENTATIVE not in types[undo:done], \
            "no tentative result between UNDO and REC_DONE"


def test_the_stable_view_equals_the_fault_free_run(dpc_run: DpcRun) -> None:
    view = stable_view(c.record for c in dpc_run.records)
    got = {r.tuple_id: r.value for r in view.stable}
    missing = sorted(set(dpc_run.expected) - set(got))
    extra = sorted(set(got) - set(dpc_run.expected))
    assert not missing and not extra, f"missing {missing[:5]}, extra {extra[:5]}"
    wrong = {i: (got[i], v) for i, v in dpc_run.expected.items()
             if {k: got[i][k] for k in v} != v}
    assert not wrong, f"{len(wrong)} corrected result(s) differ, e.g. {list(wrong.items())[:2]}"
    assert view.tentative == [] and not view.reconciling


def test_the_catalog_shows_the_fragment_fail_stabilize_and_come_back(dpc_run: DpcRun) -> None:
    states = dpc_run.dpc_states
    assert "UP_FAILURE" in states and "STABILIZATION" in states, states
    assert states.index("UP_FAILURE") < len(states) - 1 - states[::-1].index("STABILIZATION")
    assert states[-1] == "STABLE", states


def test_medusa_verify_finds_the_output_equal_to_the_reference(dpc_run: DpcRun, federation,
                                                                 tmp_path) -> None:
    reference = tmp_path / "fault-free.jsonl"
    reference.write_text("".join(json.dumps({"type": "STABLE", "id": i, "stime": 0, "value": v})
                                 + "\n" for i, v in dpc_run.expected.items()))
    command = [sys.executable, "-m", "medusa_apps", "verify", dpc_run.topic, "--against",
               str(reference), "--participant", "beta", "--idle", "3"]
    env = federation_env(federation, tmp_path)
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "equal" in done.stdout
    # One result changed in the reference: the difference is found and named.
    changed = next(iter(dpc_run.expected))
    wrong = {**dpc_run.expected, changed: {**dpc_run.expected[changed], "readings": -1}}
    reference.write_text("".join(json.dumps({"type": "STABLE", "id": i, "value": v}) + "\n"
                                 for i, v in wrong.items()))
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1 and changed in done.stdout + done.stderr
