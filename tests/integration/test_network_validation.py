"""A bad query network is rejected before anything runs, naming the box and the field."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from medusa_spark.network.model import NetworkError, load_network, parse_network
from medusa_spark.network.validate import check_structure, validate

pytestmark = pytest.mark.integration

LINEAR_ROAD = Path(__file__).parents[2] / "spark_apps/medusa_spark/networks/linear_road.yaml"

BASE = {
    "name": "t",
    "streams": {
        "reports": {"topic": "r", "participant": "alpha", "schema": "position_report"},
        "stats": {"topic": "s", "participant": "alpha", "schema": "segment_statistics"},
    },
    "boxes": {
        "moving": {"type": "filter", "params": {"predicate": "speed > 0"}},
        "per_minute": {"type": "aggregate", "params": {
            "window": {"type": "tumbling", "size": "60 seconds"},
            "group_by": ["xway", "dir", "seg"],
            "aggregates": {"car_count": {"count_distinct": "vid"}, "avg_speed": {"avg": "speed"}},
            "fields": {"xway": "xway", "dir": "dir", "seg": "seg", "minute": "1",
                       "car_count": "car_count", "avg_speed": "avg_speed"}}},
    },
    "arrows": [
        {"from": "reports", "to": "moving"},
        {"from": "moving", "to": "per_minute"},
        {"from": "per_minute", "to": "stats"},
    ],
}


def network(**changes: object) -> str:
    raw = yaml.safe_load(yaml.safe_dump(BASE, sort_keys=False))
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = raw
        for part in parents:
            node = node[part]
        node[last] = value
    return yaml.safe_dump(raw, sort_keys=False)


def rejected(spark, text: str) -> str:
    with pytest.raises(NetworkError) as error:
        validate(parse_network(text), spark)
    return str(error.value)


def test_the_base_network_and_linear_road_are_valid(spark) -> None:
    plan = validate(parse_network(network()), spark)
    assert plan.order == ["moving", "per_minute"]
    assert plan.output_schemas["per_minute"].names == [
        "xway", "dir", "seg", "minute", "car_count", "avg_speed"]
    linear_road = validate(load_network(LINEAR_ROAD), spark)
    assert sorted(linear_road.boxes) == ["alerts", "balances", "expenditures", "road", "spent",
                                         "tolls"]
    partitioned = validate(load_network(LINEAR_ROAD.with_name("linear_road_partitioned.yaml")),
                           spark)
    assert sorted(partitioned.boxes) == ["accounts", "alerts", "balances", "charges",
                                         "expenditures", "road", "spent", "tolls"]
    assert linear_road.output_schemas["tolls"].names == [
        "vid", "time", "xway", "dir", "seg", "lav", "toll"]


def _linear_road(change) -> str:  # type: ignore[no-untyped-def]
    raw = yaml.safe_load(LINEAR_ROAD.read_text())
    change(raw)
    return yaml.safe_dump(raw, sort_keys=False)


def test_a_process_box_names_a_processor_class(spark) -> None:
    def bad(raw):  # type: ignore[no-untyped-def]
        raw["boxes"]["road"]["params"]["processor"] = "medusa_spark.processors.linear_road:Nope"
    message = rejected(spark, _linear_road(bad))
    assert "box 'road', field 'params.processor'" in message and "not a Processor" in message


def test_a_port_box_names_a_port_of_its_process_box(spark) -> None:
    def bad(raw):  # type: ignore[no-untyped-def]
        raw["boxes"]["alerts"]["params"]["port"] = "alarms"
    message = rejected(spark, _linear_road(bad))
    assert "box 'alerts', field 'params.port'" in message and "accident_alerts" in message


def test_a_process_box_is_read_through_its_ports_only(spark) -> None:
    def bad(raw):  # type: ignore[no-untyped-def]
        raw["boxes"]["copy"] = {"type": "filter", "params": {"predicate": "true"}}
        raw["arrows"].append({"from": "road", "to": "copy"})
    message = rejected(spark, _linear_road(bad))
    assert "box 'copy': reads a process box directly" in message


def test_a_port_box_reads_a_process_box(spark) -> None:
    message = rejected(spark, network(boxes__moving={"type": "port", "params": {"port": "x"}}))
    assert "box 'moving', field 'in': a port box reads a process box" in message


def test_unknown_box_type(spark) -> None:
    message = rejected(spark, network(boxes__moving__type="sieve"))
    assert "box 'moving', field 'type': unknown box type 'sieve'" in message


def test_dangling_arrow(spark) -> None:
    arrows = [*BASE["arrows"], {"from": "nowhere", "to": "moving"}]
    message = rejected(spark, network(arrows=arrows))
    assert "dangling arrow, 'nowhere'" in message


def test_cycle(spark) -> None:
    boxes = {**BASE["boxes"], "merged": {"type": "union"}}
    arrows = [{"from": "reports", "to": "merged"}, {"from": "moving", "to": "merged"},
              {"from": "merged", "to": "moving"}, {"from": "moving", "to": "per_minute"},
              {"from": "per_minute", "to": "stats"}]
    with pytest.raises(NetworkError, match=r"the network has a cycle: .*moving"):
        check_structure(parse_network(network(boxes=boxes, arrows=arrows)))


def test_a_port_without_an_arrow(spark) -> None:
    message = rejected(spark, network(arrows=BASE["arrows"][1:]))
    assert "box 'moving': no arrow into port(s) in" in message


def test_a_field_not_in_the_input_schema(spark) -> None:
    message = rejected(spark, network(boxes__moving__params={"predicate": "velocity > 0"}))
    assert "box 'moving', field 'params.predicate'" in message and "velocity" in message
    bad_group = network(boxes__per_minute__params__group_by=["xway", "segment"])
    assert "box 'per_minute', field 'segment': group_by names a field not in the input" in (
        rejected(spark, bad_group))


def test_type_mismatches(spark) -> None:
    assert "box 'moving', field 'params.predicate': the predicate must be true or false" in (
        rejected(spark, network(boxes__moving__params={"predicate": "speed + 1"})))
    fields = dict(BASE["boxes"]["per_minute"]["params"]["fields"], minute="'one'")
    message = rejected(spark, network(boxes__per_minute__params__fields=fields))
    assert "box 'per_minute', field 'minute': type mismatch, the box produces string but " \
           "stream 'stats' has int" in message
    params = dict(BASE["boxes"]["per_minute"]["params"])
    params["aggregates"] = {**params["aggregates"], "lane_sum": {"sum": "lane"}}
    params["fields"] = {**params["fields"], "lane_sum": "lane_sum"}
    message = rejected(spark, network(boxes__per_minute__params=params))
    assert "box 'per_minute', field 'lane_sum': not in the schema of stream 'stats'" in message
    joined = {"type": "union"}
    message = rejected(spark, network(
        boxes={**BASE["boxes"], "both": joined},
        arrows=[*BASE["arrows"][:2], {"from": "reports", "to": "both"},
                {"from": "per_minute", "to": "both"}, {"from": "both", "to": "stats"}]))
    assert "box 'both', field" in message and "inputs disagree" in message


def test_bad_parameters_name_the_field(spark) -> None:
    message = rejected(spark, network(boxes__per_minute__params__window={"type": "sliding",
                                                                         "size": "5 minutes"}))
    assert "box 'per_minute', field 'params.window'" in message and "slide" in message
    message = rejected(spark, network(boxes__moving__params={"predicate": "x", "color": 1}))
    assert "box 'moving', field 'params.color'" in message


def test_yaml_errors_are_reported_with_the_file(tmp_path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed")
    with pytest.raises(NetworkError, match=r"broken\.yaml: not valid YAML"):
        load_network(path)


def test_a_typo_in_a_predicate_gets_the_clear_error_alone_on_the_terminal(tmp_path) -> None:
    """`medusa deploy --check` of a network with `valu > 0`: one paragraph naming the box
    and the field; Spark's own ERROR line with its Java stack trace goes to the log file."""
    path = tmp_path / "typo.yaml"
    path.write_text(network(boxes__moving__params={"predicate": "valu > 0"}))
    env = {**os.environ, "MEDUSA_RUN_DIR": str(tmp_path / "run"),
           "COLUMNS": "200"}
    result = subprocess.run([sys.executable, "-m", "medusa_apps", "deploy", "--check",
                             str(path)], capture_output=True, text=True, env=env, timeout=300,
                            check=False)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "box 'moving', field 'params.predicate'" in result.stderr
    assert "valu" in result.stderr
    shown = result.stdout + result.stderr
    for noise in ("SQLQueryContextLogger", "Traceback", "at org.apache", "ERROR"):
        assert noise not in shown, shown
    assert len(shown) < 2000, shown
    spark_log = tmp_path / "run" / "logs" / "medusa-deploy-spark.log"
    assert "valu" in spark_log.read_text(), "Spark's own account is kept in the log file"
