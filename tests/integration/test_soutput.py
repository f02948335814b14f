"""SOutput against the real Kafka: one transaction per batch over all of a fragment's
output topics, duplicates dropped by tuple id across writers, the previous writer fenced,
and a standby that writes only what is missing."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer

from medusa.envelope import ID_HEADER, TYPE_HEADER
from medusa.settings import kafka_config as client_config
from medusa.topics import ensure_topics
from medusa_spark.soutput import OutputFencedError, OutRecord, SOutput, transactional_id
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


def _records(topic: str, ids: range) -> list[OutRecord]:
    return [OutRecord(topic, f"t{i}", f"v{i}".encode(), [(TYPE_HEADER, b"STABLE"),
                                                          (ID_HEADER, f"t{i}".encode())],
                      key=f"k{i % 3}".encode()) for i in ids]


def _committed_ids(bootstrap: str, topic: str) -> list[str]:
    consumer = Consumer(client_config(bootstrap, {
        "group.id": f"read-{topic}", "auto.offset.reset": "earliest",
        "isolation.level": "read_committed", "enable.partition.eof": True}))
    consumer.subscribe([topic])
    ids, ended = [], set()
    try:
        while len(ended) < 2:
            message = consumer.poll(10)
            assert message is not None, "the topic's end did not come"
            if message.error() is not None:
                ended.add(message.partition())
                continue
            ids.append(dict(message.headers() or [])[ID_HEADER].decode())
    finally:
        consumer.close()
    return ids


@pytest.fixture
def output_topic(kafka_config, topic) -> str:
    ensure_topics(kafka_config, [topic], partitions=2)
    return topic


def test_a_takeover_fences_the_old_writer_and_drops_what_it_wrote(kafka_config,
                                                                  output_topic) -> None:
    bootstrap = kafka_config["bootstrap.servers"]
    first = SOutput(output_topic, [output_topic], bootstrap)
    assert first.write(_records(output_topic, range(0, 10))) == 10
    # The next writer replays the last batch (its checkpoint lacked the commit) and more.
    second = SOutput(output_topic, [output_topic], bootstrap)
    assert second.write(_records(output_topic, range(5, 15))) == 5
    assert second.stats.duplicates_dropped == 5 and second.stats.recovered_ids == 10
    with pytest.raises(OutputFencedError):
        first.write(_records(output_topic, range(15, 20)))
    assert sorted(_committed_ids(bootstrap, output_topic)) == sorted(f"t{i}" for i in range(15))


def test_a_result_twice_in_one_batch_is_written_once(kafka_config, output_topic) -> None:
    """A real-time fragment's relay can read one result staged by a failed node's query
    and again by its successor's in one batch."""
    bootstrap = kafka_config["bootstrap.servers"]
    output = SOutput(output_topic, [output_topic], bootstrap)
    assert output.write(_records(output_topic, range(0, 5)) +
                        _records(output_topic, range(3, 8))) == 8
    assert output.stats.duplicates_dropped == 2
    assert sorted(_committed_ids(bootstrap, output_topic)) == sorted(f"t{i}" for i in range(8))


def test_an_open_transaction_of_a_dead_writer_is_aborted(kafka_config, output_topic) -> None:
    bootstrap = kafka_config["bootstrap.servers"]
    dead = Producer(client_config(bootstrap,
                                  {"transactional.id": transactional_id(output_topic)}))
    dead.init_transactions(30)
    dead.begin_transaction()
    for record in _records(output_topic, range(0, 5)):  # half a batch, then the node dies
        dead.produce(output_topic, value=record.value, key=record.key, headers=record.headers)
    dead.flush(10)
    successor = SOutput(output_topic, [output_topic], bootstrap)
    assert successor.write(_records(output_topic, range(0, 8))) == 8
    assert sorted(_committed_ids(bootstrap, output_topic)) == sorted(f"t{i}" for i in range(8))


