"""A Spark standalone cluster (one master, one worker) from the pyspark installation.

pyspark's wheel carries ``bin/spark-class`` and Spark's ``jars/``, which is all a
standalone master and worker need. Both run as local processes bound to
127.0.0.1, each in a process group of its own (the worker's executors are its
children, so they go with it), with logs and the worker's folder under the
folder given::

    with SparkStandalone(tmp / "spark") as cluster:
        subprocess.run(["medusa", "node", ..., "--master", cluster.master_url])
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from medusa.settings import StackSettings
from tests.federation_processes import free_ports
from tests.waiting import wait_until

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    """The pyspark package: it is a SPARK_HOME, with ``bin/`` and ``jars/``."""
    spec = importlib.util.find_spec("pyspark")  # found, not imported
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pyspark is not installed")
    home = Path(next(iter(spec.submodule_search_locations))).resolve()
    if not (home / "bin" / "spark-class").is_file() or not (home / "jars").is_dir():
        raise RuntimeError(f"{home} has no bin/spark-class or jars/: not a full pyspark install")
    return home


def java_home(settings: StackSettings | None = None) -> Path:
    """MEDUSA_JAVA_HOME, else JAVA_HOME, else the JDK of the ``java`` on PATH (as the stack)."""
    settings = settings or StackSettings()
    if settings.java_home is not None:
        return settings.java_home
    if os.environ.get("JAVA_HOME"):
        return Path(os.environ["JAVA_HOME"])
    found = shutil.which("java")
    if found is None:
        raise RuntimeError("no java on PATH; set MEDUSA_JAVA_HOME to a JDK 17+")
    return Path(found).resolve().parents[1]


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class SparkStandalone:
    """A standalone master and one worker; ``master_url`` once entered."""

    def __init__(self, folder: Path, cores: int = 2, memory: str = "2g",
                 settings: StackSettings | None = None, startup_timeout_s: float = 120.0,
                 daemon_memory: str = "512m") -> None:
        self.folder = Path(folder)
        self.cores, self.memory = cores, memory
        self.startup_timeout_s = startup_timeout_s
        self.home = spark_home()
        self.java_home = java_home(settings)
        self.daemon_memory = daemon_memory
        self.master_port, self.webui_port, self.worker_webui_port = free_ports(3, 27100, 27400)
        self.logs = self.folder / "logs"
        self.work_dir = self.folder / "work"
        self._processes: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def webui_url(self) -> str:
        return f"http://127.0.0.1:{self.webui_port}"

    def log(self, role: str) -> Path:
        return self.logs / f"spark-{role}.log"

    def _env(self) -> dict[str, str]:
        conf = self.folder / "conf"  # empty: no spark-env.sh or defaults of the machine apply
        conf.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
        return {**env, "SPARK_HOME": str(self.home), "JAVA_HOME": str(self.java_home),
                "SPARK_CONF_DIR": str(conf), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOG_DIR": str(self.logs), "SPARK_DAEMON_MEMORY": self.daemon_memory,
                "SPARK_NO_DAEMONIZE": "1"}

    def _start(self, role: str, arguments: list[str]) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        with self.log(role).open("ab") as sink:
            self._processes[role] = subprocess.Popen(
                [str(self.home / "bin" / "spark-class"), *arguments], stdout=sink,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self._env(),
                cwd=self.folder, start_new_session=True)  # its group: executors go with it

    def start(self) -> SparkStandalone:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._start("master", [MASTER_CLASS, "--host", "127.0.0.1",
                                   "--port", str(self.master_port),
                                   "--webui-port", str(self.webui_port)])
            self._start("worker", [WORKER_CLASS, self.master_url, "--host", "127.0.0.1",
                                   "--webui-port", str(self.worker_webui_port),
                                   "--cores", str(self.cores), "--memory", self.memory,
                                   "--work-dir", str(self.work_dir)])
            self._wait_registered()
        except BaseException:
            self.stop()
            raise
        return self

    def master_state(self) -> dict[str, Any]:
        """The master's JSON view: workers, active and completed applications."""
        answer = httpx.get(f"{self.webui_url}/json/", timeout=5.0)
        answer.raise_for_status()
        state: dict[str, Any] = answer.json()
        return state

    def _wait_registered(self) -> None:
        def registered() -> bool:
            for role, process in self._processes.items():
                if process.poll() is not None:
                    raise RuntimeError(
                        f"Spark {role} exited with {process.returncode}; "
                        f"{self.log(role)} ends with:\n{_tail(self.log(role))}")
            try:
                return bool(self.master_state().get("aliveworkers", 0) >= 1)
            except (httpx.HTTPError, ValueError):
                return False  # the master's web UI is not up yet

        wait_until(lambda: (
            f"a Spark worker registered with {self.master_url}\nmaster log "
            f"({self.log('master')}):\n{_tail(self.log('master'))}\nworker log "
            f"({self.log('worker')}):\n{_tail(self.log('worker'))}\n"),
            registered, self.startup_timeout_s)

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM each process group (the worker's first), then SIGKILL what is left."""
        for role in ("worker", "master"):
            process = self._processes.pop(role, None)
            if process is None:
                continue
            for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    process.wait(wait_s)
                except subprocess.TimeoutExpired:
                    continue
                # The leader is gone; SIGKILL any child (an executor) it left behind.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                break

    def __enter__(self) -> SparkStandalone:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()
