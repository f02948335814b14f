"""Copying a box's checkpoint to the node that takes the box over.

Spark writes a checkpoint's files once, under new names (offsets/N, commits/N,
the state store's N.changelog and N.zip), so a copy can run while the box still
runs: a first pass copies the bulk ahead of the hand-over, and after the box has
stopped a second pass copies only what is new (the SEEP way of moving state with
a short pause). A checkpoint on a shared store (hdfs://, s3a://) is not copied:
the next node resumes from it in place.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse


@dataclass(frozen=True)
class CopyStats:
    files: int
    bytes: int


def is_local(location: str) -> bool:
    return urlparse(location).scheme in ("", "file")


def local_path(location: str) -> Path:
    return Path(urlparse(location).path if location.startswith("file:") else location)


def checkpoint_size(location: str) -> int:
    """Bytes under a local checkpoint (0 when there is none yet)."""
    root = local_path(location)
    if not is_local(location) or not root.is_dir():
        return 0
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


def sync_checkpoint(source: str, target: str) -> CopyStats:
    """Copies the files of ``source`` that ``target`` lacks or has at another size."""
    if source == target or not (is_local(source) and is_local(target)):
        return CopyStats(0, 0)
    source_root, target_root = local_path(source), local_path(target)
    if not source_root.is_dir():
        return CopyStats(0, 0)
    files = copied = 0
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
            shutil.copy2(path, destination)
        except FileNotFoundError:
            continue
        files += 1
        copied += size
    return CopyStats(files, copied)


def delete_checkpoint(location: str) -> None:
    """Removes a local checkpoint, if there is one."""
    if is_local(location):
        shutil.rmtree(local_path(location), ignore_errors=True)


def last_committed_batch(location: str) -> int | None:
    """The id of the last batch a local checkpoint holds as committed (None: none yet)."""
    commits = local_path(location) / "commits"
    if not is_local(location) or not commits.is_dir():
        return None
    ids = [int(f.name) for f in commits.iterdir() if f.name.isdigit()]
    return max(ids) if ids else None


def batch_offsets(location: str, batch: int) -> str | None:
    """The source offsets a batch ends at, as Spark wrote them (JSON per source)."""
    path = local_path(location) / "offsets" / str(batch)
    if not is_local(location) or not path.is_file():
        return None
    lines = path.read_text().splitlines()
    return "\n".join(lines[2:])  # after the version and the batch metadata


def rebase_source(location: str, topic: str, offsets: dict[int, int]) -> int | None:
    """Makes a local checkpoint resume reading ``topic`` at ``offsets`` (partition -> offset).

    For a fragment moved to a node of another cluster: its SUnion's topic there has the
    same name but other offsets. The last committed batch's source offsets are rewritten,
    and a batch planned after it (never committed) is dropped, so Spark plans the next
    batch from the new topic's offsets. Returns the batch rebased, or None without one.
    """
    batch = last_committed_batch(location)
    if batch is None:
        return None
    root = local_path(location)
    for folder in ("offsets", "commits"):
        for path in (root / folder).iterdir():
            # A later batch's log entry and its checksum (".7.crc"): a checksum left behind
            # makes Spark's write of that batch's entry fail ("already exists").
            number = path.name.removeprefix(".").split(".", 1)[0]
            if number.isdigit() and int(number) > batch:
                path.unlink()
    path = root / "offsets" / str(batch)
    lines = path.read_text().splitlines()
    wanted = json.dumps({topic: {str(p): o for p, o in sorted(offsets.items())}})
    rebased = [wanted if index >= 2 and _reads(line, topic) else line
               for index, line in enumerate(lines)]
    path.write_text("\n".join(rebased))
    for stale in (root / "offsets").glob(f".{batch}.*"):  # Spark's checksum files
        stale.unlink()
    return batch


def write_resume(location: str, batch: int, positions: dict[str, Any]) -> None:
    """Records the input positions a SUnion resumed from after the fragment's query
    committed ``batch`` (kept beside Spark's files, so it moves with the checkpoint)."""
    (local_path(location) / f"medusa-resume-{batch}.json").write_text(json.dumps(positions))


def read_resume(location: str, batch: int) -> dict[str, Any] | None:
    """The input positions recorded by ``write_resume`` for ``batch``, if any."""
    path = local_path(location) / f"medusa-resume-{batch}.json"
    if not is_local(location) or not path.is_file():
        return None
    found: dict[str, Any] = json.loads(path.read_text())
    return found


def source_offsets(location: str, batch: int, topic: str) -> dict[int, int] | None:
    """Where the batch's readers of ``topic`` stood at its end (the smallest per partition:
    a query may read its source more than once)."""
    path = local_path(location) / "offsets" / str(batch)
    if not is_local(location) or not path.is_file():
        return None
    found: dict[int, int] = {}
    for line in path.read_text().splitlines()[2:]:
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
