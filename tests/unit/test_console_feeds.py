"""The console's feeds: load reports, the ledger and traces, kept up to date in the
background; read here through a fake consumer and a fake Jaeger."""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from medusa.bpm.ledger import balances
from medusa.console import feeds
from medusa.console.feeds import (
    TRACES_PER_KIND,
    LedgerFeed,
    NodeLoadFeed,
    TraceFeed,
    fetch_trace,
    merge_traces,
    trace_summary,
)
from medusa.jaeger_client import Trace, TracedSpan
from medusa.schemas import LEDGER_TOPIC, NODE_LOAD_TOPIC
from tests.waiting import first_within

pytestmark = pytest.mark.unit


class FakeConsumer:
    """A cluster as a feed's consumer sees it: topics, watermarks and records to poll."""

    def __init__(self) -> None:
        self.down = False
        self.topics: dict[str, list[int]] = {}
        self.watermarks: dict[int, tuple[int, int]] = {}
        self.records: list[Message] = []
        self.positions: dict[int, int] = {}
        self.assigned: list[tuple[int, int]] = []
        self.closed = False

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        if self.down:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "connection refused"))
        assert topic is not None
        partitions = self.topics.get(topic)
        described = (SimpleNamespace(error=KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART),
                                     partitions={}) if partitions is None
                     else SimpleNamespace(error=None, partitions=dict.fromkeys(partitions)))
        return SimpleNamespace(topics={topic: described})

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float = -1,
                              cached: bool = False) -> tuple[int, int]:
        return self.watermarks.get(partition.partition, (0, 0))

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned += [(tp.partition, tp.offset) for tp in partitions]

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.positions.get(tp.partition, -1001))
                for tp in partitions]

    def poll(self, timeout: float = -1) -> Message | None:
        return self.records.pop(0) if self.records else None

    def close(self) -> None:
        self.closed = True


@pytest.fixture(autouse=True)
def configs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """The configurations the feeds ask for (the real one would read the stack's secrets)."""
    asked: list[tuple[str, dict[str, Any]]] = []

    def kafka_config(bootstrap: str, keys: dict[str, Any] | None = None, /,
                     **overrides: Any) -> dict[str, Any]:
        config = {"bootstrap.servers": bootstrap, **{k.replace("_", "."): v
                                                      for k, v in overrides.items()}}
        config.update(keys or {})
        asked.append((bootstrap, config))
        return config
    monkeypatch.setattr(feeds, "kafka_config", kafka_config)
    return asked


def _decode(raw: bytes, topic: str) -> Any:
    return json.loads(raw)


def _record(topic: str, partition: int, offset: int, value: dict[str, Any] | None,
            tuple_id: str = "t") -> Message:
    kind = b"STABLE" if value is not None else b"BOUNDARY"
    headers: list[tuple[str, str | bytes | None]] = [
        ("medusa.type", kind), ("medusa.id", tuple_id.encode()), ("medusa.stime", b"0")]
    return Message(topic=topic, partition=partition, offset=offset, headers=headers,
                   value=json.dumps(value).encode() if value is not None else None)


def _report(node: str, at: Any, utilisation: float = 0.5) -> dict[str, Any]:
    return {"node": node, "participant": node.split("/")[0], "reported_at": at,
            "capacity": 2.0, "load": 2 * utilisation, "utilisation": utilisation,
            "boxes": [], "fragments": []}


def _load_feed(clusters: dict[str, FakeConsumer], **options: Any) -> NodeLoadFeed:
    made = iter(clusters.values())
    return NodeLoadFeed({name: f"{name}:9092" for name in clusters}, _decode,
                        consumer_factory=lambda config: next(made),
                        recheck_s=0.0, retry_s=0.0, **options)


def _steps(feed: NodeLoadFeed | LedgerFeed, participant: str, count: int = 1) -> None:
    tail = feed._tails[participant]
    for _ in range(count):
        tail.step(threading.Event())


# --- load reports ----------------------------------------------------------------------------


def test_a_node_keeps_its_newest_report_whatever_order_they_come_in() -> None:
    feed = _load_feed({})
    assert feed.accept(_report("alpha/node-1", 2_000, 0.2))
    assert not feed.accept(_report("alpha/node-1", 1_000, 0.9))
    newer = datetime.fromtimestamp(3, UTC)  # as the Avro deserializer gives it
    assert feed.accept(_report("alpha/node-1", newer, 0.3))
    assert feed.accept(_report("beta/node-1", 500))
    assert not feed.accept(None)
    reports = feed.reports()
    assert reports["alpha/node-1"]["utilisation"] == 0.3
    assert sorted(reports) == ["alpha/node-1", "beta/node-1"]


