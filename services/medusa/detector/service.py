"""The failure detector: reads the nodes' heartbeats, declares failures and recoveries.

It watches every node the catalog lists as up (of the participants it is given),
from the moment it learns of the node: a node that never sends a heartbeat is
declared failed like one that stops. A node declared failed is marked ``failed``
in the catalog with the incarnation that failed, and its fragments are placed on
other nodes (see ``takeover``). The node is recovered when it registers again
with a new incarnation and its heartbeats come; heartbeats of the failed
incarnation are ignored (that node is fenced, and rejoins as a new one).

Every failure is one trace: the missed heartbeats, the suspicion, the
declaration, and below it the takeovers, which the new nodes continue.
"""

from __future__ import annotations

import io
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import fastavro
from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition
from opentelemetry import trace
from opentelemetry.trace import Tracer

from medusa.catalog.client import CatalogClient, CatalogError
from medusa.catalog.model import Entry, Kind
from medusa.consuming import take
from medusa.detector.paths import CANARY_HEADER, HeartbeatPaths
from medusa.detector.policy import DetectorConfig, Health, Policy
from medusa.detector.takeover import Takeover, take_over
from medusa.endpoints import Endpoints
from medusa.envelope import TYPE_HEADER, header_text
from medusa.schemas import HEARTBEAT_TOPIC, HEARTBEAT_TOPIC_CONFIG, schema_for_topic
from medusa.settings import kafka_config
from medusa.topics import ensure_topics
from medusa.tracing import traceparent

log = logging.getLogger("medusa.detector")

CANARY_INTERVAL_S = 0.2
CANARY_LATE_AFTER_S = 0.5
"""A canary this late means a stalled path: below the silence after which the defaults
declare a node failed (about 1.2 s after its last heartbeat), and far above a canary's
round trip through the broker (milliseconds)."""
LOCAL_PAUSE_S = 0.5
"""A pass of the detector's loop this long after the last means the detector itself was
away (descheduled, a slow catalog call): a canary cannot tell, as none was sent meanwhile.
Far above a pass (about 0.1 s), below the silence after which a node is declared failed."""


@dataclass
class Watched:
    node: str
    incarnation: str | None
    policy: Policy
    health: Health = Health.ALIVE
    last_heartbeat_wall: float | None = None
    """Wall-clock time of the last heartbeat, for the trace."""
    suspected_at_wall: float | None = None
    heartbeats: int = 0
    sent_at_ms: int | None = None
    """When the node sent its latest heartbeat (its clock)."""
    sent_gap_s: float = 0.0
    """How far apart the node sent its latest two heartbeats: after a silence, whether the
    node stopped beating (a long gap) or its beats were held up on the way (a short one)."""
    gaps: HeartbeatGaps = field(default_factory=lambda: HeartbeatGaps())
    """How far apart its heartbeats arrived: what the interval and the pause are set from."""


