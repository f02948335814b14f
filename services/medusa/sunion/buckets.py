"""The SUnion's pure logic: buckets by stime, per-partition boundaries, release, resume positions.

No Kafka here. The service feeds every consumed record in (``add_tuple``,
``add_boundary``, ``pass_over``) and asks for what may go out (``release``).

Invariants:
- bucket k holds the tuples with ``k * bucket_ms <= stime < (k + 1) * bucket_ms``;
- bucket k is released only when EVERY known input partition has shown a BOUNDARY
  >= (k + 1) * bucket_ms; a partition that never showed one holds everything back;
- buckets are released in increasing order; ``released_through`` (a multiple of
  bucket_ms) only grows, and every tuple with stime below it has been released;
- the tuples of a release are sorted by (stime, input, partition, offset), so the
  output order does not depend on arrival order or replay speed;
- the resume offset of a partition is the smallest offset of its held tuples, or its
  next offset to read when it holds none: re-reading from there rebuilds the held
  buckets, and the records re-read below ``read`` (the next offset to read when the
  positions were taken) that are not held again were handled before (released,
  dead-lettered, or a boundary) and are skipped.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

Header = tuple[str, str | bytes | None]


class HeldTuple(NamedTuple):
    """A data record waiting in its bucket. Its first four fields are its output order,
    and they are unique (one offset per input partition), so tuples sort natively."""

    stime: int
    input: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: Sequence[Header]
    tuple_id: str


class Outcome(enum.Enum):
    HELD = "held"
    """Waits in its bucket."""
    ALREADY_RELEASED = "already released"
    """Re-read after a restart: it went out before; skip it."""
    LATE = "late"
    """Its stime is below what was already released: its producer broke a BOUNDARY
    promise. Dead-letter it."""


@dataclass
class PartitionState:
    input: str
    partition: int
    next_offset: int
    """The next offset to read."""
    boundary: int | None = None
    """The latest BOUNDARY stime seen (or restored); None: nothing known yet."""
    replayed_until: int = 0
    """Offsets below this were handled before the last restart."""
    held: deque[tuple[int, int]] = field(default_factory=deque)
    """(offset, bucket) of the held tuples in offset order; released ones are dropped
    lazily from the front, so the front is always the smallest held offset."""

    def resume(self, released_bucket_end: int) -> int:
        """The offset to re-read from: the smallest held offset, else ``next_offset``."""
        held = self.held
        while held and held[0][1] < released_bucket_end:
            held.popleft()
        return held[0][0] if held else self.next_offset


@dataclass(frozen=True)
class Release:
    """Consecutive buckets that go out as one transaction.

    ``tuples`` may be empty (boundaries advanced without data): the boundaries
    still go out, so windows downstream close.
    """

    through: int
    """End (exclusive) of the last released bucket: the stime of the output BOUNDARY."""
    tuples: list[HeldTuple]
    positions: dict[str, Any]
    """The resume state after this release (the POSITIONS header's JSON)."""


@dataclass(frozen=True)
class RestoredPartition:
    """Where one input partition starts, from the positions of the last release."""

    resume: int
    boundary: int | None
    read: int
    """Records below this offset were handled before."""


def restored_partitions(positions: Mapping[str, Any] | None,
                        input_name: str) -> dict[int, RestoredPartition]:
    """Partition -> start of ``input_name`` in a positions JSON (empty when it is absent)."""
    if not positions:
        return {}
    partitions = positions.get("inputs", {}).get(input_name, {}).get("partitions", {})
    restored = {}
    for partition, entry in partitions.items():
        resume = int(entry["resume"])
        boundary = entry.get("boundary")
        restored[int(partition)] = RestoredPartition(
            resume, None if boundary is None else int(boundary), int(entry.get("read", resume)))
    return restored


class Buckets:
    """Tuples held by bucket, the latest boundary of every input partition, and what
    may be released. ``topics`` maps each input name to its topic (for the positions)."""

    def __init__(self, bucket_ms: int, topics: Mapping[str, str],
                 released_through: int | None = None,
                 max_delay_ms: int | None = None) -> None:
        if bucket_ms <= 0:
            raise ValueError(f"bucket_ms must be positive, got {bucket_ms}")
        self.bucket_ms = bucket_ms
        self.topics = dict(topics)
        self.released_through = released_through
        """Every tuple with a smaller stime has been released; None: nothing yet."""
        self.max_delay_ms = max_delay_ms
        """DPC: the longest a bucket may wait before a TENTATIVE release (not used yet)."""
        self.partitions: dict[tuple[str, int], PartitionState] = {}
        self._buckets: dict[int, list[HeldTuple]] = {}
        self.held_tuples = 0

    # -- input -------------------------------------------------------------------------

    def add_partition(self, input_name: str, partition: int, start_offset: int,
                      restored: RestoredPartition | None = None) -> PartitionState:
        """Starts following a partition at ``start_offset`` (its restored resume, if any)."""
        if input_name not in self.topics:
            raise KeyError(f"unknown input {input_name!r} (known: {', '.join(self.topics)})")
        key = (input_name, partition)
        if key in self.partitions:
            return self.partitions[key]
        state = PartitionState(input_name, partition, start_offset)
        if restored is not None:
            state.next_offset = restored.resume
            state.boundary = restored.boundary
            state.replayed_until = restored.read
        self.partitions[key] = state
        return state

    def add_tuple(self, held: HeldTuple) -> Outcome:
        """Holds a data tuple in its bucket, unless it is below ``released_through``."""
        state = self.partitions[(held.input, held.partition)]
        state.next_offset = held.offset + 1
        released = self.released_through
        if released is not None and held.stime < released:
            return Outcome.ALREADY_RELEASED if held.offset < state.replayed_until else Outcome.LATE
        bucket = held.stime // self.bucket_ms
        tuples = self._buckets.get(bucket)
        if tuples is None:
            self._buckets[bucket] = [held]
        else:
            tuples.append(held)
        state.held.append((held.offset, bucket))
        self.held_tuples += 1
        return Outcome.HELD

    def add_boundary(self, input_name: str, partition: int, offset: int, stime: int) -> None:
        """No later record of this partition has a smaller stime; boundaries never go back."""
        state = self.partitions[(input_name, partition)]
        state.next_offset = offset + 1
        if state.boundary is None or stime > state.boundary:
            state.boundary = stime

    def pass_over(self, input_name: str, partition: int, offset: int) -> bool:
        """Skips a record that is not held (to be dead-lettered). False when it is re-read
        after a restart and was dead-lettered before: do not dead-letter it again."""
        state = self.partitions[(input_name, partition)]
        state.next_offset = offset + 1
        return offset >= state.replayed_until

    # -- output ------------------------------------------------------------------------

    def frontier(self) -> int | None:
        """The smallest latest boundary over all partitions; None while one has none."""
        if not self.partitions:
            return None
        lowest: int | None = None
        for state in self.partitions.values():
            if state.boundary is None:
                return None
            if lowest is None or state.boundary < lowest:
                lowest = state.boundary
        return lowest

    def stable_through(self) -> int | None:
        """End of the last bucket every partition's boundary has passed; None: none has."""
        frontier = self.frontier()
        if frontier is None:
            return None
        return (frontier // self.bucket_ms) * self.bucket_ms

    def release(self) -> Release | None:
        """Takes every releasable bucket out, in order, as one release; None when no
        bucket is releasable beyond ``released_through``.

        This is the one place that decides what goes out. DPC (``max_delay_ms``) adds
        here: a bucket that waited longer than max_delay_ms goes out TENTATIVE.
        """
        through = self.stable_through()
        # stimes are not negative: a release through 0 or less would hold nothing.
        if through is None or through <= (self.released_through or 0):
            return None
        last_bucket = through // self.bucket_ms  # exclusive
        tuples: list[HeldTuple] = []
        for bucket in sorted(b for b in self._buckets if b < last_bucket):
            released = self._buckets.pop(bucket)
            released.sort()
            tuples.extend(released)
        self.held_tuples -= len(tuples)
        self.released_through = through
        return Release(through, tuples, self.positions())

    # -- state -------------------------------------------------------------------------

    @property
    def held_buckets(self) -> int:
        return len(self._buckets)

    def resume_offset(self, input_name: str, partition: int) -> int:
        state = self.partitions[(input_name, partition)]
        return state.resume(self._released_bucket_end())

    def positions(self) -> dict[str, Any]:
        """The resume state: where each input partition restarts, its latest boundary,
        and how far it was read (records below ``read`` were handled)."""
        released_bucket_end = self._released_bucket_end()
        inputs: dict[str, Any] = {
            name: {"topic": topic, "partitions": {}} for name, topic in self.topics.items()}
        for (name, partition), state in sorted(self.partitions.items()):
            inputs[name]["partitions"][str(partition)] = {
                "resume": state.resume(released_bucket_end),
                "boundary": state.boundary,
                "read": state.next_offset,
            }
        return {"released_through": self.released_through, "inputs": inputs}

    def held(self) -> Iterator[HeldTuple]:
        """The held tuples, bucket by bucket (unsorted within a bucket)."""
        for bucket in sorted(self._buckets):
            yield from self._buckets[bucket]

    def _released_bucket_end(self) -> int:
        """Buckets below this index are released."""
        if self.released_through is None:
            return -(2**62)
        return self.released_through // self.bucket_ms
