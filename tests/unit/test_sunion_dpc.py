"""DPC in the SUnion's bucket logic, in memory and on a fake clock: delay at most D, then
tentative releases that keep up, no tentative tuple for a failure shorter than D, the
REDO once every stable boundary is back, upstream tentative tuples and their UNDO, and
a restart in the middle of a failure."""

from __future__ import annotations

import pytest

from medusa.sunion.buckets import (
    Buckets,
    DpcState,
    HeldTuple,
    Outcome,
    ReleaseKind,
    restored_partitions,
)

pytestmark = pytest.mark.unit

TOPICS = {"local": "topic.local", "remote": "topic.remote"}
D_MS = 3000


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Feed:
    """Numbers each input partition's records like Kafka offsets."""

    def __init__(self, buckets: Buckets) -> None:
        self.buckets = buckets
        self.next_offset: dict[tuple[str, int], int] = {}

    def _offset(self, name: str) -> int:
        offset = self.next_offset.get((name, 0), 0)
        self.next_offset[(name, 0)] = offset + 1
        return offset

    def tuple(self, name: str, stime: int, tentative: bool = False) -> Outcome:
        offset = self._offset(name)
        return self.buckets.add_tuple(HeldTuple(stime, name, 0, offset, None, b"\x00v", [],
                                                f"{name}/{offset}", tentative))

    def boundary(self, name: str, stime: int, tentative: bool = False) -> None:
        self.buckets.add_boundary(name, 0, self._offset(name), stime, tentative)

    def second(self, name: str, second: int, tentative: bool = False) -> None:
        """One tuple in the given second, then the boundary at its end."""
        self.tuple(name, second * 1000 + 500, tentative)
        self.boundary(name, (second + 1) * 1000, tentative)

    def undo(self, name: str) -> int:
        return self.buckets.undo(name, 0, self._offset(name))


def _dpc(clock: Clock, **restored: object) -> tuple[Buckets, Feed]:
    buckets = Buckets(1000, TOPICS, max_delay_ms=D_MS, clock=clock, wall_clock=clock,
                      **restored)  # type: ignore[arg-type]
    for name in TOPICS:
        buckets.add_partition(name, 0, 0)
    return buckets, Feed(buckets)


def _both_up_to(feed: Feed, clock: Clock, seconds: range) -> None:
    for second in seconds:
        feed.second("local", second)
        feed.second("remote", second)
        clock.advance(1.0)
        release = feed.buckets.release()
        assert release is not None and release.kind is ReleaseKind.STABLE

def _local_second_one_goes_out_tentative() -> tuple[Buckets, Feed, Clock]:
    """Second 0 from both inputs; second 1 from local only, released TENTATIVE after D."""
    clock = Clock()
    buckets, feed = _dpc(clock)
    _both_up_to(feed, clock, range(0, 1))
    feed.second("local", 1)
    buckets.release()
    clock.advance(D_MS / 1000 + 0.1)
    release = buckets.release()
    assert release is not None and release.kind is ReleaseKind.TENTATIVE
    assert release.through == 2000
    return buckets, feed, clock


def test_a_failure_shorter_than_d_gives_no_tentative_tuple() -> None:
    clock = Clock()
    buckets, feed = _dpc(clock)
    _both_up_to(feed, clock, range(0, 2))
    # The remote input stops for 2.5 s (< D); the local one goes on.
    for second in (2, 3):
        feed.second("local", second)
        clock.advance(1.0)
        assert buckets.release() is None
    clock.advance(0.4)
    assert buckets.release() is None and buckets.dpc_state is DpcState.STABLE
    feed.second("remote", 2)
    feed.second("remote", 3)
    release = buckets.release()
    assert release is not None and release.kind is ReleaseKind.STABLE
    assert release.through == 4000 and len(release.tuples) == 4


