"""A node's queries run in two fair scheduler pools: the one users read first, the ones
preparing to take over (scale instances warming, moves, redos, active standbys) after."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

import pytest

from medusa_spark.fragment_writer import FragmentWriter
from medusa_spark.scheduler_pools import POOL_PROPERTY, PREPARING, SERVING
from medusa_spark.testing import boundary, run_network
from tests.integration.test_fragment_semantics import COUNT_PER_MINUTE, report

pytestmark = pytest.mark.integration


def test_the_session_defines_both_pools(spark) -> None:
    context = spark.sparkContext._jsc.sc()
    serving = context.getPoolForName(SERVING).get()
    preparing = context.getPoolForName(PREPARING).get()
    assert (serving.minShare(), serving.weight()) == (1, 4)
    assert (preparing.minShare(), preparing.weight()) == (0, 1)
    assert str(serving.schedulingMode()) == str(preparing.schedulingMode()) == "FAIR"


def test_a_writer_runs_each_batch_in_the_pool_of_its_role(spark) -> None:
    """A standby's batches go to the preparing pool; once promoted, its next batch to the
    serving one (the pool is set in the thread that starts the batch's jobs)."""
    pools: list[str | None] = []

    def standby_then_promoted(writer: FragmentWriter) -> None:
        writer.outputs[0].standby = True  # type: ignore[misc]

        def record(_fragment: str, batch_id: int) -> None:
            pools.append(spark.sparkContext.getLocalProperty(POOL_PROPERTY))
            if batch_id == 0:
                writer.outputs[0].standby = False  # type: ignore[misc]
        writer.on_batch = record
    run_network(spark, COUNT_PER_MINUTE, [[report(10, 1)], [boundary(130)]],
                prepare=standby_then_promoted)
    assert pools[0] == PREPARING and pools[1:] and set(pools[1:]) == {SERVING}



def test_a_rebuild_runs_at_a_lower_priority(spark) -> None:
    """A rebuilding query's jobs' tasks, and the thread that starts them (a query's, which
    plans its batches there too), run niced, and at the normal priority again once they
    serve: a rebuild beside a serving query leaves it the CPU. Without root the JVM cannot
    renice a thread back, and nothing is niced."""
    from pyspark.sql import functions as F

    from medusa_spark.scheduler_pools import run_jobs_in
    from medusa_spark.session import REBUILD_NICE, jvm_pid, rebuild_priority_options

    niced = REBUILD_NICE if rebuild_priority_options() else 0
    jvm = spark._jvm
    nice = F.expr("reflect('medusa.spark.RebuildPriority', 'currentNice')")
    seen = []
    try:
        for pool, rebuilding in ((PREPARING, True), (SERVING, False), (PREPARING, False),
                                 (PREPARING, True)):
            run_jobs_in(spark, pool, rebuilding)
            tasks = {int(r.n) for r in spark.range(4, numPartitions=2)
                     .select(nice.alias("n")).collect()}
            seen.append((jvm.medusa.spark.RebuildPriority.currentNice(), tasks))
    finally:
        run_jobs_in(spark, SERVING)
    assert seen == [(niced, {niced}), (0, {0}), (0, {0}), (niced, {niced})]
    # The policy that makes priorities nice values leaves the JVM's own threads (JIT, GC)
    # at the queries' priority, not ahead of them.
    pid = jvm_pid(spark)
    assert pid is not None
    favoured = {name: value for name, value in _thread_nices(pid) if value < 0}
    assert not favoured, f"the JVM's own threads run ahead of the queries': {favoured}"


def test_a_jvm_thread_niced_alone_starts_threads_at_the_normal_priority(spark) -> None:
    """A frame analysed niced (a rebuilding query's) leaves no thread it happens to start
    (a client's, a pool's, kept for the JVM's life) niced after it."""
    from medusa_spark.scheduler_pools import jvm_thread_at
    from medusa_spark.session import REBUILD_NICE, can_renice_back, jvm_pid
    from medusa_spark.thread_priority import threads_of

    if not can_renice_back():
        pytest.skip("a nice value can be lowered again only as root with CAP_SYS_NICE")
    jvm = spark._jvm
    priority = jvm.medusa.spark.RebuildPriority
    pid = jvm_pid(spark)
    assert pid is not None
    timer = None
    try:
        with jvm_thread_at(spark, REBUILD_NICE):
            during = priority.currentNice()
            timer = jvm.java.util.Timer("medusa-probe-timer", True)  # starts its thread
        after = priority.currentNice()
        started = threads_of(pid, ("medusa-probe-ti",))
        assert len(started) == 1
        assert (during, after) == (REBUILD_NICE, 0)
        assert os.getpriority(os.PRIO_PROCESS, started[0]) == 0
    finally:
        if timer is not None:
            timer.cancel()


def test_a_query_s_priority_set_in_the_middle_of_its_batch_holds_from_then_on(spark) -> None:
    """A named query's running tasks, and those its batch starts later, take a priority
    set mid-batch (a move's replica promoted, the old node giving way), and so do its
    next batches, whatever they ask."""
    from pyspark.sql import functions as F

    from medusa_spark.scheduler_pools import (
        forget_query,
        run_jobs_in,
        set_query_catching_up,
        set_query_priority,
    )
    from medusa_spark.session import CATCH_UP_NICE, REBUILD_NICE, rebuild_priority_options

    niced = REBUILD_NICE if rebuild_priority_options() else 0
    catching_up = CATCH_UP_NICE if rebuild_priority_options() else 0
    # Each task sleeps, then says its nice value: 8 tasks on the session's slots, in turns.
    sleep_then_nice = F.expr(
        "element_at(array(reflect('java.lang.Thread', 'sleep', cast(600 as bigint)), "
        "reflect('medusa.spark.RebuildPriority', 'currentNice')), 2)")
    query = "test-query#mid-batch"
    seen: dict[str, set[int]] = {}

    def batch(name: str, rebuilding: bool) -> None:
        run_jobs_in(spark, PREPARING, rebuilding, query=query)
        seen[name] = {int(r.n) for r in spark.range(8, numPartitions=8)
                      .select(sleep_then_nice.alias("n")).collect()}

    try:
        worker = threading.Thread(target=batch, args=("promoted", True))
        worker.start()
        time.sleep(0.3)  # its first tasks run, niced
        set_query_priority(spark, query, rebuilding=False)
        worker.join()
        batch("next, asking for a rebuild's", True)
        set_query_priority(spark, query, rebuilding=True)
        batch("giving way", False)
        set_query_catching_up(spark, query)  # a move's replica, just before it takes over
        batch("catching up", True)
    finally:
        forget_query(spark, query)
        run_jobs_in(spark, SERVING)
    assert seen == {"promoted": {0}, "next, asking for a rebuild's": {0},
                    "giving way": {niced}, "catching up": {catching_up}}


def test_a_query_that_gives_way_has_its_jobs_cancelled(spark) -> None:
    """A named query's jobs carry its name as a tag: an instance giving way to the one
    that took its outputs over cancels its batch in progress."""
    from pyspark.sql import functions as F

    from medusa_spark.scheduler_pools import forget_query, run_jobs_in

    query = "test-query#gives-way"
    failed: list[BaseException] = []

    def batch() -> None:
        run_jobs_in(spark, SERVING, query=query)
        try:
            spark.range(4, numPartitions=4).select(F.expr(
                "reflect('java.lang.Thread', 'sleep', cast(30000 as bigint))")).collect()
        except Exception as error:  # the cancellation, through py4j
            failed.append(error)
    worker = threading.Thread(target=batch)
    started = time.monotonic()
    worker.start()
    try:
        time.sleep(1.0)
        spark.sparkContext.cancelJobsWithTag(query)
        worker.join(20)
    finally:
        forget_query(spark, query)
        spark.sparkContext.removeJobTag(query)
    assert failed and time.monotonic() - started < 20, "its job ran on"


def _thread_nices(pid: int) -> list[tuple[str, int]]:
    """Each thread of process ``pid``: its name and nice value."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            stat = (task / "stat").read_text()
            found.append(((task / "comm").read_text().strip(),
                          int(stat[stat.rindex(")") + 2:].split()[16])))
    return found
