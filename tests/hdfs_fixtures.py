"""A real HDFS for the tests of checkpoints on a shared store: a NameNode and a DataNode
from Hadoop's own jars (``medusa.stack.hdfs``), in a temporary folder, one per test
session, started by the first test that needs it."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from medusa.settings import REPO_ROOT, StackSettings
from medusa.stack import processes
from medusa.stack.components import java_binary
from medusa.stack.hdfs import HdfsPorts, LocalHdfs, hdfs_libs
from medusa.stack.layout import StackLayout
from tests.waiting import wait_until

PORT_BASES = range(18760, 18800, 10)  # six ports each, clear of the stack's other ports


@pytest.fixture(scope="session")
def installed_hdfs() -> Path:
    """The Hadoop jars, installed on first use (a no-op when cached)."""
    settings = StackSettings()
    done = subprocess.run(["bash", str(REPO_ROOT / "infra" / "install_hdfs.sh")],
                          env={**os.environ, "MEDUSA_CACHE_DIR": str(settings.cache_dir)},
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip().splitlines()[-1:]
        pytest.skip(f"the HDFS jars are not installed and infra/install_hdfs.sh failed: "
                    f"{' '.join(reason)}")
    return hdfs_libs(settings.cache_dir)


def _free_ports() -> HdfsPorts:
    for base in PORT_BASES:
        ports = HdfsPorts.from_base(base)
        if not any(processes.port_in_use(port) for port in ports.all()):
            return ports
    raise AssertionError(f"no six free ports at any of {list(PORT_BASES)} for HDFS")


@pytest.fixture(scope="session")
def hdfs(tmp_path_factory: pytest.TempPathFactory, installed_hdfs: Path
         ) -> Iterator[LocalHdfs]:
    """A running NameNode + DataNode."""
    home = tmp_path_factory.mktemp("hdfs")
    cluster = LocalHdfs(home, _free_ports(), java_binary(StackLayout.from_settings(
        StackSettings())), installed_hdfs)
    cluster.prepare()
    started: list[processes.RunningProcess] = []
    try:
        began = time.monotonic()
        for command in cluster.commands():
            started.append(processes.start(command.name, command.command,
                                           home / f"{command.name}.log", command.env))
        def ready() -> bool:
            if cluster.ready():
                return True
            dead = [p.log for p in started if not p.alive()]
            assert not dead, f"HDFS exited during start-up; see {dead}"
            return False

        wait_until(f"HDFS ready (see {home})", ready, 120, interval_s=0.25)
        print(f"HDFS ready at {cluster.uri} in {time.monotonic() - began:.1f}s")
        yield cluster
    finally:
        for process in reversed(started):
            processes.stop(process)
