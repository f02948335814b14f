"""Checkpoint files on a local disk go through the project's manager: an atomic rename that
replaces the file it lands on, a write that refuses an existing file when asked to, and no
process started per file (Hadoop's FileContext runs ``readlink`` and ``chmod``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from py4j.protocol import Py4JJavaError

from medusa_spark.session import CHECKPOINT_FILE_MANAGER

pytestmark = pytest.mark.integration


def _manager(spark, folder: Path):  # type: ignore[no-untyped-def]
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path(folder.as_uri())
    manager_class = jvm.org.apache.spark.sql.execution.streaming.checkpointing \
        .CheckpointFileManager
    # What Spark itself creates for a checkpoint, given the session's settings.
    conf.set("spark.sql.streaming.checkpointFileManagerClass",
             spark.conf.get("spark.sql.streaming.checkpointFileManagerClass"))
    return manager_class.create(path, conf), jvm


def _write(manager, jvm, path, text: str, overwrite: bool) -> None:  # type: ignore[no-untyped-def]
    stream = manager.createAtomic(path, overwrite)
    stream.write(bytearray(text.encode()))
    stream.close()


def _read(manager, path) -> str:  # type: ignore[no-untyped-def]
    stream = manager.open(path)
    try:
        return bytes(stream.readAllBytes()).decode()
    finally:
        stream.close()


def test_spark_uses_the_local_manager_for_a_local_checkpoint(spark, tmp_path: Path) -> None:
    manager, _ = _manager(spark, tmp_path)
    assert manager.getClass().getName() == CHECKPOINT_FILE_MANAGER
    assert manager.isLocal()


def test_a_file_written_again_is_replaced(spark, tmp_path: Path) -> None:
    manager, jvm = _manager(spark, tmp_path)
    target = jvm.org.apache.hadoop.fs.Path((tmp_path / "state" / "1.changelog").as_uri())
    _write(manager, jvm, target, "first", overwrite=True)
    _write(manager, jvm, target, "second", overwrite=True)
    assert _read(manager, target) == "second"
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == ["1.changelog"]


def test_a_write_that_must_not_overwrite_refuses_an_existing_file(spark,
                                                                  tmp_path: Path) -> None:
    """Spark's offset and commit logs rely on it: two queries on one checkpoint cannot both
    write a batch."""
    manager, jvm = _manager(spark, tmp_path)
    target = jvm.org.apache.hadoop.fs.Path((tmp_path / "commits" / "7").as_uri())
    _write(manager, jvm, target, "mine", overwrite=False)
    with pytest.raises(Py4JJavaError, match="FileAlreadyExistsException"):
        _write(manager, jvm, target, "theirs", overwrite=False)
    assert _read(manager, target) == "mine"
    assert sorted(p.name for p in (tmp_path / "commits").iterdir()) == ["7"]


def test_a_cancelled_write_leaves_nothing(spark, tmp_path: Path) -> None:
    manager, jvm = _manager(spark, tmp_path)
    target = jvm.org.apache.hadoop.fs.Path((tmp_path / "offsets" / "3").as_uri())
    stream = manager.createAtomic(target, True)
    stream.write(bytearray(b"half"))
    stream.cancel()
    assert not manager.exists(target)
    assert list((tmp_path / "offsets").iterdir()) == []


def test_listing_filters_and_deleting_is_recursive(spark, tmp_path: Path) -> None:
    manager, jvm = _manager(spark, tmp_path)
    folder = tmp_path / "offsets"
    (folder / "sub").mkdir(parents=True)
    for name in ("0", "1", "sub/x"):
        (folder / name).write_text(name)
    listed = manager.list(jvm.org.apache.hadoop.fs.Path(folder.as_uri()))
    assert sorted((status.getPath().getName(), status.isDirectory(), status.getLen())
                  for status in listed) == [("0", False, 1), ("1", False, 1), ("sub", True, 0)]
    with pytest.raises(Py4JJavaError, match="FileNotFoundException"):
        manager.list(jvm.org.apache.hadoop.fs.Path((tmp_path / "absent").as_uri()))
    manager.delete(jvm.org.apache.hadoop.fs.Path(folder.as_uri()))
    assert not folder.exists()
    manager.delete(jvm.org.apache.hadoop.fs.Path(folder.as_uri()))  # gone already: done
