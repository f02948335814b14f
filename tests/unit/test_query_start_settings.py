"""A fragment's query starts with its network's state partitions and state store, and the
node's defaults are back for the next query once it has started; its RocksDB store is the
one whose aggregations' eviction a move's replica holds, where Spark allows it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from medusa_spark import fragment_run
from medusa_spark.network.fragments import group
from medusa_spark.network.model import parse_network
from medusa_spark.network.validate import check_structure
from medusa_spark.session import (
    INDEXED_ROCKSDB,
    STATE_STORE_PROVIDER,
    STATE_STORE_PROVIDERS,
)

pytestmark = pytest.mark.unit


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = dict(values)

    def get(self, key: str) -> str | None:
        return self.values.get(key)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def unset(self, key: str) -> None:
        self.values.pop(key, None)


class _Spark:
    def __init__(self) -> None:
        self.conf = _Conf({fragment_run.SHUFFLE_PARTITIONS: "4",
                           STATE_STORE_PROVIDER: STATE_STORE_PROVIDERS["rocksdb"]})


class _Stream:
    def __init__(self, spark: _Spark) -> None:
        self.spark = spark
        self.seen: Any = None

    def start(self) -> str:
        self.seen = dict(self.spark.conf.values)
        return "query"


def test_a_query_starts_with_its_networks_state_store_and_partitions() -> None:
    spark = _Spark()
    stream = _Stream(spark)
    memory = STATE_STORE_PROVIDERS["memory"]
    assert fragment_run.start_stream(spark, stream, 1, memory) == "query"  # type: ignore[arg-type]
    assert stream.seen == {fragment_run.SHUFFLE_PARTITIONS: "1",
                           STATE_STORE_PROVIDER: STATE_STORE_PROVIDERS["memory"]}
    assert spark.conf.values == {fragment_run.SHUFFLE_PARTITIONS: "4",
                                 STATE_STORE_PROVIDER: STATE_STORE_PROVIDERS["rocksdb"]}


def test_without_partitions_a_query_keeps_the_nodes() -> None:
    spark = _Spark()
    stream = _Stream(spark)
    fragment_run.start_stream(spark, stream, None, INDEXED_ROCKSDB)  # type: ignore[arg-type]
    assert stream.seen == {fragment_run.SHUFFLE_PARTITIONS: "4",
                           STATE_STORE_PROVIDER: INDEXED_ROCKSDB}


def _store_of(box: dict[str, Any], state_store: str | None = None) -> str:
    raw = {"name": "t", "participant": "alpha",
           "streams": {"readings": {"topic": "in.readings", "participant": "alpha",
                                    "schema": "sensor_reading"}},
           "boxes": {"box": {**box, **({"state_store": state_store} if state_store else {})}},
           "arrows": [{"from": "readings", "to": "box"}]}
    plan = check_structure(parse_network(yaml.safe_dump(raw, sort_keys=False)))
    (fragment,) = group(plan).values()
    return fragment_run.state_store_provider(plan, fragment)


WINDOW = {"type": "aggregate", "params": {
    "window": {"type": "tumbling", "size": "10 seconds"}, "group_by": ["sensor_id"],
    "aggregates": {"readings": {"count": "value"}}}}


def test_a_fragment_keeps_its_state_where_a_replica_can_hold_its_eviction() -> None:
    assert _store_of(WINDOW) == INDEXED_ROCKSDB
    assert _store_of(WINDOW, "memory") == STATE_STORE_PROVIDERS["memory"]
    # Spark's transformWithState accepts its own RocksDB class only.
    timed = {**WINDOW, "key": ["sensor_id"],
             "params": {**WINDOW["params"], "expiry": "timers"}}
    assert _store_of(timed) == STATE_STORE_PROVIDERS["rocksdb"]


class _Priority:
    def __init__(self, spark: _Spark) -> None:
        self.spark = spark
        self.calls: list[tuple[bool, str | None]] = []

    def enter(self, rebuilding: bool) -> None:  # records what the stream's start saw
        self.calls.append((rebuilding, getattr(self.spark, "started", None)))


def test_a_rebuilding_querys_thread_starts_at_the_lowest_priority() -> None:
    """Its thread takes the creating thread's priority: lowered around the start, and the
    creating thread is back at the normal one after it."""
    spark = _Spark()
    priority = _Priority(spark)
    spark._jvm = SimpleNamespace(  # type: ignore[attr-defined]
        medusa=SimpleNamespace(spark=SimpleNamespace(RebuildPriority=priority)))

    class _Started(_Stream):
        def start(self) -> str:
            spark.started = "started"  # type: ignore[attr-defined]
            return "query"
    fragment_run.start_stream(spark, _Started(spark), None,  # type: ignore[arg-type]
                              INDEXED_ROCKSDB, rebuilding=True)
    assert priority.calls == [(True, None), (False, "started")]
