"""Real-time Mode (``medusa_spark.realtime``): which fragments run that way and why, the
staged rows as the relay reads them, and the BOUNDARY records it holds back until every
reader of the source has staged them."""

from __future__ import annotations

import threading
from itertools import pairwise
from typing import Any

import pytest
import yaml
from pyspark.sql.types import StructType
from rich.console import Console

from medusa.envelope import TupleType, decode_record
from medusa.federation_status import FragmentStatus
from medusa.stable_view import stable_view
from medusa_apps.cli.stack import _execution_table
from medusa_spark.fragment import OUTPUT, FragmentOutput, FragmentWiring
from medusa_spark.fragment_writer import FragmentWriter
from medusa_spark.network.execution import realtime_refusal
from medusa_spark.network.fragments import group
from medusa_spark.network.model import parse_network
from medusa_spark.network.validate import Plan, check_structure
from medusa_spark.realtime import _COLUMNS, _OFFSET, RealtimeSlots, StagedRelay, _row, _table
from medusa_spark.streams import (
    BOUNDARY,
    EPOCH,
    ID,
    RAW,
    RAW_HEADERS,
    READER,
    REDO,
    STIME,
    TYPE,
    KafkaStream,
)
from medusa_spark.testing import CollectingSink

pytestmark = pytest.mark.unit

FILTER = {"type": "filter", "params": {"predicate": "speed > 0"}}
WINDOW = {"type": "aggregate", "params": {
    "window": {"type": "tumbling", "size": "60 seconds"}, "group_by": ["seg"],
    "aggregates": {"cars": {"count": "vid"}}, "fields": {"seg": "seg", "cars": "cars"}}}


def _plan(boxes: dict[str, Any], **overrides: Any) -> Plan:
    names = list(boxes)
    arrows = [{"from": "reports", "to": names[0]}] + [
        {"from": a, "to": b} for a, b in pairwise(names)]
    raw = {"name": "t", "participant": "alpha", "execution": "real-time",
           "streams": {"reports": {"topic": "in.reports", "participant": "alpha",
                                   "schema": "position_report"}},
           "boxes": boxes, "arrows": arrows, **overrides}
    return check_structure(parse_network(yaml.safe_dump(raw, sort_keys=False)))


def _only_fragment(plan: Plan) -> Any:
    (fragment,) = group(plan, dict.fromkeys(plan.network.boxes, "alpha/n1")).values()
    return fragment


def test_a_stateless_fragment_may_run_in_real_time_mode() -> None:
    plan = _plan({"moving": FILTER})
    assert realtime_refusal(plan, _only_fragment(plan)) is None


def test_with_dpc_too_since_it_reconciles_in_the_stream() -> None:
    plan = _plan({"moving": FILTER}, availability_bound="3 seconds")
    assert realtime_refusal(plan, _only_fragment(plan)) is None


@pytest.mark.parametrize(("boxes", "overrides", "why"), [
    ({"moving": FILTER}, {"execution": "micro-batch"}, "the network's execution is micro-batch"),
    ({"moving": FILTER, "per_minute": WINDOW}, {}, "box 'per_minute' (aggregate) keeps state"),
    ({"moving": {**FILTER, "ha": "active"}}, {}, "active standby"),
    ({"each": {"type": "map", "params": {"fields": {"seg": "explode(array(seg, seg))"},
                                         "id": "uuid()"}}}, {}, "has a generator"),
])
def test_the_rest_stay_on_micro_batches_and_say_why(boxes: dict[str, Any],
                                                    overrides: dict[str, Any],
                                                    why: str) -> None:
    plan = _plan(boxes, **overrides)
    refusal = realtime_refusal(plan, _only_fragment(plan))
    assert refusal is not None and why in refusal, refusal


def test_real_time_mode_is_another_checkpoint_for_a_stateless_fragment_only() -> None:
    def fingerprint(boxes: dict[str, Any], execution: str) -> str:
        plan = _plan(boxes, execution=execution)
        return _only_fragment(plan).fingerprint(plan)

    stateless = {"moving": FILTER}
    assert fingerprint(stateless, "real-time") != fingerprint(stateless, "micro-batch")
    stateful = {"moving": FILTER, "per_minute": WINDOW}
    assert fingerprint(stateful, "real-time") == fingerprint(stateful, "micro-batch")


class _Message:
    def __init__(self, offset: int, headers: list[tuple[str, bytes | None]],
                 value: bytes | None = None) -> None:
        self._offset, self._headers, self._value = offset, headers, value

    def error(self) -> None:
        return None

    def offset(self) -> int:
        return self._offset

    def headers(self) -> list[tuple[str, bytes | None]]:
        return self._headers

    def value(self) -> bytes | None:
        return self._value


