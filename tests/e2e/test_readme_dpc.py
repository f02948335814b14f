"""The README's DPC walk-through, run as written on the test stack with both participants'
BPM agents on, as `make up` runs them: a node of beta, a contract under which beta hosts
alpha's sensor-pair network, the deploy, sensors on both participants, a 30 s partition,
then what the README says a user sees (UP_FAILURE meanwhile, tentative results, UNDO and
REC_DONE, a fault-free run that `medusa verify` finds equal, the failure's trace).

Between the lines the test waits as a user would (for the node to be up, the fragment to
run and answer, the partition to heal and reconcile, the check network to catch up); the
lines themselves run unchanged in a shell, `&` starting a job and `kill %N` stopping one.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from medusa.batch_phases import PHASES
from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind
from medusa.consuming import TupleConsumer
from medusa.jaeger_client import Trace
from medusa.settings import REPO_ROOT, kafka_config
from medusa.stable_view import stable_view
from medusa.trace_view import recent, roots
from tests.federation_processes import federation_env
from tests.fragment_checks import wait_network_running
from tests.waiting import wait_for, wait_until

pytestmark = pytest.mark.e2e

README = REPO_ROOT / "README.md"
BLOCK_AFTER = "A walk-through, with the local federation up"
NETWORK, CHECK = "alpha/sensor-pair", "alpha/sensor-pair-check"
OUTPUT, CHECK_OUTPUT = "medusa.sensor-pair.per_sensor", "medusa.sensor-pair-check.per_sensor"


def walkthrough() -> list[str]:
    """The commands of the README's walk-through block, continuation lines joined."""
    text = README.read_text()
    start = text.index("```bash\n", text.index(BLOCK_AFTER)) + len("```bash\n")
    block = text[start:text.index("\n```", start)].replace("\\\n", " ")
    return [line.strip() for line in block.splitlines() if line.strip()]


@dataclass
class Line:
    command: str
    returncode: int | None = None
    output: str = ""


@dataclass
class Walk:
    lines: list[Line] = field(default_factory=list)
    states_during_cut: list[str] = field(default_factory=list)
    """The fragment's DPC state as `medusa status --json` showed it during the partition."""
    states: list[str] = field(default_factory=list)
    """Each change of its DPC state in the catalog, from the cut until STABLE again."""
    batch_phases: list[dict[str, float]] = field(default_factory=list)
    """Where the fragment's batches spent their time, as each status showed it."""
    node_of_fragment: str | None = None
    bpm_logs: str = ""
    consumed: Path | None = None

    def one(self, pattern: str) -> Line:
        found = [line for line in self.lines if re.search(pattern, line.command)]
        assert len(found) == 1, (pattern, [line.command for line in self.lines])
        return found[0]


class Shell:
    """A user's terminal: foreground lines run to their end, `&` lines are jobs."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.env, self.cwd = env, cwd
        self.jobs: list[subprocess.Popen[bytes]] = []

    def run(self, command: str, timeout_s: float = 300) -> Line:
        kill = re.fullmatch(r"kill((?: %\d+)+)(?:\s+#.*)?", command)
        if kill:
            for number in re.findall(r"%(\d+)", kill.group(1)):
                self.jobs[int(number) - 1].terminate()
            return Line(command, 0)
        if re.search(r"&\s*(#.*)?$", command):
            job = len(self.jobs) + 1
            log = (self.cwd / f"job-{job}.log").open("ab")
            self.jobs.append(subprocess.Popen(
                ["bash", "-c", "exec " + re.sub(r"&\s*(#.*)?$", "", command)], cwd=self.cwd,
                env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            return Line(command, None)
        done = subprocess.run(["bash", "-c", command], cwd=self.cwd, env=self.env,
                              capture_output=True, text=True, timeout=timeout_s, check=False)
        return Line(command, done.returncode, done.stdout + done.stderr)

    def stop(self) -> None:
        for job in self.jobs:
            if job.poll() is None:
                job.terminate()
        for job in self.jobs:
            try:
                job.wait(30)
            except subprocess.TimeoutExpired:
                job.kill()


def _node_up(catalog: CatalogClient, name: str) -> bool:
    entry = catalog.get(Kind.NODES, name)
    return entry is not None and entry.spec.get("status") == "up"


def _fragment(catalog: CatalogClient, network: str) -> dict | None:
    entries = catalog.list(Kind.FRAGMENTS, network=network)
    return entries[0].spec if entries else None


def _stable_results(config: dict, registry, topic: str, read_s: float = 300.0) -> int:
    """How many results the stable view of ``topic`` holds now: all of it once the output is
    idle, or what ``read_s`` of reading gets while a running fragment's boundaries keep
    coming."""
    with TupleConsumer(config, registry, [topic], f"readme-{uuid.uuid4().hex[:6]}") as consumer:
        return len(stable_view(c.record for c in consumer.drain(idle_s=2.0,
                                                                  timeout_s=read_s)).stable)


def _caught_up(config: dict, registry, topic: str, quiet_s: float, timeout_s: float) -> None:
    """Waits until ``topic``'s stable view has results and gained none for ``quiet_s``."""
    last, since = -1, time.monotonic()

    def quiet() -> bool:
        nonlocal last, since
        count = _stable_results(config, registry, topic)
        if count != last:
            last, since = count, time.monotonic()
            return False
        return count > 0 and time.monotonic() - since >= quiet_s

    wait_until(lambda: f"{topic} caught up ({last} results)", quiet, timeout_s, interval_s=1.0)


