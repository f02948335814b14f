"""A fragment's checkpoint: copying it to the node that takes the fragment over, and
reading or adjusting what Spark wrote in it.

Spark writes a checkpoint's files once, under new names (offsets/N, commits/N,
the state store's N.changelog and N.zip), so a copy can run while the query still
runs: a first pass copies the bulk ahead of the hand-over, and after the query has
stopped a second pass copies only what is new. On one file system a local copy is made
of hard links: nothing in a checkpoint is written in place (Spark's checkpoint manager,
``LocalCheckpointFileManager``, and this package write a temporary file and rename it),
so the two folders share the files until one of them replaces or deletes its own, and a
copy of gigabytes writes nothing beside a query that runs on. A checkpoint on a shared store
(``hdfs://``, ``s3a://``) is not copied when a node takes a fragment over: the next node
resumes from it in place. Every function here works on a local folder and on such a
store (through ``checkpoint_store``).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medusa_spark import checkpoint_store as store
from medusa_spark.checkpoint_store import is_local, local_path

__all__ = ["is_local", "local_path"]


@dataclass(frozen=True)
class CopyStats:
    files: int
    bytes: int
    linked: int = 0
    """Of ``files``, those made hard links rather than written anew."""

    def __str__(self) -> str:
        linked = f"; {self.linked} hard links" if self.linked else ""
        return f"{self.files} files ({self.bytes} bytes{linked})"


_NO_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES}
"""Why a hard link can fail where a copy does not: another file system, or one without
links (or a cap on them)."""


def _link_or_copy(path: Path, destination: Path) -> bool:
    """Makes ``destination`` the file at ``path``: a hard link where the file system
    allows one (True), else a copy."""
    # Unlinked first, never written over: an earlier pass may have made it a link to the
    # source's previous file, which a copy into it would change in the other checkpoint.
    destination.unlink(missing_ok=True)
    try:
        os.link(path, destination)
        return True
    except OSError as error:
        if error.errno not in _NO_LINK:
            raise
    shutil.copy2(path, destination)
    return False


def checkpoint_size(location: str) -> int:
    """Bytes under a checkpoint (0 when there is none yet)."""
    return store.size(location)


def sync_checkpoint(source: str, target: str) -> CopyStats:
    """Copies the files of ``source`` that ``target`` lacks or has at another size; on a
    shared store, the whole checkpoint (a store copies it without this process reading
    it file by file into its own disk)."""
    if source == target:
        return CopyStats(0, 0)
    if not (is_local(source) and is_local(target)):
        copied = store.copy_tree(source, target)
        return CopyStats(len(store.list_files(target)), copied)
    source_root, target_root = local_path(source), local_path(target)
    if not source_root.is_dir():
        return CopyStats(0, 0)
    files = copied = linked = 0
    for path in sorted(source_root.rglob("*")):
        # Temporary files are renamed into place when complete; never copy one half-written.
        if not path.is_file() or path.name.endswith(".tmp") or ".tmp." in path.name:
            continue
        destination = target_root / path.relative_to(source_root)
        try:
            size = path.stat().st_size
        except FileNotFoundError:  # cleaned up by Spark meanwhile
            continue
        if destination.is_file() and destination.stat().st_size == size:
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            linked += _link_or_copy(path, destination)
        except FileNotFoundError:
            continue
        files += 1
        copied += size
    return CopyStats(files, copied, linked)


def delete_checkpoint(location: str) -> None:
    """Removes a checkpoint, if there is one."""
    store.delete(location)


def last_committed_batch(location: str) -> int | None:
    """The id of the last batch a checkpoint holds as committed (None: none yet)."""
    ids = [int(name) for name in store.list_names(f"{location}/commits") if name.isdigit()]
    return max(ids) if ids else None


def _offsets_lines(location: str, batch: int) -> list[str] | None:
    try:
        return store.read_text(f"{location}/offsets/{batch}").splitlines()
    except FileNotFoundError:
        return None


def batch_offsets(location: str, batch: int) -> str | None:
    """The source offsets a batch ends at, as Spark wrote them (JSON per source)."""
    lines = _offsets_lines(location, batch)
    return None if lines is None else "\n".join(lines[2:])  # after version and metadata


def batch_watermark_ms(location: str, batch: int) -> int | None:
    """The event-time watermark a batch ran with (Spark's batch metadata)."""
    lines = _offsets_lines(location, batch)
    if lines is None or len(lines) < 2:
        return None
    return int(json.loads(lines[1]).get("batchWatermarkMs", 0))


def drop_uncommitted(location: str) -> int | None:
    """Drops the batch planned after the last committed one, so that Spark plans it anew;
    returns the last committed batch (None: none).

    A checkpoint copied while its query ran may hold it; Spark 4.1 re-runs such a batch
    without asking its Kafka source for the latest offsets, and then fails reporting the
    source's metrics (a NullPointerException in ``KafkaMicroBatchStream.metrics``).
    """
    batch = last_committed_batch(location)
    if batch is None:
        return None
    for folder in ("offsets", "commits"):
        for name in store.list_names(f"{location}/{folder}"):
            # A later batch's log entry and its checksum (".7.crc"): a checksum left behind
            # makes Spark's write of that batch's entry fail ("already exists").
            number = name.removeprefix(".").split(".", 1)[0]
            if number.isdigit() and int(number) > batch:
                store.delete(f"{location}/{folder}/{name}")
    return batch


def forget_query_id(location: str) -> None:
    """Gives a checkpoint a query id of its own (``metadata``): a copy then runs as a query
    of its own beside the one it was copied from, in the same session (Spark stops a
    running query whose id another run resumes). Spark 4.2 refuses a checkpoint whose
    offset log has batches but whose ``metadata`` is missing, so it is written anew."""
    for name in ("metadata", ".metadata.crc"):
        if store.exists(f"{location}/{name}"):
            store.delete(f"{location}/{name}")
    store.write_text(f"{location}/metadata", json.dumps({"id": str(uuid.uuid4())}))


def rebase_source(location: str, topic: str, offsets: dict[int, int]) -> int | None:
    """Makes a checkpoint resume reading ``topic`` at ``offsets`` (partition -> offset).

    For a fragment moved to a node of another cluster: its SUnion's topic there has the
    same name but other offsets. The last committed batch's source offsets are rewritten,
    and a batch planned after it (never committed) is dropped, so Spark plans the next
    batch from the new topic's offsets. Returns the batch rebased, or None without one.
    """
    batch = drop_uncommitted(location)
    if batch is None:
        return None
    lines = _offsets_lines(location, batch) or []
    wanted = json.dumps({topic: {str(p): o for p, o in sorted(offsets.items())}})
    rebased = [wanted if index >= 2 and _reads(line, topic) else line
               for index, line in enumerate(lines)]
    store.write_text(f"{location}/offsets/{batch}", "\n".join(rebased))
    for name in store.list_names(f"{location}/offsets"):
        if name.startswith(f".{batch}."):  # Spark's checksum of the old content
            store.delete(f"{location}/offsets/{name}")
    return batch


def write_resume(location: str, batch: int, positions: dict[str, Any]) -> None:
    """Records the input positions a SUnion resumed from after the fragment's query
    committed ``batch`` (kept beside Spark's files, so it moves with the checkpoint)."""
    store.write_text(f"{location}/medusa-resume-{batch}.json", json.dumps(positions))


def read_resume(location: str, batch: int) -> dict[str, Any] | None:
    """The input positions recorded by ``write_resume`` for ``batch``, if any."""
    try:
        found: dict[str, Any] = json.loads(
            store.read_text(f"{location}/medusa-resume-{batch}.json"))
    except FileNotFoundError:
        return None
    return found


def source_offsets(location: str, batch: int, topic: str) -> dict[int, int] | None:
    """Where the batch's readers of ``topic`` stood at its end (the smallest per partition:
    a query may read its source more than once)."""
    lines = _offsets_lines(location, batch)
    if lines is None:
        return None
    found: dict[int, int] = {}
    for line in lines[2:]:
        if not line.strip() or line.strip() == "-":
            continue
        described = json.loads(line)
        for partition, offset in (described.get(topic) or {}).items():
            if int(partition) not in found or offset < found[int(partition)]:
                found[int(partition)] = int(offset)
    return found or None


def _reads(line: str, topic: str) -> bool:
    """Whether a source line of an offsets file is a reader of ``topic``."""
    text = line.strip()
    if not text or text == "-":
        return False
    described = json.loads(text)
    return isinstance(described, dict) and topic in described
