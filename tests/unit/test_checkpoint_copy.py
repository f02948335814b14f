"""A local checkpoint's copy (a replica's, a moved fragment's, a redo's) is made of hard
links, and what is done to the copy afterwards never reaches the checkpoint it came from."""

import errno
import json
import os

import pytest

from medusa_spark import checkpoints
from medusa_spark.checkpoints import (
    drop_uncommitted,
    forget_query_id,
    rebase_source,
    sync_checkpoint,
)
from medusa_spark.reconcile import rollback

pytestmark = pytest.mark.unit

TOPIC = "net.medusa.net.f.in"


def _checkpoint(root, batches=(4, 5, 6), committed=(4, 5)) -> None:
    for folder in ("offsets", "commits", "state/0/0"):
        (root / folder).mkdir(parents=True)
    (root / "metadata").write_text(json.dumps({"id": "the-running-query"}))
    for batch in batches:
        (root / "offsets" / str(batch)).write_text("\n".join(
            ["v1", json.dumps({"batchWatermarkMs": 0}), json.dumps({TOPIC: {"0": 100 + batch}})]))
        (root / "state/0/0" / f"{batch + 1}.changelog").write_bytes(bytes(1000 + batch))
    for batch in committed:
        (root / "commits" / str(batch)).write_text("v1\n{}")


def _contents(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_a_copy_on_the_same_file_system_is_hard_links(tmp_path) -> None:
    source, copy = tmp_path / "running", tmp_path / "running.replica"
    _checkpoint(source)

    stats = sync_checkpoint(str(source), str(copy))

    assert _contents(copy) == _contents(source)
    assert stats.files == stats.linked == len(_contents(source))
    assert stats.bytes == sum(len(data) for data in _contents(source).values())
    for name in _contents(source):
        assert (copy / name).stat().st_ino == (source / name).stat().st_ino, name
    assert "hard links" in str(stats)


def test_what_is_done_to_the_copy_leaves_the_running_checkpoint_as_it_was(tmp_path) -> None:
    source, copy = tmp_path / "running", tmp_path / "running.replica"
    _checkpoint(source)
    before = _contents(source)
    sync_checkpoint(str(source), str(copy))

    # What a replica, a moved fragment and a redo do to their copy before Spark runs on it.
    assert drop_uncommitted(str(copy)) == 5
    forget_query_id(str(copy))
    rebase_source(str(copy), TOPIC, {0: 7})
    assert rollback(str(copy), 4) > 0

    assert _contents(source) == before
    assert json.loads((copy / "metadata").read_text())["id"] != "the-running-query"


def test_a_file_the_running_query_replaced_is_taken_again(tmp_path) -> None:
    source, copy = tmp_path / "running", tmp_path / "running.replica"
    _checkpoint(source)
    sync_checkpoint(str(source), str(copy))
    replaced = source / "offsets" / "6"
    fresh = tmp_path / "fresh"
    fresh.write_text("v1\n{}\n{}")  # another size, renamed into place as Spark does
    os.replace(fresh, replaced)

    stats = sync_checkpoint(str(source), str(copy))

    assert (stats.files, stats.linked) == (1, 1)
    assert (copy / "offsets" / "6").read_text() == "v1\n{}\n{}"


def test_where_no_link_can_be_made_the_files_are_copied(tmp_path, monkeypatch) -> None:
    source, copy = tmp_path / "running", tmp_path / "elsewhere"
    _checkpoint(source)

    def across_file_systems(src, dst) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")
    monkeypatch.setattr(checkpoints.os, "link", across_file_systems)

    stats = sync_checkpoint(str(source), str(copy))

    assert _contents(copy) == _contents(source)
    assert stats.linked == 0 and stats.files == len(_contents(source))
    assert (copy / "metadata").stat().st_ino != (source / "metadata").stat().st_ino
