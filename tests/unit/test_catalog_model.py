"""The catalog's specs: the fields a node reports of itself, and a fragment's instance."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from medusa.catalog.model import InstanceSpec, NodeSpec

pytestmark = pytest.mark.unit


def test_a_node_without_a_spark_ui_has_none() -> None:
    assert NodeSpec().spark_ui is None
    assert NodeSpec.model_validate({"status": "up"}).model_dump()["spark_ui"] is None


@pytest.mark.parametrize("url", ["http://127.0.0.1:4040", "https://node-1.example:4443/",
                                 "http://127.0.0.1:4041/proxy/app-1"])
def test_a_node_reports_its_spark_ui_as_a_url(url: str) -> None:
    assert NodeSpec(spark_ui=url).spark_ui == url


@pytest.mark.parametrize("url", ["javascript:alert(1)", "127.0.0.1:4040", "ftp://h/x",
                                 "http://h x", "", "http://" + "h" * 494])
def test_a_spark_ui_is_an_http_url_of_at_most_500_characters(url: str) -> None:
    with pytest.raises(ValidationError, match="spark_ui"):
        NodeSpec(spark_ui=url)
    assert NodeSpec(spark_ui="http://" + "h" * 493).spark_ui is not None  # 500 exactly


def test_only_one_instance_of_an_unkeyed_fragment_may_run() -> None:
    """A redeploy replaces an unkeyed fragment by one instance that reads all the input."""
    spec = {"of": "loud", "index": 0, "count": 1, "generation": 1, "key": [],
            "emit_from_ms": 0, "by_partition": True}
    assert InstanceSpec.model_validate(spec).key == []
    with pytest.raises(ValidationError, match="only one can run"):
        InstanceSpec.model_validate({**spec, "count": 2})
