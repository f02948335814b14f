"""`medusa verify`'s comparison: stable views of an output and a reference, what differs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medusa.envelope import TupleRecord, TupleType
from medusa.stable_view import stable_view
from medusa.verify import VerifyInputError, compare, records_from_file

pytestmark = pytest.mark.unit

S, T, U, R = TupleType.STABLE, TupleType.TENTATIVE, TupleType.UNDO, TupleType.REC_DONE


def rec(kind: TupleType, tuple_id: str, value: object = None) -> TupleRecord:
    return TupleRecord(kind, tuple_id, 0, value)


def test_a_corrected_output_equals_its_fault_free_reference() -> None:
    reference = stable_view([rec(S, "a", {"n": 1}), rec(S, "b", {"n": 2})])
    output = stable_view([rec(S, "a", {"n": 1}), rec(T, "b", {"n": 1}), rec(U, "u"),
                          rec(S, "b", {"n": 2}), rec(R, "r")])
    assert compare(output, reference).equal


def test_what_differs_is_named() -> None:
    reference = stable_view([rec(S, "a", {"n": 1}), rec(S, "b", {"n": 2})])
    output = stable_view([rec(S, "a", {"n": 5}), rec(S, "c", {"n": 3}), rec(T, "b", {"n": 2})])
    difference = compare(output, reference)
    assert not difference.equal
    assert difference.missing == ["b"] and difference.extra == ["c"]
    assert difference.changed == [("a", {"n": 5}, {"n": 1})]
    text = "\n".join(difference.lines())
    assert "1 tentative tuple(s) not yet corrected" in text and "a: output" in text


def test_a_tentative_tail_past_the_reference_is_said_not_compared() -> None:
    # Both inputs ended a bucket apart: the last window is tentative on both sides.
    reference = stable_view([rec(S, "a", {"n": 1}), rec(T, "z", {"n": 7})])
    output = stable_view([rec(S, "a", {"n": 1}), rec(T, "z", {"n": 7})])
    difference = compare(output, reference)
    assert difference.equal and difference.beyond_reference == 1
    assert "1 tentative tuple(s) past what the reference settled" in \
        "\n".join(difference.lines())


def test_fields_that_differ_by_design_can_be_left_out() -> None:
    reference = stable_view([rec(S, "a", {"n": 1, "emit_time": 10})])
    output = stable_view([rec(S, "a", {"n": 1, "emit_time": 99})])
    assert not compare(output, reference).equal
    assert compare(output, reference, ["emit_time"]).equal


def test_a_reference_file_is_what_consume_prints(tmp_path: Path) -> None:
    path = tmp_path / "reference.jsonl"
    path.write_text(json.dumps({"type": "STABLE", "id": "a", "stime": 5, "value": {"n": 1}})
                    + "\n\n" + json.dumps({"type": "BOUNDARY", "id": "x", "stime": 9}) + "\n")
    view = stable_view(records_from_file(path))
    assert [r.tuple_id for r in view.stable] == ["a"] and view.watermark == 9
    path.write_text('{"type": "STABLE"}\n')
    with pytest.raises(VerifyInputError, match=r"reference\.jsonl:1: expected a JSON object"):
        list(records_from_file(path))
