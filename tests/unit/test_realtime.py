"""Real-time Mode (``medusa_spark.realtime``): which fragments run that way and why, the
staged rows as the relay reads them, and the BOUNDARY records it holds back until every
reader of the source has staged them."""

from __future__ import annotations

import threading
from itertools import pairwise
from typing import Any

import pytest
import yaml
from rich.console import Console

from medusa.federation_status import FragmentStatus
from medusa_apps.cli.stack import _execution_table
from medusa_spark.fragment import OUTPUT
from medusa_spark.network.execution import realtime_refusal
from medusa_spark.network.fragments import group
from medusa_spark.network.model import parse_network
from medusa_spark.network.validate import Plan, check_structure
from medusa_spark.realtime import _OFFSET, RealtimeSlots, StagedRelay, _row, _table
from medusa_spark.streams import BOUNDARY, EPOCH, ID, RAW, RAW_HEADERS, READER, STIME, TYPE

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


@pytest.mark.parametrize(("boxes", "overrides", "why"), [
    ({"moving": FILTER}, {"execution": "micro-batch"}, "the network's execution is micro-batch"),
    ({"moving": FILTER, "per_minute": WINDOW}, {}, "box 'per_minute' (aggregate) keeps state"),
    ({"moving": FILTER}, {"availability_bound": "3 seconds"}, "DPC"),
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
