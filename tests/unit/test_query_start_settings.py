"""A fragment's query starts with its network's state partitions and state store, and the
node's defaults are back for the next query once it has started."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from medusa_spark import fragment_run
from medusa_spark.session import STATE_STORE_PROVIDER, STATE_STORE_PROVIDERS

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
    assert fragment_run._start(spark, stream, 1, "memory") == "query"  # type: ignore[arg-type]
    assert stream.seen == {fragment_run.SHUFFLE_PARTITIONS: "1",
                           STATE_STORE_PROVIDER: STATE_STORE_PROVIDERS["memory"]}
    assert spark.conf.values == {fragment_run.SHUFFLE_PARTITIONS: "4",
                                 STATE_STORE_PROVIDER: STATE_STORE_PROVIDERS["rocksdb"]}


def test_by_default_a_query_keeps_rocksdb_and_the_nodes_partitions() -> None:
    spark = _Spark()
    stream = _Stream(spark)
    fragment_run._start(spark, stream, None)  # type: ignore[arg-type]
    assert stream.seen == spark.conf.values == {
        fragment_run.SHUFFLE_PARTITIONS: "4",
        STATE_STORE_PROVIDER: STATE_STORE_PROVIDERS["rocksdb"]}


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
    fragment_run._start(spark, _Started(spark), None, rebuilding=True)  # type: ignore[arg-type]
    assert priority.calls == [(True, None), (False, "started")]
