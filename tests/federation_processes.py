"""The federation's own processes, started by tests: a catalog service, nodes."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind
from medusa.endpoints import Endpoints
from tests.waiting import wait_until


def free_ports(count: int, start: int = 28100, end: int = 28400) -> list[int]:
    """Free ports below the ephemeral range, where outgoing connections cannot take them."""
    found: list[int] = []
    for port in range(start + os.getpid() % 50, end):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        found.append(port)
        if len(found) == count:
            return found
    raise RuntimeError(f"fewer than {count} free ports in {start}-{end}")


def free_port(start: int = 28100, end: int = 28400) -> int:
    return free_ports(1, start, end)[0]


def federation_env(endpoints: Endpoints, run_dir: Path,
                   catalog_url: str | None = None) -> dict[str, str]:
    """Environment that points a child process at this test session's federation."""
    return endpoints.environment(run_dir, catalog_url)


class CatalogProcess:
    def __init__(self, endpoints: Endpoints, run_dir: Path, topic: str | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.topic = topic or f"test.catalog.{uuid.uuid4().hex[:8]}"
        self.env = federation_env(endpoints, run_dir)
        self.log = run_dir / f"catalog-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> CatalogProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "medusa_apps", "catalog", "serve", "--port", str(self.port),
                 # The stack's catalog keeps the ACLs and serves the console.
                 "--topic", self.topic, "--no-access", "--no-console"],
                stdout=log, stderr=subprocess.STDOUT, env=self.env)
        with CatalogClient(self.url) as client:
            client.wait_healthy(90)
        return self

    def kill(self) -> None:
        """kill -9: no shutdown hook runs."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(30)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
            self.process = None


_OWN_LINE = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ medusa[.\w]* ")
"""A line of a node's own logging (``medusa.node``, ``medusa.dpc`` and the like)."""


class NodeProcess:
    """``medusa node`` as its own process, like a node on another machine."""

    def __init__(self, name: str, participant: str, endpoints: Endpoints, run_dir: Path,
                 secondary: str | None = None, master: str = "local[1]",
                 options: tuple[str, ...] = (), checkpoint_root: str | None = None) -> None:
        self.name, self.participant = name, participant
        self.catalog_url = endpoints.catalog_url
        self.env = federation_env(endpoints, run_dir)
        self.log = run_dir / "logs" / f"node-{participant}-{name}.log"
        self.command = [sys.executable, "-m", "medusa_apps", "node", "--name", name,
                        "--participant", participant, "--master", master,
                        "--checkpoint-root",
                        checkpoint_root or str(run_dir / "checkpoints" / participant / name)]
        if secondary:
            self.command += ["--secondary", secondary]
        self.command += list(options)
        self.process: subprocess.Popen[bytes] | None = None
        self._incarnation: str | None = None

    @property
    def global_name(self) -> str:
        return f"{self.participant}/{self.name}"

    def start(self) -> NodeProcess:
        """Starts the process; ``wait_registered`` waits for it to join the catalog."""
        with CatalogClient(self.catalog_url) as catalog:
            known = catalog.get(Kind.NODES, self.global_name)
        self._incarnation = known.spec.get("incarnation") if known else None
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            # Its own process group, so that a kill takes its JVM down with it; in the
            # session of the others (see ``medusa.stack.processes.start``).
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                            env=self.env, process_group=0)
        return self

    def log_size(self) -> int:
        """Where the log ends now: ``log_since`` reads what was written after."""
        return self.log.stat().st_size if self.log.exists() else 0

    def log_since(self, size: int) -> str:
        """The log written since it had ``size`` bytes (a shared node's log holds what
        earlier modules made it do)."""
        with self.log.open("rb") as log:
            log.seek(size)
            return log.read().decode(errors="replace")

    def narrative(self, last: int = 25) -> list[str]:
        """The last lines the node's own loggers wrote (what it ran, its DPC states, its
        moves and takeovers), without the JVM's and the HTTP client's."""
        if not self.log.exists():
            return []
        with self.log.open("rb") as log:
            lines = log.read().decode(errors="replace").splitlines()
        return [line for line in lines if _OWN_LINE.match(line)][-last:]

    def signal(self, sig: signal.Signals) -> None:
        assert self.process is not None, f"node {self.global_name} is not running"
        os.killpg(self.process.pid, sig)

    def kill(self) -> None:
        """kill -9 of the node and its JVM, as when its machine dies."""
        self.signal(signal.SIGKILL)
        assert self.process is not None
        self.process.wait(30)
        self.process = None

    def wait_registered(self, timeout_s: float = 240.0) -> None:
        from medusa_spark.deploy import wait_for_node

        with CatalogClient(self.catalog_url) as catalog:
            def registered() -> bool:
                if self.process is not None and self.process.poll() is not None:
                    raise RuntimeError(f"node {self.global_name} exited; see {self.log}")
                try:
                    wait_for_node(catalog, self.global_name, 2.0, self._incarnation)
                except TimeoutError:
                    return False
                return True
            # wait_for_node waits 2 s itself between the checks.
            wait_until(f"node {self.global_name} registered (see {self.log})", registered,
                       timeout_s, interval_s=0)

    def stop(self) -> None:
        if self.process is None:
            return
        os.killpg(self.process.pid, signal.SIGCONT)  # in case a test left it paused
        self.process.terminate()
        try:
            self.process.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
        self.process = None