def test_the_reports_given_are_a_copy() -> None:
    feed = _load_feed({})
    feed.accept(_report("alpha/node-1", 1_000))
    feed.reports()["alpha/node-1"]["utilisation"] = 9.0
    feed.reports().clear()
    assert feed.reports()["alpha/node-1"]["utilisation"] == 0.5


def test_each_partition_is_read_from_its_recent_reports_then_tailed(
        configs: list[tuple[str, dict[str, Any]]]) -> None:
    alpha = FakeConsumer()
    alpha.topics[NODE_LOAD_TOPIC] = [0, 1]
    alpha.watermarks = {0: (0, 500), 1: (10, 50)}
    feed = _load_feed({"alpha": alpha}, recent=200)
    alpha.records = [
        _record(NODE_LOAD_TOPIC, 0, 300, _report("alpha/node-1", 1_000)),
        _record(NODE_LOAD_TOPIC, 0, 301, None),  # a BOUNDARY
        Message(topic=NODE_LOAD_TOPIC, partition=1, offset=10, value=b"\x00garbage"),
        _record(NODE_LOAD_TOPIC, 1, 11, _report("alpha/node-2", 1_000)),
    ]
    _steps(feed, "alpha", 5)
    assert alpha.assigned == [(0, 300), (1, 10)]
    assert sorted(feed.reports()) == ["alpha/node-1", "alpha/node-2"]
    assert feed._tails["alpha"].skipped == 1
    bootstrap, config = configs[0]
    assert bootstrap == "alpha:9092"
    assert config["group.id"] == "medusa-console"
    assert config["enable.auto.commit"] is False


def test_a_topic_created_later_and_partitions_added_are_picked_up() -> None:
    alpha = FakeConsumer()
    feed = _load_feed({"alpha": alpha})
    _steps(feed, "alpha")
    assert alpha.assigned == [] and feed.partial() == []  # nothing to read yet
    alpha.topics[NODE_LOAD_TOPIC] = [0]
    _steps(feed, "alpha")
    alpha.topics[NODE_LOAD_TOPIC] = [0, 1]
    alpha.watermarks[1] = (0, 3)
    _steps(feed, "alpha", 2)
    assert alpha.assigned == [(0, 0), (1, 0)]


def test_the_metadata_is_read_again_only_every_recheck_interval() -> None:
    alpha = FakeConsumer()
    now = [0.0]
    tail = feeds._ClusterTail("alpha", "alpha:9092", NODE_LOAD_TOPIC, lambda low, high: low,
                              lambda value, tuple_id: None, _decode, lambda config: alpha,
                              recheck_s=10.0, clock=lambda: now[0])
    tail.step(threading.Event())
    alpha.topics[NODE_LOAD_TOPIC] = [0]
    now[0] = 9.0
    tail.step(threading.Event())
    assert alpha.assigned == []
    now[0] = 10.0
    tail.step(threading.Event())
    assert alpha.assigned == [(0, 0)]


def test_a_cluster_away_is_logged_once_and_its_reports_are_kept(
        caplog: pytest.LogCaptureFixture) -> None:
    alpha = FakeConsumer()
    alpha.topics[NODE_LOAD_TOPIC] = [0]
    alpha.watermarks[0] = (0, 1)
    alpha.records = [_record(NODE_LOAD_TOPIC, 0, 0, _report("alpha/node-1", 1_000))]
    feed = _load_feed({"alpha": alpha})
    _steps(feed, "alpha")
    alpha.down = True
    with caplog.at_level(logging.INFO, logger="medusa.console"):
        _steps(feed, "alpha", 3)
        assert feed.unreachable() == {"alpha": "connection refused"}
        assert feed.partial() == ["alpha"]
        assert list(feed.reports()) == ["alpha/node-1"]
        alpha.down = False
        _steps(feed, "alpha")
    assert feed.unreachable() == {}
    messages = [r.getMessage() for r in caplog.records]
    assert sum("does not answer" in m for m in messages) == 1
    assert sum("answers again" in m for m in messages) == 1
    assert alpha.assigned == [(0, 0)]  # not assigned twice


