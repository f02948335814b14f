"""Creating topics while a cluster's only broker is fenced for a moment (its heartbeat
late behind a stalled fsync), and reading their metadata while it is slow to answer:
asked again until a broker answers, not failed."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from medusa import topics

pytestmark = pytest.mark.unit

FENCED = KafkaError(KafkaError.INVALID_REPLICATION_FACTOR,
                    "Unable to replicate the partition 1 time(s): All brokers are currently "
                    "fenced, or have all their log directories cordoned.")


class _Admin:
    """Answers each creation with the next of ``answers`` (None: created)."""

    def __init__(self, answers: list[KafkaError | None]) -> None:
        self.answers = answers
        self.asked: list[list[str]] = []
        self.metadata_answers: list[KafkaError | int] = []
        self.metadata_asked = 0

    def __call__(self, _config: dict[str, Any]) -> _Admin:
        return self

    def create_topics(self, new: list[Any], **_: Any) -> dict[str, Future[None]]:
        self.asked.append([t.topic for t in new])
        futures = {}
        for topic in new:
            future: Future[None] = Future()
            answer = self.answers.pop(0)
            if answer is None:
                future.set_result(None)
            else:
                future.set_exception(KafkaException(answer))
            futures[topic.topic] = future
        return futures

    def list_topics(self, topic: str, timeout: float) -> Any:
        self.metadata_asked += 1
        answer = self.metadata_answers.pop(0)
        if isinstance(answer, KafkaError):
            raise KafkaException(answer)
        described = SimpleNamespace(error=None, partitions=dict.fromkeys(range(answer)))
        return SimpleNamespace(topics={topic: described})


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> _Admin:
    fake = _Admin([])
    monkeypatch.setattr(topics, "AdminClient", fake)
    monkeypatch.setattr(topics, "RETRY_S", 0.01)
    return fake


def test_a_topic_no_broker_could_take_is_asked_for_again(admin: _Admin) -> None:
    admin.answers = [None, FENCED, FENCED, None]
    topics.ensure_topics({}, ["a", "b"])
    assert admin.asked == [["a", "b"], ["b"], ["b"]]


def test_an_existing_topic_is_no_error(admin: _Admin) -> None:
    admin.answers = [KafkaError(KafkaError.TOPIC_ALREADY_EXISTS, "exists")]
    topics.ensure_topics({}, ["a"])
    assert admin.asked == [["a"]]


def test_still_fenced_at_the_timeout_fails_saying_why(admin: _Admin) -> None:
    admin.answers = [FENCED] * 1000
    with pytest.raises(RuntimeError, match=r"could not create topic a: .*fenced"):
        topics.ensure_topics({}, ["a"], timeout_s=0.05)


def test_more_replicas_than_brokers_asked_for_fails_at_once(admin: _Admin) -> None:
    admin.answers = [FENCED]
    with pytest.raises(RuntimeError, match="could not create topic a"):
        topics.ensure_topics({}, ["a"], replication_factor=3)
    assert admin.asked == [["a"]]


SILENT = KafkaError(KafkaError._TIMED_OUT, "Failed to get metadata: Local: Timed out")


def test_metadata_not_given_in_time_is_asked_for_again(admin: _Admin) -> None:
    admin.metadata_answers = [SILENT, SILENT, 6]
    assert topics.partition_count({}, "a") == 6
    assert admin.metadata_asked == 3


def test_metadata_never_given_fails_as_a_timeout_saying_why(admin: _Admin) -> None:
    admin.metadata_answers = [SILENT] * 1000
    with pytest.raises(TimeoutError, match=r"topic a: the cluster gave no metadata within 0s"):
        topics.partition_count({}, "a", timeout_s=0.0)
