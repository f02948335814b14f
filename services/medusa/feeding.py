"""Feeding a source into Kafka: pacing by event time, per-topic producers, progress, summary."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient

from medusa.producing import DeliveryStats, TupleProducer
from medusa.progress import RateProgress
from medusa.schemas import schema_for_topic
from medusa.topics import ensure_topics


@dataclass
class FeedSummary:
    sent: int
    failed: int
    boundaries: int
    elapsed_s: float
    errors: list[str] = field(default_factory=list)
    bad_lines: list[tuple[int, str]] = field(default_factory=list)
    bad_line_count: int = 0
    wall_start: float = 0.0
    """Epoch seconds when second 0 was sent (maps stimes to send times)."""

    @property
    def rate(self) -> float:
        return self.sent / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "sent": self.sent, "failed": self.failed, "boundaries": self.boundaries,
            "elapsed_s": round(self.elapsed_s, 3), "rate_per_s": round(self.rate, 1),
            "bad_lines": self.bad_line_count,
            "bad_line_numbers": [number for number, _ in self.bad_lines],
            "errors": self.errors, "wall_start": self.wall_start,
        }


class Pacer:
    """Holds a source to event time: second ``t`` goes out ``t / speedup`` wall seconds
    after the start. ``speedup <= 0`` means as fast as possible.

    A record's stime is ``origin_ms + t * 1000`` whatever the speedup, so results do
    not depend on how fast the input was replayed.
    """

    def __init__(self, speedup: float, origin_ms: int) -> None:
        self.speedup = speedup
        self.origin_ms = origin_ms
        self.wall_start = time.time()
        self._monotonic_start = time.monotonic()

    def stime(self, t: float) -> int:
        return self.origin_ms + round(t * 1000)

    def due(self, t: float) -> float:
        """Wall-clock time (epoch seconds) at which second ``t`` is sent."""
        return self.wall_start + (t / self.speedup if self.speedup > 0 else 0.0)

    def wait_for(self, t: float, idle: Callable[[], None]) -> None:
        if self.speedup <= 0:
            return
        due = self._monotonic_start + t / self.speedup
        while (remaining := due - time.monotonic()) > 0:
            idle()
            time.sleep(min(remaining, 0.05))


@dataclass(frozen=True)
class Keyed:
    """What a feed needs to know to publish one record."""

    topic: str
    key: str
    tuple_id: str
    value: Any


def feed(
    seconds: Iterable[tuple[float, list[Keyed]]],
    *,
    kafka_config: dict[str, Any],
    registry: SchemaRegistryClient,
    topics: Iterable[str],
    to_dict: Callable[[Any, Any], dict[str, Any]],
    source_id: str,
    speedup: float,
    boundary_interval_s: float,
    progress: RateProgress,
    total_seconds: float | None = None,
    partitions: int = 4,
    flush_timeout_s: float = 30.0,
    topic_prefix: str = "",
    stime_origin_ms: int = 0,
    trace_every: int = 0,
    step_s: float | None = 1.0,
) -> FeedSummary:
    """Publish each second's records at its event time; one producer per topic.

    Records name their stream's default topic; ``topic_prefix`` puts a run's topics apart.
    A record of second ``t`` gets the stime ``stime_origin_ms + t * 1000``. When the
    seconds are at least ``step_s`` apart, nothing below ``t + step_s`` comes after second
    ``t``: its end is a BOUNDARY at once, so a SUnion releases the second without waiting
    for the next one.
    """
    topics = list(topics)
    ensure_topics(kafka_config, [topic_prefix + t for t in topics], partitions=partitions)
    stats = DeliveryStats()
    pacer = Pacer(speedup, stime_origin_ms)
    producers = {
        topic: TupleProducer(kafka_config, registry, topic_prefix + topic,
                             schema_for_topic(topic), source_id, to_dict=to_dict,
                             boundary_interval_s=boundary_interval_s, stats=stats,
                             trace_every=trace_every)
        for topic in topics
    }

    def idle() -> None:
        for producer in producers.values():
            producer.poll()
        progress.update(stats.sent, stats.failed)

    try:
        for t, records in seconds:
            pacer.wait_for(t, idle)
            stime = pacer.stime(t)
            for record in records:
                producers[record.topic].produce(record.value, record.tuple_id, stime,
                                                key=record.key)
            if step_s is not None:
                for producer in producers.values():
                    producer.emit_boundaries(pacer.stime(t + step_s))
            progress.update(stats.sent, stats.failed, completed=t if total_seconds else None)
    finally:
        for producer in producers.values():
            producer.close(flush_timeout_s)
        progress.update(stats.sent, stats.failed, completed=total_seconds)
    return FeedSummary(stats.sent, stats.failed, stats.boundaries, progress.elapsed_s,
                       errors=stats.errors, wall_start=pacer.wall_start)
