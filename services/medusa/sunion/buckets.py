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

DPC (Borealis's Delay, Process, Correct), when ``max_delay_ms`` D is set:
- a partition's boundaries are stable, or tentative (an upstream fragment in UP_FAILURE
  marks its boundaries so); only stable ones move ``stable_through``;
- when something could go out (a partition's boundary, stable or tentative, is past
  ``released_through``) but no stable release came for D after the partitions that hold
  it back were due to pass it, those partitions are declared failed and the fragment
  enters UP_FAILURE: every bucket up to the lowest boundary of the other partitions goes
  out TENTATIVE, and from then on each bucket goes out as soon as those partitions pass
  it, without waiting D again (delay once, then process). A failed partition rejoins
  once its boundary catches up;
- tentatively released tuples stay held: ``stable_through`` (not ``released_through``)
  is where a restart resumes, and where a tuple counts as late;
- once the stable boundaries of every partition pass ``released_through`` again, one
  REDO release carries every bucket since ``stable_through`` as STABLE (without the
  tentative tuples, which an UNDO of their upstream has removed), and the fragment
  reconciles from it (checkpoint/redo, see ``medusa_spark.reconcile``);
- D is the delay a partition adds, not the skew of the producers' boundary cadence: a
  partition is due to pass a bucket's end E at E + its boundary cadence + its shortest
  transit (wall clock at arrival minus the boundary's stime, as learned), and the D
  of a waiting bucket starts when the last partition holding it back was due (or when
  it began to wait, if that is later). So a link that delays a partition by less than D
  gives no tentative output, and one that delays it more gives the tentative release
  within D of when the bucket would have gone out without it;
- each UP_FAILURE period has a number, ``epoch``: its tentative records carry it, and
  its REDO names it, so a query that redoes can skip exactly that period's records.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

Header = tuple[str, str | bytes | None]

CADENCE_GAPS = 8
"""Boundary steps a partition's cadence is learned from."""


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
    tentative: bool = False
    """Came TENTATIVE from an upstream fragment in UP_FAILURE (an UNDO removes it)."""


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
    """The latest stable BOUNDARY stime seen (or restored); None: nothing known yet."""
    tentative_boundary: int | None = None
    """The latest tentative BOUNDARY (its upstream is in UP_FAILURE); an UNDO clears it."""
    advanced_at: float = 0.0
    """When ``effective_boundary`` last grew (the Buckets' clock)."""
    advanced_wall_ms: float = 0.0
    """The same on the wall clock, in ms."""
    shortest_transit_ms: float | None = None
    """The least (wall clock at arrival - boundary stime) seen: the partition's transit
    with its clock offset, without the delays of a slow or cut link."""
    boundary_gaps: deque[int] = field(default_factory=lambda: deque(maxlen=CADENCE_GAPS))
    """The stime steps of its last boundary advances."""
    replayed_until: int = 0
    """Offsets below this were handled before the last restart."""
    held: deque[tuple[int, int]] = field(default_factory=deque)
    """(offset, bucket) of the held tuples in offset order; released ones are dropped
    lazily from the front, so the front is always the smallest held offset."""

    def due_ms(self, stime: int, cap_ms: int | None) -> float | None:
        """When (wall clock, ms) a boundary >= ``stime`` is due: where its steps from the
        last one lead, but no later than the largest step plus the shortest transit after
        ``stime`` (a delayed last boundary does not excuse the next). The step is capped
        at ``cap_ms``; None while nothing is learned."""
        if not self.boundary_gaps or self.shortest_transit_ms is None:
            return None
        step = max(self.boundary_gaps)
        if cap_ms is not None:
            step = min(step, cap_ms)
        latest = stime + step + self.shortest_transit_ms
        boundary = self.effective_boundary
        if boundary is None or step <= 0:
            return latest
        steps = -(-(stime - boundary) // step)
        return min(latest, self.advanced_wall_ms + steps * step)

    @property
    def effective_boundary(self) -> int | None:
        """How far the partition has gone, stably or tentatively."""
        if self.tentative_boundary is None:
            return self.boundary
        if self.boundary is None:
            return self.tentative_boundary
        return max(self.boundary, self.tentative_boundary)

    def resume(self, released_bucket_end: int) -> int:
        """The offset to re-read from: the smallest held offset, else ``next_offset``."""
        held = self.held
        while held and held[0][1] < released_bucket_end:
            held.popleft()
        return held[0][0] if held else self.next_offset


class ReleaseKind(enum.Enum):
    STABLE = "stable"
    TENTATIVE = "tentative"
    """Released after waiting D: its tuples go out TENTATIVE."""
    REDO = "redo"
    """The buckets since the last stable release, complete now, again and STABLE."""


class DpcState(enum.StrEnum):
    """A fragment's DPC state as its SUnion sees it."""

    STABLE = "STABLE"
    UP_FAILURE = "UP_FAILURE"
    """Releasing tentatively: an input partition is failed or tentative."""
    STABILIZATION = "STABILIZATION"
    """Releasing tentatively, but every input is back: waiting for the stable boundaries
    to pass the tentative releases, then the REDO."""


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
    kind: ReleaseKind = ReleaseKind.STABLE
    epoch: int = 0
    """The UP_FAILURE period a TENTATIVE release belongs to, or a REDO corrects."""
    uncorrected: list[HeldTuple] = field(default_factory=list)
    """Upstream TENTATIVE tuples a stable release passed with no UNDO withdrawing them:
    left out (the upstream broke the protocol), to be dead-lettered."""
    waited_since: float | None = None
    """When its first bucket began to wait for a lagging partition (the Buckets' clock);
    None when it went out without waiting. On the first TENTATIVE release of a period,
    the start of the delay D."""


@dataclass(frozen=True)
class RestoredPartition:
    """Where one input partition starts, from the positions of the last release."""

    resume: int
    boundary: int | None
    read: int
    """Records below this offset were handled before."""
    tentative_boundary: int | None = None


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
        tentative = entry.get("tentative_boundary")
        restored[int(partition)] = RestoredPartition(
            resume, None if boundary is None else int(boundary), int(entry.get("read", resume)),
            None if tentative is None else int(tentative))
    return restored


class Buckets:
    """Tuples held by bucket, the latest boundaries of every input partition, and what
    may be released. ``topics`` maps each input name to its topic (for the positions)."""

    def __init__(self, bucket_ms: int, topics: Mapping[str, str],
                 released_through: int | None = None,
                 max_delay_ms: int | None = None,
                 tentative_through: int | None = None, epoch: int = 0,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        """``released_through`` is the last stable release's (a restart's), and
        ``tentative_through`` the tentative releases' beyond it, if any. ``clock`` times
        the waits; ``wall_clock`` (seconds) is compared with boundary stimes (ms)."""
        if bucket_ms <= 0:
            raise ValueError(f"bucket_ms must be positive, got {bucket_ms}")
        self.bucket_ms = bucket_ms
        self.topics = dict(topics)
        self.stable_through = released_through
        """Every tuple with a smaller stime went out in a stable release; None: none yet."""
        self.released_through = released_through
        """Every bucket below went out, stably or tentatively; None: nothing yet."""
        if tentative_through is not None and tentative_through > (released_through or 0):
            self.released_through = tentative_through
        self.max_delay_ms = max_delay_ms
        """DPC's D: the longest something releasable waits before a TENTATIVE release;
        None: wait for every boundary, however long."""
        self.epoch = epoch
        """The number of the current (or last) UP_FAILURE period."""
        self.failed: set[tuple[str, int]] = set()
        """Partitions left out of tentative releases (they held back a bucket for D)."""
        self._clock = clock
        self._wall_clock = wall_clock
        self._waiting_since: float | None = None
        self.partitions: dict[tuple[str, int], PartitionState] = {}
        self._buckets: dict[int, list[HeldTuple]] = {}
        self.held_tuples = 0

    @property
    def tentative(self) -> bool:
        """Whether some buckets went out TENTATIVE and wait for their REDO."""
        return (self.released_through or 0) > (self.stable_through or 0)

    @property
    def dpc_state(self) -> DpcState:
        if not self.tentative:
            return DpcState.STABLE
        # Up failure while a failed partition is silent, or an upstream is tentative;
        # stabilization once they all move again and only their backlog remains.
        now = self._clock()
        silent = [key for key in self.failed
                  if (now - self.partitions[key].advanced_at) * 1000 >= (self.max_delay_ms or 0)]
        if silent or any(p.tentative_boundary is not None and
                         (p.boundary or 0) < p.tentative_boundary
                         for p in self.partitions.values()):
            return DpcState.UP_FAILURE
        return DpcState.STABILIZATION

    # -- input -------------------------------------------------------------------------

    def add_partition(self, input_name: str, partition: int, start_offset: int,
                      restored: RestoredPartition | None = None) -> PartitionState:
        """Starts following a partition at ``start_offset`` (its restored resume, if any)."""
        if input_name not in self.topics:
            raise KeyError(f"unknown input {input_name!r} (known: {', '.join(self.topics)})")
        key = (input_name, partition)
        if key in self.partitions:
            return self.partitions[key]
        state = PartitionState(input_name, partition, start_offset, advanced_at=self._clock())
        if restored is not None:
            state.next_offset = restored.resume
            state.boundary = restored.boundary
            state.tentative_boundary = restored.tentative_boundary
            state.replayed_until = restored.read
        self.partitions[key] = state
        return state

    def add_tuple(self, held: HeldTuple) -> Outcome:
        """Holds a data tuple in its bucket, unless it is below ``stable_through``."""
        state = self.partitions[(held.input, held.partition)]
        state.next_offset = held.offset + 1
        stable = self.stable_through
        if stable is not None and held.stime < stable:
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

    def add_boundary(self, input_name: str, partition: int, offset: int, stime: int,
                     tentative: bool = False) -> None:
        """No later record of this partition has a smaller stime (a ``tentative`` one:
        no later tentative record); boundaries never go back."""
        state = self.partitions[(input_name, partition)]
        state.next_offset = offset + 1
        before = state.effective_boundary
        if tentative:
            if state.tentative_boundary is None or stime > state.tentative_boundary:
                state.tentative_boundary = stime
        elif state.boundary is None or stime > state.boundary:
            state.boundary = stime
        wall_ms = self._wall_clock() * 1000
        if state.shortest_transit_ms is None or wall_ms - stime < state.shortest_transit_ms:
            state.shortest_transit_ms = wall_ms - stime
        after = state.effective_boundary
        if after is not None and (before is None or after > before):
            state.advanced_at = self._clock()
            state.advanced_wall_ms = wall_ms
            if before is not None:
                state.boundary_gaps.append(after - before)

    def undo(self, input_name: str, partition: int, offset: int) -> int:
        """An upstream UNDO: its tentative tuples and boundaries are withdrawn (corrected
        stable tuples follow). Returns how many held tuples were dropped."""
        state = self.partitions[(input_name, partition)]
        state.next_offset = offset + 1
        state.tentative_boundary = None
        dropped = 0
        for bucket in list(self._buckets):
            tuples = self._buckets[bucket]
            kept = [t for t in tuples if not (t.tentative and t.input == input_name
                                              and t.partition == partition)]
            dropped += len(tuples) - len(kept)
            if kept:
                self._buckets[bucket] = kept
            else:
                del self._buckets[bucket]
        self.held_tuples -= dropped
        return dropped

    def pass_over(self, input_name: str, partition: int, offset: int) -> bool:
        """Skips a record that is not held (to be dead-lettered). False when it is re-read
        after a restart and was dead-lettered before: do not dead-letter it again."""
        state = self.partitions[(input_name, partition)]
        state.next_offset = offset + 1
        return offset >= state.replayed_until

    # -- output ------------------------------------------------------------------------

    def frontier(self) -> int | None:
        """The smallest latest stable boundary over all partitions; None while one has none."""
        if not self.partitions:
            return None
        lowest: int | None = None
        for state in self.partitions.values():
            if state.boundary is None:
                return None
            if lowest is None or state.boundary < lowest:
                lowest = state.boundary
        return lowest

    def stable_through_frontier(self) -> int | None:
        """End of the last bucket every partition's stable boundary has passed."""
        frontier = self.frontier()
        if frontier is None:
            return None
        return self._floor(frontier)

    def release(self) -> Release | None:
        """Takes every releasable bucket out, in order, as one release; None when there is
        none. This is the one place that decides what goes out, and how (stable, tentative
        after D, or the REDO of a tentative period)."""
        through = self.stable_through_frontier()
        released = self.released_through or 0
        # stimes are not negative: a release through 0 or less would hold nothing.
        if through is not None and through > (self.stable_through or 0):
            if not self.tentative:
                return self._take(through, ReleaseKind.STABLE)
            if through >= released:
                return self._take(through, ReleaseKind.REDO)
        if self.max_delay_ms is None:
            return None
        live = self._live_through()
        if self.tentative and live is not None and live > released:
            return self._take(live, ReleaseKind.TENTATIVE)
        # Nothing goes out. Does something wait that could go out, and for how long?
        # A bucket waits when some partition has passed its end, but not every one.
        if not any(self._floor(p.effective_boundary or 0) > released
                   for p in self.partitions.values()):
            self._waiting_since = None
            return None
        now = self._clock()
        if self._waiting_since is None:
            self._waiting_since = now + self._due_in_s(released + self.bucket_ms)
            return None
        if (now - self._waiting_since) * 1000 < self.max_delay_ms:
            return None
        # Waited D: the partitions that hold it back are failed; the others go on.
        self.failed |= {key for key, p in self.partitions.items()
                        if self._floor(p.effective_boundary or 0) <= released}
        if not self.tentative:
            self.epoch += 1
        live = self._live_through()
        if live is None or live <= released:
            return None
        return self._take(live, ReleaseKind.TENTATIVE)

    def _due_in_s(self, bucket_end: int) -> float:
        """How long until every partition short of ``bucket_end`` is due to pass it (0 when
        one is overdue or has nothing learned yet)."""
        due_ms = None
        for state in self.partitions.values():
            if self._floor(state.effective_boundary or 0) >= bucket_end:
                continue
            at = state.due_ms(bucket_end, self.max_delay_ms)
            if at is None:
                return 0.0
            due_ms = at if due_ms is None else max(due_ms, at)
        if due_ms is None:
            return 0.0
        return max(0.0, (due_ms - self._wall_clock() * 1000) / 1000)

    def reannouncement(self) -> Release | None:
        """The last release's boundary again (no tuples), for an idle query to pass it on."""
        if self.released_through is None:
            return None
        kind = ReleaseKind.TENTATIVE if self.tentative else ReleaseKind.STABLE
        return Release(self.released_through, [], self.positions(), kind, self.epoch)

    def _live_through(self) -> int | None:
        """How far the partitions that are not failed allow a tentative release; a failed
        partition whose boundary has caught up rejoins them."""
        released = self.released_through or 0
        for key in [k for k in self.failed
                    if self._floor(self.partitions[k].effective_boundary or 0) > released]:
            self.failed.discard(key)
        lowest: int | None = None
        for key, state in self.partitions.items():
            if key in self.failed:
                continue
            boundary = state.effective_boundary
            if boundary is None:
                return None
            if lowest is None or boundary < lowest:
                lowest = boundary
        return None if lowest is None else self._floor(lowest)

    def _take(self, through: int, kind: ReleaseKind) -> Release:
        """Buckets below ``through`` (from ``released_through``; for a REDO, from
        ``stable_through``, without the tentative tuples)."""
        last_bucket = through // self.bucket_ms  # exclusive
        tuples: list[HeldTuple] = []
        uncorrected: list[HeldTuple] = []
        if kind is ReleaseKind.TENTATIVE:
            first_bucket = (self.released_through or 0) // self.bucket_ms
            for bucket in sorted(b for b in self._buckets if first_bucket <= b < last_bucket):
                tuples.extend(sorted(self._buckets[bucket]))
            self.released_through = through
        else:
            for bucket in sorted(b for b in self._buckets if b < last_bucket):
                taken = self._buckets.pop(bucket)
                self.held_tuples -= len(taken)
                taken.sort()
                for held in taken:
                    (uncorrected if held.tentative else tuples).append(held)
            self.released_through = self.stable_through = through
            self.failed.clear()
        waited_since, self._waiting_since = self._waiting_since, None
        return Release(through, tuples, self.positions(), kind, self.epoch, uncorrected,
                       waited_since)

    def _floor(self, stime: int) -> int:
        return (stime // self.bucket_ms) * self.bucket_ms

    # -- state -------------------------------------------------------------------------

    @property
    def held_buckets(self) -> int:
        return len(self._buckets)

    def resume_offset(self, input_name: str, partition: int) -> int:
        state = self.partitions[(input_name, partition)]
        return state.resume(self._stable_bucket_end())

    def positions(self) -> dict[str, Any]:
        """The resume state: where each input partition restarts, its latest boundaries,
        and how far it was read (records below ``read`` were handled); the stable and the
        tentative release points and the UP_FAILURE period."""
        stable_bucket_end = self._stable_bucket_end()
        inputs: dict[str, Any] = {
            name: {"topic": topic, "partitions": {}} for name, topic in self.topics.items()}
        for (name, partition), state in sorted(self.partitions.items()):
            entry: dict[str, Any] = {
                "resume": state.resume(stable_bucket_end),
                "boundary": state.boundary,
                "read": state.next_offset,
            }
            if state.tentative_boundary is not None:
                entry["tentative_boundary"] = state.tentative_boundary
            inputs[name]["partitions"][str(partition)] = entry
        positions: dict[str, Any] = {"released_through": self.stable_through, "inputs": inputs}
        if self.tentative:
            positions["tentative_through"] = self.released_through
        if self.epoch:
            positions["epoch"] = self.epoch
        return positions

    def held(self) -> Iterator[HeldTuple]:
        """The held tuples, bucket by bucket (unsorted within a bucket)."""
        for bucket in sorted(self._buckets):
            yield from self._buckets[bucket]

    def _stable_bucket_end(self) -> int:
        """Buckets below this index went out stably: nothing of them is held."""
        if self.stable_through is None:
            return -(2**62)
        return self.stable_through // self.bucket_ms
