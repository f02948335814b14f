"""The faust-streaming trial: the current failure detector and the faust one, side by side.

Run against a stack of one participant (Kafka with SASL/SCRAM, the registry, a catalog)::

    python -m tests.faust_trial measure --out /tmp/faust-trial/figures.json

Simulated nodes beat with the node's own ``Node._beat`` (no Spark). Each detector has a
catalog of its own (the stack's, and a second one on its own topic), so one's
declarations cannot hide a node from the other; every node registers in both.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind
from medusa.detector.policy import DetectorConfig
from medusa.endpoints import resolve

PARTICIPANT = "alpha"
IMPLEMENTATIONS = {"current": (38091, "http://127.0.0.1:38090"),
                   "faust": (38092, "http://127.0.0.1:38095")}
"""Implementation -> (its /nodes port, its catalog)."""
SECOND_CATALOG = ("38095", "medusa.catalog.faust-trial")


def beat(node: str, interval_s: float) -> None:
    """A node that only registers and beats, as a Spark node does (``Node._beat``)."""
    from medusa.registry import registry_client
    from medusa_spark.node import Node

    endpoints = resolve()
    incarnation = uuid.uuid4().hex[:12]
    fake = SimpleNamespace(bootstrap=endpoints.bootstrap(PARTICIPANT),
                           registry=registry_client(endpoints.registry_url),
                           global_name=node, participant=PARTICIPANT, incarnation=incarnation,
                           hosted={}, heartbeat_interval_s=interval_s, _stop=threading.Event())
    beating = threading.Thread(target=Node._beat, args=(fake,), daemon=True)
    beating.start()
    time.sleep(1.0)  # beating before joining, as a node does
    for _, url in IMPLEMENTATIONS.values():
        with CatalogClient(url) as catalog:
            catalog.update(Kind.NODES, node, lambda spec: {
                **(spec or {}), "status": "up", "incarnation": incarnation})
    print("up", flush=True)
    beating.join()


def detector(implementation: str, events: Path) -> None:
    from medusa.detector.health_server import serve

    port, catalog_url = IMPLEMENTATIONS[implementation]
    config = DetectorConfig(policy="phi", interval_s=0.5, acceptable_pause_s=3.0)
    sink = events.open("a")

    def record(event: Any) -> None:
        sink.write(json.dumps({"impl": implementation, "kind": event.kind, "node": event.node,
                               "at": event.at}) + "\n")
        sink.flush()

    catalog = CatalogClient(catalog_url)
    if implementation == "faust":
        from medusa.detector.faust_service import FaustDetector

        running = FaustDetector(resolve(), catalog, config, PARTICIPANT, on_event=record)
        serve(running.core, "127.0.0.1", port)
        running.run()
    else:
        from medusa.detector.service import FailureDetector

        current = FailureDetector(resolve(), catalog, config, [PARTICIPANT], on_event=record)
        serve(current, "127.0.0.1", port)
        signal.signal(signal.SIGTERM, lambda *_: current.stop())
        current.run()


# -- measuring ----------------------------------------------------------------------------

def _spawn(*args: str, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tests.faust_trial", *args],
                            stdout=log.open("ab"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _view(implementation: str) -> dict[str, Any] | None:
    port = IMPLEMENTATIONS[implementation][0]
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/nodes", timeout=1) as answer:
            return json.loads(answer.read())  # type: ignore[no-any-return]
    except OSError:
        return None


def _watching(implementation: str, nodes: list[str]) -> bool:
    view = _view(implementation)
    return view is not None and all(
        view["watched"].get(n, {}).get("heartbeats", 0) > 0 for n in nodes)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _wait(condition: Any, timeout_s: float, step_s: float = 0.05) -> float | None:
    """Seconds until ``condition()`` held, or None."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if condition():
            return time.monotonic() - start
        time.sleep(step_s)
    return None


def _busy(stop_at: float) -> None:
    while time.time() < stop_at:
        pass


