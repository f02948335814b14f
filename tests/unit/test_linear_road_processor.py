"""The Linear Road network's processor, fed batch by batch with its state pickled in between
(as its process box keeps it), against the independent reference."""

import json
import pickle
from collections import Counter
from collections.abc import Iterator

import pandas as pd
import pytest

from medusa.linear_road import records as lr
from medusa.linear_road.reference import compute
from medusa.linear_road.traffic import TrafficProfile, TrafficSimulation
from medusa_spark.processors.linear_road import Road

pytestmark = pytest.mark.unit

# Built up to 400 reports/s in 30 s, with accidents: tolls, alerts and charges all occur.
PROFILE = TrafficProfile(xways=1, duration_s=420, peak_rate=400, ramp_s=30,
                         breakdown_probability=0.0001, accident_probability=1.0, seed=5)
PORTS = {lr.PositionReport: "reports", lr.AccountBalanceQuery: "balance_queries"}


def _row(record: lr.LinearRoadRecord) -> dict:
    return {"_in": PORTS[type(record)], "_id": record.tuple_id,
            "_stime": lr.STIME_ORIGIN_MS + record.time * 1000, **lr.to_dict(record)}


def _batches(records: list, seconds: int) -> Iterator[pd.DataFrame]:
    """The rows of ``seconds`` simulated seconds at a time, reports before queries."""
    rows = sorted((_row(r) for r in records if type(r) in PORTS),
                  key=lambda row: (row["time"], row["_in"] != "reports"))
    for start in range(0, PROFILE.duration_s, seconds):
        chunk = [row for row in rows if start <= row["time"] < start + seconds]
        if chunk:
            yield pd.DataFrame(chunk)


def _records(rows: list[dict]) -> Counter:
    return Counter(json.dumps(row, sort_keys=True) for row in rows)


def test_the_processor_equals_the_reference_batch_by_batch() -> None:
    records = [r for _, rs in TrafficSimulation(PROFILE).run() for r in rs]
    expected = compute(records)
    road, state = Road(), None
    got: dict[str, list[dict]] = {port: [] for port in Road.outputs}
    for batch in _batches(records, seconds=7):
        state, results = road.process(state, batch)
        state = pickle.loads(pickle.dumps(state, protocol=5))
        for port, frame in results.items():
            got[port] += frame.drop(columns=["_id", "_stime"]).to_dict("records")
    for port in Road.outputs:
        want = getattr(expected, port)
        assert want, f"{port}: the input makes some"
        assert _records(got[port]) == _records(want), port
    assert any(row["toll"] > 0 for row in expected.toll_notifications)
    assert any(row["balance"] > 0 for row in expected.account_balances)