def test_a_record_waits_while_the_registry_does_not_answer() -> None:
    alpha = FakeConsumer()
    alpha.topics[NODE_LOAD_TOPIC] = [0]
    alpha.watermarks[0] = (0, 1)
    alpha.records = [_record(NODE_LOAD_TOPIC, 0, 0, _report("alpha/node-1", 1_000))]
    registry_up = [False]

    def decode(raw: bytes, topic: str) -> Any:
        if not registry_up[0]:
            raise httpx.ConnectError("connection refused")
        return json.loads(raw)

    feed = NodeLoadFeed({"alpha": "alpha:9092"}, decode, consumer_factory=lambda c: alpha,
                        recheck_s=0.0, retry_s=0.0)
    _steps(feed, "alpha", 3)
    assert feed.reports() == {}
    registry_up[0] = True
    _steps(feed, "alpha")
    assert list(feed.reports()) == ["alpha/node-1"]
    assert feed._tails["alpha"].skipped == 0


def test_a_cluster_is_partial_until_what_it_held_is_read() -> None:
    alpha = FakeConsumer()
    alpha.topics[NODE_LOAD_TOPIC] = [0, 1]
    alpha.watermarks = {0: (0, 2), 1: (0, 5)}
    alpha.records = [_record(NODE_LOAD_TOPIC, 0, 0, _report("alpha/node-1", 1)),
                     _record(NODE_LOAD_TOPIC, 0, 1, _report("alpha/node-1", 2))]
    feed = _load_feed({"alpha": alpha})
    _steps(feed, "alpha", 2)
    assert feed.partial() == ["alpha"]
    # Partition 1's last records were transaction markers: its position shows it is read.
    alpha.positions[1] = 5
    _steps(feed, "alpha")
    assert feed.partial() == []


def test_the_threads_read_until_stopped_and_close_their_consumers() -> None:
    clusters = {"alpha": FakeConsumer(), "beta": FakeConsumer()}
    for name, cluster in clusters.items():
        cluster.topics[NODE_LOAD_TOPIC] = [0]
        cluster.watermarks[0] = (0, 1)
        cluster.records = [_record(NODE_LOAD_TOPIC, 0, 0, _report(f"{name}/node-1", 1))]
    feed = _load_feed(clusters).start()
    first_within(lambda: len(feed.reports()) >= 2, 10, interval_s=0.01)
    feed.stop()
    assert sorted(feed.reports()) == ["alpha/node-1", "beta/node-1"]
    assert all(cluster.closed for cluster in clusters.values())


# --- the ledger ------------------------------------------------------------------------------


def _entry(contract: str, origin: str, host: str, to_ms: Any, amount: float,
           kind: str = "hosting", fragment: str = "alpha/net/f1") -> dict[str, Any]:
    return {"kind": kind, "contract": contract, "origin": origin, "host": host,
            "fragment": fragment, "unit_price": 2.0, "load": 0.5, "amount": amount,
            "from_ms": to_ms - 1000 if isinstance(to_ms, int) else to_ms, "to_ms": to_ms}


def _ledger(**options: Any) -> LedgerFeed:
    return LedgerFeed({"alpha": "alpha:9092", "beta": "beta:9092", "gamma": "gamma:9092"},
                      _decode, **options)


def test_the_balances_are_those_medusa_ledger_shows() -> None:
    feed = _ledger()
    entries = [_entry("alpha/c1", "alpha", "beta", 10_000 + i, 1.5) for i in range(5)]
    entries.append(_entry("beta/c2", "beta", "alpha", 20_000, 4.0, kind="move"))
    for entry in entries:
        assert feed.accept(entry)
    view = feed.view()
    expected = balances(entries)
    assert view["participants"] == {"alpha": pytest.approx(expected.participants["alpha"]),
                                    "beta": pytest.approx(expected.participants["beta"]),
                                    "gamma": 0.0}
    assert view["contracts"] == pytest.approx(expected.contracts)
    assert view["entries"] == 6
    json.dumps(view)


def test_a_payment_read_twice_is_counted_once() -> None:
    feed = _ledger()
    entry = _entry("alpha/c1", "alpha", "beta", 10_000, 1.0)
    assert feed.accept(entry, "ledger/alpha/c1/alpha/net/f1/hosting/9000")
    # Without its envelope the id is made as the ledger makes it: the same one.
    assert not feed.accept(dict(entry))
    assert not feed.accept(dict(entry), "ledger/alpha/c1/alpha/net/f1/hosting/9000")
    assert feed.view()["participants"]["beta"] == 1.0


