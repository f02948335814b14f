"""What a fragment's query computes, batch by batch, on hand-written tuples.

The Spark query of a fragment runs for real on tuples laid out as its SUnion writes them
(``medusa_spark.testing``); only Kafka is left out. Window edges, windows closed by
BOUNDARY records alone, empty windows, windows chained in one query, joins with and
without a match, TENTATIVE propagation, the boundaries a fragment writes, and (on the
real stack) an undecodable record going to the dead-letter topic.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, Producer

from medusa.consuming import TupleConsumer
from medusa.envelope import STIME_HEADER, Envelope, TupleType
from medusa.producing import TupleProducer
from medusa.schemas import load_schema
from medusa.settings import kafka_config
from medusa.topics import dead_letter_topic
from medusa_spark.fragment_writer import FragmentWriter
from medusa_spark.local_run import LocalNetworkRun
from medusa_spark.network.model import NetworkSpec
from medusa_spark.testing import (
    BASE_MS,
    Result,
    Tuple,
    at,
    boundary,
    boundary_at,
    data,
    network_of,
    run_network,
)
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

def report(seconds: float, vid: int, speed: int = 50, seg: int = 1, input_: str = "reports",
           kind: str = "STABLE") -> Tuple:
    return Tuple(input_, at(seconds), {"time": int(seconds), "vid": vid, "speed": speed,
                                       "xway": 0, "lane": 1, "dir": 0, "seg": seg,
                                       "pos": seg * 5280}, type=kind)


def network(boxes: dict[str, Any], arrows: list[dict[str, str]],
            inputs: tuple[str, ...] = ("reports",)) -> NetworkSpec:
    return network_of(boxes, [(a["from"], a["to"]) for a in arrows],
                      dict.fromkeys(inputs, "position_report"))


START_S = "CAST((unix_millis(window_start) - 86400000) DIV 1000 AS INT)"
PER_MINUTE = {"type": "aggregate", "params": {
    "window": {"type": "tumbling", "size": "60 seconds"},
    "group_by": ["seg"],
    "aggregates": {"cars": {"count_distinct": "vid"}, "top": {"max": "speed"}},
    "fields": {"seg": "seg", "cars": "cars", "top": "top", "start_s": START_S}}}
COUNT_PER_MINUTE = network({"per_minute": PER_MINUTE},
                           [{"from": "reports", "to": "per_minute"}])


def counts(results: list[Result]) -> list[tuple[int, int]]:
    return sorted((r.value["start_s"], r.value["cars"]) for r in data(results) if r.value)


MAX_INDEXED_KEYS = "spark.sql.streaming.stateStore.medusa.evictionIndexMaxKeys"


def eviction_scans(spark) -> list[int]:  # type: ignore[no-untyped-def]
    """This JVM's aggregation eviction scans so far: [through an index, building one]."""
    return list(spark._jvm.medusa.spark.MedusaStateStoreProvider.evictionScans())


def indexes_given_up(spark) -> int:  # type: ignore[no-untyped-def]
    """How many of this JVM's state stores gave their eviction index up, past the budget."""
    return int(spark._jvm.medusa.spark.MedusaStateStoreProvider.indexesGivenUp())


def test_window_edges_and_boundary_driven_closing(spark) -> None:
    found = run_network(spark, COUNT_PER_MINUTE, [[
        report(0, 1), report(59.999, 2),  # first window [0, 60)
        report(60, 3),                    # the second starts at exactly 60 s
        boundary(130),                    # no data: the boundary alone closes both
    ]])["per_minute"]
    assert counts(found) == [(0, 2), (60, 1)]
    stimes = sorted(r.stime - BASE_MS for r in data(found))
    assert stimes == [59_999, 119_999], "a result's stime is the last millisecond of its window"
    assert len({r.id for r in data(found)}) == 2


