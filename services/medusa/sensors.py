"""Generic sensor readings: sensors whose values take a random walk around a mean."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

SENSOR_READINGS = "sensors.readings"

_KINDS = {  # kind: (unit, mean, step)
    "temperature": ("celsius", 21.0, 0.2),
    "humidity": ("percent", 45.0, 0.5),
    "pressure": ("hectopascal", 1013.0, 0.3),
    "vibration": ("mm_per_s", 2.0, 0.1),
}


@dataclass(frozen=True)
class SensorReading:
    sensor_id: str
    kind: str
    value: float
    unit: str
    measured_at: int
    """Milliseconds since the epoch."""
    site: str | None = None

    @property
    def tuple_id(self) -> str:
        return f"sensor/{self.sensor_id}/{self.measured_at}"


def to_dict(reading: SensorReading, _context: Any = None) -> dict[str, Any]:
    return dict(vars(reading))  # flat fields: no deep copy (asdict's) per reading


def sensor_readings(sensors: int, start_ms: int, interval_ms: int, count: int | None,
                    seed: int = 11, sites: int = 4, prefix: str = "s"
                    ) -> Iterator[SensorReading]:
    """Round after round of one reading per sensor, ``interval_ms`` apart; the sensors'
    ids are ``prefix`` and a number (two sources with other prefixes share no tuple id)."""
    rnd = random.Random(seed)
    kinds = list(_KINDS)
    specs = [(f"{prefix}{i:04d}", kinds[i % len(kinds)], f"site-{i % sites}")
             for i in range(sensors)]
    values = {sensor_id: _KINDS[kind][1] for sensor_id, kind, _ in specs}
    emitted = 0
    round_no = 0
    while count is None or emitted < count:
        measured_at = start_ms + round_no * interval_ms
        for sensor_id, kind, site in specs:
            if count is not None and emitted >= count:
                return
            unit, _mean, step = _KINDS[kind]
            values[sensor_id] += rnd.gauss(0.0, step)
            yield SensorReading(sensor_id, kind, round(values[sensor_id], 3), unit, measured_at,
                                site)
            emitted += 1
        round_no += 1
