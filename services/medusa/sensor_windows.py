"""The sensor-windows example: steady sensor input, and its per-window reference results.

Used by the distribution tests and the move benchmark: readings of ``sensors``
sensors, one per sensor and second, go to a topic in real time; the network
averages them per sensor and 10-second window. Its stimes start at a fixed
origin, so that the reference results do not depend on when the run happened.

The network definitions themselves belong to the data plane: ``medusa_spark.networks``
ships them and builds their variants (``network_yaml``, ``pair_network_yaml``,
``chain_network_yaml``).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient

from medusa.producing import TupleProducer
from medusa.schemas import schema_for_topic
from medusa.sensors import SENSOR_READINGS, SensorReading, sensor_readings, to_dict
from medusa.topics import ensure_topics

STIME_ORIGIN_MS = 1_800_000_000_000
"""Second 0 of the input: a multiple of the window, so windows start at whole seconds."""
WINDOW_MS = 10_000
END_OF_INPUT_MS = 60_000
"""How far past the last possible round the end-of-input boundary goes."""
CHAIN_WINDOW_MS = 20_000
"""The window of the chain example's downstream box (``medusa_spark.networks``)."""


def chain_reference(readings: list[SensorReading]) -> dict[str, dict[str, Any]]:
    """Result id -> result of the chain's per_sensor_20s box, computed in plain Python."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for result in reference(readings).values():
        start = result["window_start_ms"]
        groups[(result["sensor_id"], start - start % CHAIN_WINDOW_MS)].append(result)
    return {
        f"per_sensor_20s/{sensor}/{start}": {
            "sensor_id": sensor, "windows": len(results),
            "readings": sum(r["readings"] for r in results),
            "total": round(sum(r["total"] for r in results), 6), "window_start_ms": start}
        for (sensor, start), results in groups.items()
    }


def reference(readings: list[SensorReading]) -> dict[str, dict[str, Any]]:
    """Result id -> result of the per_sensor box, computed in plain Python."""
    groups: dict[tuple[str, int], list[float]] = defaultdict(list)
    for reading in readings:
        start = reading.measured_at - reading.measured_at % WINDOW_MS
        groups[(reading.sensor_id, start)].append(reading.value)
    return {
        f"per_sensor/{sensor}/{start}": {
            "sensor_id": sensor, "readings": len(values), "total": round(sum(values), 6),
            "top": max(values), "window_start_ms": start}
        for (sensor, start), values in groups.items()
    }


@dataclass
class SteadyInput:
    """Publishes ``seconds`` rounds of readings, one round per ``1 / speedup`` seconds, and
    then more while ``keep_going()`` says so, or, ``open_ended``, until ``end_in`` (at most
    ``max_seconds`` in all): a scenario keeps its input flowing until its steps are done
    rather than for a length guessed to cover them."""

    kafka_config: dict[str, Any]
    registry: SchemaRegistryClient
    topic: str
    sensors: int
    seconds: int
    speedup: float = 1.0
    trace_every: int = 0
    """Trace one reading in this many from the producer through the boxes to the sink."""
    keep_going: Callable[[], bool] | None = None
    open_ended: bool = False
    """Goes on past ``seconds`` until ``end_in`` is called (and its time has passed)."""
    max_seconds: int = 600
    sensor_prefix: str = "s"
    """Its sensors' ids begin so (``sensor_readings``)."""
    paused: threading.Event = field(default_factory=threading.Event)
    """While set, nothing goes out (an input that fails); afterwards the rounds it held
    back go out at once, as a producer that buffered them would send them."""
    sent: list[SensorReading] = field(default_factory=list)
    sent_at_ms: dict[int, int] = field(default_factory=dict)
    """Stime of each round -> when it went out (wall clock, ms)."""
    finished: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    _ends_at: float | None = field(default=None, init=False, repr=False)

    def end_in(self, seconds: float) -> None:
        """An open-ended input stops ``seconds`` from now (once ``seconds`` rounds went out)."""
        self._ends_at = time.monotonic() + seconds

    def finish(self, tail_s: float) -> dict[str, dict[str, Any]]:
        """Ends the input ``tail_s`` from now and waits for its last round: the reference
        results of all that was sent."""
        self.end_in(tail_s)
        if not self.finished.wait(tail_s + self.seconds / self.speedup + 120):
            raise TimeoutError(f"{self.topic}: the input did not finish")
        if self.error is not None:
            raise self.error
        return self.expected()

    def _goes_on(self) -> bool:
        if self.keep_going is not None and self.keep_going():
            return True
        return self.open_ended and (self._ends_at is None or time.monotonic() < self._ends_at)

    def readings(self) -> list[SensorReading]:
        """The first ``seconds`` rounds; ``sent`` has all that went out."""
        return list(sensor_readings(self.sensors, STIME_ORIGIN_MS, 1000,
                                    self.sensors * self.seconds, prefix=self.sensor_prefix))

    def expected(self) -> dict[str, dict[str, Any]]:
        """The reference results of what was sent (once ``finished``)."""
        return reference(self.sent)

    def run(self) -> None:
        try:
            self._publish()
        except BaseException as error:  # surfaced by the caller through .error
            self.error = error
        finally:
            self.finished.set()

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="steady-input", daemon=True)
        thread.start()
        return thread

    def _publish(self) -> None:
        ensure_topics(self.kafka_config, [self.topic], partitions=2)
        rounds: dict[int, list[SensorReading]] = defaultdict(list)
        for reading in sensor_readings(self.sensors, STIME_ORIGIN_MS, 1000,
                                       self.sensors * max(self.seconds, self.max_seconds),
                                       prefix=self.sensor_prefix):
            rounds[reading.measured_at].append(reading)
        started = time.monotonic()
        last = STIME_ORIGIN_MS
        with TupleProducer(self.kafka_config, self.registry, self.topic,
                           schema_for_topic(SENSOR_READINGS), f"steady/{self.topic}",
                           to_dict, trace_every=self.trace_every) as producer:
            for index, (stime, batch) in enumerate(sorted(rounds.items())):
                if index >= self.seconds and not self._goes_on():
                    break
                delay = started + index / self.speedup - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                while self.paused.is_set():
                    time.sleep(0.05)
                for reading in batch:
                    producer.produce(reading, reading.tuple_id, stime, key=reading.sensor_id)
                    self.sent.append(reading)
                producer.emit_boundaries(stime)
                self.sent_at_ms[stime] = time.time_ns() // 1_000_000
                last = stime
            # End of input: a boundary past the last window closes them all. The same
            # stime for every input, however far each got: inputs that ended at different
            # rounds would otherwise leave a bucket between their ends that one of them
            # never passes, which DPC rightly takes for a failed input.
            producer.emit_boundaries(
                max(last, STIME_ORIGIN_MS + self.max_seconds * 1000) + END_OF_INPUT_MS)
            if producer.flush(30):
                raise RuntimeError(f"{self.topic}: readings left undelivered")


