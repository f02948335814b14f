"""Where Linear Road input comes from: the simulation, or a file in the benchmark's CSV format."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from medusa.feeding import Keyed
from medusa.linear_road.records import CsvLineError, LinearRoadRecord, parse_csv_line
from medusa.linear_road.traffic import TrafficProfile, TrafficSimulation


def keyed(record: LinearRoadRecord) -> Keyed:
    # Keyed by car so that one car's reports stay in order on one partition.
    return Keyed(record.TOPIC, str(record.vid), record.tuple_id, record)


def simulated(profile: TrafficProfile) -> Iterator[tuple[float, list[Keyed]]]:
    for t, records in TrafficSimulation(profile).run():
        yield t, [keyed(record) for record in records]


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


class StrictCsvError(ValueError):
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
