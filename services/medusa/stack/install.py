"""Installing the components: the same ``infra/install.sh`` the container image runs."""

from __future__ import annotations

import os
import subprocess
import sys

from medusa.settings import REPO_ROOT, StackSettings

INSTALL_SCRIPT = REPO_ROOT / "infra" / "install.sh"


def install(settings: StackSettings) -> None:
    """Fetch every component, pinned, into the cache; quick when all is cached."""
    env = {**os.environ, "MEDUSA_CACHE_DIR": str(settings.cache_dir),
           "MEDUSA_PYTHON": sys.executable}
    completed = subprocess.run(["bash", str(INSTALL_SCRIPT)], env=env, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"{INSTALL_SCRIPT} failed with exit code {completed.returncode}")
