"""Nodes a benchmark part starts for itself, under the stack's launcher, and stops after."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress

from medusa.catalog.client import CatalogClient
from medusa.stack.layout import StackLayout


@contextmanager
def bench_nodes(layout: StackLayout, catalog: CatalogClient, nodes: Sequence[str],
                master: str = "local[1]") -> Iterator[None]:
    """Starts each node (participant/name), waits until every one is up in the catalog, and
    stops them (their process groups, JVMs included) when done."""
    from medusa.stack import launcher
    from medusa_spark.deploy import wait_for_node

    started = []
    try:
        for node in nodes:
            participant, name = node.split("/")
            started.append(launcher.start_service(
                layout, f"node-{participant}-{name}",
                [sys.executable, "-m", "medusa_apps", "node", "--name", name, "--participant",
                 participant, "--master", master], report=lambda _: None))
        for node in nodes:
            wait_for_node(catalog, node, timeout_s=240)
        yield
    finally:
        for process in started:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
