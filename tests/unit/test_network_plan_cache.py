"""A node plans each network once per version and fragment layout, not once per pass:
validating plans every box's query in Spark, and a standby awaiting promotion passes over
the catalog every 0.1 s."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from medusa.catalog.model import Entry, Kind
from medusa_spark.network.validate import check_structure
from medusa_spark.node import hosting

pytestmark = pytest.mark.unit

DEFINITION = yaml.safe_dump({
    "name": "t", "participant": "alpha",
    "streams": {"reports": {"topic": "in.reports", "participant": "alpha",
                            "schema": "position_report"}},
    "boxes": {"moving": {"type": "filter", "params": {"predicate": "speed > 0"}},
              "stopped": {"type": "filter", "params": {"predicate": "speed = 0"}}},
    "arrows": [{"from": "reports", "to": "moving"}, {"from": "reports", "to": "stopped"}]})


def _entry(kind: Kind, name: str, version: int, spec: dict[str, Any]) -> Entry:
    return Entry(kind=kind, name=name, version=version, updated_at=0, spec=spec)


def _fragment(name: str, boxes: list[str]) -> Entry:
    return _entry(Kind.FRAGMENTS, f"alpha/t/{name}", 1,
                  {"network": "alpha/t", "boxes": boxes, "node": "alpha/n1"})


def test_a_network_is_planned_again_only_when_its_version_or_fragments_change(
        monkeypatch) -> None:
    planned: list[int] = []

    def validate(spec: Any, spark: Any) -> Any:
        planned.append(1)
        return check_structure(spec)

    monkeypatch.setattr(hosting, "validate", validate)
    monkeypatch.setattr(hosting, "network_topics", lambda *args, **kwargs: {})
    network = {"entry": _entry(Kind.NETWORKS, "alpha/t", 1, {"definition": DEFINITION})}
    catalog = SimpleNamespace(get=lambda kind, name: network["entry"])
    host: Any = hosting.Hosting.__new__(hosting.Hosting)
    host.node = SimpleNamespace(catalog=catalog, spark=None, endpoints=None, registry=None)
    host._plans = {}
    two = [_fragment("a", ["moving"]), _fragment("b", ["stopped"])]
    first = host._network("alpha/t", two)
    assert host._network("alpha/t", two) is first
    assert len(planned) == 1
    assert set(first.fragments) == {"a", "b"}
    # Another layout of its boxes (a scale step's instances, a redeploy's grouping).
    host._network("alpha/t", [_fragment("a", ["moving"]), _fragment("c", ["stopped"])])
    assert len(planned) == 2
    network["entry"] = _entry(Kind.NETWORKS, "alpha/t", 2, {"definition": DEFINITION})
    host._network("alpha/t", [_fragment("a", ["moving"]), _fragment("c", ["stopped"])])
    assert len(planned) == 3


def test_the_plan_of_a_network_no_longer_hosted_is_dropped(monkeypatch) -> None:
    monkeypatch.setattr(hosting, "validate", lambda spec, spark: check_structure(spec))
    monkeypatch.setattr(hosting, "network_topics", lambda *args, **kwargs: {})
    entry = _entry(Kind.NETWORKS, "alpha/t", 1, {"definition": DEFINITION})
    host: Any = hosting.Hosting.__new__(hosting.Hosting)
    host.node = SimpleNamespace(catalog=SimpleNamespace(get=lambda kind, name: entry),
                                spark=None, endpoints=None, registry=None)
    host._plans = {}
    fragments = [_fragment("a", ["moving"]), _fragment("b", ["stopped"])]
    planned = host._networks({"alpha/t"}, fragments)
    assert set(planned) == set(host._plans) == {"alpha/t"}
    assert host._networks(set(), fragments) == {}
    assert host._plans == {}, "a network withdrawn (or placed elsewhere) keeps no plan here"
