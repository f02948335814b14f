"""What a node writes of itself in the catalog: its registration (with its Spark UI's URL),
its rejoining after being declared failed, and its going down."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from pyspark.sql import SparkSession

from medusa.catalog.model import Entry, Kind, NodeSpec
from medusa.endpoints import Endpoints
from medusa_spark.node import Node

pytestmark = pytest.mark.unit

Change = Callable[[dict[str, Any] | None], dict[str, Any] | None]


class FakeCatalog:
    """The catalog client's reads and read-modify-writes of node entries, in memory."""

    def __init__(self) -> None:
        self.entries: dict[tuple[Kind, str], Entry] = {}

    def get(self, kind: Kind, name: str) -> Entry | None:
        return self.entries.get((kind, name))

    def list(self, kind: Kind) -> list[Entry]:
        return [e for (k, _), e in sorted(self.entries.items()) if k == kind]

    def update(self, kind: Kind, name: str, change: Change) -> Entry | None:
        current = self.entries.get((kind, name))
        wanted = change(dict(current.spec) if current else None)
        if wanted is None:
            return current
        NodeSpec.model_validate(wanted)  # as the catalog would
        version = current.version + 1 if current else 1
        self.entries[(kind, name)] = Entry(kind=kind, name=name, version=version,
                                           updated_at=version, spec=wanted)
        return self.entries[(kind, name)]


def _node(catalog: FakeCatalog, tmp_path: Path, ui: str | None) -> Node:
    spark = SimpleNamespace(sparkContext=SimpleNamespace(uiWebUrl=ui, defaultParallelism=2))
    endpoints = Endpoints(kafka={"alpha": "unused:9092"}, registry_url="", otlp_endpoint="",
                          jaeger_query_url="")
    return Node("n1", "alpha", endpoints, cast(Any, None), cast(SparkSession, spark),
                str(tmp_path / "checkpoints"), catalog, secondary="alpha/n2",
                work_dir=tmp_path / "work")


def test_a_node_registers_with_its_spark_ui(tmp_path: Path) -> None:
    catalog = FakeCatalog()
    node = _node(catalog, tmp_path, "http://127.0.0.1:4041")
    assert node.spark_ui == "http://127.0.0.1:4041"
    spec = node.register().spec  # type: ignore[union-attr]
    assert (spec["status"], spec["incarnation"], spec["spark_ui"]) == (
        "up", node.incarnation, "http://127.0.0.1:4041")


def test_a_node_without_a_ui_says_so_over_its_last_starts_url(tmp_path: Path) -> None:
    catalog = FakeCatalog()
    catalog.update(Kind.NODES, "alpha/n1", lambda _: {
        "status": "down", "spark_ui": "http://127.0.0.1:4040", "capacity": 3.0})
    spec = _node(catalog, tmp_path, None).register().spec  # type: ignore[union-attr]
    assert (spec["status"], spec["spark_ui"], spec["capacity"]) == ("up", None, 3.0)


def test_a_node_declared_failed_rejoins_with_its_spark_ui(tmp_path: Path) -> None:
    catalog = FakeCatalog()
    node = _node(catalog, tmp_path, "http://127.0.0.1:4040")
    first = node.incarnation
    node.register()
    # The failure detector's write: the status, over the rest of what the node wrote.
    catalog.update(Kind.NODES, "alpha/n1", lambda spec: {**(spec or {}), "status": "failed"})
    node.reconcile()
    spec = catalog.get(Kind.NODES, "alpha/n1").spec  # type: ignore[union-attr]
    assert node.incarnation != first
    assert (spec["status"], spec["incarnation"], spec["spark_ui"]) == (
        "up", node.incarnation, "http://127.0.0.1:4040")


def test_a_stopped_node_leaves_no_link_to_its_ui(tmp_path: Path) -> None:
    catalog = FakeCatalog()
    node = _node(catalog, tmp_path, "http://127.0.0.1:4040")
    node.register()
    spec = node.mark_down().spec  # type: ignore[union-attr]
    assert (spec["status"], spec["spark_ui"], spec["incarnation"]) == (
        "down", None, node.incarnation)