@dataclass(frozen=True)
class Arrival:
    tuple_id: str
    value: dict[str, Any]
    appended_ms: int
    """When the record was written (its Kafka timestamp)."""


class OutputWatch:
    """Collects the data tuples of some topics, from the start, on a thread of its own."""

    def __init__(self, kafka_config: dict[str, Any], registry: SchemaRegistryClient,
                 topics: list[str]) -> None:
        from medusa.consuming import TupleConsumer

        self.arrivals: dict[str, list[Arrival]] = {topic: [] for topic in topics}
        self._consumer = TupleConsumer(kafka_config, registry, topics,
                                       f"watch-{time.time_ns()}")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="output-watch", daemon=True)
        self._lock = threading.Lock()

    def start(self) -> OutputWatch:
        self._thread.start()
        return self

    def _run(self) -> None:
        from medusa.envelope import TupleType

        while not self._stop.is_set():
            consumed = self._consumer.poll(0.5)
            if consumed is None or consumed.record.type not in (TupleType.STABLE,
                                                                 TupleType.TENTATIVE):
                continue
            arrival = Arrival(consumed.record.tuple_id, dict(consumed.record.value),
                              consumed.timestamp_ms)
            with self._lock:
                self.arrivals[consumed.topic].append(arrival)

    def ids(self, topic: str) -> list[str]:
        with self._lock:
            return [a.tuple_id for a in self.arrivals[topic]]

    def arrived(self, topic: str) -> list[Arrival]:
        with self._lock:
            return list(self.arrivals[topic])

    def wait_for(self, topic: str, expected: set[str], timeout_s: float,
                 settle_s: float = 5.0) -> None:
        """Until every expected id has come (and ``settle_s`` more, for any duplicate)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not expected <= set(self.ids(topic)):
            time.sleep(0.5)
        time.sleep(settle_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()
