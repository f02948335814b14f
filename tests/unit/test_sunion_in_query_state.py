"""The SUnion in the query as `medusa status` sees it: its source's metrics in a batch's
progress, under the keys a SUnion process's state has."""

from __future__ import annotations

import pytest

from medusa.federation_status import _sunion_status
from medusa_spark.sunion_source import in_query_state

pytestmark = pytest.mark.unit

METRICS = {"recordsIn": "120", "deadLettered": "2", "heldTuples": "7", "heldBuckets": "1",
           "releasedThrough": "5000", "stableThrough": "4000", "dpcState": "UP_FAILURE",
           "epoch": "1", "releases": "9", "tentativeReleases": "1", "redos": "0",
           "partitions": "3", "maxOffsetsBehindLatest": "15", "failedInputs": "remote[0]",
           "waitingForInputs": ""}


def test_the_source_metrics_read_as_a_sunion_state() -> None:
    progress = {"sources": [{"description": "kafka", "metrics": {}},
                            {"description": "SUnion", "metrics": METRICS}]}
    state = in_query_state(progress, "alpha/net/f")
    assert state["in_query"] and state["fragment"] == "alpha/net/f"
    assert (state["released_through"], state["tentative_through"]) == (4000, 5000)
    assert (state["held_tuples"], state["dead_lettered"], state["lag"]) == (7, 2, 15)
    assert state["dpc_state"] == "UP_FAILURE" and state["failed_inputs"] == ["remote[0]"]
    assert state["waiting_for_inputs"] == []
    shown = _sunion_status(state)
    assert shown is not None and shown.lag == 15 and shown.held_tuples == 7


def test_no_state_before_the_first_batch_and_none_released_yet() -> None:
    assert in_query_state({}, "f") == {}
    state = in_query_state({"sources": [{"metrics": {**METRICS, "releasedThrough": "null",
                                                      "stableThrough": "null"}}]}, "f")
    assert state["released_through"] is None and state["tentative_through"] is None