def test_the_newest_payments_come_first_with_times_in_ms() -> None:
    feed = _ledger(newest=3)
    at = datetime.fromtimestamp(50, UTC)  # as the Avro deserializer gives it
    feed.accept(_entry("alpha/c1", "alpha", "beta", at, 1.0, fragment="alpha/net/f9"))
    for i in range(5):
        feed.accept(_entry("alpha/c1", "alpha", "beta", 10_000 + i * 1000, 1.0,
                           fragment=f"alpha/net/f{i}"))
    payments = feed.view()["payments"]
    assert [p["to_ms"] for p in payments] == [50_000, 14_000, 13_000]
    assert payments[0]["from_ms"] == 50_000 and payments[0]["fragment"] == "alpha/net/f9"
    assert payments[0]["id"] == "ledger/alpha/c1/alpha/net/f9/hosting/50000"
    assert set(payments[1]) == {"id", "kind", "contract", "origin", "host", "fragment",
                                "unit_price", "load", "amount", "from_ms", "to_ms"}


def test_entries_beyond_those_kept_still_count_in_the_balances() -> None:
    feed = _ledger(keep=2, newest=10)
    for i in range(5):
        feed.accept(_entry("alpha/c1", "alpha", "beta", 10_000 + i, 1.0,
                           fragment=f"alpha/net/f{i}"))
    view = feed.view()
    assert len(view["payments"]) == 2
    assert view["participants"]["alpha"] == -5.0 and view["entries"] == 5


def test_the_ledger_says_which_clusters_it_could_not_read() -> None:
    alpha, beta, gamma = FakeConsumer(), FakeConsumer(), FakeConsumer()
    beta.down = True
    alpha.topics[LEDGER_TOPIC] = [0]
    alpha.watermarks[0] = (0, 1)
    alpha.records = [_record(LEDGER_TOPIC, 0, 0, _entry("alpha/c1", "alpha", "beta", 1000, 2.0),
                             "ledger/alpha/c1/alpha/net/f1/hosting/0")]
    made = iter([alpha, beta, gamma])
    feed = LedgerFeed({"alpha": "a:1", "beta": "b:1", "gamma": "g:1"}, _decode,
                      consumer_factory=lambda config: next(made), recheck_s=0.0, retry_s=0.0)
    for name in ("alpha", "beta", "gamma"):
        _steps(feed, name)
    assert alpha.assigned == [(0, 0)]  # from the beginning: balances need every payment
    view = feed.view()
    assert view["participants"] == {"alpha": -2.0, "beta": 2.0, "gamma": 0.0}
    assert view["partial"] == ["beta"]
    assert view["error"] == "beta's cluster does not answer: connection refused"


# --- traces ----------------------------------------------------------------------------------


def _span(span_id: str, name: str, parent: str | None, start_s: float, duration_s: float,
          service: str = "medusa-detector", **attributes: Any) -> TracedSpan:
    return TracedSpan(span_id, name, service, parent,
                      1_700_000_000_000_000 + round(start_s * 1e6), round(duration_s * 1e6),
                      attributes)


def _failure(trace_id: str, start_s: float) -> Trace:
    return Trace(trace_id, [
        _span("d", "declaration", "r", start_s + 3.9, 0.2),
        _span("r", "node failure alpha/node-1", None, start_s, 4.1, node="alpha/node-1"),
        _span("t", "takeover alpha/net/f1", "r", start_s + 4.3, 9.0, "medusa-node alpha/node-2"),
    ])


def _move(trace_id: str, start_s: float) -> Trace:
    return Trace(trace_id, [_span("m", "move alpha/net/f1", None, start_s, 2.0, "medusa-bpm")])


def test_a_trace_is_listed_with_its_title_start_duration_and_services() -> None:
    assert trace_summary("failure", _failure("f1", 10.0)) == {
        "kind": "failure", "trace_id": "f1", "title": "node failure alpha/node-1",
        "started_ms": 1_700_000_010_000, "duration_ms": 13_300.0, "spans": 3,
        "services": ["medusa-detector", "medusa-node alpha/node-2"]}


def test_the_kinds_merge_newest_first_each_trace_once_and_limited() -> None:
    found = {"failure": [_failure("f1", 10.0), _failure("f2", 30.0)],
             "partition": [],
             "move": [_move("m1", 20.0), _move("m2", 40.0), Trace("empty", [])],
             "autoscale": [_failure("f2", 30.0)]}
    merged = merge_traces(found, limit=3)
    assert [(t["kind"], t["trace_id"]) for t in merged] == [
        ("move", "m2"), ("failure", "f2"), ("move", "m1")]
    json.dumps(merged)


