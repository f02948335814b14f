"""Reporting: the node's load per fragment and per box to ``medusa.node-load`` (what BPM
prices and ``medusa status`` shows), and each fragment's DPC state to the catalog."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from medusa.batch_phases import median_phases
from medusa.catalog.model import Kind
from medusa.load import BatchSample, FragmentLoad, fragment_load, utilisation
from medusa.producing import TupleProducer
from medusa.schemas import NODE_LOAD_TOPIC, schema_for_topic
from medusa.settings import kafka_config
from medusa.topics import ensure_topics
from medusa_spark.node.state import (
    HostedFragment,
    NodeState,
    offsets_behind,
    published_dpc_state,
)
from medusa_spark.sunion_source import in_query_state

log = logging.getLogger("medusa.node")


class Reporting:
    """Reads the hosted fragments' progress; writes only reports and DPC states."""

    def __init__(self, node: NodeState) -> None:
        self.node = node

    def fragment_loads(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Per hosted fragment and per box: rates, batch time, lag, errors, SUnion state."""
        fragments, boxes = [], []
        with self.node.lock:
            items = list(self.node.hosted.values())
        for hosted in items:
            run = hosted.run
            progress: dict[str, Any] = run.query.lastProgress or {}
            lag = offsets_behind(progress)
            failure = run.failure()
            state = ("failed" if hosted.failed else "restarting" if failure else
                     "standby" if run.standby else "running")
            operators = [{"operator": op.get("operatorName"),
                          "rows_total": op.get("numRowsTotal"),
                          "rows_updated": op.get("numRowsUpdated"),
                          "rows_dropped_late": op.get("numRowsDroppedByWatermark"),
                          "update_ms": op.get("allUpdatesTimeMs"),
                          "removal_ms": op.get("allRemovalsTimeMs"),
                          "commit_ms": op.get("commitTimeMs")}
                         for op in progress.get("stateOperators", [])]
            sunion = hosted.sunion.state() if hosted.sunion is not None else \
                in_query_state(progress, hosted.name) if run.wiring.sunion_in_query else {}
            recent = [json.loads(p.json) for p in run.query.recentProgress]
            samples = [BatchSample.of(p) for p in recent]
            load = fragment_load([s for s in samples if s is not None], int(time.time() * 1000),
                                 self.node.load_window_s)
            batch_ms = int(progress.get("batchDuration") or 0)
            if run.relay is not None:  # real-time: a batch's tasks run for all of it
                load = FragmentLoad(run.relay.load(self.node.load_window_s), 0.0)
            if load.demand >= 1.0 or (run.trigger_ms and batch_ms > run.trigger_ms):
                hosted.bottleneck_since = hosted.bottleneck_since or time.time()
            else:
                hosted.bottleneck_since = None
            fragments.append({
                "fragment": hosted.name, "state": state,
                "dpc_state": published_dpc_state(hosted, sunion_state=sunion),
                "tentative_results": run.writer.tentative_written,
                "corrections": hosted.reconciliations + run.writer.reconciled_in_stream,
                "input_rate": float(progress.get("inputRowsPerSecond") or 0.0),
                "processing_rate": float(progress.get("processedRowsPerSecond") or 0.0),
                "batch_duration_ms": int(progress.get("batchDuration") or 0),
                "load": round(load.load, 4),
                "running_s": round(time.time() - hosted.started_at, 1),
                "bottleneck_s": round(time.time() - hosted.bottleneck_since, 1)
                if hosted.bottleneck_since is not None and not run.standby else 0.0,
                "lag": lag, "restarts": hosted.restarts,
                "error": failure or self.node.errors.get(hosted.name),
                "operators": json.dumps({
                    "operators": operators, "duration_ms": progress.get("durationMs", {}),
                    "batch_phases_ms": median_phases(recent,
                                                     run.writer.recent_times.by_batch()),
                    "execution": {"mode": run.execution, "why": run.execution_why,
                                  "asked": run.execution_asked}}),
                "sunion": json.dumps(sunion),
            })
            duration_s = max(0.001, (progress.get("batchDuration") or 0) / 1000.0)
            rows = run.box_rows()
            network = hosted.name.rsplit("/", 1)[0]
            for box in run.wiring.fragment.boxes:
                out = rows.get(box)
                boxes.append({
                    "box": f"{network}/{box}",
                    "input_rate": float(progress.get("inputRowsPerSecond") or 0.0),
                    "processing_rate": (out / duration_s) if out is not None else 0.0,
                    "batch_duration_ms": int(progress.get("batchDuration") or 0),
                    "lag": lag,
                })
        return fragments, boxes

    def report(self) -> None:
        """Reports every ``metrics_interval_s`` until ``stop``, on a thread of its own."""
        ensure_topics(kafka_config(self.node.bootstrap), [NODE_LOAD_TOPIC], partitions=1)
        with TupleProducer(kafka_config(self.node.bootstrap), self.node.registry, NODE_LOAD_TOPIC,
                           schema_for_topic(NODE_LOAD_TOPIC), self.node.global_name,
                           boundary_interval_s=self.node.metrics_interval_s) as producer:
            while not self.node.stopping.wait(self.node.metrics_interval_s):
                fragments, boxes = self.fragment_loads()
                load = sum(f["load"] for f in fragments)
                now = int(time.time() * 1000)
                report = {
                    "node": self.node.global_name, "participant": self.node.participant,
                    "reported_at": now, "capacity": self.node.capacity, "load": load,
                    "utilisation": utilisation(load, self.node.capacity),
                    "boxes": boxes, "fragments": fragments,
                }
                producer.produce(report, f"{self.node.global_name}/load/{now}", now,
                                 key=self.node.global_name)

    def publish_dpc_state(self, hosted: HostedFragment, replica_serves: bool = False) -> None:
        """The fragment's DPC state into the catalog, when it changed (``replica_serves``:
        see ``published_dpc_state``)."""
        state = published_dpc_state(hosted, replica_serves)
        if state == hosted.dpc_state:
            return

        def changed(spec: dict[str, Any] | None) -> dict[str, Any] | None:
            if spec is None or spec.get("node") != self.node.global_name:
                return None
            return {**spec, "dpc_state": state}
        self.node.catalog.update(Kind.FRAGMENTS, hosted.name, changed)
        log.info("%s: %s is %s (was %s)", self.node.global_name, hosted.name, state,
                 hosted.dpc_state)
        hosted.dpc_state = state

