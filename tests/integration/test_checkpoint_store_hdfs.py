"""Spark checkpoints on a real HDFS, run from Hadoop's own jars (``medusa.stack.hdfs``).

A NameNode and a DataNode start in a temporary folder on ports of 18700-18799; a stateful
streaming query (RocksDB state store, changelog checkpointing) checkpoints to hdfs://,
stops, and resumes from the same checkpoint with its state; ``checkpoint_store`` reads and
writes that checkpoint and a local one alike. Needs no Kafka: not the shared stack.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from medusa.stack.hdfs import LocalHdfs
from medusa_spark import checkpoint_store as store
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def _run_until(spark: Any, checkpoint: str, batches: int) -> list[tuple[int, int, int]]:
    """Run the stateful query until it has done ``batches`` more batches; for each, its id,
    the total count over all groups (every row the state has counted) and its input rows."""
    seen: list[tuple[int, int]] = []

    def collect(frame: Any, batch_id: int) -> None:
        seen.append((batch_id, sum(row["count"] for row in frame.collect())))

    rates = spark.readStream.format("rate").option("rowsPerSecond", 20).load()
    counts = rates.groupBy((rates.value % 5).alias("key")).count()
    query = (counts.writeStream.outputMode("complete").foreachBatch(collect)
             .option("checkpointLocation", checkpoint)
             .trigger(processingTime="500 milliseconds").start())

    def done() -> bool:
        assert query.exception() is None, query.exception()
        return len(seen) >= batches

    try:
        wait_until(lambda: f"{batches} batches (only {seen})", done, 180, interval_s=0.2)
    finally:
        query.stop()
    rows = {p["batchId"]: p["numInputRows"] for p in query.recentProgress}
    return [(batch, total, rows.get(batch, -1)) for batch, total in seen]


def test_a_stateful_query_resumes_from_its_hdfs_checkpoint(hdfs: LocalHdfs, spark: Any
                                                           ) -> None:
    assert spark.conf.get("spark.sql.streaming.stateStore.providerClass") == ROCKSDB
    assert spark.conf.get(
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled") == "true"
    checkpoint = f"{hdfs.uri}/medusa/ck1"

    first = _run_until(spark, checkpoint, 3)
    committed = max(int(name) for name in store.list_names(f"{checkpoint}/commits", spark)
                    if name.isdigit())
    second = _run_until(spark, checkpoint, 3)
    print(f"first run: {first}; committed up to {committed}; second run: {second}")

    assert [batch for batch, _, _ in first][:3] == [0, 1, 2]
    # The second run goes on after the last committed batch, not from 0 ...
    resumed, total, rows = second[0]
    assert resumed == committed + 1
    # ... with the counts the first run's last committed batch left in the state store.
    left = {batch: counted for batch, counted, _ in first}[committed]
    assert rows > 0 and total == left + rows
    assert [batch for batch, _, _ in second] == list(range(resumed, resumed + len(second)))
    assert {"commits", "offsets", "sources", "state"} <= set(store.list_names(checkpoint, spark))
    state = store.list_names(f"{checkpoint}/state/0/0", spark)
    assert any(name.endswith(".changelog") for name in state), state
    assert store.read_text(f"{checkpoint}/commits/0", spark).startswith("v1")
    assert store.size(checkpoint, spark) > 0


def _exercise(root: str, spark: Any) -> None:
    assert not store.exists(root, spark)
    assert store.list_names(root, spark) == []
    assert store.size(root, spark) == 0
    with pytest.raises(FileNotFoundError):
        store.read_text(f"{root}/absent.json", spark)

    store.write_text(f"{root}/a/resume.json", '{"päth": 1}', spark)
    store.write_text(f"{root}/b.txt", "x" * 10, spark)
    assert store.exists(root, spark) and store.exists(f"{root}/a/resume.json", spark)
    assert store.list_names(root, spark) == ["a", "b.txt"]
    assert store.list_names(f"{root}/a", spark) == ["resume.json"]
    assert store.list_names(f"{root}/b.txt", spark) == []  # a file is no directory
    assert store.read_text(f"{root}/a/resume.json", spark) == '{"päth": 1}'
    assert store.size(root, spark) == len('{"päth": 1}'.encode()) + 10
    assert store.size(f"{root}/b.txt", spark) == 10

    store.write_text(f"{root}/a/resume.json", "{}", spark)  # overwrite, shorter
    assert store.read_text(f"{root}/a/resume.json", spark) == "{}"

    store.delete(f"{root}/b.txt", spark)
    assert store.list_names(root, spark) == ["a"]
    store.delete(root, spark)
    store.delete(root, spark)  # absent: nothing happens
    assert not store.exists(root, spark)
    assert store.size(root, spark) == 0


@pytest.mark.parametrize("kind", ["hdfs", "local", "file-uri"])
def test_checkpoint_store_works_alike_on_hdfs_and_local_folders(
        kind: str, hdfs: LocalHdfs, spark: Any, tmp_path: Path) -> None:
    root = {"hdfs": f"{hdfs.uri}/medusa/store-test",
            "local": str(tmp_path / "ck"),
            "file-uri": (tmp_path / "ck").as_uri()}[kind]
    _exercise(root, spark)


def test_a_checkpoint_is_copied_inside_hdfs_without_its_temporary_files(
        hdfs: LocalHdfs, spark: Any) -> None:
    source, target = f"{hdfs.uri}/medusa/copy-from", f"{hdfs.uri}/medusa/copy-to"
    store.write_text(f"{source}/commits/0", "v1", spark)
    store.write_text(f"{source}/state/0/1/1.changelog", "x" * 100, spark)
    store.write_text(f"{source}/state/0/1/.2.changelog.crc.4f2a.tmp", "half", spark)
    store.write_text(f"{target}/stale", "old", spark)
    assert store.copy_tree(source, target, spark) == 102
    assert store.list_files(target, spark) == ["commits/0", "state/0/1/1.changelog"]
    assert store.read_text(f"{target}/state/0/1/1.changelog", spark) == "x" * 100
    store.delete(source, spark)
    store.delete(target, spark)
