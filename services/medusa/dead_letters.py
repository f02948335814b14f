"""Dead letters: the one place that says how an unusable record is kept.

A dead-lettered record goes to ``<topic>.dlq`` on the cluster of the topic it
came from, with its key, value and headers unchanged, plus ``medusa.dlq.*``
headers saying why and where it came from (and which box refused it, if a box
did), so that nothing is lost and it can be replayed once fixed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import Producer

DEAD_LETTER_SUFFIX = ".dlq"
REASON_HEADER = "medusa.dlq.reason"
TOPIC_HEADER = "medusa.dlq.topic"
PARTITION_HEADER = "medusa.dlq.partition"
OFFSET_HEADER = "medusa.dlq.offset"
BOX_HEADER = "medusa.dlq.box"

Header = tuple[str, str | bytes | None]


def dead_letter_topic(topic: str) -> str:
    return f"{topic}{DEAD_LETTER_SUFFIX}"


@dataclass(frozen=True)
class DeadLetter:
    """An unusable record, where it came from and why it cannot be used."""

    topic: str
    reason: str
    value: bytes | None
    key: bytes | None = None
    headers: Sequence[Header] = ()
    partition: int | None = None
    offset: int | None = None
    box: str | None = None
    """The box (or fragment) that refused it; None when a reader or the SUnion did."""

    @property
    def destination(self) -> str:
        return dead_letter_topic(self.topic)

    def dlq_headers(self) -> list[Header]:
        """The original headers followed by the ``medusa.dlq.*`` ones."""
        extra: list[Header] = [(REASON_HEADER, self.reason.encode()),
                               (TOPIC_HEADER, self.topic.encode())]
        if self.partition is not None:
            extra.append((PARTITION_HEADER, str(self.partition).encode()))
        if self.offset is not None:
            extra.append((OFFSET_HEADER, str(self.offset).encode()))
        if self.box is not None:
            extra.append((BOX_HEADER, self.box.encode()))
        return [*self.headers, *extra]


def produce(producer: Producer, letter: DeadLetter) -> None:
    """Queues the dead letter on ``producer`` (inside its transaction, if one is open)."""
    producer.produce(letter.destination, key=letter.key, value=letter.value,
                     headers=letter.dlq_headers())


def send(producer: Producer, letters: Sequence[DeadLetter], timeout_s: float = 30.0) -> None:
    """Writes the dead letters and waits until the broker has them all."""
    for letter in letters:
        produce(producer, letter)
    if letters and producer.flush(timeout_s) != 0:
        raise RuntimeError(f"could not write {len(letters)} dead letter(s) within "
                           f"{timeout_s:.0f}s")
