"""Linear Road's processors, fed batch by batch as their process boxes feed them (each group
of rows sharing the box's key on its own, its state pickled in between), against the
independent reference: the road as one group (linear_road.yaml), and partitioned
(linear_road_partitioned.yaml: the road by expressway and direction, its charges going on
to the accounts by car)."""

import json
import pickle
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest

from medusa.linear_road import records as lr
from medusa.linear_road.reference import compute
from medusa.linear_road.traffic import TrafficProfile, TrafficSimulation
from medusa_spark.boxes.keyed_state import EntryStore, KeyedState
from medusa_spark.boxes.process import Processor
from medusa_spark.processors.linear_road import Accounts, Expenditures, Road

pytestmark = pytest.mark.unit

# Built up to 400 reports/s in 30 s, with accidents: tolls, alerts and charges all occur.
PROFILE = TrafficProfile(xways=1, duration_s=420, peak_rate=400, ramp_s=30,
                         breakdown_probability=0.0001, accident_probability=1.0, seed=5)
PORTS = {lr.PositionReport: "reports", lr.AccountBalanceQuery: "balance_queries"}
OUTPUTS = ("toll_notifications", "accident_alerts", "account_balances")


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


def _assert_equal(got: dict[str, list[dict]], expected: Any) -> None:
    """Each output equals the reference's, which has tolls and balances above 0."""
    for port in OUTPUTS:
        want = getattr(expected, port)
        assert want, f"{port}: the input makes some"
        assert _records(got[port]) == _records(want), port
    assert any(row["toll"] > 0 for row in expected.toll_notifications)
    assert any(row["balance"] > 0 for row in expected.account_balances)


def test_the_road_as_one_group_equals_the_reference_batch_by_batch() -> None:
    """linear_road.yaml: every report and balance query in one group, one state."""
    records = [r for _, rs in TrafficSimulation(PROFILE).run() for r in rs]
    expected = compute(records)
    road, state = Road(), None
    got: dict[str, list[dict]] = {port: [] for port in OUTPUTS}
    for batch in _batches(records, seconds=7):
        state, results = road.process(state, batch)
        state = pickle.loads(pickle.dumps(state, protocol=5))
        for port in OUTPUTS:
            got[port] += results[port].drop(columns=["_id", "_stime"]).to_dict("records")
    _assert_equal(got, expected)


class KeyedBox:
    """A process box's processor as Spark runs it: per group of ``key``, in stime order and
    the processor's order of inputs, with that group's state pickled between batches (or
    its entries, for a processor with ``keyed_state``)."""

    def __init__(self, processor: Processor, key: list[str]) -> None:
        self.processor, self.key = processor, key
        self.states: dict[tuple, object] = {}
        self.groups_run = 0

    def run(self, rows: pd.DataFrame, buckets: int | None = None) -> dict[str, pd.DataFrame]:
        order = {port: i for i, port in enumerate(self.processor.inputs)}
        rows = rows.assign(_order=rows["_in"].map(order)).sort_values(
            ["_stime", "_order", "_id"], kind="stable").drop(columns="_order")
        if buckets:  # the key hashed into buckets (``key_buckets``)
            rows = rows.assign(_group=rows[self.key[0]].astype("int64") % buckets)
        found: dict[str, list[pd.DataFrame]] = {}
        for key, group in rows.groupby(["_group"] if buckets else self.key, sort=True):
            if self.processor.keyed_state:  # entries, each stored on its own
                entries = self.states.setdefault(key, {})
                keyed = KeyedState(EntryStore.of_dict(entries))  # type: ignore[arg-type]
                _, results = self.processor.process(keyed, group.reset_index(drop=True))
                keyed.flush()
            else:
                state, results = self.processor.process(self.states.get(key),
                                                        group.reset_index(drop=True))
                self.states[key] = pickle.loads(pickle.dumps(state, protocol=5))
            self.groups_run += 1
            for port, frame in results.items():
                found.setdefault(port, []).append(frame)
        return {port: pd.concat(frames, ignore_index=True) for port, frames in found.items()}


def test_the_partitioned_road_equals_the_reference_batch_by_batch() -> None:
    records = [r for _, rs in TrafficSimulation(PROFILE).run() for r in rs]
    expected = compute(records)
    road = KeyedBox(Road(), ["xway", "dir"])
    accounts = KeyedBox(Accounts(), ["vid"])
    got: dict[str, list[dict]] = {port: [] for port in OUTPUTS}
    for batch in _batches(records, seconds=7):
        results = road.run(batch[batch["_in"] == "reports"].dropna(axis=1, how="all"))
        charges = results.get("charges", pd.DataFrame(columns=["_id", "_stime", "vid", "time",
                                                                "toll"])).assign(_in="charges")
        queries = batch[batch["_in"] == "balance_queries"].dropna(axis=1, how="all")
        results |= accounts.run(pd.concat([charges, queries], ignore_index=True), buckets=16)
        for port in OUTPUTS:
            if port in results:
                got[port] += results[port].drop(columns=["_id", "_stime"]).to_dict("records")
    _assert_equal(got, expected)
    assert len(road.states) == 2, "one group per direction of the expressway"
    assert len(accounts.states) == 16, "one group per bucket of cars"


def test_a_road_state_saved_before_a_field_was_added_resumes_with_it_empty() -> None:
    """A checkpoint's state from an earlier version (without ``lavs``) loads and runs on."""
    from medusa_spark.processors.linear_road import RoadState

    older = RoadState(minute=3)
    del older.__dict__["lavs"]
    resumed = pickle.loads(pickle.dumps(older, protocol=5))
    assert resumed.minute == 3 and resumed.lavs == {}


@pytest.mark.parametrize("buckets", [1, 4])
def test_daily_expenditures_equal_the_reference_batch_by_batch(buckets: int) -> None:
    """The expenditures box as the networks run it (one group, or the car's hash buckets):
    every query answered in its own batch, from the history of that car and expressway."""
    profile = TrafficProfile(xways=2, duration_s=300, peak_rate=300, ramp_s=30, seed=11)
    records = [r for _, rs in TrafficSimulation(profile).run() for r in rs]
    expected = compute(records).daily_expenditures
    assert expected and any(row["expenditure"] > 0 for row in expected)
    assert any(row["expenditure"] == 0 for row in expected)
    ports = {lr.HistoricalTolls: "history", lr.DailyExpenditureQuery: "queries"}
    rows = sorted(({"_in": ports[type(r)], "_id": r.tuple_id,
                    "_stime": lr.STIME_ORIGIN_MS + r.time * 1000, **lr.to_dict(r)}
                   for r in records if type(r) in ports),
                  key=lambda row: (row["time"], row["_in"] != "history"))
    box = KeyedBox(Expenditures(), ["vid"])
    got: list[dict] = []
    for start in range(0, profile.duration_s, 7):
        chunk = [row for row in rows if start <= row["time"] < start + 7]
        if chunk:
            results = box.run(pd.DataFrame(chunk), buckets=buckets)
            got += results["daily_expenditures"].drop(columns=["_id", "_stime"]).to_dict(
                "records")
    assert _records(got) == _records(expected)
    entries = sum(len(entries) for entries in box.states.values())
    histories = sum(type(r) is lr.HistoricalTolls for r in records)
    assert entries < histories / 8, "a state entry holds the histories of many cars"
