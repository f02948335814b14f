"""Inputs the parser fuzzers (tests/fuzz) found: each is refused with the parser's own error,
whose message names the field it is about."""

import pytest
import yaml

from medusa.envelope import ID_HEADER, STIME_HEADER, TYPE_HEADER, EnvelopeError, parse_headers
from medusa.linear_road.records import CsvLineError, parse_csv_line
from medusa_spark.network.model import NetworkError, parse_network
from medusa_spark.network.validate import check_structure

pytestmark = pytest.mark.unit


def test_header_that_is_not_utf8_is_an_envelope_error() -> None:
    headers = [(TYPE_HEADER, b"STABLE"), (ID_HEADER, b"src/\xe2oundary"), (STIME_HEADER, b"5")]
    with pytest.raises(EnvelopeError, match=r"medusa\.id is not UTF-8 text"):
        parse_headers(headers)


@pytest.mark.parametrize("bad", ["--1", "²", "9" * 5000])
def test_field_that_only_looks_like_digits_is_named(bad: str) -> None:
    # Each passes str.isdigit() after lstrip('-'), but int() refuses it.
    line = f"0,0,101,50,0,1,0,3,16000,-1,-1,{bad},-1,-1,-1"
    with pytest.raises(CsvLineError, match=r"^field 12 is not an integer"):
        parse_csv_line(line)


def test_wrong_field_count_lists_the_fields() -> None:
    with pytest.raises(CsvLineError, match=r"expected 15 comma-separated fields \(Type,Time,VID,"
                                           r".*,Day\), got 1"):
        parse_csv_line("")


def _network(**changes: object) -> str:
    raw = {
        "name": "n",
        "streams": {"readings": {"topic": "t", "participant": "alpha",
                                 "schema": "sensor_reading"}},
        "boxes": {"plausible": {"type": "filter", "params": {"predicate": "value > 0"}}},
        "arrows": [{"from": "readings", "to": "plausible"}],
    }
    return yaml.safe_dump({**raw, **changes})


def test_box_name_with_a_dot_is_named_whole() -> None:
    text = _network(boxes={"a.b": {"type": 3}})
    with pytest.raises(NetworkError, match=r"box 'a\.b', field 'type': Input should be"):
        parse_network(text)


def test_yaml_nested_too_deeply_is_a_network_error() -> None:
    with pytest.raises(NetworkError, match="not valid YAML: collections nested too deeply"):
        parse_network("[" * 1000 + "]" * 1000)


@pytest.mark.parametrize("trigger", ["1 ſecond", "2 mınutes"])
def test_duration_with_a_unicode_look_alike_letter_is_a_network_error(trigger: str) -> None:
    with pytest.raises(NetworkError, match="field 'trigger'"):
        parse_network(_network(trigger=trigger))


def test_relative_processor_module_is_a_network_error() -> None:
    text = _network(boxes={"p": {"type": "process", "params": {"processor": "..x:Y"}}},
                    arrows=[{"from": "readings", "to": "p"}])
    with pytest.raises(NetworkError, match=r"box 'p', field 'params\.processor'"):
        check_structure(parse_network(text))
