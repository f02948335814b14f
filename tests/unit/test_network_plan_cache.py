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
    host._incomplete_since = {}
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
    host._incomplete_since = {}
    fragments = [_fragment("a", ["moving"]), _fragment("b", ["stopped"])]
    planned = host._networks({"alpha/t"}, fragments)
    assert set(planned) == set(host._plans) == {"alpha/t"}
    assert host._networks(set(), fragments) == {}
    assert host._plans == {}, "a network withdrawn (or placed elsewhere) keeps no plan here"


def test_a_definition_ahead_of_its_fragment_entries_waits_before_it_is_an_error(
        monkeypatch) -> None:
    """A deploy writes a network's new definition before its new fragments' entries: a
    node between the two keeps the plan it has (or waits, having none), and calls it an
    error only when the entries stay missing."""
    monkeypatch.setattr(hosting, "validate", lambda spec, spark: check_structure(spec))
    monkeypatch.setattr(hosting, "network_topics", lambda *args, **kwargs: {})
    one_box = yaml.safe_dump({**yaml.safe_load(DEFINITION),
                              "boxes": {"moving": {"type": "filter",
                                                   "params": {"predicate": "speed > 0"}}},
                              "arrows": [{"from": "reports", "to": "moving"}]})
    network = {"entry": _entry(Kind.NETWORKS, "alpha/t", 1, {"definition": one_box})}
    host: Any = hosting.Hosting.__new__(hosting.Hosting)
    host.node = SimpleNamespace(catalog=SimpleNamespace(get=lambda kind, name: network["entry"]),
                                spark=None, endpoints=None, registry=None)
    host._plans = {}
    host._incomplete_since = {}
    only_a = [_fragment("a", ["moving"])]
    before = host._network("alpha/t", only_a)
    network["entry"] = _entry(Kind.NETWORKS, "alpha/t", 2, {"definition": DEFINITION})
    assert host._network("alpha/t", only_a) is before, "box 'stopped' has no entry yet"
    host._plans = {}
    with pytest.raises(hosting.NetworkPending, match=r"'stopped'.* yet"):
        host._network("alpha/t", only_a)
    monkeypatch.setattr(hosting, "CATALOG_SETTLE_S", 0.0)
    with pytest.raises(hosting.NetworkError, match=r"'stopped'.*redeploy the network") as raised:
        host._network("alpha/t", only_a)
    assert not isinstance(raised.value, hosting.NetworkPending)
    monkeypatch.setattr(hosting, "CATALOG_SETTLE_S", 20.0)
    after = host._network("alpha/t", [*only_a, _fragment("b", ["stopped"])])
    assert after.version == 2 and host._incomplete_since == {}
