"""What makes a fragment scalable (its key, its window span) and how an instance is named;
the scale steps themselves run in tests/e2e/test_scale.py."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from medusa.catalog.model import InstanceSpec
from medusa_spark.fragment import Instance
from medusa_spark.network.model import parse_network
from medusa_spark.networks import chain_network_yaml, network_yaml
from medusa_spark.scaling import ScaleError, fragment_key, window_span_ms, written_below

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


def test_an_instance_retired_before_its_first_batch_wrote_only_below_where_it_began() -> None:
    # Scaled in seconds after a scale out: one new instance had not run a batch yet, so
    # its keys' results from its emit_from on were never written and must be rebuilt.
    began = {"instance": {"emit_from_ms": 86_426_999}}
    assert written_below({**began, "retired_watermark_ms": None}) == 86_426_999
    assert min(written_below(spec) for spec in (
        {**began, "retired_watermark_ms": 86_474_999}, {**began, "retired_watermark_ms": None},
    )) == 86_426_999


def test_a_fragment_never_scaled_nor_run_wrote_nothing() -> None:
    assert written_below({"retired_watermark_ms": None}) == 0
    assert written_below({"retired_watermark_ms": 5_000}) == 5_000


def test_an_instance_still_rebuilding_its_windows_wrote_below_where_it_began() -> None:
    spec = {"instance": {"emit_from_ms": 60_000}, "retired_watermark_ms": 45_000}
    assert written_below(spec) == 60_000