def _result(offset: int, stime: int) -> _Message:
    return _Message(offset, [(OUTPUT, b"kept"), (TYPE, b"STABLE"), (ID, f"t{stime}".encode()),
                             (STIME, str(stime).encode())], b"\x00avro")


def _boundary(offset: int, stime: int, source_offset: int, reader: int) -> _Message:
    return _Message(offset, [(TYPE, BOUNDARY.encode()), (ID, f"b{stime}".encode()),
                             (STIME, str(stime).encode()),
                             (_OFFSET, str(source_offset).encode()),
                             (READER, str(reader).encode())])


def test_staged_records_become_the_writer_s_rows() -> None:
    invalid = _Message(3, [(TYPE, b"INVALID"), ("_reason", b"not Avro"), (EPOCH, b"2"),
                           ("raw:medusa.id", b"x1")], b"garbage")
    rows = [_row(message) for message in (_result(1, 1000), invalid)]
    table = _table([{k: v for k, v in row.items() if k != _OFFSET} for row in rows])
    assert table.column(OUTPUT).to_pylist() == ["kept", None]
    assert table.column("value").to_pylist() == [b"\x00avro", None]
    assert table.column(RAW).to_pylist() == [None, b"garbage"]
    assert table.column(RAW_HEADERS).to_pylist()[1] == [{"key": "medusa.id", "value": b"x1"}]
    assert table.column(EPOCH).to_pylist() == [None, 2]


def _relay(readers: int = 2) -> StagedRelay:
    relay = object.__new__(StagedRelay)  # its state only: no consumer, no thread
    relay.topic, relay.readers = "t.staged", readers
    relay._held, relay._released_offset, relay._position = {}, -1, 0
    return relay


def test_a_boundary_waits_until_every_reader_has_staged_it() -> None:
    """Each reader stages its copy after its own results below it: once both copies are
    read, so is every result below the BOUNDARY."""
    relay = _relay()
    rows, _ = relay._rows([_result(0, 1000), _boundary(1, 1010, source_offset=7, reader=0)])
    assert [r[ID] for r in rows] == ["t1000"], "results go at once, the boundary is held"
    assert relay._released_boundaries() == []
    relay._rows([_boundary(2, 1010, source_offset=7, reader=0)])  # staged again (a retry)
    assert relay._released_boundaries() == [], "one reader twice is not two readers"
    relay._rows([_boundary(3, 1020, source_offset=9, reader=0),
                 _result(4, 1005), _boundary(5, 1010, source_offset=7, reader=1)])
    assert [r[ID] for r in relay._released_boundaries()] == ["b1010"]
    assert list(relay._held) == [9], "the next one waits for reader 1"
    relay._rows([_boundary(6, 1010, source_offset=7, reader=1)])  # after a restart
    assert list(relay._held) == [9], "one passed on already is not held again"


def test_a_complete_boundary_supersedes_one_a_reader_staged_before_the_relay_started(
) -> None:
    relay = _relay()
    relay._rows([_boundary(0, 1010, source_offset=7, reader=1),  # reader 0's copy: before
                 _boundary(1, 1020, source_offset=9, reader=0),
                 _boundary(2, 1020, source_offset=9, reader=1)])
    assert [r[ID] for r in relay._released_boundaries()] == ["b1020"]
    assert relay._held == {}


def _status(execution: str, why: str, name: str = "alpha/t/f", asked: str = "real-time"
            ) -> FragmentStatus:
    return FragmentStatus(name, "alpha/t", "alpha/n1", "running", execution=execution,
                          execution_why=why, execution_asked=asked)


def test_status_says_how_each_fragment_runs_once_the_network_asks_for_real_time() -> None:
    def shown(fragments: list[FragmentStatus]) -> str:
        console = Console(width=100, record=True)
        for table in _execution_table("alpha/t", fragments, lambda n: n.split("/")[-1],
                                      lambda table, header, _: table.add_column(header)):
            console.print(table)
        return console.export_text()

    assert shown([_status("micro-batch", "the network's execution is micro-batch",
                          asked="micro-batch")]) == ""
    text = shown([_status("real-time", "stateless", "alpha/t/a"),
                  _status("micro-batch", "box 'w' (aggregate) keeps state", "alpha/t/b")])
    assert "real-time" in text and "keeps state" in text, text


