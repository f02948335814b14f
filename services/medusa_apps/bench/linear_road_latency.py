"""Linear Road at the benchmark's peak rate: latency from a report's sending to its toll.

Each step runs the network on topics of its own, holds about 1,700 position reports
per second per expressway (in real time) for ``hold_s`` seconds, and records every
toll notification's latency: its emit time minus the moment its position report was
sent. The number of expressways doubles until the p99 latency exceeds the bound.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from pyspark.sql import SparkSession

from medusa.consuming import TupleConsumer
from medusa.envelope import TupleType
from medusa.linear_road.sources import publish_traffic
from medusa.linear_road.traffic import PEAK_REPORTS_PER_S_PER_XWAY, TrafficProfile
from medusa.progress import RateProgress
from medusa.settings import REPO_ROOT, kafka_config
from medusa.stack.endpoints import Endpoints
from medusa_spark.local_run import LocalNetworkRun
from medusa_spark.network.model import load_network

NETWORK = REPO_ROOT / "spark_apps" / "medusa_spark" / "networks" / "linear_road.yaml"
LATENCY_BOUND_S = 5.0


@dataclass
class StepResult:
    xways: int
    hold_s: int
    sent: int
    input_rate: float
    notifications: int
    latencies_s: list[tuple[float, float]] = field(default_factory=list)
    """(seconds since the step's start, latency) per toll notification."""

    def percentile(self, share: float) -> float | None:
        values = sorted(latency for _, latency in self.latencies_s)
        if not values:
            return None
        return values[min(len(values) - 1, int(share * len(values)))]

    @property
    def met(self) -> bool:
        p99 = self.percentile(0.99)
        return p99 is not None and p99 <= LATENCY_BOUND_S

    def as_dict(self) -> dict[str, Any]:
        return {"xways": self.xways, "hold_s": self.hold_s, "sent": self.sent,
                "input_rate_per_s": round(self.input_rate, 1),
                "notifications": self.notifications,
                "p50_latency_s": self.percentile(0.5), "p99_latency_s": self.percentile(0.99),
                "max_latency_s": self.percentile(1.0), "met": self.met}


class _Collector(threading.Thread):
    """Reads toll notifications while the step runs."""

    def __init__(self, config: dict[str, Any], registry: SchemaRegistryClient, topic: str):
        super().__init__(name="toll-collector", daemon=True)
        self.rows: list[tuple[int, int]] = []
        self._done = threading.Event()
        self._consumer = TupleConsumer(config, registry, [topic], f"bench-{uuid.uuid4()}")

    def run(self) -> None:
        with self._consumer as consumer:
            while not self._done.is_set():
                consumed = consumer.poll(0.5)
                if consumed is not None and consumed.record.type is TupleType.STABLE:
                    value = consumed.record.value
                    self.rows.append((value["time"], value["emit_time"]))

    def stop(self) -> None:
        self._done.set()
        self.join(30)


def run_step(spark: SparkSession, endpoints: Endpoints, registry: SchemaRegistryClient,
             xways: int, hold_s: int, checkpoints: Path, drain_s: float = 300.0,
             quiet_s: float = 20.0) -> StepResult:
    prefix = f"bench-lr{xways}-{uuid.uuid4().hex[:6]}."
    config = kafka_config(endpoints.bootstrap("alpha"))
    run = LocalNetworkRun(spark, load_network(NETWORK), endpoints, registry, checkpoints,
                          topic_prefix=prefix)
    profile = TrafficProfile(xways=xways, duration_s=hold_s,
                             peak_rate=PEAK_REPORTS_PER_S_PER_XWAY,
                             start_rate=PEAK_REPORTS_PER_S_PER_XWAY, seed=xways)
    collector = _Collector(config, registry, run.topic("toll_notifications"))
    with run:
        collector.start()
        with RateProgress(f"L={xways}", total=hold_s - 1.0) as progress:
            summary = publish_traffic(profile, kafka_config=config, registry=registry,
                                      speedup=1.0, progress=progress, topic_prefix=prefix,
                                      boundary_interval_s=1.0)
        # Results of the last seconds are still on their way: wait until the notifications
        # stop coming (after at least one came), so that slow runs are measured, not cut off.
        deadline, seen, last_change = time.monotonic() + drain_s, 0, time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(1.0)
            if len(collector.rows) != seen:
                seen, last_change = len(collector.rows), time.monotonic()
            elif seen and time.monotonic() - last_change > quiet_s:
                break
        collector.stop()
    result = StepResult(xways, hold_s, summary.sent, summary.rate, len(collector.rows))
    for report_time, emit_ms in collector.rows:
        sent_at = summary.wall_start + report_time  # speedup 1: second t goes out at start + t
        result.latencies_s.append((float(report_time), emit_ms / 1000.0 - sent_at))
    return result


def run_steps(spark: SparkSession, endpoints: Endpoints, registry: SchemaRegistryClient,
              hold_s: int, max_xways: int, checkpoints: Path,
              say: Callable[[str], None]) -> list[StepResult]:
    results: list[StepResult] = []
    xways = 1
    while xways <= max_xways:
        say(f"Linear Road L={xways}: {xways * PEAK_REPORTS_PER_S_PER_XWAY:,} reports/s "
            f"for {hold_s}s")
        step = run_step(spark, endpoints, registry, xways, hold_s, checkpoints / f"l{xways}")
        results.append(step)
        say(f"  {step.notifications:,} toll notifications, p50 {step.percentile(0.5)} s, "
            f"p99 {step.percentile(0.99)} s -> {'met' if step.met else 'not met'}")
        if not step.met:
            break
        xways *= 2
    return results
