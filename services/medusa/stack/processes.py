"""Starting and stopping the stack's processes, and knowing for sure a pid is still ours."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunningProcess:
    name: str
    pid: int
    start_ticks: int
    """Kernel start time of the pid: a recycled pid will not match it."""
    command: list[str]
    log: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunningProcess:
        return cls(**data)

    def alive(self) -> bool:
        return process_start_ticks(self.pid) == self.start_ticks


def process_start_ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22 (starttime), counted after the parenthesised command name.
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] == "Z":  # a zombie is as good as gone
        return None
    return int(fields[19])


def start(name: str, command: list[str], log: Path, env: dict[str, str] | None = None,
          cwd: Path | None = None, own_session: bool = True) -> RunningProcess:
    """Starts ``command`` in a process group of its own (stopped as a whole, not by ^C).

    ``own_session=False`` (the nodes) keeps it in the caller's session: Linux gives each
    session (its autogroup) an even share of the CPU whatever its threads' nice values, so
    a node's rebuild, niced, would otherwise take as much from another node's serving
    query as if it were not. Services stay in sessions of their own, so that a busy node
    does not starve a broker or the failure detector."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as sink:
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})}, cwd=cwd,
            **({"start_new_session": True} if own_session else {"process_group": 0}))
    ticks = process_start_ticks(process.pid)
    if ticks is None:
        raise RuntimeError(f"{name} exited at once; see {log}")
    return RunningProcess(name, process.pid, ticks, command, str(log))


def stop(process: RunningProcess, timeout_s: float = 20.0) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left after ``timeout_s``."""
    stop_all([process], timeout_s)


def stop_all(stopping: list[RunningProcess], timeout_s: float = 20.0) -> None:
    """``stop`` for several processes side by side: each shuts down while the others do."""
    left = [p for p in stopping if p.alive()]
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
        for process in left:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
        deadline = time.monotonic() + wait_s
        while left and time.monotonic() < deadline:
            for process in left:
                _reap(process.pid)
            left = [p for p in left if p.alive()]
            if left:
                time.sleep(0.1)
        if not left:
            return


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False
