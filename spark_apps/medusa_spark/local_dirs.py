"""Where a node's Spark keeps its scratch files (``spark.local.dir``): shuffle blocks and
the RocksDB state stores' working copies, hundreds of MB for a large state.

Spark deletes them when its JVM exits cleanly; a node killed (kill -9, a failover test, a
bench) leaves them behind, and under ``/tmp`` they piled up run after run. Each node
process keeps them in a folder of its own under its run folder, named by its process id,
and removes the folders of its earlier processes that are no longer alive (not a live
one: a node of the same name may still be stopping while its successor starts)."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from medusa.stack.processes import process_start_ticks

log = logging.getLogger("medusa.node")


def node_local_dir(root: Path, pid: int | None = None) -> Path:
    """This process's scratch folder under ``root`` (created), after removing those of
    ``root``'s earlier processes that have exited."""
    pid = os.getpid() if pid is None else pid
    root.mkdir(parents=True, exist_ok=True)
    for earlier in root.iterdir():
        if earlier.is_dir() and earlier.name.isdigit() and int(earlier.name) != pid and \
                process_start_ticks(int(earlier.name)) is None:
            shutil.rmtree(earlier, ignore_errors=True)
            log.info("removed %s: Spark's scratch files of an earlier process that exited "
                     "without removing them", earlier)
    mine = root / str(pid)
    mine.mkdir(exist_ok=True)
    return mine

