"""A SparkSession wired with the cached Kafka and Avro connector jars."""

from __future__ import annotations

import functools
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any

import pyspark
from pyspark.sql import SparkSession

from medusa.settings import StackSettings
from medusa_spark.scheduler_pools import allocation_file


def connector_jars(settings: StackSettings | None = None) -> list[Path]:
    settings = settings or StackSettings()
    folder = settings.cache_dir / "spark-jars" / pyspark.__version__
    jars = sorted(folder.glob("*.jar"))
    if not (folder / ".installed").is_file() or not jars:
        raise RuntimeError(
            f"Spark connectors for pyspark {pyspark.__version__} are not installed in {folder}; "
            "run `make setup` (or infra/install_spark_jars.sh)")
    return jars


def extension_jar(settings: StackSettings | None = None) -> Path:
    """The project's own Spark classes (``spark_apps/jvm``), compiled by
    ``infra/install_spark_extensions.sh``."""
    settings = settings or StackSettings()
    jar = (settings.cache_dir / "spark-extensions" / pyspark.__version__
           / "medusa-spark-extensions.jar")
    if not jar.is_file():
        raise RuntimeError(f"The project's Spark classes for pyspark {pyspark.__version__} "
                           f"are not built in {jar.parent}; run `make setup` "
                           "(or infra/install_spark_extensions.sh)")
    return jar


REBUILD_PRIORITY_PLUGIN = "medusa.spark.RebuildPriority"
REBUILD_NICE = 10
"""The nice value of a thread rebuilding a query's state beside a serving one (see
RebuildPriority.java): while both want the CPU the serving one gets about nine tenths of
it, and the rebuild all that it leaves."""
CATCH_UP_NICE = 5
"""The nice value of a move's replica catching up on its last lag beside the instance it
replaces, just before it takes over: at 10 it lagged a batch of 4 to 6 s when it took
over, at 0 the old node's batches went from 1.1 to 1.7 to 2.2 s and its output paused
3.9 to 4.2 s (at 1.5 to 1.8 GB)."""


@functools.cache
def can_renice_back() -> bool:
    """Whether a thread of this process may lower its nice value again (root with the
    capability CAP_SYS_NICE, which a container's root lacks by default): tried on a
    thread of its own, which then ends."""
    result: list[bool] = []

    def attempt() -> None:
        tid = threading.get_native_id()
        try:
            before = os.getpriority(os.PRIO_PROCESS, tid)
            os.setpriority(os.PRIO_PROCESS, tid, before + 1)
            os.setpriority(os.PRIO_PROCESS, tid, before)
            result.append(True)
        except OSError:
            result.append(False)
    probe = threading.Thread(target=attempt, name="renice-check")
    probe.start()
    probe.join()
    return result == [True]


def jvm_pid(spark: SparkSession) -> int | None:
    """The process id of the session's JVM (None where py4j cannot say)."""
    try:
        gateway: Any = spark.sparkContext._jvm
        return int(gateway.java.lang.ProcessHandle.current().pid())
    except Exception:  # a session without a local gateway
        return None


def rebuild_priority_options() -> list[str]:
    """The JVM's options that make the rebuild's priority a nice value. Java priorities
    reach the OS only with this policy, and a task thread reniced for a rebuild must be
    reniced back when it serves next: only where that is allowed."""
    if not can_renice_back():
        return []
    # The policy also maps the JVM's own threads (JIT compilers, GC, the VM thread: Java
    # priorities 9 and 10) to nice -4 and -5, ahead of every query's: all but the lowest
    # priority stay at nice 0, as without the policy.
    return ["-XX:ThreadPriorityPolicy=1", f"-XX:JavaPriority1_To_OSPriority={REBUILD_NICE}",
            f"-XX:JavaPriority2_To_OSPriority={CATCH_UP_NICE}",
            *(f"-XX:JavaPriority{p}_To_OSPriority=0" for p in range(3, 11))]

