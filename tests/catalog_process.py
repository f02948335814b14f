"""A catalog service of one test: its own process, port and Kafka topic."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

from medusa.catalog.client import CatalogClient
from medusa.stack.endpoints import Endpoints


def free_port(start: int = 28100, end: int = 28400) -> int:
    """A port below the ephemeral range, where outgoing connections cannot take it."""
    for port in range(start + os.getpid() % 50, end):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {start}-{end}")


def federation_env(endpoints: Endpoints, run_dir: Path) -> dict[str, str]:
    """Environment that points a child process at this test session's federation."""
    return {**os.environ, "MEDUSA_RUN_DIR": str(run_dir),
            "MEDUSA_EXTERNAL_KAFKA": ",".join(f"{p}={b}" for p, b in endpoints.kafka.items()),
            "MEDUSA_EXTERNAL_REGISTRY_URL": endpoints.registry_url,
            "MEDUSA_EXTERNAL_OTLP_ENDPOINT": endpoints.otlp_endpoint,
            "MEDUSA_EXTERNAL_JAEGER_QUERY_URL": endpoints.jaeger_query_url}


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
                [sys.executable, "-m", "medusa", "catalog", "serve", "--port", str(self.port),
                 "--topic", self.topic], stdout=log, stderr=subprocess.STDOUT, env=self.env)
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