@contextmanager
def running(nodes: dict[str, NodeProcess]) -> Iterator[dict[str, NodeProcess]]:
    """The nodes started side by side (their JVMs start in parallel), each registered;
    all stopped afterwards, whatever happened."""
    try:
        for node in nodes.values():
            node.start()
        for node in nodes.values():
            node.wait_registered()
        yield nodes
    finally:
        for node in nodes.values():
            node.stop()


class SharedNodes:
    """Nodes the e2e modules of a session share, so that each module does not pay for
    starting and stopping JVMs: two on alpha (each the other's secondary) and one on beta.
    Started on first use; a node a module killed or stopped is started again by the next
    ``ready``."""

    A1, A2, B1 = "alpha/shared-a1", "alpha/shared-a2", "beta/shared-b1"

    def __init__(self, endpoints: Endpoints, run_dir: Path) -> None:
        self.nodes = {
            self.A1: NodeProcess("shared-a1", "alpha", endpoints, run_dir, secondary=self.A2),
            self.A2: NodeProcess("shared-a2", "alpha", endpoints, run_dir, secondary=self.A1),
            # A real-time fragment of two inputs holds three task slots (test_dpc_realtime).
            self.B1: NodeProcess("shared-b1", "beta", endpoints, run_dir,
                                 options=("--realtime-slots", "3")),
        }

    def ready(self) -> dict[str, NodeProcess]:
        """Every node running and registered (their JVMs start side by side)."""
        for node in self.nodes.values():
            if node.process is not None and node.process.poll() is not None:
                node.process = None  # it died (kill -9 by a test)
            if node.process is None:
                node.start()
        for node in self.nodes.values():
            node.wait_registered()
        return self.nodes

    def narratives(self, last: int = 25) -> str:
        """Each started node's last lines of its own (``NodeProcess.narrative``)."""
        return "\n".join(f"-- {name}\n" + "\n".join(node.narrative(last))
                         for name, node in self.nodes.items() if node.log.exists())

    def stop(self) -> None:
        """Stops them all, side by side (a test that wants no node but its own on a
        participant)."""
        for node in self.nodes.values():
            if node.process is not None and node.process.poll() is None:
                os.killpg(node.process.pid, signal.SIGCONT)  # in case a test left it paused
                node.process.terminate()
        for node in self.nodes.values():
            node.stop()  # waits for the ones asked above; kills what does not stop