def test_a_scale_steps_cut_leaves_the_later_results_to_the_new_instances(spark) -> None:
    """A cut asked for below what the writer has written is raised past it; no result
    from the cut on is written, and no boundary promises beyond it."""
    cuts: list[tuple[int | None, int]] = []

    def cut_after_the_boundary(writer: FragmentWriter) -> None:
        def cut(_fragment: str, batch_id: int) -> None:
            if batch_id == 1:
                written = max(int(dict(r.headers)[STIME_HEADER]) for r in
                              writer.outputs[0].records if r.value is not None)
                cuts.append((writer.cut(at(30)), written))
        writer.on_batch = cut
    found = run_network(spark, COUNT_PER_MINUTE, [
        [report(10, 1), report(70, 2)],
        [boundary(130)],  # closes [0, 60) at least; then the cut
        [report(130, 3), report(190, 4)],
        [boundary(250)],  # would close up to [180, 240)
    ], prepare=cut_after_the_boundary)["per_minute"]
    [(cut, written)] = cuts
    assert cut == written + 1, "raised past the newest result written"
    assert data(found) and all(r.stime < cut for r in data(found))
    assert counts(found)[0] == (0, 1)
    assert max(r.stime for r in found if r.type == "BOUNDARY") == cut


def test_a_held_aggregation_keeps_its_closed_windows_until_released(spark) -> None:
    """A warm move's replica (``eviction_hold``): held, its windows stay in its state and
    its boundaries promise nothing behind them; released, its next batch emits every
    window closed meanwhile, each once, and promises past them only after them."""
    released_after: list[int] = []
    built_at_release: list[int] = []

    def held_until_batch_2(writer: FragmentWriter) -> None:
        writer.hold_eviction(spark)

        def release(_fragment: str, batch_id: int) -> None:
            if batch_id == 2 and writer.eviction_held:
                writer.release_eviction(spark)
                released_after.append(len(writer.outputs[0].records))
                built_at_release.append(eviction_scans(spark)[1])
        writer.on_batch = release
    found = run_network(spark, COUNT_PER_MINUTE, [
        [report(10, 1), report(30, 2)],
        [report(70, 3), boundary(80)],    # closes [0, 60): held
        [report(130, 4), boundary(140)],  # closes [60, 120): held
        [report(150, 5), boundary(150)],  # released: both come out
        [boundary(250)],
    ], prepare=held_until_batch_2)["per_minute"]
    [held_records] = released_after
    assert not data(found[:held_records]), "nothing closed while held"
    assert counts(found) == [(0, 2), (60, 1), (120, 2)]
    assert len({r.id for r in data(found)}) == 3
    assert eviction_scans(spark)[1] == built_at_release[0], \
        "the held batches built the eviction index: no whole scan after the release"
    for index, result in enumerate(found):
        if result.type != "BOUNDARY":
            assert all(b.stime < result.stime for b in found[:index] if b.type == "BOUNDARY"), \
                "no boundary before a result promised past it"