def test_a_real_time_query_holds_a_slot_per_reader_while_there_are_free_ones() -> None:
    slots = RealtimeSlots()
    slots.configure(3)
    assert slots.take(2) and not slots.take(2), "two of three taken: two more do not fit"
    slots.give_back(2)
    assert slots.take(3)


class _Alive:
    def is_alive(self) -> bool:
        return True


def test_a_hand_over_waits_until_every_staged_row_is_written() -> None:
    """A hand-over stops the query, then drains the relay: the next runner (perhaps on
    another cluster, with another staged topic) must not be left rows staged here."""
    relay = _relay()
    relay._drain_asked, relay._drain_end = threading.Event(), None
    relay._thread, relay.error = _Alive(), None
    with pytest.raises(TimeoutError, match="an unknown number of"):
        relay.drain(0.05)  # its thread has not yet learnt where the staged topic ends
    assert relay._drain_asked.is_set()
    relay._drain_end = 5
    relay._started_at_position, relay._written_to, relay._position = 0, None, 3
    with pytest.raises(TimeoutError, match="2 staged row"):
        relay.drain(0.05)
    relay._position, relay._written_to = 5, 3  # read to the end, not yet written
    with pytest.raises(TimeoutError):
        relay.drain(0.05)
    relay._written_to = 5
    relay.drain(0.05)
    relay.error = RuntimeError("broker gone")
    relay._position = 4
    with pytest.raises(RuntimeError, match="broker gone"):
        relay.drain(0.05)


def _in_stream_writer(sunion_cluster: str = "memory") -> tuple[FragmentWriter, CollectingSink]:
    plan = _plan({"moving": FILTER}, availability_bound="3 seconds")
    fragment = _only_fragment(plan)
    stream = KafkaStream("t.moving", "memory", 1, "")
    wiring = FragmentWiring(
        network="alpha/t", fragment=fragment,
        source=KafkaStream("t.sunion", sunion_cluster, 0, ""),
        inputs={}, outputs={"moving": FragmentOutput("moving", stream, StructType(), (), 2)},
        bucket_ms=10, fingerprint="test", topic_prefix="")
    sink = CollectingSink(["t.moving"])
    writer = FragmentWriter(plan, wiring, sinks=[sink])
    writer.in_stream = True
    return writer, sink


def _staged(kind: str, stime: int, epoch: int | None = None, redo: int | None = None,
            tuple_id: str | None = None) -> dict[str, Any]:
    """A relayed row: a result of the output box, or (``BOUNDARY``) a released boundary."""
    row: dict[str, Any] = dict.fromkeys(_COLUMNS)
    row.update({TYPE: kind, ID: tuple_id or f"{kind[0]}{stime}", STIME: str(stime),
                EPOCH: epoch, REDO: redo})
    if kind != BOUNDARY:
        row.update({OUTPUT: "moving", "value": b"\x00avro"})
    return row


def _written(sink: CollectingSink) -> list[str]:
    """What reached the output, one entry per record (marks once, not per partition)."""
    shown: list[str] = []
    for record in sink.records:
        envelope = decode_record(record.headers, None)
        kind = envelope.type.value
        entry = kind if kind in ("UNDO", "REC_DONE") else \
            f"{kind}@{envelope.stime}" if kind == BOUNDARY else f"{kind[0]}:{record.tuple_id}"
        if not shown or shown[-1] != entry or kind == "STABLE":
            shown.append(entry)
    return shown


