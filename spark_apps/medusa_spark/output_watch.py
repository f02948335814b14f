"""How long a fragment's output has been silent, and how far its boundaries have come, as
its readers see it.

A reader-side replica (``medusa.reader_side``) tails the output topics on its own
cluster, committed records only, and takes the output over when nothing has come for
the fragment's delay D while its own boundaries have gone well past the output's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from confluent_kafka import OFFSET_END, Consumer, KafkaException, TopicPartition

from medusa.envelope import STIME_HEADER, TYPE_HEADER
from medusa.settings import kafka_config

BOUNDARY = b"BOUNDARY"

log = logging.getLogger(__name__)


class OutputWatch:
    def __init__(self, topics: Sequence[str], bootstrap: str, name: str) -> None:
        self.topics = list(topics)
        self.bootstrap = bootstrap
        self.name = name
        self.last_record_at = time.monotonic()
        """When the newest committed record came (monotonic clock); the start until then."""
        self.newest_boundary_ms: int | None = None
        """The largest stime a BOUNDARY written since the watch began promised (None: the
        output has promised nothing since, as before its primary's first batch)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"output-watch {name}",
                                        daemon=True)

    def start(self) -> OutputWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def silent_s(self) -> float:
        return time.monotonic() - self.last_record_at

    def _run(self) -> None:
        consumer = Consumer(kafka_config(self.bootstrap, **{
            "group.id": f"medusa.output-watch.{self.name}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 100,
        }))
        try:
            while not self._stop.is_set():
                try:
                    partitions = [TopicPartition(topic, p, OFFSET_END)
                                  for topic in self.topics for p in
                                  consumer.list_topics(topic, timeout=5).topics[topic].partitions]
                    break
                except (KafkaException, KeyError) as error:
                    log.debug("%s: output topics not readable yet: %s", self.name, error)
                    self._stop.wait(1.0)
            else:
                return
            consumer.assign(partitions)
            while not self._stop.is_set():
                message = consumer.poll(0.2)
                if message is None or message.error() is not None:
                    continue
                self.last_record_at = time.monotonic()
                self._note_boundary(dict(message.headers() or []))
        finally:
            consumer.close()

    def _note_boundary(self, headers: dict[str, str | bytes | None]) -> None:
        stime = headers.get(STIME_HEADER)
        if headers.get(TYPE_HEADER) != BOUNDARY or stime is None:
            return
        promised = int(stime)
        if self.newest_boundary_ms is None or promised > self.newest_boundary_ms:
            self.newest_boundary_ms = promised
