"""Spark's fair scheduler pools on a node: a query that writes its results runs before one
that is preparing to take over (a warming scale instance, a move's or a redo's query, an
active standby).

A node's queries share its task slots. In Spark's default pool, jobs run first in, first
out: a new instance's rebuild batch, many seconds of tasks, held every batch of the
instance the users read until it was done. In separate pools the serving query's next
task runs as soon as a slot frees (its pool's minimum share), and a preparing query takes
what is left.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from medusa_spark.thread_priority import thread_at

POOL_PROPERTY = "spark.scheduler.pool"
REBUILD_PROPERTY = "medusa.rebuild"
"""Set on the jobs of a query rebuilding its state beside a serving one (RebuildPriority)."""
QUERY_PROPERTY = "medusa.query"
"""Names the query whose batch started a job, so that its priority can change mid-batch."""
SERVING = "serving"
"""The pool of a query whose results its outputs write."""
PREPARING = "preparing"
"""The pool of a query that computes beside a serving one and writes nothing yet."""

ALLOCATIONS = f"""<?xml version="1.0"?>
<allocations>
  <pool name="{SERVING}">
    <schedulingMode>FAIR</schedulingMode>
    <weight>4</weight>
    <minShare>1</minShare>
  </pool>
  <pool name="{PREPARING}">
    <schedulingMode>FAIR</schedulingMode>
    <weight>1</weight>
    <minShare>0</minShare>
  </pool>
</allocations>
"""


def allocation_file() -> Path:
    """The pools' definition, for ``spark.scheduler.allocation.file`` (read when the
    session's context starts)."""
    folder = Path(tempfile.gettempdir()) / "medusa-spark"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "fair-scheduler-pools.xml"
    if not path.is_file() or path.read_text() != ALLOCATIONS:
        staged = folder / f".fair-scheduler-pools.{os.getpid()}.xml"
        staged.write_text(ALLOCATIONS)
        staged.replace(path)  # atomic: nodes start side by side
    return path


def run_jobs_in(spark: SparkSession, pool: str, rebuilding: bool = False,
                query: str | None = None) -> None:
    """The jobs this thread starts from now on run in ``pool``. Called from a query's
    ``foreachBatch`` function: its Spark jobs (the batch's whole plan, state included)
    start in the thread that calls it. ``rebuilding``: that thread (the query's, in which
    Spark plans its next batch too) and the jobs' tasks run at the lowest priority
    (``RebuildPriority``; a rebuild's work gives way to a serving query's). ``query``
    names the query, for ``set_query_priority``, and tags its jobs with that name (to
    cancel them: ``SparkContext.cancelJobsWithTag``)."""
    context = spark.sparkContext
    context.setLocalProperty(POOL_PROPERTY, pool)
    context.setLocalProperty(REBUILD_PROPERTY, "true" if rebuilding else "false")
    context.setLocalProperty(QUERY_PROPERTY, query)  # type: ignore[arg-type]  # None clears
    jvm: Any = spark._jvm
    if query is None:
        jvm.medusa.spark.RebuildPriority.enter(rebuilding)
        return
    context.addJobTag(query)
    jvm.medusa.spark.RebuildPriority.enterQuery(query, rebuilding)


def set_query_priority(spark: SparkSession, query: str, rebuilding: bool) -> None:
    """The named query's thread and its batches' tasks, those running and those to come,
    rebuild (lowest priority) or run at the normal one from now on, whatever its batches
    ask (``run_jobs_in``), and in the middle of a batch too: a move's replica catching up
    just before it takes over, or promoted, goes on at the normal priority at once, and
    the instance it replaces gives way while its last batch ends."""
    jvm: Any = spark._jvm
    jvm.medusa.spark.RebuildPriority.setQueryPriority(query, rebuilding)


def set_query_catching_up(spark: SparkSession, query: str) -> None:
    """The named query (a move's replica) catches up from now on, its batch in progress
    too: between a rebuild's priority and the normal one (``session.CATCH_UP_NICE``)."""
    jvm: Any = spark._jvm
    jvm.medusa.spark.RebuildPriority.setQueryCatchingUp(query)


def forget_query(spark: SparkSession, query: str) -> None:
    """The named query has stopped."""
    jvm: Any = spark._jvm
    jvm.medusa.spark.RebuildPriority.forgetQuery(query)


@contextmanager
def jvm_thread_at(spark: SparkSession, nice: int, allowed: bool = True) -> Iterator[None]:
    """This thread's JVM thread (PySpark pins one to each Python thread) alone at ``nice``
    meanwhile, unless not ``allowed``: a query's frame is analysed on it. Its nice value,
    not its Java priority: a thread it starts meanwhile (a client's, a pool's, kept for
    the node's life) takes the normal priority."""
    if not allowed:
        yield
        return
    jvm: Any = spark._jvm
    tid = int(jvm.medusa.spark.RebuildPriority.currentThreadId())
    if tid < 0:
        yield
        return
    with thread_at(tid, nice):
        yield


@contextmanager
def threads_started_in(spark: SparkSession, rebuilding: bool) -> Iterator[None]:
    """This thread's JVM thread, and the threads it starts meanwhile (a query's), at the
    lowest priority when ``rebuilding`` (a Java thread takes its creator's): the query
    plans and compiles its first batch before that batch's writer sets the priority."""
    if not rebuilding:  # the calling thread is at the normal priority (reset below)
        yield
        return
    jvm: Any = spark._jvm
    jvm.medusa.spark.RebuildPriority.enter(True)
    try:
        yield
    finally:
        jvm.medusa.spark.RebuildPriority.enter(False)
