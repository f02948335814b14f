"""Where Linear Road input comes from: the simulation (traffic and historical tolls), or the
benchmark's files: its 15-field CSV traffic and its historical toll table."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient

from medusa.errors import MedusaError
from medusa.feeding import FeedSummary, Keyed, feed
from medusa.linear_road import records as lr
from medusa.linear_road.records import (
    HISTORY_DAYS,
    CsvLineError,
    HistoricalTolls,
    LinearRoadRecord,
    parse_csv_line,
    parse_history_line,
)
from medusa.linear_road.traffic import TrafficProfile, TrafficSimulation
from medusa.producing import TupleProducer
from medusa.progress import RateProgress
from medusa.schemas import schema_for_topic


def keyed(record: LinearRoadRecord) -> Keyed:
    # Keyed by car so that one car's records stay in order on one partition.
    return Keyed(record.TOPIC, str(record.vid), record.tuple_id, record)


def simulated(profile: TrafficProfile) -> Iterator[tuple[float, list[Keyed]]]:
    """The simulation's records per second: each new car's historical tolls, then the
    position reports, then the queries."""
    for t, records in TrafficSimulation(profile).run():
        yield t, [keyed(record) for record in records]


def publish_traffic(profile: TrafficProfile, *, kafka_config: dict[str, Any],
                    registry: SchemaRegistryClient, speedup: float, progress: RateProgress,
                    topic_prefix: str = "", boundary_interval_s: float = 0.5,
                    end_of_stream: bool = False) -> FeedSummary:
    """Publishes a simulation to the Linear Road input topics at ``speedup``.

    With ``end_of_stream`` a final BOUNDARY far beyond the last report follows on every
    input topic: nothing smaller will come, so every window downstream closes.
    """
    summary = feed(simulated(profile), kafka_config=kafka_config, registry=registry,
                   topics=lr.TOPICS, to_dict=lr.to_dict, source_id="linear-road",
                   speedup=speedup, boundary_interval_s=boundary_interval_s,
                   progress=progress, total_seconds=profile.duration_s - 1.0,
                   topic_prefix=topic_prefix, stime_origin_ms=lr.STIME_ORIGIN_MS)
    if end_of_stream:
        for topic in lr.TOPICS:
            with TupleProducer(kafka_config, registry, topic_prefix + topic,
                               schema_for_topic(topic), "linear-road") as producer:
                producer.emit_boundaries(
                    lr.STIME_ORIGIN_MS + (profile.duration_s + 3600) * 1000)
    return summary


@dataclass
class BadLines:
    """Lines that could not be read: counted, and the first ones kept with their reason."""

    count: int = 0
    first: list[tuple[int, str]] = field(default_factory=list)
    keep: int = 50

    def add(self, line_number: int, reason: str) -> None:
        self.count += 1
        if len(self.first) < self.keep:
            self.first.append((line_number, reason))


class StrictCsvError(MedusaError, ValueError):
    def __init__(self, path: Path, line_number: int, reason: str) -> None:
        super().__init__(f"{path}:{line_number}: {reason}")
        self.line_number = line_number


def from_csv(path: Path, bad_lines: BadLines, strict: bool = False
             ) -> Iterator[tuple[float, list[Keyed]]]:
    """Records grouped by their Time field; the file must be in time order."""
    current_time: int | None = None
    batch: list[Keyed] = []
    with path.open() as lines:
        for line_number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = parse_csv_line(line)
                if current_time is not None and record.time < current_time:
                    raise CsvLineError(
                        f"time goes backwards ({record.time} after {current_time})")
            except CsvLineError as error:
                if strict:
                    raise StrictCsvError(path, line_number, str(error)) from None
                bad_lines.add(line_number, str(error))
                continue
            if record.time != current_time:
                if batch:
                    yield float(current_time or 0), batch
                current_time, batch = record.time, []
            batch.append(keyed(record))
    if batch:
        yield float(current_time or 0), batch


def read_history(path: Path, bad_lines: BadLines, strict: bool = False
                 ) -> list[HistoricalTolls]:
    """The benchmark's historical toll file (rows ``vid,day,xway,toll``) as one
    ``HistoricalTolls`` per (vid, xway), at second 0, in the order of their first rows; a
    day without a row is 0. A second row for the same (vid, day, xway) is a bad line."""
    tolls: dict[tuple[int, int], list[int]] = {}
    with path.open() as lines:
        for line_number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                vid, day, xway, toll = parse_history_line(line)
                days = tolls.setdefault((vid, xway), [-1] * HISTORY_DAYS)
                if days[day - 1] >= 0:
                    raise CsvLineError(
                        f"a second row for vid {vid}, day {day}, xway {xway}")
                days[day - 1] = toll
            except CsvLineError as error:
                if strict:
                    raise StrictCsvError(path, line_number, str(error)) from None
                bad_lines.add(line_number, str(error))
    return [HistoricalTolls(0, vid, xway, tuple(max(0, toll) for toll in days))
            for (vid, xway), days in tolls.items()]


def with_history(history: Iterable[HistoricalTolls],
                 seconds: Iterable[tuple[float, list[Keyed]]]
                 ) -> Iterator[tuple[float, list[Keyed]]]:
    """``seconds`` with the historical tolls published first, at second 0 (ahead of the
    records of second 0, if any)."""
    rows = [keyed(record) for record in history]
    first = True
    for t, batch in seconds:
        if first:
            first = False
            if t == 0:
                yield t, rows + batch
                continue
            if rows:
                yield 0.0, rows
        yield t, batch
    if first and rows:
        yield 0.0, rows