# Checkpoints on a local disk through java.nio (see LocalCheckpointFileManager.java);
# Spark's own manager elsewhere (HDFS, S3A).
CHECKPOINT_FILE_MANAGER = "medusa.spark.LocalCheckpointFileManager"
STATE_STORE_PROVIDER = "spark.sql.streaming.stateStore.providerClass"
STATE_STORE_PROVIDERS = {
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "memory": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
}
"""Spark's state store for each of a network's ``state_store`` settings; RocksDB by default.
A query keeps the one it started with in its checkpoint."""
INDEXED_ROCKSDB = "medusa.spark.MedusaStateStoreProvider"
"""Spark's RocksDB store, whose aggregations evict through an index of their keys by
window end (not a scan of the whole state) and whose eviction a move's replica holds
(``eviction_hold``): a fragment's, unless Spark's ``transformWithState`` runs in it, which
accepts Spark's own class only."""
QUERY_STOP_TIMEOUT_MS = 60_000
"""How long a query's stop waits for its thread (Spark's ``stopTimeout``; its default
waits forever). A stop can hang in Spark (its thread misses the interrupt), and a node
whose loop waits on it runs nothing else; past this the stop raises and the node goes on,
the fragment's writer halted (``FragmentRun.stop_query``)."""


def object_store_jars(settings: StackSettings | None = None) -> list[Path]:
    """Spark's S3A file system (hadoop-aws and the AWS SDK modules it uses), for
    checkpoints on ``s3a://``; installed by ``infra/install_s3.sh``."""
    settings = settings or StackSettings()
    from medusa.stack.s3 import s3a_jars_folder

    folder = s3a_jars_folder(settings.cache_dir)
    jars = sorted(folder.glob("*.jar"))
    if not (folder / ".installed").is_file() or not jars:
        raise RuntimeError(f"Spark's S3A client is not installed in {folder}; "
                           "run `make setup` (or infra/install_s3.sh)")
    return jars


HDFS_CLIENT_CONF = {
    # Closing a file, the client asks the NameNode to complete it; the DataNode's report
    # of the block often comes just after, and the client would retry only after 400 ms,
    # for each of the files Spark writes per batch (offsets, commits, state changelogs).
    "dfs.client.block.write.locateFollowingBlock.initial.delay.ms": "20",
}


UI_RETENTION_CONF = {
    # A node's streaming queries run a few jobs, stages and SQL executions per micro-batch,
    # for days: its web UI keeps only the latest of each (Spark's defaults are 1000 jobs,
    # stages and executions, and 100,000 tasks).
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.ui.retainedTasks": "1000",
    "spark.ui.retainedDeadExecutors": "10",
    "spark.ui.dagGraph.retainedRootRDDs": "100",
    "spark.sql.ui.retainedExecutions": "50",
    "spark.sql.streaming.ui.retainedQueries": "20",
    "spark.sql.streaming.ui.retainedProgressUpdates": "60",
}


LOG4J2_TO_FILE = """\
# Spark's own log of a command run in a terminal: to a file, so that a user sees
# Medusa's one-paragraph errors alone (``medusa --verbose`` keeps Spark's on the terminal).
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{ISO8601}} %p %c{{1}}: %m%n%ex
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
"""
PYSPARK_ERROR_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
"""PySpark's loggers that print an analysis error with its whole Java stack trace as the
error is raised, before the caller has a chance to explain it."""


def _log_to_file(log_file: Path) -> str:
    """Sends Spark's logs, the JVM's and PySpark's error loggers, to ``log_file``; the
    driver's Java option that does so for the JVM."""
    import logging

    from pyspark.logger import PySparkLogger

    log_file.parent.mkdir(parents=True, exist_ok=True)
    config = log_file.with_suffix(".log4j2.properties")
    config.write_text(LOG4J2_TO_FILE.format(path=log_file))
    for name in PYSPARK_ERROR_LOGGERS:
        logger = PySparkLogger.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        handler = logging.FileHandler(log_file)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: "
                                               "%(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    return f"-Dlog4j2.configurationFile={config}"


