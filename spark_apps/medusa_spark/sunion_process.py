"""A fragment's SUnion as a process of its own, started and watched by the node.

The SUnion keeps no state outside Kafka (its positions ride in its topic), so the
node may stop, kill or restart it at any time; a new one fences the old one and
resumes where the last committed bucket left off.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from medusa.sunion.config import SUnionConfig, dump_config
from medusa.sunion.service import FENCED_EXIT
from medusa_spark.session import REBUILD_NICE, can_renice_back
from medusa_spark.thread_priority import renice, threads_of

log = logging.getLogger("medusa.node")


class SUnionProcess:
    def __init__(self, config: SUnionConfig, folder: Path) -> None:
        self.folder = folder
        self.config_path = folder / "sunion.json"
        self.log_path = folder / "sunion.log"
        self.config = config.model_copy(update={"state_file": str(folder / "state.json")})
        self.go_path = folder / "go"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.waiting_for_go = False
        self.went_at: float | None = None
        """When ``go`` was called (wall clock)."""
        self._niced: tuple[int, int] | None = None
        """The process and the nice value ``follow_rebuild`` last gave its threads."""

    def start(self, wait_for_go: bool = False, rebuilding: bool = False) -> SUnionProcess:
        """Starts the process; ``wait_for_go``: it starts up, then waits for ``go``;
        ``rebuilding``: at a rebuild's priority from its start (its imports take a second
        of CPU), where ``follow_rebuild`` may renice it back."""
        self.folder.mkdir(parents=True, exist_ok=True)
        dump_config(self.config, self.config_path)
        # It goes with the node: a node killed, or stopped by Ctrl-C, left it running.
        command = [sys.executable, "-m", "medusa.sunion", "--config", str(self.config_path),
                   "--parent-pid", str(os.getpid())]
        nice = REBUILD_NICE if rebuilding and can_renice_back() else 0
        if nice:
            command = ["nice", "-n", str(nice), *command]
        self.waiting_for_go = wait_for_go
        if wait_for_go:
            self.go_path.unlink(missing_ok=True)
            command += ["--go-file", str(self.go_path)]
        with self.log_path.open("ab") as output:
            self.process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT,
                                            env=os.environ.copy())
        self._niced = (self.process.pid, nice) if nice else None
        self.starts += 1
        return self

    def follow_rebuild(self, rebuilding: bool) -> None:
        """Its threads at ``REBUILD_NICE`` while its fragment rebuilds its state beside a
        serving instance (a scale step's new instance replays its input through it; a warm
        move's replica on another cluster runs its own), at 0 otherwise: it takes CPU from
        the serving instance as the rebuild's query would (where a thread may be reniced
        back, ``can_renice_back``; a process started again begins at 0)."""
        pid = self.pid
        if pid is None or not self.alive() or not can_renice_back():
            return
        nice = REBUILD_NICE if rebuilding else 0
        if self._niced == (pid, nice) or (self._niced is None and nice == 0):
            return
        renice(threads_of(pid), nice)
        self._niced = (pid, nice)

    def go(self) -> None:
        """Lets a SUnion started with ``wait_for_go`` open and run (started anew if it has
        died while it waited). Once gone, a second call (the promotion after a warm move's
        input switch) changes nothing."""
        if self.went_at is not None and self.alive():
            return
        self.waiting_for_go = False
        self.went_at = time.time()
        if not self.alive():
            self.start()
            return
        self.go_path.touch()

    def running_since(self) -> float | None:
        """When it opened after ``go`` (fencing the SUnion it replaces), or None before."""
        opened = self.state().get("opened_at")
        return opened if self.went_at is not None and opened is not None and \
            opened >= self.went_at else None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def fenced(self) -> bool:
        """Whether another node's SUnion took its topic over (a move or a takeover)."""
        return self.process is not None and self.process.poll() == FENCED_EXIT

    def keep_alive(self) -> bool:
        """Starts it again if it died; says whether it had to. A fenced one stays stopped:
        started again, it would fence the SUnion that replaced it."""
        if self.process is not None and self.process.poll() is not None and not self.fenced():
            log.warning("SUnion of %s exited with %s; starting it again (log: %s)",
                        self.config.fragment, self.process.returncode, self.log_path)
            self.start(wait_for_go=self.waiting_for_go)
            return True
        return False

    def stop(self, timeout_s: float = 30.0) -> None:
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        self.process = None

    def caught_up(self, records: int) -> bool:
        """Whether it has opened and its last state put it at most ``records`` behind the
        end of its inputs."""
        state = self.state()
        if not state.get("opened_at"):
            return False
        lags = [part.get("lag") for given in (state.get("inputs") or {}).values()
                for part in (given.get("partitions") or {}).values()]
        known = [lag for lag in lags if isinstance(lag, int)]
        return len(known) == len(lags) and sum(known) <= records

    def state(self) -> dict[str, Any]:
        """The SUnion's last written state ({} before the first)."""
        path = Path(self.config.state_file or "")
        try:
            state: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        state["pid"] = self.pid
        state["age_s"] = round(time.time() - path.stat().st_mtime, 1)
        return state