@dataclass
class HeartbeatGaps:
    """The intervals between a node's heartbeats as they arrived here (its beat, Kafka and
    this loop together): the longest, and the recent ones for percentiles."""

    longest_s: float = 0.0
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=2000))
    _last: float | None = None

    def arrived(self, at: float) -> None:
        if self._last is not None and at > self._last:
            gap = at - self._last
            self.recent.append(gap)
            self.longest_s = max(self.longest_s, gap)
        self._last = at

    def summary(self) -> dict[str, float | int]:
        gaps = sorted(self.recent)
        if not gaps:
            return {"count": 0}
        return {"count": len(gaps), "p50_s": round(gaps[len(gaps) // 2], 3),
                "p99_s": round(gaps[min(len(gaps) - 1, int(len(gaps) * 0.99))], 3),
                "longest_s": round(self.longest_s, 3)}


@dataclass(frozen=True)
class Event:
    kind: str
    """suspected, cleared, failed, recovered"""
    node: str
    at: float
    """Wall-clock seconds."""
    detail: str = ""
    takeovers: tuple[Takeover, ...] = ()


@dataclass
class DetectorState:
    events: deque[Event] = field(default_factory=lambda: deque(maxlen=1000))
    """The latest events, for the HTTP view and tests; the log has them all."""
    false_suspicions: int = 0
    local_pauses: int = 0
    """Passes after which the detector gave no verdict: it had been away itself."""


class FailureDetector:
    def __init__(self, endpoints: Endpoints, catalog: CatalogClient, config: DetectorConfig,
                 participants: list[str] | None = None, tracer: Tracer | None = None,
                 tick_s: float = 0.1, refresh_s: float = 1.0,
                 on_event: Callable[[Event], None] | None = None) -> None:
        self.endpoints = endpoints
        self.catalog = catalog
        self.config = config
        self.participants = participants or list(endpoints.kafka)
        self.tracer = tracer or trace.get_tracer("medusa")
        self.tick_s = tick_s
        self.refresh_s = refresh_s
        self.on_event = on_event
        self.watched: dict[str, Watched] = {}
        self.failed: dict[str, str | None] = {}
        """Nodes declared failed, with the incarnation that failed."""
        self.state = DetectorState()
        self.paths = HeartbeatPaths(CANARY_LATE_AFTER_S)
        self._holding: set[str] = set()
        """Participants whose path is stalled, with a declaration held back."""
        self._last_pass: float | None = None
        self._assess_s = 0.0
        self._verdicts_from = 0.0
        """After a pause of its own, no node is declared failed before this (monotonic)."""
        self._schema = schema_for_topic(HEARTBEAT_TOPIC).parsed
        self._stop = threading.Event()
        self._listed: list[Entry] | None = None
        """The catalog's nodes as last read, not applied yet."""
        self._listed_lock = threading.Lock()
        self._next_canary = 0.0
        self._canary_id = uuid.uuid4().hex
        """Tells this detector's canaries from another one's on the same path."""

    # -- heartbeats -----------------------------------------------------------------------

    def _consumers(self) -> list[Consumer]:
        consumers = []
        for participant in self.participants:
            bootstrap = self.endpoints.bootstrap(participant)
            ensure_topics(kafka_config(bootstrap), [HEARTBEAT_TOPIC], partitions=1,
                          config=HEARTBEAT_TOPIC_CONFIG)
            consumer = Consumer(kafka_config(bootstrap, group_id=f"medusa.detector.{participant}",
                                             enable_auto_commit=False))
            # Only heartbeats from now on matter: the catalog says who to expect.
            consumer.assign([TopicPartition(HEARTBEAT_TOPIC, 0, OFFSET_END)])
            consumers.append(consumer)
        return consumers

    def _send_canaries(self, producers: dict[str, Producer], now: float) -> None:
        if now < self._next_canary:
            return
        self._next_canary = now + CANARY_INTERVAL_S
        for participant, producer in producers.items():
            producer.produce(HEARTBEAT_TOPIC, value=b"",
                             headers=[(CANARY_HEADER, f"{self._canary_id} {now!r}")])
            producer.poll(0)
            self.paths.sent(participant, now)

    def heartbeat(self, node: str, incarnation: str, now: float,
                  sent_at_ms: int | None = None) -> None:
        watched = self.watched.get(node)
        if watched is None or watched.incarnation != incarnation:
            return  # not (yet) in the catalog as up, or a fenced incarnation
        if sent_at_ms is not None:
            if watched.sent_at_ms is not None:
                watched.sent_gap_s = max(0.0, (sent_at_ms - watched.sent_at_ms) / 1000)
            watched.sent_at_ms = sent_at_ms
        watched.policy.heartbeat(now)
        watched.gaps.arrived(now)
        watched.heartbeats += 1
        watched.last_heartbeat_wall = time.time()

    def _decode(self, value: bytes) -> dict[str, object]:
        # Confluent wire format: magic byte and 4-byte schema id, then the Avro body.
        record = fastavro.schemaless_reader(io.BytesIO(value[5:]), self._schema, None)
        assert isinstance(record, dict)
        return record

    # -- the catalog's view ---------------------------------------------------------------

    def refresh(self, now: float, listed: list[Entry] | None = None) -> None:
        """Watches the nodes the catalog lists as up (``listed``, else read now)."""
        if listed is None:
            listed = self.catalog.list(Kind.NODES)
        nodes = {e.name: e for e in listed if e.participant in self.participants}
        for name, entry in nodes.items():
            status, incarnation = entry.spec.get("status"), entry.spec.get("incarnation")
            watched = self.watched.get(name)
            if status != "up":
                if watched is not None and status == "down":
                    del self.watched[name]  # stopped cleanly: nothing to detect
                continue
            if watched is not None and watched.incarnation == incarnation:
                continue
            policy = self.config.policy_for_node()
            policy.heartbeat(now)  # joining counts as a sign of life
            self.watched[name] = Watched(name, incarnation, policy,
                                         last_heartbeat_wall=time.time())
            if name in self.failed:
                self._recovered(name, incarnation)
        for name in [n for n in self.watched if n not in nodes]:
            del self.watched[name]

    def _list_nodes(self) -> None:
        """Reads the catalog's nodes every ``refresh_s`` on a thread of its own, so that a
        slow catalog (it commits each write to Kafka; seconds while the disk is saturated)
        never holds up reading heartbeats. The loop applies what it read."""
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                listed = self.catalog.list(Kind.NODES)
            except CatalogError as error:
                log.warning("catalog: %s", error)
            else:
                with self._listed_lock:
                    self._listed = listed
            took = time.monotonic() - started
            if took > LOCAL_PAUSE_S:
                log.info("the catalog took %.1fs to list the nodes", took)
            self._stop.wait(max(0.0, self.refresh_s - took))

    def _take_listed(self) -> list[Entry] | None:
        with self._listed_lock:
            listed, self._listed = self._listed, None
        return listed

    # -- judging --------------------------------------------------------------------------

    def judge(self, now: float, read_s: float = 0.0) -> None:
        """One pass's verdicts, after its heartbeats were read. A pass long after the last
        means this detector was away itself: the nodes' heartbeats of that time may not be
        read yet, so for ``LOCAL_PAUSE_S`` nothing is declared failed (as Cassandra's
        detector skips its verdicts after a pause of its own). ``read_s``: how long this
        pass took to read the heartbeats, for the log."""
        away = 0.0 if self._last_pass is None else now - self._last_pass
        self._last_pass = now
        if away > LOCAL_PAUSE_S:
            self.state.local_pauses += 1
            self._verdicts_from = now + LOCAL_PAUSE_S
            log.warning("this detector was away for %.1fs (a pause of its own; its last "
                        "verdicts took %.1fs, reading heartbeats %.1fs): no node is declared "
                        "failed for %.1fs, until the heartbeats of that time are read",
                        away, self._assess_s, read_s, LOCAL_PAUSE_S)
        self.assess(now)
        self._assess_s = time.monotonic() - now

    def assess(self, now: float) -> None:
        for watched in list(self.watched.values()):
            health = watched.policy.assess(now)
            if self._held(watched, health, now) or \
                    (health == Health.FAILED and now < self._verdicts_from):
                health = Health.SUSPECT
            if health == watched.health:
                continue
            previous, watched.health = watched.health, health
            if health == Health.SUSPECT and previous == Health.ALIVE:
                watched.suspected_at_wall = time.time()
                silent = now - (watched.policy.last or now)
                self._event(Event("suspected", watched.node, time.time(),
                                  f"no heartbeat for {silent:.1f}s"))
            elif health == Health.ALIVE:
                self.state.false_suspicions += 1
                self._event(Event("cleared", watched.node, time.time(),
                                  f"its heartbeats were sent {watched.sent_gap_s:.1f}s apart"))
                watched.suspected_at_wall = None
            elif health == Health.FAILED:
                self._declare(watched)

    def _held(self, watched: Watched, health: Health, now: float) -> bool:
        """A failure not declared yet: the node's participant's path is stalled."""
        participant = watched.node.split("/", 1)[0]
        if not self.paths.stalled(participant, now):
            self._holding.discard(participant)
            return False
        if health != Health.FAILED:
            return False
        if participant not in self._holding:
            self._holding.add(participant)
            log.warning("the heartbeat path of %s is stalled (a canary %.1fs overdue): no "
                        "node of it is declared failed until it carries heartbeats again",
                        participant, self.paths.overdue_s(participant, now))
        return True

    def _declare(self, watched: Watched) -> None:
        declared_at = time.time()
        last = watched.last_heartbeat_wall or declared_at
        suspected = watched.suspected_at_wall or declared_at
        root = self.tracer.start_span(
            f"node failure {watched.node}", start_time=_ns(last),
            attributes={"medusa.node": watched.node,
                        "medusa.incarnation": watched.incarnation or "",
                        "medusa.detector.policy": self.config.policy,
                        "medusa.detector.acceptable_pause_s": self.config.acceptable_pause_s,
                        "medusa.heartbeats.received": watched.heartbeats})
        context = trace.set_span_in_context(root)
        missed = int((declared_at - last) / self.config.interval_s)
        self.tracer.start_span("heartbeats missed", context=context, start_time=_ns(last),
                               attributes={"medusa.heartbeats.missed": missed}
                               ).end(end_time=_ns(suspected))
        self.tracer.start_span("suspicion", context=context, start_time=_ns(suspected),
                               attributes={"medusa.suspicion": watched.policy.suspicion(
                                   time.monotonic())}).end(end_time=_ns(declared_at))
        declaration = self.tracer.start_span("declaration", context=context,
                                             start_time=_ns(declared_at))
        parent = traceparent(root)
        takeovers: list[Takeover] = []
        try:
            with trace.use_span(declaration):  # the catalog's writes join this trace
                entry = self._mark_failed(watched)
                if entry is not None:
                    takeovers = take_over(self.catalog, entry, parent,
                                          on_fragment=self._placed)
        except CatalogError as error:
            declaration.record_exception(error)
            declaration.end()
            root.end()
            # Still failed: the next check declares it again, until the catalog answers.
            log.error("declaring %s failed: %s; retrying", watched.node, error)
            watched.health = Health.SUSPECT
            return
        declaration.end()
        root.end()
        del self.watched[watched.node]
        self.failed[watched.node] = watched.incarnation
        self._event(Event("failed", watched.node, declared_at,
                          f"silent for {declared_at - last:.1f}s", tuple(takeovers)))
        for takeover in takeovers:
            where = takeover.target or "nowhere (no live node)"
            log.info("  %s -> %s (%s)", takeover.fragment, where, takeover.mode)

    def _placed(self, takeover: Takeover) -> None:
        self.tracer.start_span(f"placement {takeover.fragment}", attributes={
            "medusa.fragment": takeover.fragment, "medusa.target": takeover.target or "",
            "medusa.ha": takeover.mode}).end()

    def _mark_failed(self, watched: Watched) -> Entry | None:
        def failed(spec: dict[str, object] | None) -> dict[str, object] | None:
            if spec is None or spec.get("incarnation") != watched.incarnation:
                return None  # restarted meanwhile: that incarnation is a new node
            return {**spec, "status": "failed"}
        return self.catalog.update(Kind.NODES, watched.node, failed)

    def _recovered(self, node: str, incarnation: str | None) -> None:
        del self.failed[node]
        with self.tracer.start_as_current_span(
                f"node recovered {node}", attributes={
                    "medusa.node": node, "medusa.incarnation": incarnation or ""}):
            pass
        self._event(Event("recovered", node, time.time(), f"incarnation {incarnation}"))

    def _event(self, event: Event) -> None:
        self.state.events.append(event)
        log.info("%s %s%s", event.node, event.kind, f": {event.detail}" if event.detail else "")
        if self.on_event is not None:
            self.on_event(event)

    # -- life cycle -----------------------------------------------------------------------

    def run(self) -> None:
        consumers = self._consumers()
        producers = {p: Producer(kafka_config(self.endpoints.bootstrap(p), linger_ms=0))
                     for p in self.participants}
        log.info("watching the nodes of %s (%s policy, acceptable pause %.1fs)",
                 ", ".join(self.participants), self.config.policy,
                 self.config.acceptable_pause_s)
        threading.Thread(target=self._list_nodes, name="detector-catalog", daemon=True).start()
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                listed = self._take_listed()
                if listed is not None:
                    self.refresh(now, listed)
                self._send_canaries(producers, now)
                reading = time.monotonic()
                for participant, consumer in zip(self.participants, consumers, strict=True):
                    for message in take(consumer, 1000, self.tick_s / len(consumers)):
                        value = message.value()
                        if message.error() is not None or value is None:
                            continue
                        canary = _canary(message.headers())
                        if canary is not None:
                            if canary[0] == self._canary_id:
                                self.paths.arrived(participant, canary[1])
                            continue
                        if _is_boundary(message.headers()):
                            continue
                        record = self._decode(value)
                        self.heartbeat(str(record["node"]), str(record["incarnation"]),
                                       time.monotonic(), _millis(record.get("sent_at")))
                now = time.monotonic()
                self.judge(now, now - reading)
        finally:
            for consumer in consumers:
                consumer.close()
            for producer in producers.values():
                producer.flush(1)

    def stop(self) -> None:
        self._stop.set()


def _canary(headers: Any) -> tuple[str, float] | None:
    """(detector, send time) of a canary record; None for a heartbeat."""
    text = header_text(headers, CANARY_HEADER)
    if text is None:
        return None
    sender, _, sent_at = text.partition(" ")
    return sender, float(sent_at)


def _millis(sent_at: object) -> int | None:
    """A heartbeat's ``sent_at`` (Avro's timestamp-millis, decoded as a datetime)."""
    if isinstance(sent_at, datetime):
        return int(sent_at.timestamp() * 1000)
    return sent_at if isinstance(sent_at, int) else None


def _is_boundary(headers: Any) -> bool:
    pairs = headers.items() if isinstance(headers, dict) else headers or []
    return any(k == TYPE_HEADER and v in (b"BOUNDARY", "BOUNDARY") for k, v in pairs)


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)