def test_after_d_the_waiting_bucket_goes_out_tentative_and_later_ones_at_once() -> None:
    clock = Clock()
    buckets, feed = _dpc(clock)
    _both_up_to(feed, clock, range(0, 2))
    feed.second("local", 2)
    assert buckets.release() is None  # starts the wait
    clock.advance(D_MS / 1000 - 0.01)
    assert buckets.release() is None, "held for D, not less"
    clock.advance(0.02)
    release = buckets.release()
    assert release is not None and release.kind is ReleaseKind.TENTATIVE
    assert release.through == 3000 and release.epoch == 1
    assert [t.stime for t in release.tuples] == [2500]
    assert buckets.dpc_state is DpcState.UP_FAILURE
    assert buckets.failed == {("remote", 0)}
    # Delay once, then process: the next second goes out as soon as local passes it.
    feed.second("local", 3)
    release = buckets.release()
    assert release is not None and release.kind is ReleaseKind.TENTATIVE
    assert release.through == 4000 and [t.stime for t in release.tuples] == [3500]
    # Tentatively released tuples stay held for the redo; a restart resumes before them.
    assert buckets.held_tuples == 2 and buckets.stable_through == 2000
    positions = buckets.positions()
    assert positions["released_through"] == 2000 and positions["tentative_through"] == 4000
    assert positions["inputs"]["local"]["partitions"]["0"]["resume"] == 4, \
        "the local tuples of the tentative seconds are re-read after a restart"


def test_the_redo_comes_once_the_stable_boundaries_pass_the_tentative_releases() -> None:
    buckets, feed, clock = _local_second_one_goes_out_tentative()
    feed.second("local", 2)
    assert buckets.release().kind is ReleaseKind.TENTATIVE  # type: ignore[union-attr]
    # The remote input comes back with its backlog, partly first.
    feed.second("remote", 1)
    assert buckets.release() is None, "stable through 2000 only; 3000 went out tentative"
    assert buckets.dpc_state is DpcState.STABILIZATION
    feed.second("remote", 2)
    redo = buckets.release()
    assert redo is not None and redo.kind is ReleaseKind.REDO and redo.epoch == 1
    assert redo.through == 3000
    assert [(t.input, t.stime) for t in redo.tuples] == [
        ("local", 1500), ("remote", 1500), ("local", 2500), ("remote", 2500)]
    assert buckets.dpc_state is DpcState.STABLE and buckets.held_tuples == 0
    # Stable again: the next failure is a new period.
    feed.second("local", 3)
    buckets.release()
    clock.advance(D_MS / 1000 + 0.1)
    release = buckets.release()
    assert release is not None and release.kind is ReleaseKind.TENTATIVE and release.epoch == 2


def test_a_tuple_of_a_tentatively_released_bucket_is_held_for_the_redo_not_late() -> None:
    _, feed, _ = _local_second_one_goes_out_tentative()
    assert feed.tuple("local", 1700) is Outcome.HELD, "below the tentative release, above stable"
    assert feed.tuple("local", 900) is Outcome.LATE


def test_an_upstream_in_up_failure_makes_the_release_tentative_after_d() -> None:
    clock = Clock()
    buckets, feed = _dpc(clock)
    _both_up_to(feed, clock, range(0, 1))
    # The remote fragment is in UP_FAILURE: its tuples and boundaries are tentative.
    feed.second("remote", 1, tentative=True)
    feed.second("local", 1)
    assert buckets.release() is None, "a tentative boundary does not make a bucket stable"
    clock.advance(D_MS / 1000 + 0.1)
    release = buckets.release()
    assert release is not None and release.kind is ReleaseKind.TENTATIVE
    assert buckets.failed == set(), "the remote input is alive, only tentative"
    assert buckets.dpc_state is DpcState.UP_FAILURE
    # It reconciles: UNDO, the corrected stable tuple, its stable boundary.
    assert feed.undo("remote") == 1
    feed.second("remote", 1)
    redo = buckets.release()
    assert redo is not None and redo.kind is ReleaseKind.REDO
    assert [(t.input, t.tentative) for t in redo.tuples] == [("local", False), ("remote", False)]


def test_a_tentative_tuple_a_stable_boundary_passes_without_undo_is_left_out() -> None:
    clock = Clock()
    buckets, feed = _dpc(clock)
    _both_up_to(feed, clock, range(0, 1))
    feed.tuple("remote", 1200, tentative=True)  # then, against the protocol, no UNDO
    feed.second("remote", 1)
    feed.second("local", 1)
    release = buckets.release()
    assert release is not None and release.kind is ReleaseKind.STABLE
    assert [t.stime for t in release.tuples] == [1500, 1500]
    assert [t.stime for t in release.uncorrected] == [1200], "dead-lettered, not merged"


