"""A real S3-compatible object store for the tests of checkpoints on ``s3a://``: s3proxy
(``medusa.stack.s3``) with its file system backend, in a temporary folder, beside the
session's federation, one per test session, started by the first test that needs it."""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from medusa.settings import REPO_ROOT, StackSettings
from medusa.stack import processes
from medusa.stack.components import java_binary
from medusa.stack.layout import StackLayout
from medusa.stack.s3 import LocalS3, s3a_jars_folder, s3proxy_libs
from tests.federation_processes import free_port
from tests.waiting import wait_until

BUCKET = "medusa-tests"
ACCESS_KEY = "medusa-tests"


@pytest.fixture(scope="session")
def installed_s3() -> Path:
    """s3proxy's jars and Spark's S3A client, installed on first use (a no-op when
    cached)."""
    settings = StackSettings()
    done = subprocess.run(["bash", str(REPO_ROOT / "infra" / "install_s3.sh")],
                          env={**os.environ, "MEDUSA_CACHE_DIR": str(settings.cache_dir)},
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip().splitlines()[-1:]
        pytest.skip(f"s3proxy or the S3A client is not installed and infra/install_s3.sh "
                    f"failed: {' '.join(reason)}")
    assert (s3a_jars_folder(settings.cache_dir) / ".installed").is_file()
    return s3proxy_libs(settings.cache_dir)


@pytest.fixture(scope="session")
def s3_store(tmp_path_factory: pytest.TempPathFactory, installed_s3: Path
             ) -> Iterator[LocalS3]:
    """A running s3proxy with a bucket ``BUCKET`` and a key of its own."""
    home = tmp_path_factory.mktemp("s3")
    store = LocalS3(home, free_port(), java_binary(StackLayout.from_settings(StackSettings())),
                    installed_s3, ACCESS_KEY, secrets.token_urlsafe(32), buckets=[BUCKET])
    store.configure()
    began = time.monotonic()
    process = processes.start("s3", store.command(), home / "s3.log", {})
    try:
        def ready() -> bool:
            if store.ready():
                return True
            assert process.alive(), f"s3proxy exited during start-up; see {process.log}"
            return False

        wait_until(f"s3proxy ready (see {home})", ready, 60, interval_s=0.25)
        print(f"s3proxy ready at {store.endpoint} in {time.monotonic() - began:.1f}s")
        yield store
    finally:
        processes.stop(process)


def s3_env(store: LocalS3) -> dict[str, str]:
    """What points a node's ``s3a://`` checkpoints at the store (``medusa.object_store``)."""
    return {"MEDUSA_S3_ENDPOINT": store.endpoint, "MEDUSA_S3_ACCESS_KEY": store.access_key,
            "MEDUSA_S3_SECRET_KEY": store.secret_key}
