"""Faults on the links between participants, with the real toxiproxy and Kafka: alpha's
services reach beta's cluster through the link; cut, it reaches nothing while beta's own
producers go on; healed, everything written meanwhile arrives. The CLI does the same."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from medusa.settings import kafka_config
from medusa.topics import ensure_topics
from tests.federation_processes import federation_env
from tests.waiting import first_within

pytestmark = pytest.mark.integration


def _values(consumer: Consumer, wanted: int, within_s: float) -> list[bytes]:
    """What came within ``within_s``, once ``wanted`` came (the test's checks tell the rest)."""
    values: list[bytes] = []

    def enough() -> bool:
        if len(values) >= wanted:
            return True
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            values.append(message.value())
        return False

    first_within(enough, within_s, interval_s=0)  # poll waits
    return values


def test_alpha_reaches_beta_through_the_link(federation, links) -> None:
    through_link = federation.seen_from("alpha").bootstrap("beta")
    assert through_link != federation.bootstrap("beta")
    assert through_link == federation.links["beta-from-alpha"]
    metadata = AdminClient(kafka_config(through_link)).list_topics(timeout=10)
    assert [b.port for b in metadata.brokers.values()] == [int(through_link.split(":")[1])], \
        "beta's broker advertises the link to alpha's clients, so they stay behind it"
    assert federation.seen_from("beta").bootstrap("beta") == federation.bootstrap("beta")


def test_a_partition_cuts_alpha_off_beta_until_it_heals(federation, links, topic) -> None:
    beta = federation.bootstrap("beta")
    ensure_topics(kafka_config(beta), [topic], partitions=1)
    producer = Producer(kafka_config(beta))  # beta's own sensors: never cut off
    consumer = Consumer(kafka_config(federation.seen_from("alpha").bootstrap("beta"), {
        "group.id": f"test-{uuid.uuid4()}", "auto.offset.reset": "earliest",
        "reconnect.backoff.max.ms": 1000}))
    consumer.subscribe([topic])
    try:
        producer.produce(topic, b"before")
        producer.flush(10)
        assert _values(consumer, 1, 30) == [b"before"]

        assert links.partition("alpha", "beta") == ["alpha-from-beta", "beta-from-alpha"]
        assert _conditions(links) == {"alpha-from-beta": "cut", "beta-from-alpha": "cut"}
        assert _untouched(links), "gamma's links stay up"
        for index in range(3):
            producer.produce(topic, f"during-{index}".encode())
        producer.flush(10)
        assert _values(consumer, 1, 4) == [], "nothing crosses a cut link"

        assert sorted(links.heal()) == ["alpha-from-beta", "beta-from-alpha"]
        assert _values(consumer, 3, 60) == [b"during-0", b"during-1", b"during-2"], \
            "what beta wrote meanwhile arrives once the link heals"
    finally:
        consumer.close()


def test_a_slow_link_delays_what_crosses_it(federation, links, topic) -> None:
    beta = federation.bootstrap("beta")
    ensure_topics(kafka_config(beta), [topic], partitions=1)
    links.slow("alpha", "beta", 700)
    assert set(_conditions(links).values()) == {"slow (+700 ms)"} and _untouched(links)
    admin = AdminClient(kafka_config(federation.seen_from("alpha").bootstrap("beta")))
    began = time.monotonic()
    admin.list_topics(topic, timeout=30)
    # A fresh connection's request and answer each wait 700 ms: a lower bound, not a timing.
    assert time.monotonic() - began >= 1.4
    links.heal("beta", "alpha")
    assert set(_conditions(links).values()) == {"up"}


def _conditions(links) -> dict[str, str]:
    """The links between alpha and beta, each with its condition."""
    return {s.name: s.condition for s in links.states()
            if s.name in ("alpha-from-beta", "beta-from-alpha")}


def _untouched(links) -> bool:
    """Whether every other link (a third participant's) is up."""
    return all(s.condition == "up" for s in links.states()
               if s.name not in ("alpha-from-beta", "beta-from-alpha"))


def _medusa(federation, tmp_path, *arguments: str) -> subprocess.CompletedProcess[str]:
    env = {**federation_env(federation, tmp_path), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "medusa_apps", *arguments], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_the_cli_cuts_heals_and_explains(federation, links, tmp_path) -> None:
    cut = _medusa(federation, tmp_path, "fault", "partition", "alpha", "beta", "--for", "1s")
    assert cut.returncode == 0, cut.stderr
    assert "healed the link between alpha and beta" in cut.stdout
    assert {s.condition for s in links.states()} == {"up"}  # every link

    one_way = _medusa(federation, tmp_path, "fault", "partition", "alpha", "beta", "--one-way")
    assert one_way.returncode == 0, one_way.stderr
    assert "beta cannot reach alpha" in one_way.stdout
    assert _conditions(links) == {"alpha-from-beta": "cut", "beta-from-alpha": "up"}
    assert _untouched(links)
    links.heal()

    slowed = _medusa(federation, tmp_path, "fault", "slow", "alpha", "beta", "--latency", "2s")
    assert slowed.returncode == 0, slowed.stderr
    status = _medusa(federation, tmp_path, "fault", "status")
    assert "slow (+2000 ms)" in status.stdout
    healed = _medusa(federation, tmp_path, "fault", "heal")
    assert "healed: alpha-from-beta, beta-from-alpha" in healed.stdout

    unknown = _medusa(federation, tmp_path, "fault", "partition", "alpha", "omega")
    assert unknown.returncode == 2
    assert "no link between 'alpha' and 'omega'" in " ".join(unknown.stderr.split())
    bad = _medusa(federation, tmp_path, "fault", "slow", "alpha", "beta", "--latency", "fast")
    assert bad.returncode == 2 and "expected a duration such as 30s" in " ".join(
        bad.stderr.split())


def test_kill_names_what_runs_when_the_target_does_not(federation, tmp_path) -> None:
    result = _medusa(federation, tmp_path, "fault", "kill", "sunion:alpha/none/f9")
    assert result.returncode == 2
    assert "no SUnion of fragment 'alpha/none/f9' runs here" in " ".join(result.stderr.split())
