"""The local half of ``checkpoint_store``: plain paths and file: URIs, through pathlib,
with no SparkSession (the hdfs:// half runs in tests/integration/test_checkpoint_store_hdfs.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from medusa_spark import checkpoint_store as store

pytestmark = pytest.mark.unit


@pytest.fixture(params=["path", "file-uri"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    folder = tmp_path / "a dir" / "ck"  # a space: file: URIs quote it as %20
    return str(folder) if request.param == "path" else folder.as_uri()


def test_an_absent_location_is_empty(root: str) -> None:
    assert not store.exists(root)
    assert store.list_names(root) == []
    assert store.size(root) == 0
    store.delete(root)  # nothing to delete, no error
    with pytest.raises(FileNotFoundError):
        store.read_text(f"{root}/commits/0")


def test_write_read_list_size_and_delete(root: str) -> None:
    store.write_text(f"{root}/offsets/0", "v1\n{}")
    store.write_text(f"{root}/medusa-resume-0.json", '{"ä": 1}')
    assert store.exists(root) and store.exists(f"{root}/offsets/0")
    assert store.list_names(root) == ["medusa-resume-0.json", "offsets"]
    assert store.list_names(f"{root}/offsets/0") == []  # a file is no directory
    assert store.read_text(f"{root}/medusa-resume-0.json") == '{"ä": 1}'
    assert store.size(root) == len(b"v1\n{}") + len('{"ä": 1}'.encode())
    assert store.size(f"{root}/offsets/0") == 5

    store.write_text(f"{root}/offsets/0", "v1")  # overwrite, shorter
    assert store.read_text(f"{root}/offsets/0") == "v1"
    # The write went through a temporary file renamed into place: none is left behind.
    assert store.list_names(f"{root}/offsets") == ["0"]

    store.delete(f"{root}/offsets/0")
    assert store.list_names(f"{root}/offsets") == []
    store.delete(root)
    assert not store.exists(root)


def test_a_file_uri_and_its_path_are_the_same_place(tmp_path: Path) -> None:
    store.write_text((tmp_path / "x y" / "f").as_uri(), "hello")
    assert (tmp_path / "x y" / "f").read_text() == "hello"
    assert store.is_local("file:///tmp/x") and store.is_local("/tmp/x")
    assert not store.is_local("hdfs://127.0.0.1:8020/ck")


@pytest.mark.parametrize("call", [store.exists, store.list_names, store.read_text,
                                  store.delete, store.size])
def test_another_file_system_needs_a_spark_session(call: Callable[[str], object],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark.sql import SparkSession

    # None given and none active in this process (another test may have started one).
    monkeypatch.setattr(SparkSession, "getActiveSession", classmethod(lambda cls: None))
    monkeypatch.setattr(SparkSession, "_instantiatedSession", None)
    with pytest.raises(ValueError, match="needs a SparkSession"):
        call("hdfs://127.0.0.1:1/ck")
