"""A Linear Road run's records, read back from Kafka: its inputs with their publish times, and
the network's outputs.

The run's topics (each behind the run's ``topic_prefix``) are read from the start with one
``TupleConsumer`` (``read_committed``: only committed transactions) until nothing more comes
for ``idle_s`` seconds, i.e. to their end when the run is over. Only STABLE records count:
BOUNDARY records carry no value, and tentative outputs not yet corrected are no answer.
Every STABLE record counts, so an output written twice shows as a duplicate.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import SchemaRegistryClient

from medusa.consuming import ConsumedTuple, TupleConsumer
from medusa.envelope import TupleType
from medusa.errors import MedusaError
from medusa.linear_road import records as lr
from medusa.linear_road.records import (
    AccountBalanceQuery,
    DailyExpenditureQuery,
    HistoricalTolls,
    LinearRoadRecord,
    PositionReport,
)
from medusa.linear_road.validation import OUTPUT_KINDS, Published

INPUT_TYPES: dict[str, type[LinearRoadRecord] | type[HistoricalTolls]] = {
    lr.POSITION_REPORTS: PositionReport,
    lr.ACCOUNT_BALANCE_QUERIES: AccountBalanceQuery,
    lr.DAILY_EXPENDITURE_QUERIES: DailyExpenditureQuery,
    lr.HISTORICAL_TOLLS: HistoricalTolls,
}
OPTIONAL_TOPICS = (lr.HISTORICAL_TOLLS,)
"""A run without historical tolls (a CSV replay) may not have the topic: every car's
history is then empty."""
OUTPUT_TOPICS = {kind.topic: kind.field for kind in OUTPUT_KINDS}
PROCESSING_RANK = {HistoricalTolls: 0, PositionReport: 1}
"""Within one second: historical tolls, then position reports, then queries."""


class MissingTopicsError(MedusaError, LookupError):
    """The run's topics that do not exist on the cluster."""

    def __init__(self, topics: Sequence[str]) -> None:
        super().__init__(f"topic(s) not found: {', '.join(topics)} (is the prefix right, "
                         "and did the run produce its input and start the network?)")
        self.topics = list(topics)


@dataclass
class RunRecords:
    inputs: list[Published] = field(default_factory=list)
    """Input records in the order read, each with its Kafka timestamp."""
    outputs: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {kind.field: [] for kind in OUTPUT_KINDS})
    """Per ``OutputKind.field``: the STABLE outputs' values (with ``emit_time``)."""
    skipped: int = 0
    """Records that are no input or answer: BOUNDARY, TENTATIVE, UNDO, REC_DONE."""
    complete: bool = True
    """False when reading stopped at its time limit, not at the topics' end."""

    def count(self, record_type: type) -> int:
        return sum(1 for published in self.inputs if isinstance(published.record, record_type))

    def reference_input(self) -> list[LinearRoadRecord | HistoricalTolls]:
        """The inputs in SEMANTICS.md's processing order: by second; within one, historical
        tolls, position reports, queries, each in publish order."""
        ordered = sorted(self.inputs, key=lambda p: (
            p.record.time, PROCESSING_RANK.get(type(p.record), 2), p.publish_ms))
        return [published.record for published in ordered]

    def add(self, consumed: ConsumedTuple, prefix: str) -> None:
        if consumed.record.type is not TupleType.STABLE:
            self.skipped += 1
            return
        topic = consumed.topic.removeprefix(prefix)
        value = dict(consumed.record.value)
        if topic in OUTPUT_TOPICS:
            self.outputs[OUTPUT_TOPICS[topic]].append(value)
        else:
            self.inputs.append(Published(input_record(topic, value), consumed.timestamp_ms))


def input_record(topic: str, value: dict[str, Any]) -> LinearRoadRecord | HistoricalTolls:
    """The record an input topic's value stands for (fields it does not know are left out)."""
    record_type = INPUT_TYPES[topic]
    known = {f.name for f in fields(record_type)}
    given = {name: value[name] for name in known if name in value}
    if record_type is HistoricalTolls:
        given["tolls"] = tuple(given.get("tolls", ()))
    return record_type(**given)


def run_topics(prefix: str = "") -> list[str]:
    """The run's input and output topics, prefixed."""
    return [prefix + topic for topic in (*INPUT_TYPES, *OUTPUT_TOPICS)]


def missing_topics(kafka: dict[str, Any], topics: Sequence[str],
                   timeout_s: float = 10.0) -> list[str]:
    existing = AdminClient(kafka).list_topics(timeout=timeout_s).topics
    return [topic for topic in topics if topic not in existing]


def read_run(kafka: dict[str, Any], registry: SchemaRegistryClient, prefix: str = "",
             idle_s: float = 5.0, first_s: float = 30.0,
             timeout_s: float = 3600.0) -> RunRecords:
    """Every record of the run's topics, from the start, until none came for ``idle_s``
    (waiting up to ``first_s`` for the first, while the consumer joins its group).

    Raises MissingTopicsError naming the topics the cluster does not have (but the
    optional historical tolls).
    """
    topics = run_topics(prefix)
    missing = missing_topics(kafka, topics)
    required = [t for t in missing if t.removeprefix(prefix) not in OPTIONAL_TOPICS]
    if required:
        raise MissingTopicsError(required)
    found = RunRecords()
    config = {**kafka, "isolation.level": "read_committed"}
    with TupleConsumer(config, registry, [t for t in topics if t not in missing],
                       f"medusa-validate-{uuid.uuid4()}") as consumer:
        first = consumer.poll(first_s)
        if first is None:
            return found
        found.add(first, prefix)
        started = time.monotonic()
        drained = consumer.drain(idle_s=idle_s, timeout_s=timeout_s)
        found.complete = time.monotonic() - started < timeout_s
    for consumed in drained:
        found.add(consumed, prefix)
    return found
