"""Linear Road over two participants: each direction's sensors report to the cluster of its
own participant (direction 0 to alpha, direction 1 to beta), and the whole network runs on
one of them behind a union of the two streams, with DPC. When the link between them is
cut, the host keeps answering for its own direction within the availability bound
(tentative results) and corrects everything once the other direction's reports arrive."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import yaml
from confluent_kafka.schema_registry import SchemaRegistryClient

from medusa.feeding import FeedSummary, Keyed, feed
from medusa.linear_road import records as lr
from medusa.linear_road.sources import simulated
from medusa.linear_road.traffic import TrafficProfile
from medusa.producing import TupleProducer
from medusa.progress import RateProgress
from medusa.schemas import schema_for_topic
from medusa.settings import REPO_ROOT

NETWORK = REPO_ROOT / "spark_apps" / "medusa_spark" / "networks" / "linear_road.yaml"
DIRECTION_OF = {"alpha": 0, "beta": 1}
"""Which participant's sensors report which direction of the expressways."""
UNION = "position_reports"
QUERY_STREAMS = ("account_balance_queries", "daily_expenditure_queries", "historical_tolls",
                 "daily_expenditures")
"""The union box takes the single stream's name, so the rest of the network is unchanged."""
EXPENDITURE_BOXES = ("expenditures", "spent")


def reports_topic(participant: str) -> str:
    """A participant's position report topic (before the run's prefix)."""
    return f"{participant}.{lr.POSITION_REPORTS}"


def split_network_yaml(name: str, topic_prefix: str, availability_bound: str,
                       host: str = "beta") -> str:
    """The Linear Road network fed by both participants' reports and run on ``host``, whose
    cluster also holds its outputs; under another name, on topics of its own."""
    raw = yaml.safe_load(NETWORK.read_text())
    streams = raw["streams"]
    # Position reports only: no queries, so no historical tolls and no expenditures.
    for unfed in QUERY_STREAMS:
        del streams[unfed]
    raw["boxes"] = {name: box for name, box in raw["boxes"].items()
                    if name not in EXPENDITURE_BOXES}
    raw["arrows"] = [a for a in raw["arrows"] if not {a["from"], a["to"].split(".")[0]}
                     & {*QUERY_STREAMS, *EXPENDITURE_BOXES}]
    single = streams.pop(UNION)
    for stream in streams.values():
        stream["participant"] = host
    for participant in DIRECTION_OF:
        streams[f"{UNION}_{participant}"] = {
            **single, "topic": reports_topic(participant), "participant": participant}
    # A box may not share a stream's name: the union is a box, the single stream is gone.
    raw["boxes"] = {UNION: {"type": "union"}, **raw["boxes"]}
    for box in raw["boxes"].values():
        box["participant"] = host
    raw["arrows"] = [{"from": f"{UNION}_{p}", "to": UNION} for p in DIRECTION_OF] + raw["arrows"]
    raw.update(name=name, participant=host, topic_prefix=topic_prefix,
               availability_bound=availability_bound)
    return yaml.safe_dump(raw, sort_keys=False)


class SplitInput:
    """The simulation's position reports, each participant publishing its direction's on its
    own cluster, side by side at ``speedup``, until the simulation ends or ``stop_after``
    cuts it short; then (``end_of_stream``) a BOUNDARY far beyond the last report on both,
    so that every window closes. ``sent`` holds every report published, for the reference."""

    def __init__(self, profile: TrafficProfile, *, kafka_configs: dict[str, dict[str, Any]],
                 registry: SchemaRegistryClient, speedup: float, topic_prefix: str,
                 progress: RateProgress, end_of_stream: bool = True) -> None:
        self.profile, self.speedup = profile, speedup
        self._configs, self._registry = kafka_configs, registry
        self._prefix, self._progress, self._end_of_stream = topic_prefix, progress, end_of_stream
        self.sent: list[lr.PositionReport] = []
        self.second = 0
        """The latest simulated second published."""
        self._end_s = float(profile.duration_s)

    def stop_after(self, wall_seconds: float) -> None:
        """Publishes ``wall_seconds`` more of input, then ends (both participants alike)."""
        self._end_s = min(self._end_s, self.second + wall_seconds * self.speedup)

    def run(self) -> dict[str, FeedSummary]:
        summaries: dict[str, FeedSummary] = {}
        errors: list[BaseException] = []

        def publish(participant: str) -> None:
            try:
                summaries[participant] = self._publish(participant)
            except BaseException as error:  # re-raised in the caller's thread
                errors.append(error)

        threads = [threading.Thread(target=publish, args=(p,), daemon=True)
                   for p in DIRECTION_OF]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return summaries

    def _direction(self, direction: int) -> Iterator[tuple[float, list[Keyed]]]:
        for t, keyed in simulated(self.profile):
            if t >= self._end_s:
                return
            self.second = max(self.second, int(t))
            reports = [k for k in keyed if isinstance(k.value, lr.PositionReport)
                       and k.value.dir == direction]
            self.sent.extend(k.value for k in reports)
            yield t, reports

    def _publish(self, participant: str) -> FeedSummary:
        config = self._configs[participant]
        summary = feed(self._direction(DIRECTION_OF[participant]), kafka_config=config,
                       registry=self._registry, topics=[lr.POSITION_REPORTS],
                       to_dict=lr.to_dict, source_id=f"linear-road-{participant}",
                       speedup=self.speedup, boundary_interval_s=0.5, progress=self._progress,
                       total_seconds=self.profile.duration_s - 1.0,
                       topic_prefix=f"{self._prefix}{participant}.",
                       stime_origin_ms=lr.STIME_ORIGIN_MS)
        if self._end_of_stream:
            topic = self._prefix + reports_topic(participant)
            with TupleProducer(config, self._registry, topic,
                               schema_for_topic(lr.POSITION_REPORTS),
                               f"linear-road-{participant}") as producer:
                producer.emit_boundaries(
                    lr.STIME_ORIGIN_MS + (self.profile.duration_s + 3600) * 1000)
        return summary
