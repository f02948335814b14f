"""A node's Spark scratch folders (``medusa_spark.local_dirs``): a node's process removes
those its earlier, exited processes left behind, never a live one's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from medusa_spark.local_dirs import node_local_dir

pytestmark = pytest.mark.unit


def _exited_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_the_folders_of_exited_processes_go_and_a_live_ones_stay(tmp_path: Path) -> None:
    exited, live = tmp_path / str(_exited_pid()), tmp_path / str(os.getppid())
    for folder in (exited, live, tmp_path / "notes"):
        (folder / "blockmgr-1").mkdir(parents=True)
    mine = node_local_dir(tmp_path)
    assert mine == tmp_path / str(os.getpid()) and mine.is_dir()
    assert not exited.exists()
    assert live.exists() and (tmp_path / "notes").exists()
