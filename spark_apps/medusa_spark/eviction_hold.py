"""A move's replica holds its aggregations' eviction while it catches up.

Spark's windowed aggregation goes through its whole state each batch to find the windows
the watermark closed. A replica rebuilding beside the instance it replaces does that too,
and at a gigabyte two such scans at once slowed the serving instance's batches (on two
cores, its output paused 3 to 3.5 s during the replica's rebuild). Held, the replica's
aggregations skip the scan and keep their closed windows until its promotion (released
at the input switch instead, the two instances scanned side by side for the 4 to 5 s
before it); its next scan evicts and emits them all, the outputs dropping by tuple id
those the old instance wrote (``MedusaStateStoreProvider.java``). Its writer promises no
boundary behind a window for a batch that ran held: it has not emitted those windows.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession


def hold_eviction(spark: SparkSession, query: str) -> None:
    """The named query's aggregations (``FragmentWriter.query_key``) keep their closed
    windows from its next batch on (``FragmentWriter.hold_eviction``, which notes it)."""
    jvm: Any = spark._jvm
    jvm.medusa.spark.MedusaStateStoreProvider.holdEviction(query)


def release_eviction(spark: SparkSession, query: str) -> None:
    """The named query's aggregations evict again, from their next scan on (in the batch
    in progress, if it has not reached its scan)."""
    jvm: Any = spark._jvm
    jvm.medusa.spark.MedusaStateStoreProvider.releaseEviction(query)