def test_a_real_time_writer_reconciles_in_the_stream() -> None:
    """Tentative results as their input was, then UNDO before the REDO's first correction,
    superseded tentative results left out, REC_DONE with the first stable promise past the
    REDO; no query is rolled back or started for it."""
    writer, sink = _in_stream_writer()
    writer.write_table(_table([_staged("STABLE", 100, tuple_id="a"),
                               _staged(BOUNDARY, 110)]), 1)
    writer.write_table(_table([_staged("TENTATIVE", 120, epoch=1, tuple_id="b"),
                               _staged(BOUNDARY, 130, epoch=1)]), 2)
    assert writer.dpc_state == "UP_FAILURE" and writer.tentative_written > 0
    # The REDO's first correction, and a reader still behind it staging a tentative result.
    writer.write_table(_table([_staged("TENTATIVE", 125, epoch=1, tuple_id="c"),
                               _staged("STABLE", 120, redo=1, tuple_id="b"),
                               _staged(BOUNDARY, 130, redo=1)]), 3)
    assert writer.dpc_state == "STABILIZATION" and writer.superseded_tentative == 1
    writer.write_table(_table([_staged("STABLE", 125, redo=1, tuple_id="c"),
                               _staged(BOUNDARY, 140, redo=1)]), 4)
    assert writer.redo_requested is None, "nothing for the node to redo beside it"
    writer.write_table(_table([_staged("STABLE", 150, tuple_id="d"),
                               _staged(BOUNDARY, 160)]), 5)
    assert writer.dpc_state == "STABLE" and writer.reconciled_in_stream == 1
    assert _written(sink) == [
        "S:a", "BOUNDARY@110", "T:b", "BOUNDARY@130", "UNDO", "S:b", "S:c", "BOUNDARY@140",
        "S:d", "BOUNDARY@160", "REC_DONE"]
    view = stable_view(decode_record(r.headers, r.value) for r in sink.records)
    assert [r.tuple_id for r in view.stable] == ["a", "b", "c", "d"]
    assert view.tentative == [] and not view.reconciling
    # Its query restarted from a checkpoint before the failure reads the period again:
    # nothing of it comes out tentative, nor is undone again.
    before = len(sink.records)
    writer.write_table(_table([_staged("TENTATIVE", 120, epoch=1, tuple_id="b"),
                               _staged(BOUNDARY, 130, epoch=1),
                               _staged("STABLE", 120, redo=1, tuple_id="b")]), 6)
    again = [decode_record(r.headers, None).type.value for r in sink.records[before:]]
    assert "TENTATIVE" not in again and "UNDO" not in again, again
    assert writer.dpc_state == "STABLE"


def test_a_restart_between_the_undo_and_the_redo_s_boundaries_still_ends_in_rec_done(
) -> None:
    """The REDO's reach is kept from its first tuple: a writer that restarts before any of
    the REDO's boundaries was released (its query's checkpoint past them) still knows
    which stable BOUNDARY comes after all of it."""
    writer, _ = _in_stream_writer()
    writer.write_table(_table([_staged("TENTATIVE", 120, epoch=1, tuple_id="b"),
                               _staged(BOUNDARY, 130, epoch=1)]), 1)
    writer.write_table(_table([_staged("STABLE", 120, redo=1, tuple_id="b")]), 2)
    assert writer.dpc_state == "STABILIZATION" and writer.dpc.redo_through == 120
    restarted, sink = _in_stream_writer()
    restarted.dpc = writer.dpc  # as the checkpoint keeps it
    restarted.write_table(_table([_staged("STABLE", 150, tuple_id="d"),
                                  _staged(BOUNDARY, 160)]), 3)
    assert restarted.dpc_state == "STABLE"
    assert _written(sink)[-1] == "REC_DONE"


def test_a_primary_s_undo_is_not_taken_for_its_reader_side_replica_s() -> None:
    """A reader-side replica and its primary each number their own failure periods (each
    has its own SUnion, on its own cluster): the replica reconciled its period 1 on the
    output; the primary, taking the output back, wrote tentative results of its own period
    1 and then reconciles it. Its UNDO is a mark of its own, not a repeat the output's
    tuple-id deduplication drops, so the tentative results before it are withdrawn."""
    replica, on_beta = _in_stream_writer("beta:9092")
    primary, on_alpha = _in_stream_writer("alpha:9092")
    for writer in (replica, primary):
        writer.write_table(_table([_staged("TENTATIVE", 120, epoch=1, tuple_id="b"),
                                   _staged(BOUNDARY, 130, epoch=1)]), 1)
        writer.write_table(_table([_staged("STABLE", 120, redo=1, tuple_id="b"),
                                   _staged(BOUNDARY, 140, redo=1)]), 2)
        writer.write_table(_table([_staged("STABLE", 150, tuple_id="d"),
                                   _staged(BOUNDARY, 160)]), 3)
    output: list[Any] = []
    seen: set[str] = set()
    for record in [*on_beta.records, *on_alpha.records]:
        if not record.tentative and record.tuple_id in seen:
            continue  # as the SOutput drops a repeated id
        if not record.tentative:
            seen.add(record.tuple_id)
        output.append(decode_record(record.headers, record.value))
    view = stable_view(output)
    assert view.tentative == [] and not view.reconciling
    assert [r.tuple_id for r in view.stable] == ["b", "d"]
    # The same SUnion's marks, written again after a restart, are still one mark each.
    again, _ = _in_stream_writer("alpha:9092")
    again.dpc = primary.dpc  # as the checkpoint keeps it
    assert [r.tuple_id for r in again._marks(TupleType.UNDO)] == \
        [r.tuple_id for r in primary._marks(TupleType.UNDO)]
