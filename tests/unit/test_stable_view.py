import pytest

from medusa.envelope import TupleRecord, TupleType
from medusa.stable_view import stable_view

pytestmark = pytest.mark.unit

S, T, U, R, B = (TupleType.STABLE, TupleType.TENTATIVE, TupleType.UNDO, TupleType.REC_DONE,
                 TupleType.BOUNDARY)


def rec(kind: TupleType, tuple_id: str, value: object = None, stime: int = 0) -> TupleRecord:
    return TupleRecord(kind, tuple_id, stime, value)


def test_plain_stable_stream() -> None:
    view = stable_view([rec(S, "1", "a"), rec(B, "b", stime=10), rec(S, "2", "b")])
    assert view.stable_values() == ["a", "b"]
    assert view.watermark == 10


def test_tentative_tuples_show_in_current_view_only() -> None:
    view = stable_view([rec(S, "1", "a"), rec(T, "t1", "x"), rec(T, "t2", "y")])
    assert view.stable_values() == ["a"]
    assert view.current_values() == ["a", "x", "y"]


def test_undo_then_corrections_then_rec_done() -> None:
    view = stable_view([
        rec(S, "1", "a"),
        rec(T, "t1", "x"), rec(T, "t2", "y"),
        rec(U, "1"),                      # back to the last stable tuple, "1"
        rec(S, "2", "b"), rec(S, "3", "c"),
        rec(R, "done"),
        rec(S, "4", "d"),
    ])
    assert view.stable_values() == ["a", "b", "c", "d"]
    assert view.tentative == []
    assert not view.reconciling


def test_reconciling_until_rec_done() -> None:
    view = stable_view([rec(T, "t1", "x"), rec(U, ""), rec(S, "1", "a")])
    assert view.reconciling
    assert view.current_values() == ["a"]


def test_undo_withdraws_the_tentative_tuples_only() -> None:
    view = stable_view([rec(S, "1", "a"), rec(T, "2", "x"), rec(U, "undo"), rec(S, "2", "b"),
                        rec(R, "r")])
    assert view.stable_values() == ["a", "b"], "a tentative id never makes a duplicate"
    assert view.undone == 1


def test_duplicate_stable_tuples_are_dropped() -> None:
    view = stable_view([rec(S, "1", "a"), rec(S, "2", "b"), rec(S, "1", "a"), rec(S, "2", "b")])
    assert view.stable_values() == ["a", "b"]
    assert view.duplicates_dropped == 2


def test_corrected_output_equals_fault_free_run() -> None:
    fault_free = [rec(S, str(i), i) for i in range(6)]
    with_failure = [
        *fault_free[:2],
        rec(T, "t2", 20), rec(T, "t3", 30),        # tentative results during the failure
        rec(U, "1"),
        *fault_free[2:5],
        rec(R, "r"),
        fault_free[4],                              # a duplicate after recovery
        fault_free[5],
    ]
    assert stable_view(with_failure).stable_values() == stable_view(fault_free).stable_values()
