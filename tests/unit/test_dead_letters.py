"""Dead letters have one owner: the topic they go to and the headers they carry."""

from __future__ import annotations

from typing import Any

import pytest

from medusa import dead_letters, topics
from medusa.dead_letters import DeadLetter

pytestmark = pytest.mark.unit


class _Producer:
    def __init__(self, unflushed: int = 0) -> None:
        self.produced: list[tuple[str, bytes | None, bytes | None, list]] = []
        self.unflushed = unflushed

    def produce(self, topic: str, key: bytes | None, value: bytes | None, headers: list) -> None:
        self.produced.append((topic, key, value, headers))

    def flush(self, timeout: float) -> int:
        return self.unflushed


def test_a_dead_letter_keeps_the_record_and_says_why_and_where() -> None:
    letter = DeadLetter("lr.reports", "EnvelopeError: no medusa.type", b"v", key=b"k",
                        headers=[("medusa.id", b"t-1")], partition=2, offset=17)
    assert letter.destination == "lr.reports.dlq"
    assert letter.dlq_headers() == [
        ("medusa.id", b"t-1"),
        ("medusa.dlq.reason", b"EnvelopeError: no medusa.type"),
        ("medusa.dlq.topic", b"lr.reports"),
        ("medusa.dlq.partition", b"2"),
        ("medusa.dlq.offset", b"17"),
    ]
    boxed = DeadLetter("lr.reports", "bad", None, box="moving")
    assert boxed.dlq_headers()[-1] == ("medusa.dlq.box", b"moving")


def test_send_writes_every_letter_and_waits_for_the_broker() -> None:
    producer: Any = _Producer()
    dead_letters.send(producer, [DeadLetter("a", "r1", b"1"), DeadLetter("b", "r2", b"2")])
    assert [(topic, value) for topic, _, value, _ in producer.produced] == [
        ("a.dlq", b"1"), ("b.dlq", b"2")]
    stuck: Any = _Producer(unflushed=1)
    with pytest.raises(RuntimeError, match="could not write 1 dead letter"):
        dead_letters.send(stuck, [DeadLetter("a", "r", b"1")])


def test_the_topic_module_re_exports_the_dead_letter_topic() -> None:
    assert topics.dead_letter_topic is dead_letters.dead_letter_topic
    assert topics.dead_letter_topic("x") == "x.dlq"
