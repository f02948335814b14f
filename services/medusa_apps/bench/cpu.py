"""CPU seconds spent by the processes on a path (the node's JVM, its Python, a SUnion
process), read from ``/proc`` before and after a run: what a record costs the machine,
beside how fast it went."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float:
    """User and system CPU of a process so far (0 once it has gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime


def jvm_pid(spark: object) -> int:
    """The pid of the SparkSession's JVM (the driver, and a local node's executors)."""
    return int(spark._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[attr-defined]


@dataclass
class CpuMeter:
    """Adds up the CPU of the processes it is shown, from when it first sees each."""

    started: dict[int, float] = field(default_factory=dict)
    ended: dict[int, float] = field(default_factory=dict)

    def watch(self, pids: Iterable[int]) -> CpuMeter:
        for pid in pids:
            self.started.setdefault(pid, cpu_seconds(pid))
        return self

    def stop(self) -> float:
        """The CPU seconds the processes spent since they were watched."""
        for pid in self.started:
            self.ended[pid] = cpu_seconds(pid)
        return round(sum(max(0.0, self.ended[p] - self.started[p]) for p in self.started), 3)