def test_jaeger_away_is_an_error_in_the_view_and_the_last_traces_stay() -> None:
    answering = [True]

    def fetch(kind: str, last: int, lookback_s: int) -> list[Trace]:
        assert last == TRACES_PER_KIND and lookback_s == 1800
        if not answering[0]:
            raise httpx.ConnectError("connection refused")
        return {"failure": [_failure("f1", 10.0)], "move": [_move("m1", 20.0)]}.get(kind, [])

    feed = TraceFeed("http://jaeger:16686", fetch=fetch)
    assert feed.view() == {"traces": [], "error": None, "updated_ms": None}
    feed.poll()
    first = feed.view()
    assert [t["trace_id"] for t in first["traces"]] == ["m1", "f1"] and first["error"] is None
    answering[0] = False
    feed.poll()
    away = feed.view()
    assert away["traces"] == first["traces"]
    assert away["error"] == ("failure, partition, move, autoscale traces unknown: "
                             "ConnectError: connection refused")
    answering[0] = True
    feed.poll()
    assert feed.view()["error"] is None


def test_one_kind_failing_keeps_the_others_fresh() -> None:
    def fetch(kind: str, last: int, lookback_s: int) -> list[Trace]:
        if kind == "partition":
            raise ValueError("bad JSON")
        return [_move("m1", 20.0)] if kind == "move" else []

    feed = TraceFeed("http://jaeger:16686", fetch=fetch)
    feed.poll()
    view = feed.view()
    assert [t["trace_id"] for t in view["traces"]] == ["m1"]
    assert view["error"] == "partition traces unknown: ValueError: bad JSON"
    assert view["updated_ms"] is not None


def test_a_trace_is_given_with_its_timeline() -> None:
    asked: list[str] = []

    def fetch_one(trace_id: str) -> Trace | None:
        asked.append(trace_id)
        return _failure(trace_id, 0.0) if trace_id == "abc123" else None

    feed = TraceFeed("http://jaeger:16686", fetch=lambda *a: [], fetch_one=fetch_one)
    found = feed.trace("abc123")
    assert found is not None
    assert found["kind"] == "failure" and found["title"] == "node failure alpha/node-1"
    assert found["error"] is None and found["spans"] == 3
    assert [(r["name"], r["depth"]) for r in found["rows"]] == [
        ("node failure alpha/node-1", 0), ("declaration", 1), ("takeover alpha/net/f1", 1)]
    assert found["rows"][0] == {
        "span_id": "r", "parent_id": None, "name": "node failure alpha/node-1",
        "service": "medusa-detector", "depth": 0, "offset_s": 0.0, "duration_s": 4.1,
        "attributes": {"node": "alpha/node-1"}}
    assert found["rows"][2]["offset_s"] == pytest.approx(4.3)
    json.dumps(found)
    assert feed.trace("fff") is None
    assert feed.trace("../../api/services") is None  # not an id: Jaeger is not asked
    assert asked == ["abc123", "fff"]


def test_a_trace_asked_for_while_jaeger_is_away_carries_the_error() -> None:
    def fetch_one(trace_id: str) -> Trace | None:
        raise httpx.ConnectError("connection refused")

    found = TraceFeed("http://jaeger:16686/", fetch=lambda *a: [], fetch_one=fetch_one).trace(
        "abc")
    assert found is not None and found["rows"] == [] and found["trace_id"] == "abc"
    assert found["error"] == "Jaeger at http://jaeger:16686: ConnectError: connection refused"


def test_fetch_trace_reads_one_trace_by_its_id() -> None:
    raw = {"traceID": "abc", "processes": {"p1": {"serviceName": "medusa-bpm"}},
           "spans": [{"spanID": "s1", "operationName": "move alpha/net/f1", "processID": "p1",
                      "startTime": 1_000_000, "duration": 5, "references": [],
                      "tags": [{"key": "fragment", "value": "alpha/net/f1"}]}]}

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/traces/abc":
            return httpx.Response(200, json={"data": [raw]})
        return httpx.Response(404, json={"errors": [{"code": 404, "msg": "trace not found"}]})

    with httpx.Client(transport=httpx.MockTransport(answer)) as client:
        found = fetch_trace("http://jaeger:16686", "abc", client=client)
        assert found is not None and found.trace_id == "abc"
        assert found.spans[0].service == "medusa-bpm"
        assert found.spans[0].attributes == {"fragment": "alpha/net/f1"}
        assert fetch_trace("http://jaeger:16686", "def", client=client) is None


def test_the_trace_thread_polls_until_stopped() -> None:
    polled = threading.Event()

    def fetch(kind: str, last: int, lookback_s: int) -> list[Trace]:
        polled.set()
        raise httpx.ConnectError("connection refused")  # must not end the thread

    feed = TraceFeed("http://jaeger:16686", fetch=fetch, interval_s=0.01).start()
    assert polled.wait(10)
    feed.stop()
    assert feed._thread is not None and not feed._thread.is_alive()
    assert feed.view()["error"] is not None
