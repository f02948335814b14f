"""An UP_FAILURE period as one trace, on a fake clock: the SUnion's turns drive the Buckets
and the tracer as the service does, and the spans come out with the period's times, under
one root whose traceparent the REDO carries."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracer

from medusa.sunion.buckets import Buckets, HeldTuple, Release, ReleaseKind
from medusa.sunion.failure_trace import UpFailureTracer

pytestmark = pytest.mark.unit

TOPICS = {"local": "topic.local", "remote": "topic.remote"}
D_MS = 3000
WALL_AT_ZERO_NS = 1_700_000_000 * 10**9
"""The fake clock's 0.0 in real time."""


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def wall_ns(self) -> int:
        return WALL_AT_ZERO_NS + int(self.now * 1e9)

    def at_ns(self, at: float) -> int:
        return WALL_AT_ZERO_NS + int(at * 1e9)


class SUnionTurns:
    """What the SUnion's loop does each turn, without Kafka."""

    def __init__(self, clock: Clock, tracer: UpFailureTracer) -> None:
        self.clock = clock
        self.tracer = tracer
        self.buckets = Buckets(1000, TOPICS, max_delay_ms=D_MS, clock=clock, wall_clock=clock)
        for name in TOPICS:
            self.buckets.add_partition(name, 0, 0)
        self.offsets = dict.fromkeys(TOPICS, 0)
        self.redo_traceparents: list[str | None] = []

    def second(self, name: str, second: int) -> None:
        """One tuple in the given second, then the boundary at its end."""
        offset = self.offsets[name]
        self.offsets[name] += 2
        self.buckets.add_tuple(HeldTuple(second * 1000 + 500, name, 0, offset, None, b"\x00v",
                                         [], f"{name}/{offset}"))
        self.buckets.add_boundary(name, 0, offset + 1, (second + 1) * 1000)

    def turn(self, write_s: float = 0.0) -> Release | None:
        self.tracer.observe(self.buckets)
        release = self.buckets.release()
        if release is not None:
            self.write(release, write_s)
        return release

    def write(self, release: Release, write_s: float = 0.0) -> None:
        parent = self.tracer.taken(release)
        if release.kind is ReleaseKind.REDO:
            self.redo_traceparents.append(parent)
        self.clock.now += write_s  # the transaction
        self.tracer.written(release, self.buckets)


@pytest.fixture
def exported() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def _tracer(clock: Clock, exported: InMemorySpanExporter) -> UpFailureTracer:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    return UpFailureTracer("alpha/net/pair", D_MS, provider.get_tracer("test"), clock=clock,
                           wall_ns=clock.wall_ns)


def _by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    named = {span.name: span for span in spans}
    assert len(named) == len(spans), [span.name for span in spans]
    return named


def test_an_up_failure_period_is_one_trace_with_its_stages_in_order(exported) -> None:
    clock = Clock()
    turns = SUnionTurns(clock, _tracer(clock, exported))
    for second in range(2):
        turns.second("local", second)
        turns.second("remote", second)
        assert turns.turn().kind is ReleaseKind.STABLE  # type: ignore[union-attr]
        clock.now += 1.0
    # The remote input stops; the bucket of second 2 begins to wait at 102.0.
    turns.second("local", 2)
    assert turns.turn() is None
    clock.now += D_MS / 1000 + 0.25
    first = turns.turn(write_s=0.25)  # taken at 105.25, committed at 105.5
    assert first is not None and first.kind is ReleaseKind.TENTATIVE
    for second in (3, 4):  # delay once, then keep up
        clock.now += 1.0
        turns.second("local", second)
        assert turns.turn().kind is ReleaseKind.TENTATIVE  # type: ignore[union-attr]
    turns.write(turns.buckets.reannouncement())  # idle: repeated, not counted
    assert exported.get_finished_spans() == (), "nothing is written before the REDO"
    # The remote input comes back at 108.0: part of its backlog, then the rest.
    clock.now = 108.0
    turns.second("remote", 2)
    assert turns.turn() is None
    clock.now = 108.5
    for second in (3, 4):
        turns.second("remote", second)
    redo = turns.turn(write_s=0.25)  # written at 108.75
    assert redo is not None and redo.kind is ReleaseKind.REDO

    spans = _by_name(exported.get_finished_spans())
    root = spans["up-failure alpha/net/pair"]
    assert root.parent is None
    assert (root.start_time, root.end_time) == (clock.at_ns(102.0), clock.at_ns(108.75))
    for name in ("delay", "tentative release", "heal", "stabilization"):
        assert spans[name].parent.span_id == root.context.span_id, name
        assert spans[name].context.trace_id == root.context.trace_id, name
    times = {name: (span.start_time, span.end_time) for name, span in spans.items()}
    assert times["delay"] == (clock.at_ns(102.0), clock.at_ns(105.25))
    assert times["tentative release"] == (clock.at_ns(105.25), clock.at_ns(105.5))
    assert times["heal"] == (clock.at_ns(108.0), clock.at_ns(108.0))
    assert times["stabilization"] == (clock.at_ns(108.0), clock.at_ns(108.75))
    assert spans["delay"].attributes == {"medusa.dpc.delay_ms": D_MS,
                                         "medusa.dpc.failed_inputs": "remote[0]"}
    assert spans["tentative release"].attributes == {
        "medusa.dpc.epoch": 1, "medusa.dpc.tentative_releases": 3,
        "medusa.dpc.tentative_tuples": 3}
    assert spans["stabilization"].attributes["medusa.dpc.redo_through"] == 5000
    # The REDO carries the root's context.
    [traceparent] = turns.redo_traceparents
    assert traceparent is not None
    assert traceparent.split("-")[1:3] == [f"{root.context.trace_id:032x}",
                                           f"{root.context.span_id:016x}"]


def test_a_period_the_sunion_did_not_see_begin_gives_no_trace(exported) -> None:
    """Restarted after the period's last tentative release: its REDO has no trace."""
    clock = Clock()
    tracer = _tracer(clock, exported)
    redo = Release(3000, [], {}, ReleaseKind.REDO, epoch=1)
    assert tracer.taken(redo) is None
    tracer.written(redo, Buckets(1000, TOPICS))
    assert exported.get_finished_spans() == ()


def test_an_untraced_sunions_redo_carries_no_traceparent() -> None:
    clock = Clock()
    turns = SUnionTurns(clock, UpFailureTracer("alpha/net/pair", D_MS, NoOpTracer(),
                                               clock=clock))
    turns.second("local", 0)
    turns.turn()
    clock.now += D_MS / 1000 + 0.1
    assert turns.turn().kind is ReleaseKind.TENTATIVE  # type: ignore[union-attr]
    turns.second("remote", 0)
    turns.second("remote", 1)
    turns.second("local", 1)
    assert turns.turn().kind is ReleaseKind.REDO  # type: ignore[union-attr]
    assert turns.redo_traceparents == [None]
