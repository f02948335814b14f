"""The project's Avro schemas: ``schemas/*.avsc`` parsed once, and the topics they belong to."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import fastavro

from medusa.settings import REPO_ROOT

SCHEMAS_DIR = REPO_ROOT / "schemas"

NODE_LOAD_TOPIC = "medusa.node-load"
"""Where nodes publish their per-box load reports."""
HEARTBEAT_TOPIC = "medusa.heartbeats"
"""Where nodes publish their heartbeats, on their own participant's cluster."""
LEDGER_TOPIC = "medusa.ledger"
"""BPM's payments, on the paying participant's cluster."""
HEARTBEAT_TOPIC_CONFIG = {"retention.ms": str(3_600_000)}
"""Heartbeats matter for seconds; an hour is kept for looking back."""

# Default stream (topic) of each schema; the registry subject is "<topic>-value".
DEFAULT_TOPICS: dict[str, str] = {
    "linear-road.position-reports": "position_report",
    "linear-road.account-balance-queries": "account_balance_query",
    "linear-road.daily-expenditure-queries": "daily_expenditure_query",
    "linear-road.travel-time-queries": "travel_time_query",
    "linear-road.historical-tolls": "historical_tolls",
    "linear-road.toll-notifications": "toll_notification",
    "linear-road.accident-alerts": "accident_alert",
    "linear-road.account-balances": "account_balance",
    "linear-road.daily-expenditures": "daily_expenditure",
    "linear-road.toll-charges": "toll_charge",
    "linear-road.segment-statistics": "segment_statistics",
    "sensors.readings": "sensor_reading",
    HEARTBEAT_TOPIC: "heartbeat",
    NODE_LOAD_TOPIC: "node_load_report",
    LEDGER_TOPIC: "ledger_entry",
}


@dataclass(frozen=True)
class AvroSchema:
    name: str
    """File stem, e.g. ``position_report``."""
    text: str
    """Canonical JSON text, as registered."""
    parsed: Any
    """fastavro's parsed form, for serializing in Python."""

    @property
    def field_names(self) -> list[str]:
        return [field["name"] for field in json.loads(self.text)["fields"]]


def epoch_ms(value: Any) -> int:
    """An Avro ``timestamp-millis`` field in ms since the epoch, whether read (a datetime)
    or as written (an int)."""
    return int(value.timestamp() * 1000) if hasattr(value, "timestamp") else int(value)


def subject_for(topic: str) -> str:
    return f"{topic}-value"


@cache
def load_schema(name: str, directory: Path = SCHEMAS_DIR) -> AvroSchema:
    path = directory / f"{name}.avsc"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in directory.glob("*.avsc")))
        raise KeyError(f"no schema {name!r} in {directory} (known: {known})")
    raw = json.loads(path.read_text())
    parsed = fastavro.parse_schema(raw)
    return AvroSchema(name=name, text=json.dumps(raw, separators=(",", ":")), parsed=parsed)


def schema_for_topic(topic: str) -> AvroSchema:
    try:
        return load_schema(DEFAULT_TOPICS[topic])
    except KeyError:
        raise KeyError(
            f"topic {topic!r} has no default schema; known topics: {', '.join(DEFAULT_TOPICS)}"
        ) from None


def all_schemas() -> list[AvroSchema]:
    return [load_schema(path.stem) for path in sorted(SCHEMAS_DIR.glob("*.avsc"))]
