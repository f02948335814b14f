"""Rehearsals: a node that backs up a passive fragment runs that fragment's query once,
beside the running one, over the first records of its SUnion's topic, its results kept
nowhere. Spark plans and compiles a query's code in its first batches, seconds for a
fragment's plan; the node's warm-up (``warmup``) compiles Spark's own classes but not a
fragment's code, so a passive takeover would pay that inside the output gap. It pays it
here instead, once per fragment and wiring, before any failure. Measured here (the
sensor-windows fragment, after the warm-up, four runs): from a query's start to its first
batch written 3.7 to 4.5 s cold, 2.0 to 2.8 s after a rehearsal.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
from confluent_kafka.admin import AdminClient
from pyspark.sql import DataFrame, SparkSession

from medusa.settings import kafka_config
from medusa_spark.fragment import FragmentWiring, build_fragment, read_fragment_input
from medusa_spark.fragment_writer import FragmentWriter, OutRecord
from medusa_spark.network.execution import MICRO_BATCH
from medusa_spark.network.validate import Plan
from medusa_spark.realtime import execution_of
from medusa_spark.scheduler_pools import PREPARING, run_jobs_in, threads_started_in

log = logging.getLogger("medusa.node")

REHEARSAL_RECORDS = 200
"""Records of the source a rehearsal reads: enough for every box to see rows."""
REHEARSAL_TIMEOUT_S = 120.0
RETRY_S = 30.0
"""A fragment whose source was empty is rehearsed again after this long."""


class _Discarded:
    """A rehearsal's outputs: nothing is kept."""

    standby = False
    """As a primary's: a REDO among the records read does not stop the query."""

    def __init__(self, topics: list[str]) -> None:
        self.topics = topics

    def write(self, records: Sequence[OutRecord]) -> int:
        return len(records)

    def promote(self, keep_tentative: bool = True, from_stime_ms: int | None = None) -> int:
        return 0

    def close(self) -> None:
        pass


class _RehearsalWriter(FragmentWriter):
    """A fragment's writer that leaves no trace of a rehearsal: no dead letters (the
    running query sent them) and no spans (its records' traces are the running query's).
    Its jobs run as a rebuild's do, after the serving queries' (``scheduler_pools``)."""

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        run_jobs_in(batch.sparkSession, PREPARING, rebuilding=True)
        self._write_batch(batch, batch_id)

    def _dead_letters(self, table: pa.Table, rows: list[int]) -> None:
        pass

    def _traced(self, record: OutRecord, box: str, parent: str, started_ns: int,
                batch_id: int) -> OutRecord:
        return record

    def _span_rec_done(self, parent: str | None, attributes: dict[str, str | int]) -> None:
        pass


def rehearse(spark: SparkSession, plan: Plan, wiring: FragmentWiring,
             stop: threading.Event | None = None) -> bool:
    """Runs the fragment's query from a scratch checkpoint until it has written one batch
    with rows (or found none); True when it did. Raises what the query raised."""
    if not wiring.sunion_in_query and not _exists(wiring.source.bootstrap,
                                                  wiring.source.topic):
        return False  # the wiring makes it; a read of a missing one could have it made
    topics = [output.stream.topic for output in wiring.outputs.values()]
    writer = _RehearsalWriter(plan, wiring, sinks=[_Discarded(topics)])
    frame = build_fragment(plan, wiring, read_fragment_input(
        spark, wiring, rehearsal_records=REHEARSAL_RECORDS))
    with tempfile.TemporaryDirectory(prefix="medusa-rehearsal-") as scratch:
        # Its planning and compiling (the query's own thread) give way to serving queries
        # too: a node rehearsing three fragments had slowed a scale step's rebuild beside.
        with threads_started_in(spark, rebuilding=True):
            query: Any = (frame.writeStream
                          .queryName(f"{wiring.topic_prefix}{wiring.global_name}/rehearsal")
                          .outputMode("append").foreachBatch(writer)
                          .option("checkpointLocation", scratch)
                          # The SUnion source reads on as records come (no availableNow).
                          .trigger(**({"processingTime": "200 milliseconds"}
                                      if wiring.sunion_in_query else {"availableNow": True}))
                          .start())
        def has_read() -> bool:
            return any(p.numInputRows > 0 for p in query.recentProgress)

        deadline = time.monotonic() + REHEARSAL_TIMEOUT_S
        try:
            while query.isActive and time.monotonic() < deadline and \
                    not (stop is not None and stop.is_set()) and not has_read():
                time.sleep(0.05)
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            return has_read()
        finally:
            query.stop()


def _exists(bootstrap: str, topic: str) -> bool:
    # Every topic's metadata: a request naming a missing topic may have it created.
    found = AdminClient(kafka_config(bootstrap)).list_topics(timeout=10).topics.get(topic)
    return found is not None and found.error is None and bool(found.partitions)


class Rehearsals:
    """The node's rehearsals, one at a time on a thread of their own, each fragment's once
    per wiring."""

    def __init__(self, spark: SparkSession, node_name: str,
                 rehearsed: Callable[[str], None] = lambda _: None) -> None:
        self.spark = spark
        self.node_name = node_name
        self._rehearsed = rehearsed
        """Told each fragment whose query was rehearsed (the node says so in the catalog)."""
        self._done: dict[str, tuple[FragmentWiring, float]] = {}
        """Each fragment's wiring rehearsed (or being), and when to try again if its
        source had nothing to read."""
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="rehearsal")
        self._stop = threading.Event()

    def start(self, name: str, plan: Plan, wiring: FragmentWiring) -> None:
        """Rehearses the fragment's query, unless it was already with this wiring or its
        takeover would run in Real-time Mode (another query, that keeps running)."""
        done = self._done.get(name)
        if self._stop.is_set() or (done is not None and done[0] == wiring and
                                   time.monotonic() < done[1]):
            return
        if execution_of(plan, wiring, False)[0] != MICRO_BATCH:
            return
        self._done[name] = (wiring, float("inf"))
        self._pool.submit(self._rehearse, name, plan, wiring)

    def _rehearse(self, name: str, plan: Plan, wiring: FragmentWiring) -> None:
        started = time.monotonic()
        try:
            read = rehearse(self.spark, plan, wiring, self._stop)
        except Exception as error:  # only its takeover's first batch is slower for it
            log.warning("%s: rehearsal of %s failed: %s", self.node_name, name, error)
            return
        if read:
            log.info("%s: rehearsed %s's query in %.1fs, for a takeover", self.node_name, name,
                     time.monotonic() - started)
            self._rehearsed(name)
        else:  # nothing to read yet: a pass after a while tries again
            self._done[name] = (wiring, time.monotonic() + RETRY_S)

    def stop(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