def spark_session(app_name: str, master: str = "local[2]",
                  settings: StackSettings | None = None,
                  ui_port: int | None = None, log_file: Path | None = None,
                  object_store: bool = False, realtime_slots: int = 0,
                  local_dir: Path | None = None) -> SparkSession:
    """The project's SparkSession. ``ui_port``: run Spark's web UI on this port of the
    loopback interface, or on one of the next ones (``spark.port.maxRetries``) when it is
    taken; ``sparkContext.uiWebUrl`` then tells where. None or 0: no UI (the default:
    only nodes run one). ``log_file``: Spark's logs go there rather than to the terminal
    (commands a user runs; a node's output is a log file already). ``object_store``: with
    the S3A file system, configured for the settings' object store (``s3a://``
    checkpoints; see ``medusa.object_store``). ``realtime_slots``: task threads on top of a
    ``local[N]`` master for Real-time Mode's long-running tasks (``realtime``), which hold
    a slot each for good; the other queries keep their N. ``local_dir``: Spark's scratch
    files there rather than under the system's temporary folder (``local_dirs``)."""
    # Everything this project runs binds to the loopback interface: the driver, and the web
    # UI, whose server binds to SPARK_LOCAL_IP (or to every interface when it is unset).
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers (process boxes) need this interpreter's packages (pandas, pyarrow).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = settings or StackSettings()
    jar_files = [*connector_jars(settings), extension_jar(settings)]
    hadoop_conf = dict(HDFS_CLIENT_CONF)  # checkpoints on a shared HDFS
    if object_store:
        from medusa.object_store import s3_access, s3a_conf

        jar_files += object_store_jars(settings)
        hadoop_conf.update(s3a_conf(s3_access(settings)))
    jars = ",".join(str(jar) for jar in jar_files)
    # Stopping a query mid-batch logs its plan through a recursive regex, which can
    # overflow the default thread stack with the plans of larger boxes.
    java_options = ["-Xss16m", *rebuild_priority_options()]
    if log_file is not None:
        java_options.append(_log_to_file(log_file))
    builder = SparkSession.builder
    for key, value in hadoop_conf.items():
        builder = builder.config(f"spark.hadoop.{key}", value)
    if ui_port:
        builder = builder.config("spark.ui.enabled", "true").config("spark.ui.port",
                                                                    str(ui_port))
        for key, value in UI_RETENTION_CONF.items():
            builder = builder.config(key, value)
    else:
        builder = builder.config("spark.ui.enabled", "false")
    if local_dir is not None:
        builder = builder.config("spark.local.dir", str(local_dir))
    from medusa_spark.realtime import SLOTS

    local = re.fullmatch(r"local\[(\d+)\]", master)
    SLOTS.configure(realtime_slots if local else 0)
    if local and realtime_slots:
        master = f"local[{int(local.group(1)) + realtime_slots}]"
    session = (
        builder.appName(app_name)
        .master(master)
        .config("spark.jars", jars)
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.scheduler.mode", "FAIR")
        .config("spark.scheduler.allocation.file", str(allocation_file()))
        .config("spark.plugins", REBUILD_PRIORITY_PLUGIN)
        .config("spark.driver.extraJavaOptions", " ".join(java_options))
        .config("spark.ui.showConsoleProgress", "false")
        # Read-only: a stage killed from the UI would fail a fragment's query.
        .config("spark.ui.killEnabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.streaming.checkpointFileManagerClass", CHECKPOINT_FILE_MANAGER)
        .config(STATE_STORE_PROVIDER, STATE_STORE_PROVIDERS["rocksdb"])
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        # A query's stop otherwise waits for its thread forever; a node must not.
        .config("spark.sql.streaming.stopTimeout", str(QUERY_STOP_TIMEOUT_MS))
        .getOrCreate()
    )
    _quiet(session, QUIET_LOGGERS)
    return session


QUIET_LOGGERS = (
    # A warning for every read of a map state's missing key: an aggregate with timers
    # (``expiry: timers``) reads one per new window, thousands a batch.
    "org.apache.spark.sql.execution.python.streaming.TransformWithStateInPySparkStateServer",
)


def _quiet(spark: SparkSession, loggers: tuple[str, ...]) -> None:
    """Spark's ``loggers`` log errors only, in this JVM (a local node's executors too)."""
    jvm: Any = spark._jvm
    if jvm is None:
        return
    log4j = jvm.org.apache.logging.log4j
    for name in loggers:
        log4j.core.config.Configurator.setLevel(name, log4j.Level.ERROR)
