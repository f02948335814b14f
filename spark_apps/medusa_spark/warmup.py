"""Warming a node's JVM before it takes boxes: the first streaming batch on a fresh
SparkSession spends seconds loading and compiling classes (the Kafka source, the
planner, code generation). A node that takes over a failed node's boxes would pay
that inside the output gap; it pays it at start instead, with one small query
over a Kafka topic of its own participant."""

from __future__ import annotations

import logging
import tempfile
import time
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from medusa.settings import spark_kafka_options

log = logging.getLogger("medusa.node")


def warm_up(spark: SparkSession, bootstrap: str, topic: str, timeout_s: float = 120.0) -> None:
    """Runs one available-now batch over ``topic``; a failure is logged, never raised."""
    started = time.monotonic()

    def touch(batch: DataFrame, _: int) -> None:
        batch.groupBy("partition").agg(F.count("*"), F.max("offset")).collect()

    try:
        with tempfile.TemporaryDirectory(prefix="medusa-warmup-") as scratch:
            frame = (spark.readStream.format("kafka").options(**spark_kafka_options(bootstrap))
                     .option("subscribe", topic).option("startingOffsets", "earliest")
                     .option("includeHeaders", "true")
                     .option("kafka.isolation.level", "read_committed")
                     .option("maxOffsetsPerTrigger", "1000").load())
            query: Any = (frame.writeStream.foreachBatch(touch)
                          .option("checkpointLocation", scratch)
                          .trigger(availableNow=True).start())
            if not query.awaitTermination(timeout_s):
                query.stop()
        log.info("warmed up in %.1fs", time.monotonic() - started)
    except Exception as error:  # a cold node still works, only its first batch is slower
        log.warning("warm-up skipped: %s", error)
