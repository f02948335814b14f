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


def start_node(layout: StackLayout, node: str, master: str = "local[1]",
               secondary: str | None = None, capacity: float | None = None
               ) -> RunningProcess:
    """Starts one node (participant/name, with its secondary if one is named) under the
    stack's launcher, in the caller's session like the other nodes (a rebuild's lower
    priority then counts against their queries too); the caller waits for it to be up in
    the catalog. One of that name left by an interrupted run is stopped first: it ran
    the code of its own start, perhaps not the code measured now."""
    from medusa.stack import launcher

    participant, name = node.split("/")
    launcher.stop_service(layout, f"node-{participant}-{name}", report=lambda _: None)
    return launcher.start_service(
        layout, f"node-{participant}-{name}",
        [sys.executable, "-m", "medusa_apps", "node", "--name", name, "--participant",
         participant, "--master", master, *(["--secondary", secondary] if secondary else []),
         *(["--capacity", f"{capacity:g}"] if capacity is not None else [])],
        report=lambda _: None, own_session=False)


@contextmanager
def bench_nodes(layout: StackLayout, catalog: CatalogClient, nodes: Sequence[str],
                master: str = "local[1]", secondaries: Mapping[str, str] | None = None
                ) -> Iterator[dict[str, RunningProcess]]:
    """Starts each node (participant/name, with its secondary if ``secondaries`` names
    one), waits until every one is up in the catalog, yields their processes, and stops
    them (their process groups, JVMs included) when done. A node the caller starts again
    goes back into the dict it was given, so it is stopped too."""
    from medusa_spark.deploy import wait_for_node

    started: dict[str, RunningProcess] = {}
    try:
        for node in nodes:
            started[node] = start_node(layout, node, master, (secondaries or {}).get(node))
        for node in nodes:
            wait_for_node(catalog, node, timeout_s=240)
        yield started
    finally:
        for process in started.values():
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
