"""The JVM's JIT compiler threads at a rebuild's priority while the node rebuilds state.

A rebuild's own threads run niced (``session.REBUILD_NICE``), but a query new to its JVM
is compiled by the JVM's compiler threads, at the normal priority: beside a warm move's
replica they took 0.26 to 0.35 of the two cores while it caught up, more than its tasks,
and the running instance on the other node lost as much. While a rebuild runs here they
are reniced with it, and back once none does (a thread may lower its nice value again only
where ``can_renice_back``).

Once none does, every thread still at the rebuild's priority goes back too, on every pass
for ``SWEEP_S``: a batch begun niced keeps the priority to its end and gives it to each task
it starts (a partner move's replica ran its last catching-up batch 9.6 s niced, and its
takeover waited for it). A thread's next serving batch or task sets it normal again."""

from __future__ import annotations

import logging
import time

from medusa_spark.session import REBUILD_NICE, can_renice_back
from medusa_spark.thread_priority import renice, threads_at, threads_of

COMPILER_THREADS = ("C1 CompilerThre", "C2 CompilerThre")
"""The compiler threads' names as Linux shows them (cut to 15 characters)."""

log = logging.getLogger("medusa.node")

SWEEP_S = 30.0
"""For this long after the node's last rebuild ended, its threads still at the rebuild's
priority go back to 0 on every pass: a batch begun while rebuilding starts each of its
tasks at that priority until it ends. (Not longer: a rehearsal runs niced too.)"""


def compiler_threads(pid: int) -> list[int]:
    """The ids of the JIT compiler threads of process ``pid`` (none where it is gone)."""
    return threads_of(pid, COMPILER_THREADS)


class CompilerPriority:
    """Follows whether the node rebuilds (``follow``): the compilers of ``jvm_pid`` at
    ``REBUILD_NICE`` meanwhile, at 0 otherwise, with any thread a rebuild or a DPC redo
    left niced."""

    def __init__(self, jvm_pid: int | None) -> None:
        self._pid = jvm_pid if jvm_pid is not None and can_renice_back() else None
        self._rebuilding = False
        self._redoing = False
        self._ended_at: float | None = None
        """When (monotonic) the node's last rebuild or DPC redo ended."""

    def follow(self, rebuilding: bool, redoing: bool = False) -> None:
        """``redoing``: a DPC redo runs here, niced, though its compilers are not. Once none
        does (it has taken over or stopped), threads it left niced go back as after a
        rebuild: its query's own thread starts niced, and a thread that starts for the
        query's life (its Kafka admin client's) kept nice 10 after it took over."""
        redo_ended, self._redoing = self._redoing and not redoing, redoing
        if self._pid is None:
            return
        if rebuilding:
            # Again on every pass: the JVM starts compiler threads as needed.
            renice(compiler_threads(self._pid), REBUILD_NICE)
        elif self._rebuilding or redo_ended:
            self._ended_at = time.monotonic()
        if rebuilding != self._rebuilding:
            log.info("JIT compiler threads at nice %d: %s", REBUILD_NICE if rebuilding else 0,
                     "a rebuild runs here" if rebuilding else "no rebuild runs here")
        self._rebuilding = rebuilding
        if not rebuilding and self._ended_at is not None and \
                time.monotonic() - self._ended_at < SWEEP_S:
            # The compilers, and the tasks a batch begun while rebuilding still starts.
            renice(threads_at(self._pid, REBUILD_NICE), 0)
