"""A stopped query's state snapshots are written before a roll-back, not after it.

RocksDB's changelog checkpointing makes a snapshot at a commit and writes it later, from
Spark's maintenance task; a DPC roll-back between the two would receive a snapshot of a
batch it undid, and a later load would start from it (a window's earlier readings lost).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from medusa_spark import state_stores
from medusa_spark.reconcile import rollback
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


def _snapshots(checkpoint: Path) -> set[int]:
    return {int(p.name.split(".")[0].split("_")[0])
            for p in (checkpoint / "state").rglob("*.zip")}


def _stopped_query(spark: Any, checkpoint: Path, batches: int) -> str:
    """Runs a counting query (a snapshot every 3 versions) for ``batches`` batches and
    stops it; returns its run id."""
    from pyspark.sql import functions as F

    spark.conf.set("spark.sql.streaming.stateStore.minDeltasForSnapshot", "3")
    try:
        counts = (spark.readStream.format("rate").option("rowsPerSecond", 20).load()
                  .groupBy((F.col("value") % 3).alias("key")).count())
        query = (counts.writeStream.outputMode("update").format("noop")
                 .option("checkpointLocation", str(checkpoint))
                 .trigger(processingTime="200 milliseconds").start())
        try:
            wait_until(f"{batches} batches",
                       lambda: (query.lastProgress or {}).get("batchId", 0) >= batches, 120)
        finally:
            query.stop()
        return str(query.runId)
    finally:
        spark.conf.unset("spark.sql.streaming.stateStore.minDeltasForSnapshot")


def test_the_state_stores_of_a_query_are_found_in_its_checkpoint(spark: Any,
                                                                  tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    _stopped_query(spark, checkpoint, 4)
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    assert state_stores.state_store_ids(str(checkpoint)) == {
        (0, partition, "default") for partition in range(partitions)}


def test_released_snapshots_are_written_at_once_and_none_comes_after_a_rollback(
        spark: Any, tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    run_id = _stopped_query(spark, checkpoint, 12)
    assert state_stores.release(spark, str(checkpoint), run_id) > 0
    assert max(_snapshots(checkpoint), default=0) > 3, "the pending snapshot was written"
    rollback(str(checkpoint), 2)
    assert max(_snapshots(checkpoint), default=0) <= 3
    # Nothing of the stopped run is loaded any more: no maintenance pass can write to it.
    assert state_stores.release(spark, str(checkpoint), run_id) == 0
