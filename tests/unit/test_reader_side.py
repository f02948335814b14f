"""Reader-side replicas: where they are placed, when they serve, and what a promoted standby
writes (stale tentative results left out)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from medusa.catalog.model import Entry, Kind
from medusa.envelope import TupleType
from medusa.placement import PlacementError
from medusa.reader_side import AHEAD_MS, output_sides, reader_replica, should_serve
from medusa_spark.node.state import HostedFragment, may_take_back
from medusa_spark.soutput import OutRecord, SOutput

pytestmark = pytest.mark.unit

PAIR = {"boxes": ["merged", "per_sensor"], "dpc_delay_ms": 3000,
        "writes": [{"participant": "beta", "topic": "pair.out"}]}


def _node(name: str, status: str = "up") -> Entry:
    return Entry(kind=Kind.NODES, name=name, version=1, updated_at=0, spec={"status": status})


def _fragment(name: str, **spec: Any) -> Entry:
    return Entry(kind=Kind.FRAGMENTS, name=name, version=1, updated_at=0, spec=spec)


def test_only_a_bounded_fragment_away_from_its_output_needs_a_reader_side_replica() -> None:
    assert output_sides(PAIR, "alpha/n1") == ["beta"]
    assert output_sides(PAIR, "beta/n1") == []
    assert output_sides({**PAIR, "dpc_delay_ms": None}, "alpha/n1") == []
    nodes = [_node("alpha/n1"), _node("beta/b1")]
    assert reader_replica("alpha/pair/f", PAIR, "beta/b1", nodes) is None


def test_the_replica_goes_to_the_least_busy_running_node_of_the_output_side_and_stays() -> None:
    nodes = [_node("alpha/n1"), _node("beta/b1"), _node("beta/b2"), _node("beta/b3", "failed")]
    busy = [_fragment("alpha/x/f", node="beta/b1")]
    assert reader_replica("alpha/pair/f", PAIR, "alpha/n1", nodes, busy) == "beta/b2"
    # An existing replica on a running node is kept, however busy.
    kept = {**PAIR, "reader_replica": "beta/b1"}
    assert reader_replica("alpha/pair/f", kept, "alpha/n1", nodes, busy) == "beta/b1"
    gone = {**PAIR, "reader_replica": "beta/b3"}
    assert reader_replica("alpha/pair/f", gone, "alpha/n1", nodes, busy) == "beta/b2"


def test_a_placement_that_cannot_keep_the_bound_is_refused_naming_box_and_side() -> None:
    with pytest.raises(PlacementError) as raised:
        reader_replica("alpha/pair/f", PAIR, "alpha/n1", [_node("alpha/n1"),
                                                         _node("beta/b1", "failed")])
    message = str(raised.value)
    assert "box 'merged'" in message and "beta" in message and "availability bound" in message


def test_the_replica_serves_only_after_d_of_silence_with_its_boundaries_well_ahead() -> None:
    at = 1_000_000
    assert should_serve(3.0, 3.0, at + AHEAD_MS, at)
    assert not should_serve(2.9, 3.0, at + 10_000, at)
    # The primary promises the same a trigger later: a window's quiet output is no cut.
    assert not should_serve(9.0, 3.0, at + AHEAD_MS - 1000, at)
    # Nothing promised by the primary since the replica began (both starting): no serve.
    assert not should_serve(30.0, 3.0, at, None)
    assert not should_serve(30.0, 3.0, None, at)  # nothing to say: inputs idle


class _Producer:
    def __init__(self) -> None:
        self.produced: list[str] = []

    def begin_transaction(self) -> None:
        pass

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                on_delivery: Any = None, timestamp: int = 0, headers: Any = None) -> None:
        """In confluent-kafka's order of arguments."""
        self.produced.append(dict(headers)["medusa.id"] if headers else "")

    def poll(self, timeout: float) -> None:
        pass

    def commit_transaction(self, timeout: float) -> None:
        pass


def _record(tuple_id: str, tentative: bool = False) -> OutRecord:
    kind = TupleType.TENTATIVE.value if tentative else TupleType.STABLE.value
    return OutRecord("out", tuple_id, b"v", [("medusa.type", kind), ("medusa.id", tuple_id)],
                     tentative=tentative)


def _promoted(written_before: list[str], kept: list[OutRecord], keep_tentative: bool
              ) -> list[str]:
    output = SOutput("alpha/pair/f", ["out"], "unused:9092", standby=True)
    producer = _Producer()

    def open_producer() -> None:  # the tail read back from the topic, without Kafka
        output._producer = producer  # type: ignore[assignment]
        for tuple_id in written_before:
            output._remember("out", tuple_id)
    output._open_producer = open_producer  # type: ignore[method-assign]
    output.write(kept)
    output.promote(keep_tentative)
    return producer.produced


def test_a_promoted_standby_writes_what_the_output_lacks_and_no_stale_tentative_result() -> None:
    kept = [_record("w1/s1"), _record("w2/s1"), _record("w3/s1", tentative=True),
            _record("w2/s2", tentative=True)]
    # w2/s2 has its stable version out already: its tentative one is stale.
    assert _promoted(["w1/s1", "w2/s2"], kept, keep_tentative=True) == ["w2/s1", "w3/s1"]
    # Past its failure period, no tentative record it kept is written at all.
    assert _promoted(["w1/s1"], kept, keep_tentative=False) == ["w2/s1"]


class _Run:
    """A primary's query as ``may_take_back`` reads it."""

    def __init__(self) -> None:
        self.query = SimpleNamespace(lastProgress=None)
        self.writer = SimpleNamespace(dpc_state="STABLE")

    def failure(self) -> None:
        return None

    def batch(self, began: float, behind: int, rows: int = 10) -> None:
        stamp = datetime.fromtimestamp(began, UTC).isoformat().replace("+00:00", "Z")
        self.query.lastProgress = {"timestamp": stamp, "numInputRows": rows, "sources": [
            {"metrics": {"maxOffsetsBehindLatest": str(behind)}}]}


def test_a_primary_takes_its_output_back_only_after_a_batch_read_all_since_it_was_stable(
) -> None:
    """Restarted from its checkpoint beside its serving reader-side replica, a primary says
    STABLE before reading anything (the cut's tentative records and its REDO may lie ahead):
    it takes the output back only after a batch begun since then read to the end of its
    SUnion's topic, and not while reconciling what that batch read."""
    run = _Run()
    primary = HostedFragment("alpha/pair/f", 1, run, 0.0, yielded=True)  # type: ignore[arg-type]
    now = time.time()
    run.batch(now - 5, behind=3)  # the restarted query's first batch: "caught up"
    assert not may_take_back(primary)
    assert not may_take_back(primary)  # the same batch, asked again
    run.batch(time.time() + 0.01, behind=2)  # not all of it yet
    assert not may_take_back(primary)
    run.writer.dpc_state = "STABILIZATION"  # that batch read the REDO: it reconciles
    assert not may_take_back(primary) and primary.stable_since is None
    run.writer.dpc_state = "STABLE"
    assert not may_take_back(primary)
    run.batch(time.time() + 0.01, behind=0)
    assert may_take_back(primary)
    # A new query (a restart) starts over.
    primary.run = _Run()
    primary.run.batch(time.time() + 0.01, behind=0)
    assert not may_take_back(primary)
