"""Nodes a benchmark part starts for itself, under the stack's launcher, and stops after."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress

from medusa.catalog.client import CatalogClient
from medusa.stack.layout import StackLayout
from medusa.stack.processes import RunningProcess


@contextmanager
def bench_nodes(layout: StackLayout, catalog: CatalogClient, nodes: Sequence[str],
                master: str = "local[1]", secondaries: Mapping[str, str] | None = None
                ) -> Iterator[dict[str, RunningProcess]]:
    """Starts each node (participant/name, with its secondary if ``secondaries`` names
    one), waits until every one is up in the catalog, yields their processes, and stops
    them (their process groups, JVMs included) when done."""
    from medusa.stack import launcher
    from medusa_spark.deploy import wait_for_node

    started: dict[str, RunningProcess] = {}
    try:
        for node in nodes:
            participant, name = node.split("/")
            secondary = (secondaries or {}).get(node)
            started[node] = launcher.start_service(
                layout, f"node-{participant}-{name}",
                [sys.executable, "-m", "medusa_apps", "node", "--name", name, "--participant",
                 participant, "--master", master,
                 *(["--secondary", secondary] if secondary else [])], report=lambda _: None)
        for node in nodes:
            wait_for_node(catalog, node, timeout_s=240)
        yield started
    finally:
        for process in started.values():
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
