"""What a DPC scenario that never settles says of its output (``bench.dpc_partition``)."""

from __future__ import annotations

import pytest

from medusa.consuming import ConsumedTuple
from medusa.envelope import TupleRecord, TupleType
from medusa_apps.bench.dpc_partition import OutputLog, _unsettled

pytestmark = pytest.mark.unit


def _consumed(kind: TupleType, tuple_id: str, at_ms: int, partition: int = 0) -> ConsumedTuple:
    return ConsumedTuple(TupleRecord(kind, tuple_id, at_ms), "out", partition, at_ms, None,
                         timestamp_ms=at_ms)


def test_an_unsettled_run_names_what_its_output_lacks() -> None:
    log = OutputLog([
        _consumed(TupleType.STABLE, "sensor/s1/10000", 11_000),
        _consumed(TupleType.TENTATIVE, "sensor/s1/20000", 21_000),
        _consumed(TupleType.BOUNDARY, "b/0/21000", 21_500),
        _consumed(TupleType.UNDO, "f/out/undo/1@x/0", 30_000),
        _consumed(TupleType.TENTATIVE, "sensor/s2/20000", 31_000, partition=1),
    ])
    expected = {"sensor/s1/10000": {}, "sensor/s1/20000": {}, "sensor/s2/20000": {}}
    said = _unsettled("it did not settle", log, expected,
                      [(1_000, "STABLE"), (25_000, "UP_FAILURE")], started_ms=1_000)

    assert said.startswith("it did not settle:")
    assert "STABLE at 0.0s, UP_FAILURE at 24.0s" in said
    assert "1 stable, 1 tentative after the last UNDO, reconciling" in said
    assert "2 of 3 expected results missing, e.g. sensor/s1/20000, sensor/s2/20000" in said
    assert "tentative left: sensor/s2/20000" in said
    # BOUNDARY records are left out of the last records shown.
    assert "its last 4 records other than BOUNDARY" in said
    assert "  29.0s p0 UNDO f/out/undo/1@x/0" in said