def test_a_promoted_standby_writes_only_what_the_primary_had_not(kafka_config,
                                                                 output_topic) -> None:
    bootstrap = kafka_config["bootstrap.servers"]
    primary = SOutput(output_topic, [output_topic], bootstrap)
    standby = SOutput(output_topic, [output_topic], bootstrap, standby=True)
    primary.write(_records(output_topic, range(0, 10)))
    assert standby.write(_records(output_topic, range(0, 12))) == 0  # kept, not written
    assert standby.promote() == 2
    assert standby.write(_records(output_topic, range(12, 14))) == 2
    with pytest.raises(OutputFencedError):
        primary.write(_records(output_topic, range(10, 12)))
    ids = _committed_ids(bootstrap, output_topic)
    assert sorted(ids) == sorted(f"t{i}" for i in range(14)) and len(ids) == len(set(ids))


def test_a_following_standby_knows_what_the_primary_wrote_without_reading_it_back(
        kafka_config, output_topic, monkeypatch) -> None:
    """The standby follows the ids the primary commits (before it started and after), and
    the promotion reads on only to the end: a transaction left open is aborted, not
    counted."""
    bootstrap = kafka_config["bootstrap.servers"]
    primary = SOutput(output_topic, [output_topic], bootstrap)
    primary.write(_records(output_topic, range(0, 10)))
    standby = SOutput(output_topic, [output_topic], bootstrap, standby=True)
    standby.follow()
    primary.write(_records(output_topic, range(10, 20)))

    def followed(tuple_id: str) -> bool:
        follower = standby._follower
        return follower is not None and (output_topic, tuple_id) in follower.ids
    wait_until("the follower reads t19", lambda: followed("t19"), 30, interval_s=0.1)
    result_at = standby.primary_wrote_at()
    # A BOUNDARY (written every batch) is no result: the next result is as far off.
    primary.write([OutRecord(output_topic, "boundary-1", None,
                             [(TYPE_HEADER, b"BOUNDARY"), (ID_HEADER, b"boundary-1")],
                             partition=0)])
    wait_until("the follower reads the BOUNDARY", lambda: followed("boundary-1"), 30,
               interval_s=0.1)
    assert standby.primary_wrote_at() == result_at, "a BOUNDARY counted as a result"
    dead = Producer(client_config(bootstrap,
                                  {"transactional.id": transactional_id(output_topic)}))
    dead.init_transactions(30)  # the primary's successor dies mid-batch
    dead.begin_transaction()
    for record in _records(output_topic, range(20, 25)):
        dead.produce(output_topic, value=record.value, key=record.key, headers=record.headers)
    dead.flush(10)
    assert standby.write(_records(output_topic, range(0, 15))) == 0
    # Its newest, t14, is one the primary has written: not ahead once the follower has it.
    wait_until("the follower reads t14", lambda: not standby.is_ahead(), 30,
               interval_s=0.1)
    wrote_at = standby.primary_wrote_at()
    assert wrote_at is not None and wrote_at <= time.time(), "when the primary last wrote"
    assert standby.write(_records(output_topic, range(15, 30))) == 0
    assert standby.is_ahead(), "t29 is not written yet: promoted now, it comes earlier"

    def read_back(*_: object) -> list[str]:
        raise AssertionError("the promotion read the horizon back instead of following it")
    monkeypatch.setattr(SOutput, "_read_tail", read_back)
    assert standby.promote() == 10
    assert standby.stats.recovered_ids == 21  # the 20 results and the BOUNDARY
    ids = [i for i in _committed_ids(bootstrap, output_topic) if i != "boundary-1"]
    assert sorted(ids) == sorted(f"t{i}" for i in range(30)) and len(ids) == len(set(ids))


def test_one_transaction_spans_the_fragments_output_topics(kafka_config, topic) -> None:
    bootstrap = kafka_config["bootstrap.servers"]
    first_topic, second_topic = f"{topic}.a", f"{topic}.b"
    ensure_topics(kafka_config, [first_topic, second_topic], partitions=2)
    writer = SOutput(topic, [first_topic, second_topic], bootstrap)
    # The same id on two outputs is two results, not a duplicate.
    both = _records(first_topic, range(0, 6)) + _records(second_topic, range(0, 4))
    assert writer.write(both) == 10
    successor = SOutput(topic, [first_topic, second_topic], bootstrap)
    assert successor.write(_records(second_topic, range(0, 6))) == 2
    assert sorted(_committed_ids(bootstrap, first_topic)) == sorted(f"t{i}" for i in range(6))
    assert sorted(_committed_ids(bootstrap, second_topic)) == sorted(f"t{i}" for i in range(6))
