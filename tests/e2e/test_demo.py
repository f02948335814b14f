"""The main job, as a user runs it (`make demo` is `medusa demo`), shortened to two simulated
minutes: the federation, a node, the Linear Road network deployed with default placement,
traffic rising to one expressway's peak rate, and its own check against the reference and
the 5 s rule. Its answers must be right, as the user's must; its response times are
measured (``make bench``), not asserted."""

from __future__ import annotations

import subprocess
import sys

import pytest

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind

pytestmark = pytest.mark.e2e


def test_the_demo_passes_its_own_check(local_federation, federation, shared_nodes,
                                       tmp_path) -> None:
    if local_federation is None:
        pytest.skip("the demo runs the local federation; this session's stack is another")
    shared_nodes.stop()  # a user's federation has the demo's node alone
    env = {**federation.environment(local_federation.settings.run_dir), "COLUMNS": "80"}
    # The session's stack is the one `medusa up` recorded in its run folder: the demo uses it.
    for variable in [v for v in env if v.startswith("MEDUSA_EXTERNAL_")]:
        del env[variable]
    result = subprocess.run([sys.executable, "-m", "medusa_apps", "demo", "--duration", "120",
                             "--stop"], capture_output=True, text=True, env=env, timeout=900,
                            check=False)
    output = result.stdout + result.stderr
    (tmp_path / "demo.log").write_text(output)
    # The answers are asserted; the 5 s rule is the machine's as much as the system's (a
    # loaded CI machine saw p99 6.99 s), so exit 2 (right, but late) passes here too.
    assert result.returncode in (0, 2), output[-6000:]
    assert "every output equals the reference" in output, output[-6000:]
    for line in ("Summary, as a reader saw it", "Where to look next:",
                 "/console"):
        assert line in output, output[-3000:]
    # A user's terminal shows Medusa's lines, not the clients' logs.
    for noise in ("CONFWARN", "isolation.level", "%4|", "%6|", "SQLQueryContextLogger"):
        assert noise not in output, noise
    # Medusa's own lines fit an 80-column terminal (the installers' lines name paths).
    assert max(len(line) for line in output.splitlines()
               if not line.startswith("[install]")) <= 80
    with CatalogClient(federation.catalog_url) as catalog:
        assert catalog.list(Kind.FRAGMENTS, network="alpha/linear-road") == [], \
            "--stop withdraws the demo's network"
