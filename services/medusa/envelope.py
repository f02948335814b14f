"""The tuple envelope: DPC tuple type, tuple id and stime carried in Kafka record headers.

Header values are ASCII so that Spark (``CAST(value AS STRING)``) and command-line
tools read them without a custom decoder.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from medusa.errors import MedusaError

TYPE_HEADER = "medusa.type"
ID_HEADER = "medusa.id"
STIME_HEADER = "medusa.stime"
TRACEPARENT_HEADER = "traceparent"
TENTATIVE_HEADER = "medusa.tentative"
"""DPC: on the records of an UP_FAILURE period (its tuples and its BOUNDARY records), the
period's number (epoch). A BOUNDARY with it promises only about tentative records."""
REDO_HEADER = "medusa.redo"
"""DPC: on the BOUNDARY records of a SUnion's REDO release, the epoch it corrects (the
REC_REQUEST to its fragment's query, in the same topic as the data it concerns)."""

Headers = list[tuple[str, str | bytes | None]]


class TupleType(StrEnum):
    """Borealis tuple types, as carried on the data streams."""

    STABLE = "STABLE"
    TENTATIVE = "TENTATIVE"
    BOUNDARY = "BOUNDARY"
    UNDO = "UNDO"
    REC_DONE = "REC_DONE"


class EnvelopeError(MedusaError, ValueError):
    """A record whose envelope headers are missing or malformed."""


@dataclass(frozen=True)
class Envelope:
    type: TupleType
    tuple_id: str
    stime: int
    """Event time in milliseconds since the epoch."""

    def headers(self, extra: Iterable[tuple[str, str | bytes | None]] = ()) -> Headers:
        return envelope_headers(self.type, self.tuple_id, self.stime, extra)


_TYPE_BYTES = {kind: kind.value.encode() for kind in TupleType}


def envelope_headers(kind: TupleType, tuple_id: str, stime: int,
                     extra: Iterable[tuple[str, str | bytes | None]] = ()) -> Headers:
    """An envelope's headers without building the envelope (the producer's per-record path)."""
    return [(TYPE_HEADER, _TYPE_BYTES[kind]), (ID_HEADER, tuple_id.encode()),
            (STIME_HEADER, str(stime).encode()), *extra]


@dataclass(frozen=True)
class TupleRecord:
    """A decoded record: envelope plus value (``None`` for BOUNDARY, UNDO and REC_DONE)."""

    type: TupleType
    tuple_id: str
    stime: int
    value: Any = None


def boundary(source_id: str, partition: int, stime: int) -> Envelope:
    """Punctuation: no later record on this partition has a smaller stime."""
    return Envelope(TupleType.BOUNDARY, f"{source_id}/boundary/{partition}/{stime}", stime)


RawHeaders = Sequence[tuple[str, bytes | str | None]] | dict[str, bytes | str | None] | None


def header_text(headers: RawHeaders, key: str) -> str | None:
    """The first value of header ``key`` as text; None when there is none (or it is null)."""
    pairs = headers.items() if isinstance(headers, dict) else headers or ()
    for name, value in pairs:
        if name == key and value is not None:
            return value.decode() if isinstance(value, bytes) else value
    return None


def parse_headers(headers: RawHeaders) -> Envelope:
    found: dict[str, str] = {}
    pairs = headers.items() if isinstance(headers, dict) else headers or ()
    for key, raw in pairs:
        if key in (TYPE_HEADER, ID_HEADER, STIME_HEADER) and raw is not None:
            try:
                found[key] = raw.decode() if isinstance(raw, bytes) else raw
            except UnicodeDecodeError:
                # A corrupt header is a bad record, not a crash of its consumer.
                raise EnvelopeError(f"{key} is not UTF-8 text: {raw!r}") from None
    missing = [key for key in (TYPE_HEADER, ID_HEADER, STIME_HEADER) if key not in found]
    if missing:
        raise EnvelopeError(f"record lacks envelope header(s) {', '.join(missing)}")
    try:
        tuple_type = TupleType(found[TYPE_HEADER])
    except ValueError:
        raise EnvelopeError(f"unknown tuple type {found[TYPE_HEADER]!r} in {TYPE_HEADER}") from None
    try:
        stime = int(found[STIME_HEADER])
    except ValueError:
        raise EnvelopeError(f"{STIME_HEADER} is not an integer: {found[STIME_HEADER]!r}") from None
    return Envelope(tuple_type, found[ID_HEADER], stime)


def decode_record(headers: RawHeaders, value: Any) -> TupleRecord:
    """(type, id, stime, value) of a consumed record whose value is already deserialized."""
    envelope = parse_headers(headers)
    return TupleRecord(envelope.type, envelope.tuple_id, envelope.stime, value)
