"""One trace per UP_FAILURE period of a fragment, written by its SUnion.

The root, ``up-failure <fragment>``, lasts from when the held bucket began to wait for a
lagging input until the REDO is written. Its children, one after the other:

- ``delay``: that wait, D, up to the first tentative release (D in ms, the failed inputs);
- ``tentative release``: the first tentative release, from taken to committed (the
  period's epoch, and its tentative releases and tuples, counted to its end);
- ``heal``: the moment every failed input's boundary moved again and no input was
  tentative any more (an instant);
- ``stabilization``: from the heal until the REDO is written.

The REDO's BOUNDARY records carry the root's traceparent, so the fragment's
reconciliation (the node's ``reconcile`` span, the writer's ``REC_DONE``) joins the trace.

The period is kept on the Buckets' clock while it lasts, and its spans are made only once
the REDO is out, with explicit start and end times (as the failure detector does): a crash
in the middle of a period leaves nothing half written. A SUnion restarted in the middle of
a period knows only what follows its restart: its trace begins at its own first tentative
release, and one restarted after the last tentative release writes no trace for that
period (its REDO carries no traceparent).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from opentelemetry import trace
from opentelemetry.trace import Span, Tracer

from medusa.sunion.buckets import Buckets, PartitionState, Release, ReleaseKind
from medusa.tracing import traceparent

ROOT_PREFIX = "up-failure "
"""The root span's name is this and the fragment's."""

PartitionKey = tuple[str, int]


def partition_label(key: PartitionKey) -> str:
    """``input[partition]``, as ``medusa status`` names a failed input."""
    return f"{key[0]}[{key[1]}]"


@dataclass
class UpFailurePeriod:
    """One UP_FAILURE period as its SUnion saw it; times in seconds on the Buckets' clock."""

    epoch: int
    waiting_since: float
    """When the held bucket began to wait: the start of the delay."""
    first_release_taken: float
    first_release_written: float
    failed_since: dict[PartitionKey, float] = field(default_factory=dict)
    """Each partition declared failed in the period -> when its boundary last moved before."""
    healed_at: float | None = None
    tentative_releases: int = 0
    tentative_tuples: int = 0
    counted_through: int = 0
    """The furthest tentative release counted: a re-announcement repeats it, uncounted."""

    def count(self, release: Release) -> None:
        if release.through > self.counted_through:
            self.counted_through = release.through
            self.tentative_releases += 1
            self.tentative_tuples += len(release.tuples)

    def note_failed(self, failed: set[PartitionKey],
                    partitions: Mapping[PartitionKey, PartitionState]) -> None:
        for key in failed:
            self.failed_since.setdefault(key, partitions[key].advanced_at)

    def is_back(self, partitions: Mapping[PartitionKey, PartitionState]) -> bool:
        """Every failed partition's boundary moved since it failed, and no partition is
        ahead only tentatively (an upstream in UP_FAILURE)."""
        return all(partitions[key].advanced_at > since
                   for key, since in self.failed_since.items()) and \
            not any(p.tentative_boundary is not None and (p.boundary or 0) < p.tentative_boundary
                    for p in partitions.values())

    @property
    def failed_inputs(self) -> str:
        return ", ".join(partition_label(key) for key in sorted(self.failed_since))


class UpFailureTracer:
    """Follows one SUnion's UP_FAILURE periods and writes each one's trace at its REDO.

    The SUnion calls ``observe`` every turn before it asks the buckets for a release, and
    ``taken`` then ``written`` around each release's transaction.
    """

    def __init__(self, fragment: str, max_delay_ms: int | None, tracer: Tracer | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall_ns: Callable[[], int] = time.time_ns) -> None:
        """``clock`` must be the Buckets' clock; ``wall_ns`` places it in real time."""
        self.fragment = fragment
        self.max_delay_ms = max_delay_ms
        self._tracer = tracer or trace.get_tracer("medusa")
        self._clock = clock
        self._wall_ns = wall_ns
        self.period: UpFailurePeriod | None = None
        self._taken_at = 0.0
        self._root: Span | None = None
        self._wall_offset_ns = 0
        """Real time (ns) minus the clock's (ns), fixed per trace: its spans line up."""

    def observe(self, buckets: Buckets) -> None:
        """Notes the partitions declared failed since, and the heal once they are back."""
        period = self.period
        if period is None or period.healed_at is not None:
            return
        period.note_failed(buckets.failed, buckets.partitions)
        if period.is_back(buckets.partitions):
            period.healed_at = self._clock()

    def taken(self, release: Release) -> str | None:
        """A release is about to be written. For the REDO of a followed period, starts the
        trace's root and returns its traceparent, for the REDO's BOUNDARY records."""
        self._taken_at = self._clock()
        period = self.period
        if release.kind is not ReleaseKind.REDO or period is None or \
                period.epoch != release.epoch:
            return None
        if self._root is None:  # a retried transaction keeps the root it had
            self._wall_offset_ns = self._wall_ns() - int(self._clock() * 1e9)
            self._root = self._tracer.start_span(
                f"{ROOT_PREFIX}{self.fragment}", start_time=self._ns(period.waiting_since),
                attributes={"medusa.fragment": self.fragment, "medusa.dpc.epoch": period.epoch,
                            "medusa.dpc.failed_inputs": period.failed_inputs})
        return traceparent(self._root)

    def written(self, release: Release, buckets: Buckets) -> None:
        """A release's transaction committed: a period begins, goes on, or ends (its trace)."""
        if release.kind is ReleaseKind.TENTATIVE:
            period = self.period
            if period is None or period.epoch != release.epoch:
                waited = release.waited_since
                period = self.period = UpFailurePeriod(
                    release.epoch, self._taken_at if waited is None else waited,
                    self._taken_at, self._clock())
                period.note_failed(buckets.failed, buckets.partitions)
            period.count(release)
        elif release.kind is ReleaseKind.REDO:
            root, period = self._root, self.period
            self._root = self.period = None
            if root is not None and period is not None:
                self._write_children(root, period, release)

    def _write_children(self, root: Span, period: UpFailurePeriod, release: Release) -> None:
        redo_written = self._clock()
        healed = period.healed_at if period.healed_at is not None else self._taken_at
        context = trace.set_span_in_context(root)
        start = self._tracer.start_span
        start("delay", context=context, start_time=self._ns(period.waiting_since), attributes={
            "medusa.dpc.delay_ms": self.max_delay_ms or 0,
            "medusa.dpc.failed_inputs": period.failed_inputs,
        }).end(end_time=self._ns(period.first_release_taken))
        start("tentative release", context=context,
              start_time=self._ns(period.first_release_taken), attributes={
                  "medusa.dpc.epoch": period.epoch,
                  "medusa.dpc.tentative_releases": period.tentative_releases,
                  "medusa.dpc.tentative_tuples": period.tentative_tuples,
              }).end(end_time=self._ns(period.first_release_written))
        start("heal", context=context, start_time=self._ns(healed), attributes={
            "medusa.dpc.failed_inputs": period.failed_inputs,
        }).end(end_time=self._ns(healed))
        start("stabilization", context=context, start_time=self._ns(healed), attributes={
            "medusa.dpc.redo_through": release.through,
            "medusa.dpc.redo_tuples": len(release.tuples),
        }).end(end_time=self._ns(redo_written))
        root.set_attribute("medusa.dpc.tentative_tuples", period.tentative_tuples)
        root.end(end_time=self._ns(redo_written))

    def _ns(self, at: float) -> int:
        """A time on the Buckets' clock as nanoseconds since the Unix epoch."""
        return self._wall_offset_ns + int(at * 1e9)
