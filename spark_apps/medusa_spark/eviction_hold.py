"""A move's replica holds its aggregations' eviction while it catches up.

Held, the replica's aggregations evict nothing and keep their closed windows until its
release, just before its promotion; its next batch evicts and emits them all, the outputs
dropping by tuple id those the old instance wrote (``MedusaStateStoreProvider.java``).
Its first held batch builds the store's index of keys by window end (one whole scan, at
the replica's low priority), so that the batch after the release goes through the closed
windows only. Before that index, Spark's eviction went through the whole state every
batch, and at a gigabyte a replica doing it beside the serving instance paused that
instance's output 3 to 3.5 s. Its writer promises no boundary behind a window for a
batch that ran held: it has not emitted those windows.
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
