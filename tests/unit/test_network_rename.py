"""`medusa deploy FILE --name NEW`: the same network under another name, with topics of its own."""

import pytest

from medusa.settings import REPO_ROOT
from medusa_spark.network.model import NetworkError, parse_network, renamed_network

pytestmark = pytest.mark.unit

PAIR = (REPO_ROOT / "spark_apps" / "medusa_spark" / "networks" / "sensor_pair.yaml").read_text()


def test_a_renamed_network_keeps_its_boxes_and_inputs_and_gets_its_own_outputs() -> None:
    original, renamed = parse_network(PAIR), parse_network(renamed_network(PAIR, "pair-check"))
    assert renamed.name == "pair-check" and renamed.boxes == original.boxes
    assert renamed.streams == original.streams
    assert renamed.intermediate_topic("per_sensor") == "medusa.pair-check.per_sensor"


def test_a_name_the_network_may_not_have_is_refused_naming_the_field() -> None:
    with pytest.raises(NetworkError, match=r"\(as 'Pair_Check'\): field 'name'"):
        renamed_network(PAIR, "Pair_Check")