@pytest.fixture(scope="module")
def walk(federation, shared_nodes, registry_module, tmp_path_factory) -> Iterator[Walk]:
    shared_nodes.ready()  # other beta nodes may run too, as on a user's federation
    cwd = tmp_path_factory.mktemp("readme-dpc")
    (cwd / "spark_apps").symlink_to(REPO_ROOT / "spark_apps")
    env = {**federation_env(federation, cwd), "COLUMNS": "200",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    agents = [subprocess.Popen(
        [sys.executable, "-m", "medusa_apps", "bpm", "--participant", participant],
        env=env, stdout=(cwd / f"bpm-{participant}.log").open("ab"), stderr=subprocess.STDOUT)
        for participant in ("alpha", "beta")]
    shell, walked = Shell(env, cwd), Walk()
    beta = kafka_config(federation.bootstrap("beta"))
    catalog = CatalogClient(federation.catalog_url)
    try:
        for command in walkthrough():
            name = shlex.split(command, comments=True)[:3]
            if name[:2] == ["medusa", "fault"] and "--for" in command:
                with _states_sampled(federation.catalog_url, walked.states):
                    walked.lines.append(_partition_watched(shell, command, env, walked))
                    # The user reads the results once the fragment has reconciled.
                    wait_until("the fragment is STABLE again after the heal", lambda: (
                        (_fragment(catalog, NETWORK) or {}).get("dpc_state") == "STABLE"), 180)
                continue
            if name[:2] == ["medusa", "verify"]:
                _caught_up(beta, registry_module, CHECK_OUTPUT, quiet_s=10, timeout_s=300)
            line = shell.run(command)
            walked.lines.append(line)
            print(f"$ {command}\n{line.output[-3000:]}")
            if line.returncode not in (0, None):
                raise AssertionError(f"{command!r} exited {line.returncode}:\n{line.output}")
            if name[:2] == ["medusa", "node"]:
                wait_until("beta/node-1 is up", lambda: _node_up(catalog, "beta/node-1"), 240)
            elif name[:2] == ["medusa", "deploy"]:
                network = CHECK if "--name" in command else NETWORK
                wait_network_running(catalog, network, timeout_s=240)
            elif name[:3] == ["medusa", "produce", "sensors"] and "beta" in command:
                wait_until("the first window came out", lambda: _stable_results(
                    beta, registry_module, OUTPUT, read_s=15.0) > 0, 240)
        walked.node_of_fragment = (_fragment(catalog, NETWORK) or {}).get("node")
        walked.consumed = cwd / "out.jsonl"
        walked.bpm_logs = "".join((cwd / f"bpm-{p}.log").read_text() for p in ("alpha", "beta"))
        yield walked
    finally:
        for agent in agents:
            agent.terminate()
            agent.wait(30)
        for network in (CHECK, NETWORK):  # before the node stops: nothing to take over
            subprocess.run([sys.executable, "-m", "medusa_apps", "undeploy", network], env=env,
                           capture_output=True, timeout=120, check=False)
        shell.stop()
        subprocess.run([sys.executable, "-m", "medusa_apps", "fault", "heal"], env=env,
                       capture_output=True, timeout=60, check=False)
        catalog.close()


@contextmanager
def _states_sampled(catalog_url: str, states: list[str]) -> Iterator[None]:
    """Records each change of the fragment's DPC state in the catalog, every 0.3 s."""
    stop = threading.Event()

    def sample(catalog: CatalogClient) -> None:
        state = str((_fragment(catalog, NETWORK) or {}).get("dpc_state", "STABLE"))
        if not states or states[-1] != state:
            states.append(state)

    def sampling() -> None:
        with CatalogClient(catalog_url) as catalog:
            while not stop.wait(0.3):
                sample(catalog)

    sampler = threading.Thread(target=sampling, daemon=True)
    sampler.start()
    try:
        yield
    finally:
        stop.set()
        sampler.join(5)
        with CatalogClient(catalog_url) as catalog:
            sample(catalog)  # the state the wait ended on


def _partition_watched(shell: Shell, command: str, env: dict[str, str], walked: Walk) -> Line:
    """Runs the partition line; meanwhile `medusa status --json`, as the README says."""
    result: list[Line] = []
    running = threading.Thread(target=lambda: result.append(shell.run(command)))
    running.start()
    while running.is_alive():
        status = subprocess.run([sys.executable, "-m", "medusa_apps", "status", "--json"],
                                env=env, capture_output=True, text=True, timeout=60,
                                check=False)
        if status.returncode == 0:
            for fragment in json.loads(status.stdout).get("fragments", []):
                if fragment["network"] == NETWORK:
                    walked.states_during_cut.append(fragment["dpc_state"])
                    walked.batch_phases.append(fragment["batch_phases_ms"])
        time.sleep(3.0)
    running.join()
    return result[0]


def test_every_line_of_the_walkthrough_succeeds(walk: Walk) -> None:
    failed = [(line.command, line.output[-2000:]) for line in walk.lines
              if line.returncode not in (0, None)]
    assert not failed, failed


def test_the_deploy_names_the_contract_and_the_fragment_stays_on_beta(walk: Walk) -> None:
    deployed = walk.one(r"deploy \S+sensor_pair.yaml\s*(#|$)").output
    assert "under contract alpha/sensor-pair" in deployed, deployed
    assert walk.node_of_fragment and walk.node_of_fragment.startswith("beta/"), (
        walk.node_of_fragment, walk.bpm_logs[-3000:])
    assert "bringing" not in walk.bpm_logs, walk.bpm_logs[-3000:]


def test_status_shows_up_failure_while_cut_off(walk: Walk) -> None:
    assert "UP_FAILURE" in walk.states_during_cut, walk.states_during_cut


def test_status_says_where_the_fragment_s_batches_spend_their_time(walk: Walk) -> None:
    shown = [phases for phases in walk.batch_phases if phases]
    assert shown, walk.batch_phases
    assert set(shown[-1]) == set(PHASES), shown[-1]
    assert shown[-1]["total"] > 0 and shown[-1]["compute"] > 0, shown[-1]
    # The fragment writes to Kafka in transactions: their commits are timed apart.
    assert any(phases["transaction_commit"] > 0 for phases in shown), shown


def test_the_catalog_shows_the_fragment_fail_stabilize_and_come_back(walk: Walk) -> None:
    states = walk.states
    assert "UP_FAILURE" in states and "STABILIZATION" in states, states
    assert states.index("UP_FAILURE") < len(states) - 1 - states[::-1].index("STABILIZATION")
    assert states[-1] == "STABLE", states


def test_tentative_results_come_and_are_undone_and_settled(walk: Walk) -> None:
    tentative = walk.one(r"grep -c TENTATIVE")
    assert int(tentative.output.strip()) > 0, tentative.output
    marks = walk.one(r"grep -E 'UNDO\|REC_DONE'").output.splitlines()
    types = [json.loads(line)["type"] for line in marks]
    assert "UNDO" in types and "REC_DONE" in types, types
    # Per partition: UNDO, the corrections, REC_DONE, and no tentative result between.
    assert walk.consumed is not None
    by_partition: dict[int, list[str]] = {}
    for line in walk.consumed.read_text().splitlines():
        record = json.loads(line)
        if record["type"] != "BOUNDARY":
            by_partition.setdefault(record["partition"], []).append(record["type"])
    for partition, kinds in by_partition.items():
        assert "UNDO" in kinds and "REC_DONE" in kinds, (partition, kinds)
        undo, done = kinds.index("UNDO"), kinds.index("REC_DONE")
        assert undo < done and "TENTATIVE" not in kinds[undo:done], (partition, kinds)


def test_verify_finds_the_stable_view_equal_to_the_fault_free_run(walk: Walk) -> None:
    verified = walk.one(r"medusa verify").output
    assert "equal" in verified, verified


def test_the_partition_is_one_trace_from_the_delay_to_rec_done(walk: Walk, federation) -> None:
    traced = walk.one(r"medusa trace --kind partition").output
    assert "sensor-pair" in traced, traced
    stages = ["delay", "tentative release", "heal", "stabilization", "reconcile", "REC_DONE"]
    found = _partition_trace(federation.jaeger_query_url, NETWORK, stages)
    [root] = roots(found)
    assert root.service == "medusa-sunion"
    for stage in stages:
        assert found.parent(found.one(stage)) == root, stage
    heal, reconcile, rec_done = (found.one(n) for n in ("heal", "reconcile", "REC_DONE"))
    for span in (reconcile, rec_done):
        assert span.service == f"medusa-node {walk.node_of_fragment}"
    assert heal.start_us <= reconcile.start_us <= rec_done.start_us
    epoch = found.one("tentative release").attributes["medusa.dpc.epoch"]
    assert rec_done.attributes["medusa.dpc.epoch"] == epoch
    assert rec_done.attributes["medusa.dpc.rolled_back_batches"] >= 1


def _partition_trace(query_url: str, network: str, spans: list[str],
                     timeout_s: float = 90.0) -> Trace:
    """The newest partition trace of a fragment of ``network`` with every span named."""
    seen: list[list[str]] = []

    def complete() -> Trace | None:
        found = [t for t in recent(query_url, "partition", 10, 3600)
                 if any(r.name.startswith(f"up-failure {network}/") for r in roots(t))]
        seen[:] = [sorted(s.name.split(" ")[0] for s in t.spans) for t in found]
        return next((t for t in found if all(t.named(name) for name in spans)), None)

    return wait_for(lambda: f"a partition trace of {network} with {spans} (found {seen})",
                    complete, timeout_s, interval_s=2)