class Trial:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.events = work / "events.jsonl"
        self.events.write_text("")
        self.detectors: dict[str, subprocess.Popen[bytes]] = {}
        self.nodes: dict[str, subprocess.Popen[bytes]] = {}
        self.count = 0

    def start_detector(self, implementation: str, watching: list[str]) -> dict[str, float]:
        process = _spawn("detector", implementation, str(self.events),
                         log=self.work / f"detector-{implementation}.log")
        self.detectors[implementation] = process
        ready = _wait(lambda: _watching(implementation, watching), 120)
        return {"start_s": None if ready is None else round(ready, 2), "pid": process.pid}

    def start_node(self) -> str:
        self.count += 1
        node = f"{PARTICIPANT}/sim{self.count}-{uuid.uuid4().hex[:4]}"
        process = _spawn("beat", node, log=self.work / "nodes.log")
        self.nodes[node] = process
        return node

    def kill(self, process: subprocess.Popen[bytes]) -> float:
        os.killpg(process.pid, signal.SIGKILL)
        killed = time.time()
        process.wait()
        return killed

    def declared(self, node: str) -> dict[str, float]:
        return {e["impl"]: e["at"] for e in _events(self.events)
                if e["node"] == node and e["kind"] == "failed"}

    def stop(self) -> None:
        for process in [*self.nodes.values(), *self.detectors.values()]:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in [*self.nodes.values(), *self.detectors.values()]:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def measure(out: Path, kills: int, load_s: float, nodes_n: int) -> dict[str, Any]:
    work = out.parent
    work.mkdir(parents=True, exist_ok=True)
    trial = Trial(work)
    figures: dict[str, Any] = {"impls": {}}
    try:
        live = [trial.start_node() for _ in range(nodes_n)]
        time.sleep(3)
        for implementation in IMPLEMENTATIONS:
            figures["impls"][implementation] = trial.start_detector(implementation, live)
        time.sleep(10)
        for implementation, process in trial.detectors.items():
            figures["impls"][implementation]["rss_mb"] = round(_rss_mb(process.pid), 1)

        # 1. Detection time after kill -9 of a beating node.
        detection: dict[str, list[float]] = {i: [] for i in IMPLEMENTATIONS}
        for _ in range(kills):
            node = trial.start_node()
            assert _wait(lambda n=node: all(_watching(i, [n]) for i in IMPLEMENTATIONS), 60)
            time.sleep(5)
            killed = trial.kill(trial.nodes.pop(node))
            _wait(lambda n=node: len(trial.declared(n)) == len(IMPLEMENTATIONS), 30)
            for implementation, at in trial.declared(node).items():
                detection[implementation].append(round(at - killed, 3))
        figures["detection_s"] = detection

        # 2. False suspicions of live nodes under CPU load.
        before = len(_events(trial.events))
        stop_at = time.time() + load_s
        hogs = [multiprocessing.Process(target=_busy, args=(stop_at,))
                for _ in range(os.cpu_count() or 2)]
        for hog in hogs:
            hog.start()
        for hog in hogs:
            hog.join()
        time.sleep(5)
        window = [e for e in _events(trial.events)[before:] if e["node"] in live]
        figures["load"] = {"seconds": load_s, "busy_processes": len(hogs), "live_nodes": len(live),
                           **{i: {"suspected": sum(1 for e in window if e["impl"] == i and
                                                   e["kind"] == "suspected"),
                                  "failed": sum(1 for e in window if e["impl"] == i and
                                                e["kind"] == "failed")}
                              for i in IMPLEMENTATIONS}}

        # 3. kill -9 of the detectors; a node dies while they are down; restart.
        for implementation in IMPLEMENTATIONS:
            trial.kill(trial.detectors[implementation])
        dead_while_down = trial.start_node()
        time.sleep(3)
        dying = trial.nodes.pop(dead_while_down)
        died = trial.kill(dying)
        time.sleep(2)
        events_before_restart = len(_events(trial.events))
        recovery: dict[str, Any] = {}
        for implementation in IMPLEMENTATIONS:
            restarted = time.time()
            started = trial.start_detector(implementation, live)
            recovery[implementation] = {"restart_to_watching_s": started["start_s"],
                                        "restarted_at": restarted}
        _wait(lambda: len(trial.declared(dead_while_down)) == len(IMPLEMENTATIONS), 30)
        probe = trial.start_node()
        assert _wait(lambda: all(_watching(i, [probe]) for i in IMPLEMENTATIONS), 60)
        time.sleep(3)
        probe_killed = trial.kill(trial.nodes.pop(probe))
        _wait(lambda: len(trial.declared(probe)) == len(IMPLEMENTATIONS), 30)
        time.sleep(5)
        after = _events(trial.events)[events_before_restart:]
        for implementation in IMPLEMENTATIONS:
            mine = [e for e in after if e["impl"] == implementation]
            declared = trial.declared(dead_while_down).get(implementation)
            recovery[implementation].update({
                "dead_while_down_declared_after_restart_s":
                    None if declared is None else round(
                        declared - recovery[implementation]["restarted_at"], 2),
                "dead_while_down_declared_after_death_s":
                    None if declared is None else round(declared - died, 2),
                "detection_after_restart_s": round(
                    trial.declared(probe).get(implementation, float("nan")) - probe_killed, 3),
                "redeclared_earlier_failures": sum(
                    1 for e in mine if e["kind"] == "failed" and e["node"] not in
                    (dead_while_down, probe)),
                "suspected_live_nodes": sum(
                    1 for e in mine if e["kind"] == "suspected" and e["node"] in live),
            })
            del recovery[implementation]["restarted_at"]
        figures["detector_restart"] = recovery
        for implementation, process in trial.detectors.items():
            figures["impls"][implementation]["rss_mb_end"] = round(_rss_mb(process.pid), 1)
    finally:
        trial.stop()
    out.write_text(json.dumps(figures, indent=2))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    beating = commands.add_parser("beat")
    beating.add_argument("node")
    beating.add_argument("--interval", type=float, default=0.5)
    detecting = commands.add_parser("detector")
    detecting.add_argument("implementation", choices=sorted(IMPLEMENTATIONS))
    detecting.add_argument("events", type=Path)
    measuring = commands.add_parser("measure")
    measuring.add_argument("--out", type=Path, default=Path("/tmp/faust-trial/figures.json"))
    measuring.add_argument("--kills", type=int, default=5)
    measuring.add_argument("--load-s", type=float, default=60.0)
    measuring.add_argument("--nodes", type=int, default=4)
    arguments = parser.parse_args()
    if arguments.command == "beat":
        beat(arguments.node, arguments.interval)
    elif arguments.command == "detector":
        detector(arguments.implementation, arguments.events)
    else:
        print(json.dumps(measure(arguments.out, arguments.kills, arguments.load_s,
                                 arguments.nodes), indent=2))


if __name__ == "__main__":
    main()