def test_a_restart_during_up_failure_goes_on_from_the_positions() -> None:
    buckets, _, clock = _local_second_one_goes_out_tentative()
    positions = buckets.positions()
    restarted = Buckets(1000, TOPICS, max_delay_ms=D_MS, clock=clock,
                        released_through=positions["released_through"],
                        tentative_through=positions["tentative_through"],
                        epoch=positions["epoch"])
    for name in TOPICS:
        restored = restored_partitions(positions, name)[0]
        restarted.add_partition(name, 0, restored.resume, restored)
    assert restarted.tentative and restarted.epoch == 1 and restarted.released_through == 2000
    # The local second re-read is held again (for the redo), not released twice.
    assert restarted.add_tuple(HeldTuple(1500, "local", 0, 2, None, b"\x00v", [], "l/2")) \
        is Outcome.HELD
    assert restarted.release() is None


class Link:
    """Two producers whose boundaries (stime = when they were sent) reach the SUnion, one
    of them ``phase_s`` later in each second and through a link that adds ``delay_s``
    from ``slow_from_s`` on. Steps a fake clock in 0.1 s ticks and records the releases."""

    def __init__(self, phase_s: float, delay_s: float, slow_from_s: float) -> None:
        self.clock = Clock()
        self.buckets, self.feed = _dpc(self.clock)
        self.start = self.clock.now
        sent = [("local", second, second) for second in range(1, 60)]
        sent += [("remote", second + phase_s, second + phase_s) for second in range(1, 60)]
        self.arrivals = sorted(
            (at + (delay_s if name == "remote" and at >= slow_from_s else 0.0), name, stime)
            for name, at, stime in sent)
        self.releases: list[tuple[float, ReleaseKind, int]] = []

    def run_until(self, seconds: float) -> None:
        while self.clock.now - self.start < seconds:
            self.clock.advance(0.1)
            elapsed = self.clock.now - self.start
            while self.arrivals and self.arrivals[0][0] <= elapsed:
                _, name, stime = self.arrivals.pop(0)
                self.feed.boundary(name, round((stime + self.start) * 1000))
            release = self.buckets.release()
            if release is not None:
                self.releases.append((elapsed, release.kind,
                                      release.through - round(self.start * 1000)))


def test_a_link_that_delays_a_partition_by_less_than_d_gives_no_tentative_output() -> None:
    # The remote producer's boundaries come 0.9 s after the local one's each second; from
    # 10 s on its link adds 2.5 s. Waiting from the local boundary, that is 3.4 s > D.
    link = Link(phase_s=0.9, delay_s=2.5, slow_from_s=10.0)
    link.run_until(40.0)
    assert {kind for _, kind, _ in link.releases} == {ReleaseKind.STABLE}
    assert link.buckets.dpc_state is DpcState.STABLE
    # Each bucket still goes out, only later by the link's delay.
    late = [at - through / 1000 for at, _, through in link.releases if through >= 20_000]
    assert late and max(late) <= 0.9 + 2.5 + 0.2


def test_a_link_that_delays_a_partition_by_more_than_d_goes_tentative_within_d() -> None:
    link = Link(phase_s=0.9, delay_s=6.0, slow_from_s=10.0)
    link.run_until(40.0)
    kinds = [kind for _, kind, _ in link.releases]
    first = kinds.index(ReleaseKind.TENTATIVE)
    first_at = link.releases[first][0]
    waited_end = link.releases[first - 1][2] + 1000  # the end of the bucket that waited
    # Without the delay, that bucket would have gone out when the remote boundary past
    # its end came: 0.9 s after it.
    due = waited_end / 1000 + 0.9
    assert due + D_MS / 1000 - 0.2 <= first_at <= due + D_MS / 1000 + 0.2
    # The remote input still moves, 6 s late: the output stays tentative, a bucket a second.
    later = link.releases[first:]
    assert {kind for _, kind, _ in later} == {ReleaseKind.TENTATIVE} and len(later) >= 25
    assert link.buckets.dpc_state is DpcState.STABILIZATION
