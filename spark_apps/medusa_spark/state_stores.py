"""The state stores a stopped query leaves loaded in this JVM, and their release.

With RocksDB's changelog checkpointing, a state snapshot is made at a batch's commit but
written to the checkpoint later, by Spark's maintenance task; a query that stops keeps its
providers loaded until that task next runs. A checkpoint rolled back in between (DPC's
checkpoint/redo) would then receive a snapshot of a batch it no longer has, and the next
query to load the state from that version on would start from the undone timeline's state
and lose what the redo wrote before it. Releasing the stopped query's providers first
writes their pending snapshots while they are still right, so the roll-back removes them.

Only the providers in this process's JVM can be reached: the executors of a local node,
not those of a cluster (see ``docs/how-to/run-on-a-spark-cluster.md``).
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from medusa_spark import checkpoint_store as store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("medusa.node")

STATE_FILE = re.compile(r"^(\d+)(?:_[^.]*)?\.(changelog|zip|delta|snapshot)$")
"""A state version's file (``<version>[_<id>].<kind>``): group 1 is the version."""
_PACKAGE = "org.apache.spark.sql.execution.streaming.state"


def state_store_ids(checkpoint: str) -> set[tuple[int, int, str]]:
    """(operator, partition, store name) of every state store with files in the checkpoint:
    ``state/<operator>/<partition>/`` holds the default store, a folder below it a named
    one (a stream-stream join's)."""
    ids = set()
    for relative in store.list_files(f"{checkpoint}/state"):
        parts = relative.split("/")
        if len(parts) not in (3, 4) or not STATE_FILE.match(parts[-1]) \
                or not (parts[0].isdigit() and parts[1].isdigit()):
            continue
        ids.add((int(parts[0]), int(parts[1]), parts[2] if len(parts) == 4 else "default"))
    return ids


def release(spark: SparkSession, checkpoint: str, run_id: str) -> int:
    """Writes the pending snapshots of query run ``run_id``'s state stores and unloads
    them (the query has stopped); returns how many were loaded here."""
    jvm: Any = spark._jvm
    if jvm is None:
        return 0
    package = jvm
    for part in _PACKAGE.split("."):
        package = getattr(package, part)
    state_store = getattr(getattr(package, "StateStore$"), "MODULE$")
    root = _state_root(spark, checkpoint)
    run = jvm.java.util.UUID.fromString(run_id)
    released = 0
    for operator, partition, name in sorted(state_store_ids(checkpoint)):
        provider = package.StateStoreProviderId(
            package.StateStoreId(root, operator, partition, name), run)
        if state_store.isLoaded(provider):
            state_store.doMaintenanceAndUnload(provider)
            released += 1
    if released:
        log.info("%s: released %d state store(s) of the stopped query run %s", checkpoint,
                 released, run_id)
    return released


def _state_root(spark: SparkSession, checkpoint: str) -> str:
    """The state folder as Spark names it in a state store's id: the checkpoint qualified
    by its file system, as a URI, then ``state`` below it as a Hadoop path."""
    jvm: Any = spark._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path
    path = hadoop_path(checkpoint)
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
    return str(hadoop_path(fs.makeQualified(path).toUri().toString(), "state").toString())