def test_an_aggregations_eviction_scan_goes_through_its_index(spark) -> None:
    """Spark scans a windowed aggregation's whole state every batch for the windows the
    watermark closed; Medusa's state store keeps the keys ordered by window end and goes
    through the closed ones only (``EvictionIndex.java``). Windows of several segments
    closing over many batches: each comes out once, as the reference has it."""
    batches: list[list[Tuple]] = []
    expected: dict[tuple[int, int], set[int]] = {}
    for batch in range(8):
        reports = []
        for k in range(12):
            seconds, seg, vid = batch * 25 + k * 2, k % 4, (k * 7 + batch) % 9
            reports.append(report(seconds, vid, seg=seg))
            expected.setdefault((seconds // 60 * 60, seg), set()).add(vid)
        batches.append([*reports, boundary(batch * 25 + 24)])
    batches.append([boundary(400)])
    indexed_before, built_before = eviction_scans(spark)
    found = data(run_network(spark, COUNT_PER_MINUTE, batches)["per_minute"])
    indexed, built = eviction_scans(spark)
    assert sorted((r.value["start_s"], r.value["seg"], r.value["cars"]) for r in found) == \
        sorted((start, seg, len(vids)) for (start, seg), vids in expected.items())
    assert len({r.id for r in found}) == len(found)
    assert built > built_before and indexed - indexed_before >= 3 * (built - built_before), \
        "after one whole scan per state partition, the batches' evictions go through the index"


def test_an_aggregation_past_the_index_budget_scans_as_spark_does_and_loses_nothing(
        spark) -> None:
    """A JVM's eviction indexes share a budget of keys (an eighth of its heap, or the
    session's setting); a store whose index would go past it gives the index up and scans
    its whole state each batch, as Spark does, from then on: no window missed or repeated."""
    batches = [[*(report(batch * 25 + k * 2, (k * 7 + batch) % 9, seg=k % 4)
                  for k in range(12)), boundary(batch * 25 + 24)] for batch in range(6)]
    batches.append([boundary(300)])
    unlimited = data(run_network(spark, COUNT_PER_MINUTE, batches)["per_minute"])
    given_up_before = indexes_given_up(spark)
    spark.conf.set(MAX_INDEXED_KEYS, "0")
    try:
        found = data(run_network(spark, COUNT_PER_MINUTE, batches)["per_minute"])
    finally:
        spark.conf.unset(MAX_INDEXED_KEYS)
    assert indexes_given_up(spark) > given_up_before, "the stores holding keys give theirs up"
    assert sorted((r.value["start_s"], r.value["seg"], r.value["cars"]) for r in found) == \
        sorted((r.value["start_s"], r.value["seg"], r.value["cars"]) for r in unlimited)
    assert len({r.id for r in found}) == len(found)


def test_empty_windows_give_nothing_and_open_windows_wait(spark) -> None:
    found = run_network(spark, COUNT_PER_MINUTE,
                        [[report(5, 1), report(200, 2), boundary(250)]])["per_minute"]
    # [0,60) and [180,240) have data; [60,180) are empty; [240,300) is still open at 250 s.
    assert counts(found) == [(0, 1), (180, 1)]


def test_a_window_closes_in_the_batch_that_carries_its_boundary(spark) -> None:
    """No lateness: the boundary of 60 s closes [0, 60) in its own micro-batch, and the
    boundary the fragment writes after it says so."""
    found = run_network(spark, COUNT_PER_MINUTE, [
        [report(10, 1), report(30, 2)],
        [boundary(60)],
        [report(70, 3), boundary(80)],
    ])["per_minute"]
    assert counts(found) == [(0, 2)]
    last_boundary = max(r.stime for r in found if r.type == "BOUNDARY")
    assert last_boundary >= at(59.999), "the fragment's boundary passes the closed window"
    assert last_boundary < at(119.999), "and not the open one"


def test_results_are_tentative_from_the_first_batch_with_a_tentative_input(spark) -> None:
    found = run_network(spark, COUNT_PER_MINUTE, [
        [report(1, 1), report(2, 2), boundary(65)],
        [boundary(66)],  # the batch after the watermark passed 60 emits the first window
        # A TENTATIVE release of period 1, its boundary marked as the SUnion marks it.
        [replace(report(70, 3, kind="TENTATIVE"), epoch=1), boundary_at(at(200), epoch=1)]]
    )["per_minute"]
    kinds = {r.value["start_s"]: r.type for r in data(found) if r.value}
    assert kinds == {0: "STABLE", 60: "TENTATIVE"}


def test_a_tentative_result_outside_any_failure_period_is_left_out(spark) -> None:
    # As state older than the last reconciliation would give it: its window was written
    # stable before, and no UNDO would follow it.
    stray = report(2, 2, kind="TENTATIVE")  # no period: the SUnion never writes one so
    found = run_network(spark, COUNT_PER_MINUTE, [
        [report(1, 1), stray, report(70, 3), boundary(200)]])["per_minute"]
    kinds = {r.value["start_s"]: r.type for r in data(found) if r.value}
    assert kinds == {60: "STABLE"}


def test_windows_chain_inside_one_query(spark) -> None:
    """An aggregate of an aggregate's results in the same fragment: its window results are
    stamped with window_time, so the next window sees them in the same micro-batch."""
    chained = network({
        "per_minute": PER_MINUTE,
        "busiest": {"type": "aggregate", "params": {
            "window": {"type": "tumbling", "size": "120 seconds"},
            "group_by": [], "aggregates": {"most": {"max": "cars"}},
            "fields": {"most": "most", "start_s": START_S}}},
    }, [{"from": "reports", "to": "per_minute"}, {"from": "per_minute", "to": "busiest"}])
    found = run_network(spark, chained, [[
        report(1, 1), report(2, 2), report(3, 3), report(61, 4), report(130, 5),
        boundary(125)]], outputs=["busiest"])["busiest"]
    assert [(r.value["start_s"], r.value["most"]) for r in data(found) if r.value] == [(0, 3)]


def _join(how: str) -> NetworkSpec:
    return network({"pair": {"type": "join", "params": {
        "how": how, "keys": [["vid", "vid"]],
        "within": {"lower": "-30 seconds", "upper": "0 seconds"},
        "fields": {"vid": "l.vid", "now": "l.seg", "before": "r.seg"}}}},
        [{"from": "left", "to": "pair.left"}, {"from": "right", "to": "pair.right"}],
        inputs=("left", "right"))


def test_joins_with_and_without_a_match(spark) -> None:
    batch = [report(0, 1, seg=1, input_="right"), report(10, 2, seg=4, input_="right"),
             report(30, 1, seg=2, input_="left"), report(50, 2, seg=5, input_="left"),
             boundary(200)]
    inner = data(run_network(spark, _join("inner"), [batch])["pair"])
    assert [(r.value["vid"], r.value["now"], r.value["before"]) for r in inner if r.value] == [
        (1, 2, 1)]  # vid 2's right tuple is 40 s before its left one: outside the range
    outer = data(run_network(spark, _join("left_outer"), [batch])["pair"])
    assert sorted((r.value["vid"], r.value["before"]) for r in outer if r.value) == [
        (1, 1), (2, None)]
    matched = next(r for r in outer if r.value and r.value["vid"] == 1)
    assert matched.stime == at(30), "a join result carries its left tuple's stime"


def test_a_held_query_holds_its_aggregations_scan_only(spark) -> None:
    """A join evicts its unmatched rows by a scan of its own: held or not, the same."""
    def held(writer: FragmentWriter) -> None:
        writer.hold_eviction(spark)
    batches = [[report(10, 2, seg=4, input_="right"), report(50, 2, seg=5, input_="left")],
               [boundary(200)], [boundary(300)]]
    outer = data(run_network(spark, _join("left_outer"), batches, prepare=held)["pair"])
    assert [(r.value["vid"], r.value["before"]) for r in outer if r.value] == [(2, None)]


def test_undecodable_input_goes_to_the_dead_letter_topic(spark, federation, registry,
                                                         tmp_path) -> None:
    prefix = f"frag{uuid.uuid4().hex[:8]}."
    garbage = b"\x00\x00\x00\x7f\x7fgarbage"
    moving = network({"moving": {"type": "filter", "params": {"predicate": "speed > 0"}}},
                     [{"from": "reports", "to": "moving"}])
    config = kafka_config(federation.bootstrap())
    with LocalNetworkRun(spark, moving, federation, registry, tmp_path / "checkpoints",
                         topic_prefix=prefix) as run:
        bad = Producer(config)
        bad.produce(run.topic("reports"), value=garbage,
                    headers=Envelope(TupleType.STABLE, "poison", at(0.5)).headers())
        bad.flush(10)
        with TupleProducer(config, registry, run.topic("reports"),
                           load_schema("position_report"), "reports",
                           boundary_interval_s=3600) as producer:
            producer.produce(report(1, 1).value, "reports-1", at(1))
            producer.emit_boundaries(at(100))
        run.wait_until_quiet(timeout_s=300)
        out_topic = next(w.outputs["moving"].stream.topic for w in run.wiring.values()
                         if "moving" in w.outputs)
        with TupleConsumer(config, registry, [out_topic], f"t-{uuid.uuid4()}") as consumer:
            found = [c.record for c in consumer.drain() if c.record.type is TupleType.STABLE]
    assert [r.value["vid"] for r in found] == [1], "processing goes on after a bad record"
    reader = Consumer(kafka_config(federation.bootstrap(), {
        "group.id": f"t-{uuid.uuid4()}", "auto.offset.reset": "earliest"}))
    reader.subscribe([dead_letter_topic(run.topic("reports"))])

    def letter() -> Message | None:
        message = reader.poll(1.0)
        return message if message is not None and message.error() is None else None

    try:
        found_letter = wait_for("the undecodable record on the dead-letter topic", letter, 30,
                                interval_s=0)  # poll waits
    finally:
        reader.close()
    headers = dict(found_letter.headers() or [])
    assert found_letter.value() == garbage
    assert b"schema id" in headers["medusa.dlq.reason"]
    assert headers["medusa.id"] == b"poison", "the original headers are kept"


def test_every_daily_expenditure_query_is_answered_with_or_without_history(spark) -> None:
    """Linear Road's expenditures fragment as shipped: a query whose car has history on
    that expressway gets the day's toll; one whose car has none gets 0 (the benchmark
    answers every query), each in the batch the query comes in."""
    from medusa.settings import REPO_ROOT
    from medusa_spark.network.model import load_network
    from medusa_spark.testing import harness

    shipped = load_network(REPO_ROOT / "spark_apps/medusa_spark/networks/linear_road.yaml")
    member = {box: "road" for box in shipped.boxes} | {"expenditures": "expenditures",
                                                       "spent": "expenditures"}
    tolls = list(range(10, 79))  # day d's toll is d + 9

    def query(seconds: int, vid: int, qid: int) -> Tuple:
        return Tuple("daily_expenditure_queries", at(seconds),
                     {"time": seconds, "vid": vid, "xway": 0, "qid": qid, "day": 5})

    found = harness(spark, shipped, member, "expenditures").run([
        [Tuple("historical_tolls", at(1), {"time": 1, "vid": 7, "xway": 0, "tolls": tolls}),
         boundary(2)],
        [query(3, 7, 1), query(3, 8, 2), boundary(4)],
        # A history and its car's query of the same second, in one batch: history first.
        [Tuple("historical_tolls", at(5), {"time": 5, "vid": 9, "xway": 0, "tolls": tolls}),
         query(5, 9, 3), boundary(6)],
        [boundary(10)],
    ])["spent"]
    answers = {r.value["qid"]: r.value["expenditure"] for r in data(found) if r.value}
    assert answers == {1: 14, 2: 0, 3: 14}


def test_the_partitioned_road_equals_the_reference_in_its_spark_queries(spark) -> None:
    """Linear Road's road and accounts fragments as shipped, each its Spark query over the
    network's state partitions: the road keyed by expressway and direction, its charges
    read by the accounts keyed by car, batch by batch, against the independent reference."""
    from medusa.linear_road import records as lr
    from medusa.linear_road.reference import compute
    from medusa.linear_road.traffic import TrafficProfile, TrafficSimulation
    from medusa.settings import REPO_ROOT
    from medusa_spark.network.model import load_network
    from medusa_spark.testing import harness

    shipped = load_network(REPO_ROOT / "spark_apps/medusa_spark/networks/"
                                       "linear_road_partitioned.yaml")
    assert shipped.state_partitions and shipped.state_partitions > 1
    member = {box: spec.fragment or "" for box, spec in shipped.boxes.items()}
    # Tolls, charges and accidents all occur (the first accident's alerts after 6 minutes).
    profile = TrafficProfile(xways=1, duration_s=390, peak_rate=300, ramp_s=30,
                             breakdown_probability=0.0003, accident_probability=1.0, seed=5)
    records = [r for _, rs in TrafficSimulation(profile).run() for r in rs]
    step = 15

    def batches(tuples: list[Tuple]) -> list[list[Tuple]]:
        """``step`` seconds of tuples a batch (in the order given), then the BOUNDARY."""
        return [[t for t in tuples if at_s <= (t.stime - lr.STIME_ORIGIN_MS) // 1000 < at_s + step]
                + [boundary_at(lr.STIME_ORIGIN_MS + (at_s + step) * 1000)]
                for at_s in range(0, profile.duration_s, step)]

    def tuples(kind: type, stream: str) -> list[Tuple]:
        return [Tuple(stream, lr.STIME_ORIGIN_MS + r.time * 1000, lr.to_dict(r), id=r.tuple_id)
                for r in records if isinstance(r, kind)]

    road = harness(spark, shipped, member, "road").run(
        batches(tuples(lr.PositionReport, "position_reports")))
    charges = [Tuple("toll_charges", r.stime, r.value, id=r.id) for r in data(road["charges"])]
    accounts = harness(spark, shipped, member, "accounts").run(batches(
        charges + tuples(lr.AccountBalanceQuery, "account_balance_queries")))
    expected = compute(records)
    for found, box, port in ((road, "tolls", "toll_notifications"),
                             (road, "alerts", "accident_alerts"),
                             (accounts, "balances", "account_balances")):
        got = sorted(json.dumps({k: v for k, v in r.value.items() if k != "emit_time"},
                                sort_keys=True) for r in data(found[box]))
        want = sorted(json.dumps(row, sort_keys=True) for row in getattr(expected, port))
        assert want, f"{port}: the input makes some"
        assert got == want, port
    assert any(row["balance"] > 0 for row in expected.account_balances)
