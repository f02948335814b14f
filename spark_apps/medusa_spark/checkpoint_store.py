"""Reading and writing files of a checkpoint wherever it lives: a local folder or any
Hadoop file system Spark can reach (``hdfs://``, ``s3a://``, ...).

A checkpoint on a shared store lets the next node resume a box in place instead of copying
its state, but Medusa's own bookkeeping beside Spark's files (resume positions, rebased
offsets, sizes for the benchmarks) then needs the same access Spark has. Local locations
go through pathlib, with no JVM needed; any other scheme goes through the Hadoop
``FileSystem`` of a SparkSession's JVM, so it uses exactly the configuration (and the
hadoop-client jars) the streaming query itself uses.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from py4j.java_gateway import JavaClass

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def is_local(location: str) -> bool:
    """A plain path or a ``file:`` URI: handled with pathlib."""
    return urlparse(location).scheme in ("", "file")


def local_path(location: str) -> Path:
    return Path(unquote(urlparse(location).path)) if location.startswith("file:") \
        else Path(location)


def _hadoop(location: str, spark: SparkSession | None) -> tuple[Any, Any]:
    """The Hadoop FileSystem and Path of a non-local location, through the session's JVM
    (the process's session when none is given: a node has exactly one; a thread of its
    own, such as a takeover's, has no active session but the default one)."""
    if spark is None:
        from pyspark.errors import PySparkRuntimeError
        from pyspark.sql import SparkSession

        try:
            spark = SparkSession.active()
        except PySparkRuntimeError:
            raise ValueError(f"{location} is not a local path: reading it needs a "
                             "SparkSession") from None
    jvm = spark._jvm
    if jvm is None:  # a Spark Connect session has no JVM in this process
        raise ValueError(f"{location}: the SparkSession has no JVM gateway (Spark Connect?)")
    path = jvm.org.apache.hadoop.fs.Path(location)
    return path.getFileSystem(spark._jsc.hadoopConfiguration()), path


def exists(location: str, spark: SparkSession | None = None) -> bool:
    if is_local(location):
        return local_path(location).exists()
    fs, path = _hadoop(location, spark)
    return bool(fs.exists(path))


def list_names(location: str, spark: SparkSession | None = None) -> list[str]:
    """The names in a directory, sorted; [] when it is absent or not a directory."""
    if is_local(location):
        root = local_path(location)
        return sorted(p.name for p in root.iterdir()) if root.is_dir() else []
    fs, path = _hadoop(location, spark)
    if not fs.exists(path) or not fs.getFileStatus(path).isDirectory():
        return []
    return sorted(str(status.getPath().getName()) for status in fs.listStatus(path))


def read_text(location: str, spark: SparkSession | None = None) -> str:
    """A file's content as UTF-8 text; FileNotFoundError when it is absent."""
    if is_local(location):
        return local_path(location).read_text(encoding="utf-8")
    fs, path = _hadoop(location, spark)
    if not fs.exists(path):
        raise FileNotFoundError(location)
    stream = fs.open(path)
    try:
        data = stream.readAllBytes()  # java.io.InputStream's (Java 9+): a byte[] as bytes
    finally:
        stream.close()
    return bytes(data).decode("utf-8")


def write_text(location: str, text: str, spark: SparkSession | None = None) -> None:
    """Create or overwrite a file (and its parent directories).

    Locally the text goes to a temporary file renamed into place, so a reader (or a copy
    running beside the box, see ``checkpoints.sync_checkpoint``) never sees half of it."""
    if is_local(location):
        target = local_path(location)
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                             suffix=".tmp")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as sink:
                sink.write(text)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        return
    fs, path = _hadoop(location, spark)
    stream = fs.create(path, True)  # overwrite; HDFS creates the parents
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()


def delete(location: str, spark: SparkSession | None = None) -> None:
    """Remove a file or a whole directory; nothing happens when it is absent."""
    if is_local(location):
        target = local_path(location)
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)
        return
    fs, path = _hadoop(location, spark)
    fs.delete(path, True)


def size(location: str, spark: SparkSession | None = None) -> int:
    """Bytes in the files under a location (a file's own size; 0 when absent)."""
    if is_local(location):
        root = local_path(location)
        if root.is_file():
            return root.stat().st_size
        total = 0
        for file in root.rglob("*") if root.is_dir() else ():
            try:
                total += file.stat().st_size if file.is_file() else 0
            except FileNotFoundError:  # cleaned up by Spark meanwhile
                continue
        return total
    fs, path = _hadoop(location, spark)
    if not fs.exists(path):
        return 0
    return int(fs.getContentSummary(path).getLength())


def list_files(location: str, spark: SparkSession | None = None) -> list[str]:
    """Every file under a directory, as paths relative to it ('/'-separated), sorted."""
    if is_local(location):
        root = local_path(location)
        if not root.is_dir():
            return []
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    fs, path = _hadoop(location, spark)
    if not fs.exists(path):
        return []
    base = str(fs.getFileStatus(path).getPath().toUri().getPath()).rstrip("/") + "/"
    found = []
    files = fs.listFiles(path, True)
    while files.hasNext():
        name = str(files.next().getPath().toUri().getPath())
        found.append(name.removeprefix(base))
    return sorted(found)


def copy_tree(source: str, target: str, spark: SparkSession | None = None) -> int:
    """Copies the files of a checkpoint on a Hadoop file system to another place (replacing
    what is there), file by file; returns the bytes copied.

    The checkpoint may be in use meanwhile: its temporary files (renamed into place when
    complete) are skipped, and a file deleted before its turn (Spark's clean-up of old
    versions) is left out, as ``checkpoints.sync_checkpoint`` does with local folders.
    """
    from py4j.protocol import Py4JJavaError

    source_fs, source_path = _hadoop(source, spark)
    target_fs, target_path = _hadoop(target, spark)
    if not source_fs.exists(source_path):
        return 0
    target_fs.delete(target_path, True)
    file_util = JavaClass("org.apache.hadoop.fs.FileUtil", source_path._gateway_client)
    path_class = JavaClass("org.apache.hadoop.fs.Path", source_path._gateway_client)
    copied = 0
    for relative in list_files(source, spark):
        name = relative.rsplit("/", 1)[-1]
        if name.endswith(".tmp") or ".tmp." in name:
            continue
        try:
            status = source_fs.getFileStatus(path_class(source_path, relative))
            file_util.copy(source_fs, status.getPath(), target_fs,
                           path_class(target_path, relative), False, True, source_fs.getConf())
        except Py4JJavaError as error:
            if "FileNotFoundException" not in str(error.java_exception.getClass().getName()):
                raise
            continue
        copied += int(status.getLen())
    return copied
