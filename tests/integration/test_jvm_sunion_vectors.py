"""The JVM SUnion's rules (``spark_apps/jvm/medusa/spark/sunion/Buckets.java``) replay
every recorded vector of buckets.py: answers, clock readings and state, call by call."""

from __future__ import annotations

import os
import subprocess

import pyspark
import pytest

from medusa_spark.session import connector_jars, extension_jar
from tests.vectors.sunion_buckets import VECTORS

pytestmark = pytest.mark.integration


def test_the_jvm_buckets_replay_every_vector() -> None:
    pyspark_jars = os.path.join(os.path.dirname(pyspark.__file__), "jars", "*")
    classpath = os.pathsep.join([str(extension_jar()), pyspark_jars,
                                 *(str(jar) for jar in connector_jars())])
    result = subprocess.run(
        ["java", "-cp", classpath, "medusa.spark.sunion.BucketsVectors", str(VECTORS)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert result.stdout.strip().endswith(" 0 failed")
