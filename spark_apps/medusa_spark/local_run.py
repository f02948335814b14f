"""A whole network run in this process: for tests, the demo and benchmarks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from confluent_kafka.schema_registry import SchemaRegistryClient
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from medusa.stack.endpoints import Endpoints
from medusa_spark.network.model import NetworkSpec
from medusa_spark.network.validate import Plan, validate
from medusa_spark.runner import BoxWiring, start_box, wait_until_quiet, wire


class LocalNetworkRun:
    """Validates, wires and starts every box of a network on one SparkSession."""

    def __init__(self, spark: SparkSession, network: NetworkSpec, endpoints: Endpoints,
                 registry: SchemaRegistryClient, checkpoint_root: Path,
                 topic_prefix: str = "", trigger: str | None = None) -> None:
        self.spark = spark
        self.plan: Plan = validate(network, spark)
        self.wiring: dict[str, BoxWiring] = wire(self.plan, endpoints, registry, topic_prefix)
        self.checkpoint_root = checkpoint_root
        self.topic_prefix = topic_prefix
        self.trigger = trigger
        self.queries: list[StreamingQuery] = []

    def topic(self, stream: str) -> str:
        """The topic a declared stream of the network is on, in this run."""
        network = self.plan.network
        return network.topic_prefix + self.topic_prefix + network.streams[stream].topic

    def start(self) -> LocalNetworkRun:
        for box in self.plan.order:
            self.queries.append(start_box(self.spark, self.plan, self.wiring[box],
                                          str(self.checkpoint_root), self.trigger))
        return self

    def wait_until_quiet(self, timeout_s: float = 900.0,
                         on_check: Callable[[int], None] | None = None) -> None:
        wait_until_quiet(self.queries, timeout_s=timeout_s, on_check=on_check)

    def stop(self) -> None:
        for query in self.queries:
            query.stop()
        self.queries.clear()

    def __enter__(self) -> LocalNetworkRun:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
