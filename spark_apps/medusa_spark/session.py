"""A SparkSession wired with the cached Kafka and Avro connector jars."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

from medusa.settings import StackSettings


def connector_jars(settings: StackSettings | None = None) -> list[Path]:
    settings = settings or StackSettings()
    folder = settings.cache_dir / "spark-jars" / pyspark.__version__
    jars = sorted(folder.glob("*.jar"))
    if not (folder / ".installed").is_file() or not jars:
        raise RuntimeError(
            f"Spark connectors for pyspark {pyspark.__version__} are not installed in {folder}; "
            "run `make setup` (or infra/install_spark_jars.sh)")
    return jars


HDFS_CLIENT_CONF = {
    # Closing a file, the client asks the NameNode to complete it; the DataNode's report
    # of the block often comes just after, and the client would retry only after 400 ms,
    # for each of the files Spark writes per batch (offsets, commits, state changelogs).
    "dfs.client.block.write.locateFollowingBlock.initial.delay.ms": "20",
}


def spark_session(app_name: str, master: str = "local[2]",
                  settings: StackSettings | None = None) -> SparkSession:
    # Everything this project runs binds to the loopback interface.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers (process boxes) need this interpreter's packages (pandas, pyarrow).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    jars = ",".join(str(jar) for jar in connector_jars(settings))
    builder = SparkSession.builder
    for key, value in HDFS_CLIENT_CONF.items():  # checkpoints on a shared HDFS
        builder = builder.config(f"spark.hadoop.{key}", value)
    return (
        builder.appName(app_name)
        .master(master)
        .config("spark.jars", jars)
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.scheduler.mode", "FAIR")
        # Stopping a query mid-batch logs its plan through a recursive regex, which can
        # overflow the default thread stack with the plans of larger boxes.
        .config("spark.driver.extraJavaOptions", "-Xss16m")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.streaming.stateStore.providerClass",
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .getOrCreate()
    )
