"""The JVM's JIT compiler threads at a rebuild's priority while the node rebuilds state.

A rebuild's own threads run niced (``session.REBUILD_NICE``), but a query new to its JVM
is compiled by the JVM's compiler threads, at the normal priority: beside a warm move's
replica they took 0.26 to 0.35 of the two cores while it caught up, more than its tasks,
and the running instance on the other node lost as much. While a rebuild runs here they
are reniced with it, and back once none does (a thread may lower its nice value again only
where ``can_renice_back``)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from medusa_spark.session import REBUILD_NICE, can_renice_back

COMPILER_THREADS = ("C1 CompilerThre", "C2 CompilerThre")
"""The compiler threads' names as Linux shows them (cut to 15 characters)."""

log = logging.getLogger("medusa.node")


def compiler_threads(pid: int) -> list[int]:
    """The ids of the JIT compiler threads of process ``pid`` (none where it is gone)."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            if (task / "comm").read_text().strip().startswith(COMPILER_THREADS):
                found.append(int(task.name))
        except OSError:  # the thread ended meanwhile
            continue
    return found


class CompilerPriority:
    """Follows whether the node rebuilds (``follow``): the compilers of ``jvm_pid`` at
    ``REBUILD_NICE`` meanwhile, at 0 otherwise."""

    def __init__(self, jvm_pid: int | None) -> None:
        self._pid = jvm_pid if jvm_pid is not None and can_renice_back() else None
        self._rebuilding = False

    def follow(self, rebuilding: bool) -> None:
        if self._pid is None or (not rebuilding and not self._rebuilding):
            return
        # Again on every pass while rebuilding: the JVM starts compiler threads as needed.
        nice = REBUILD_NICE if rebuilding else 0
        for tid in compiler_threads(self._pid):
            try:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
            except OSError:
                continue
        if rebuilding != self._rebuilding:
            log.info("JIT compiler threads at nice %d: %s", nice,
                     "a rebuild runs here" if rebuilding else "no rebuild runs here")
        self._rebuilding = rebuilding
