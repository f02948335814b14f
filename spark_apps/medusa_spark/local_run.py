"""A whole network run in this process: for tests, the demo and benchmarks.

Each fragment runs as it does on a node: its SUnion as a process of its own on
the cluster of the fragment's participant, its query on this SparkSession.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from pyspark.sql import SparkSession

from medusa.endpoints import Endpoints
from medusa_spark.fragment import FragmentWiring
from medusa_spark.fragment_run import FragmentRun, checkpoint_location, start_fragment
from medusa_spark.network.fragments import Fragment, fragment_delays, group
from medusa_spark.network.model import NetworkSpec
from medusa_spark.network.validate import Plan, validate
from medusa_spark.sunion_process import SUnionProcess
from medusa_spark.wiring import NetworkTopics, fragment_wiring, network_topics


class LocalNetworkRun:
    """Validates and wires a network, and starts each of its fragments with its SUnion."""

    def __init__(self, spark: SparkSession, network: NetworkSpec, endpoints: Endpoints,
                 registry: SchemaRegistryClient, checkpoint_root: Path,
                 topic_prefix: str = "", trigger: str | None = None,
                 fragments: dict[str, Fragment] | None = None) -> None:
        self.spark = spark
        self.plan: Plan = validate(network, spark)
        self.fragments = fragments or group(self.plan)
        self.topics: NetworkTopics = network_topics(self.plan, self.fragments, endpoints,
                                                    registry, topic_prefix)
        network_name = f"{network.participant}/{network.name}"
        self.wiring: dict[str, FragmentWiring] = {}
        delays = fragment_delays(self.plan, self.fragments)
        for name, fragment in self.fragments.items():
            participant = self._participant(fragment)
            self.wiring[name] = fragment_wiring(self.topics, network_name, fragment,
                                                endpoints.bootstrap(participant), delays[name])
        self.checkpoint_root = checkpoint_root
        self.topic_prefix = topic_prefix
        self.trigger = trigger
        self.runs: list[FragmentRun] = []
        self.sunions: list[SUnionProcess] = []
        self._scratch = tempfile.TemporaryDirectory(prefix="medusa-local-run-")

    def _participant(self, fragment: Fragment) -> str:
        network = self.plan.network
        box = (fragment.outputs or fragment.boxes)[0]
        declared = self.plan.output_stream[box]
        if declared is not None:
            return network.streams[declared].participant
        return network.boxes[box].participant or network.participant

    def topic(self, stream: str) -> str:
        """The topic a declared stream of the network is on, in this run."""
        network = self.plan.network
        return network.topic_prefix + self.topic_prefix + network.streams[stream].topic

    def start(self, on_batch: Callable[[str, int], None] | None = None) -> LocalNetworkRun:
        for name, wiring in self.wiring.items():
            folder = Path(self._scratch.name) / name
            if not wiring.sunion_in_query:
                self.sunions.append(SUnionProcess(wiring.sunion_config(), folder).start())
            checkpoint = checkpoint_location(str(self.checkpoint_root), wiring)
            self.runs.append(start_fragment(self.spark, self.plan, wiring, checkpoint,
                                            self.trigger, on_batch=on_batch))
        return self

    def wait_until_quiet(self, timeout_s: float = 900.0,
                         on_check: Callable[[int], None] | None = None) -> None:
        wait_until_quiet(self.runs, self.sunions, timeout_s=timeout_s, on_check=on_check)

    def stop(self) -> None:
        for run in self.runs:
            run.query.stop()
            run.writer.close()
        for sunion in self.sunions:
            sunion.stop()
        self.runs.clear()
        self.sunions.clear()

    def __enter__(self) -> LocalNetworkRun:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
        self._scratch.cleanup()


def _busy(run: FragmentRun) -> bool:
    progress: dict[str, Any] = run.query.lastProgress or {}
    return run.has_work() or progress.get("numInputRows", 1) != 0


def wait_until_quiet(runs: list[FragmentRun], sunions: list[SUnionProcess],
                     timeout_s: float = 600.0, quiet_checks: int = 3, interval_s: float = 3.0,
                     on_check: Callable[[int], None] | None = None) -> None:
    """Waits until no fragment has had input for ``quiet_checks`` checks in a row.

    Raises the first fragment's failure, or TimeoutError.
    """
    deadline = time.monotonic() + timeout_s
    quiet, check = 0, 0
    while quiet < quiet_checks:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the fragments were still busy after {timeout_s:.0f}s")
        time.sleep(interval_s)
        check += 1
        for run in runs:
            failure = run.failure()
            if failure is not None:
                raise RuntimeError(f"fragment {run.name} failed: {failure}") from None
        for sunion in sunions:
            sunion.keep_alive()
        busy = [r for r in runs if _busy(r)]
        quiet = 0 if busy else quiet + 1
        if on_check is not None:
            on_check(len(busy))
