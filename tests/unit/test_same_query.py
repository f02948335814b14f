"""A redeploy stops only the fragments whose query it changes (``hosting.same_query``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from medusa_spark.fragment import FragmentWiring, Instance
from medusa_spark.network.fragments import Fragment
from medusa_spark.node.hosting import same_query
from medusa_spark.streams import KafkaStream

pytestmark = pytest.mark.unit


def _wiring(instance: Instance | None = None) -> FragmentWiring:
    stream = KafkaStream("t.readings", "127.0.0.1:9092", 1, "{}")
    return FragmentWiring(
        network="alpha/t", fragment=Fragment("f", ("plausible",), ("readings",),
                                             ("plausible",), "passive"),
        source=KafkaStream("t.medusa.t.f.abc.in", "127.0.0.1:9092", 0, ""),
        inputs={"readings": stream}, outputs={}, bucket_ms=1000, fingerprint="abc",
        topic_prefix="t.", max_delay_ms=None, instance=instance)


def test_the_same_definition_and_topics_are_the_same_query() -> None:
    assert same_query(_wiring(), _wiring())
    assert not same_query(replace(_wiring(), fingerprint="def"), _wiring())
    assert not same_query(replace(_wiring(), max_delay_ms=2000), _wiring())


def test_an_instance_is_the_same_query_whatever_stime_it_writes_from() -> None:
    """A scale step moves that stime while the instance runs; its keys are its query."""
    first = Instance(0, 2, 1, ("sensor_id",), 1000, {"readings": {0: 5}})
    assert same_query(_wiring(replace(first, emit_from_ms=9000)), _wiring(first))
    assert not same_query(_wiring(replace(first, index=1)), _wiring(first))


def test_a_change_of_standby_alone_is_the_same_query() -> None:
    """``ha`` passive -> active starts a replica elsewhere; the primary's query goes on."""
    active = replace(_wiring(), fragment=replace(_wiring().fragment, ha="active"))
    assert same_query(active, _wiring()) and same_query(_wiring(), active)
