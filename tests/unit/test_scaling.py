"""What makes a fragment scalable (its key, its window span) and how an instance is named;
the scale steps themselves run in tests/e2e/test_scale.py."""

from __future__ import annotations

import time
from typing import Any, cast

import pytest
import yaml
from pydantic import ValidationError

from medusa.catalog.model import Entry, InstanceSpec, Kind
from medusa_spark.fragment import Instance
from medusa_spark.network.model import parse_network
from medusa_spark.networks import chain_network_yaml, network_yaml
from medusa_spark.scaling import ScaleError, _cut, _give_up, fragment_key, window_span_ms

pytestmark = pytest.mark.unit


def _spec(text: str):  # type: ignore[no-untyped-def]
    return parse_network(text)


def test_the_key_is_the_one_the_boxes_declare() -> None:
    spec = _spec(network_yaml("sw", "sw."))
    assert fragment_key(spec, ["plausible", "per_sensor"], "main") == ["sensor_id"]


def test_a_fragment_without_a_declared_key_is_refused() -> None:
    raw = yaml.safe_load(network_yaml("sw", "sw."))
    raw["boxes"]["per_sensor"]["key"] = []
    spec = parse_network(yaml.safe_dump(raw))
    with pytest.raises(ScaleError, match="no box declares a key"):
        fragment_key(spec, ["plausible", "per_sensor"], "main")


def test_boxes_declaring_different_keys_are_refused() -> None:
    raw = yaml.safe_load(network_yaml("sw", "sw."))
    raw["boxes"]["plausible"]["key"] = ["kind"]
    with pytest.raises(ScaleError, match="different keys"):
        fragment_key(parse_network(yaml.safe_dump(raw)), ["plausible", "per_sensor"], "main")


def test_a_session_window_is_refused_naming_the_box() -> None:
    raw = yaml.safe_load(network_yaml("sw", "sw."))
    raw["boxes"]["per_sensor"]["params"]["window"] = {"type": "session", "gap": "5 seconds"}
    with pytest.raises(ScaleError, match=r"box 'per_sensor', field 'params\.window'"):
        fragment_key(parse_network(yaml.safe_dump(raw)), ["plausible", "per_sensor"], "main")


def test_an_output_read_by_another_fragment_is_refused() -> None:
    spec = _spec(chain_network_yaml("pair", "pair.", "3 seconds"))
    boxes = [b for b in spec.boxes if b != "per_sensor_20s"]
    with pytest.raises(ScaleError, match="feeds box 'per_sensor_20s' of another fragment"):
        fragment_key(spec, boxes, "beta")


def test_the_span_sums_the_windows_of_the_fragment() -> None:
    spec = _spec(chain_network_yaml("pair", "pair.", "3 seconds"))
    assert window_span_ms(spec, ["per_sensor"]) == 10_000
    assert window_span_ms(spec, ["per_sensor", "per_sensor_20s"]) == 30_000


def test_an_instance_index_must_be_below_its_count() -> None:
    with pytest.raises(ValidationError, match="not below count"):
        InstanceSpec(of="main", index=2, count=2, generation=1, key=["k"], emit_from_ms=0)


def test_an_instance_has_names_of_its_own() -> None:
    instance = Instance(1, 3, 2, ("sensor_id",), 0, {})
    assert instance.suffix == "--g2-1"


class AnsweringCatalog:
    """Fragment entries in memory; each old instance's node answers a cut at once, past
    the newest result it has written."""

    def __init__(self, written: dict[str, int]) -> None:
        self.written = written
        self.specs: dict[str, dict[str, Any]] = {name: {"phase": "running"} for name in written}
        self.deleted: list[str] = []

    def get(self, kind: Kind, name: str) -> Entry | None:
        spec = self.specs.get(name)
        if spec is None:
            return None
        wanted = spec.get("emit_until_ms")
        if wanted is not None:  # the node's answer (``Hosting._apply_cut``)
            spec["emit_cut_ms"] = max(wanted, spec.get("emit_cut_ms") or wanted,
                                      self.written[name] + 1)
        return Entry(kind=kind, name=name, version=1, updated_at=1, spec=dict(spec))

    def update(self, kind: Kind, name: str, change: Any) -> Entry | None:
        wanted = change(dict(self.specs[name]) if name in self.specs else None)
        if wanted is not None:
            self.specs[name] = wanted
        return None

    def delete(self, kind: Kind, name: str) -> None:
        self.deleted.append(name)
        self.specs.pop(name, None)


def _entries(names: list[str]) -> list[Entry]:
    return [Entry(kind=Kind.FRAGMENTS, name=n, version=1, updated_at=1, spec={}) for n in names]


def test_the_cut_is_the_furthest_answer_and_every_old_instance_is_raised_to_it() -> None:
    catalog = AnsweringCatalog({"a": 5_000, "b": 12_000})
    cut = _cut(cast(Any, catalog), _entries(["a", "b"]), 10_000, time.monotonic() + 5)
    assert cut == 12_001, "b had written up to 12,000 already"
    assert catalog.specs["a"]["emit_until_ms"] == 12_001, "a writes on below the cut"
    assert catalog.specs["b"]["emit_until_ms"] == 10_000, "b answered the cut itself"


def test_a_step_given_up_removes_the_new_instances_and_lifts_the_cut() -> None:
    catalog = AnsweringCatalog({"a": 5_000, "new-0": 0})
    catalog.specs["a"].update(emit_until_ms=6_000, emit_cut_ms=6_000)
    _give_up(cast(Any, catalog), ["new-0"], _entries(["a"]))
    assert catalog.deleted == ["new-0"]
    assert catalog.specs["a"].get("emit_until_ms") is None
    assert catalog.specs["a"].get("emit_cut_ms") is None


def test_linear_road_scales_its_road_by_expressway_and_direction() -> None:
    """The road's state key is its process box's (its ports' keys only key their records);
    its state has no bounded span, so a scale step rebuilds it from the whole input; its
    charges are read by the accounts, so each instance writes partitions of its own."""
    from medusa.settings import REPO_ROOT
    from medusa_spark.network.fragments import read_elsewhere
    from medusa_spark.network.model import load_network

    spec = load_network(REPO_ROOT / "spark_apps/medusa_spark/networks/linear_road_partitioned.yaml")
    road = ["road", "tolls", "alerts", "charges"]
    assert fragment_key(spec, road, "road") == ["xway", "dir"]
    assert fragment_key(spec, ["accounts", "balances"], "accounts") == ["vid"]
    assert window_span_ms(spec, road) is None
    assert window_span_ms(spec, ["expenditures", "spent"]) is None, "histories of the whole run"
    assert read_elsewhere(spec, road) == {"charges": "accounts"}
    assert read_elsewhere(spec, ["accounts", "balances"]) == {}
