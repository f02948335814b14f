"""The failure detector on faust-streaming: a trial beside ``service`` (see docs/faust-trial.md).

The same judge as ``FailureDetector`` (its policy, catalog view, declarations and
traces), fed by faust instead of a confluent-kafka loop: an agent streams the
heartbeats into a changelog-backed table (node -> incarnation and send time), and a
timer refreshes the catalog's view and judges. A restarted detector recovers the
table from its changelog, so a node is judged from its last heartbeat, not from the
restart. Heartbeats are timed by their ``sent_at`` (the committed offsets replay
a few after a restart, which must not count as fresh). One participant per process:
a faust app talks to one Kafka cluster.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import faust
from opentelemetry.trace import Tracer

from medusa.catalog.client import CatalogClient, CatalogError
from medusa.detector.policy import DetectorConfig
from medusa.detector.service import Event, FailureDetector, _is_boundary, log
from medusa.endpoints import Endpoints
from medusa.schemas import HEARTBEAT_TOPIC, HEARTBEAT_TOPIC_CONFIG
from medusa.settings import authenticated, kafka_client_settings, kafka_config
from medusa.topics import ensure_topics

SESSION_TIMEOUT_S = 6.0
"""How soon the group forgets a killed detector, so a restarted one is given the partition
(the broker's least, ``group.min.session.timeout.ms``; faust's default is 60 s)."""


def _credentials() -> faust.SASLCredentials | None:
    settings = authenticated(kafka_client_settings())
    if settings.sasl_mechanism is None:
        return None
    password = settings.sasl_password.get_secret_value() if settings.sasl_password else None
    return faust.SASLCredentials(username=settings.sasl_username, password=password,
                                 mechanism=settings.sasl_mechanism)


def _monotonic(sent_at: float) -> float:
    """The monotonic time of a wall-clock send time (never later than now)."""
    return time.monotonic() - max(0.0, time.time() - sent_at)


class FaustDetector:
    def __init__(self, endpoints: Endpoints, catalog: CatalogClient, config: DetectorConfig,
                 participant: str, tracer: Tracer | None = None, tick_s: float = 0.1,
                 refresh_s: float = 1.0, on_event: Callable[[Event], None] | None = None,
                 app_id: str = "medusa.detector.faust") -> None:
        self.core = FailureDetector(endpoints, catalog, config, [participant], tracer,
                                    tick_s, refresh_s, on_event)
        bootstrap = endpoints.bootstrap(participant)
        ensure_topics(kafka_config(bootstrap), [HEARTBEAT_TOPIC], partitions=1,
                      config=HEARTBEAT_TOPIC_CONFIG)
        self.app = faust.App(app_id, broker=f"kafka://{bootstrap}",
                             broker_credentials=_credentials(), store="memory://",
                             web_enabled=False, topic_partitions=1,
                             consumer_auto_offset_reset="latest",
                             broker_session_timeout=SESSION_TIMEOUT_S,
                             broker_heartbeat_interval=1.0)
        self.last = self.app.Table("last-heartbeat", partitions=1)
        """node -> {"incarnation", "sent_at"}: its latest heartbeat, kept in a changelog."""
        topic = self.app.topic(HEARTBEAT_TOPIC, key_serializer="raw", value_serializer="raw")
        self.app.agent(topic, name="heartbeats")(self._heartbeats)
        self.app.timer(tick_s, name="judge")(self._judge)
        self._next_refresh = 0.0
        self._recovered_at: float | None = None
        self._caught_up = False

    async def _heartbeats(self, stream: Any) -> None:
        async for event in stream.events():
            if event.value is None or _is_boundary(event.headers):
                continue
            record = self.core._decode(event.value)
            node, incarnation = str(record["node"]), str(record["incarnation"])
            sent_at = record["sent_at"].timestamp()  # type: ignore[attr-defined]
            self.last[node] = {"incarnation": incarnation, "sent_at": sent_at}
            self._caught_up |= time.time() - sent_at < 2 * self.core.config.interval_s
            self.core.heartbeat(node, incarnation, _monotonic(sent_at))

    async def _judge(self) -> None:
        if not self.app.tables.recovery.completed.is_set():  # type: ignore[attr-defined]
            return  # the table is not back yet: judging now would forget the past
        now = time.monotonic()
        self._recovered_at = self._recovered_at or now
        config = self.core.config
        if not self._caught_up and now - self._recovered_at < config.interval_s + \
                config.acceptable_pause_s:
            return  # still replaying old heartbeats (or there are none to catch up on)
        if now >= self._next_refresh:
            self._next_refresh = now + self.core.refresh_s
            before = set(self.core.watched)
            try:
                self.core.refresh(now)
            except CatalogError as error:
                log.warning("catalog: %s", error)
            for name in self.core.watched.keys() - before:
                self._seed(name)
        self.core.assess(time.monotonic())

    def _seed(self, node: str) -> None:
        """A node newly watched is judged from its last heartbeat in the table, if any."""
        watched, last = self.core.watched[node], self.last.get(node)
        if last is None or last["incarnation"] != watched.incarnation:
            return
        policy = self.core.config.policy_for_node()
        policy.heartbeat(_monotonic(last["sent_at"]))
        watched.policy = policy

    def run(self) -> None:
        """Until SIGTERM or SIGINT (faust's worker handles both)."""
        log.info("watching the nodes of %s on faust (%s policy, acceptable pause %.1fs)",
                 ", ".join(self.core.participants), self.core.config.policy,
                 self.core.config.acceptable_pause_s)
        faust.Worker(self.app, loglevel="WARNING", quiet=True).execute_from_commandline()
