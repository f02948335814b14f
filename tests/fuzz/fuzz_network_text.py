"""Fuzzes ``medusa_spark.network.model.parse_network`` (and ``check_structure`` on what it
accepts) with raw bytes as YAML text: the YAML reader and the model's first checks.

Run: ``python tests/fuzz/fuzz_network_text.py -runs=10000 -max_len=4096 [corpus dirs]``;
spark_apps/medusa_spark/networks makes a good second corpus dir.
"""

from __future__ import annotations

import sys

import atheris

# Imported uninstrumented first: instrumenting them would only slow every run down, and
# atheris 2.3 on Python 3.11 miscompiles part of PyYAML's scanner (an AttributeError that
# PyYAML alone does not raise).
import pandas  # noqa: F401
import pydantic  # noqa: F401
import pyspark.sql  # noqa: F401
import yaml  # noqa: F401

with atheris.instrument_imports(include=["medusa", "medusa_spark"]):
    from network_checks import check_network_text, guard_processor_imports


def test_one_input(data: bytes) -> None:
    check_network_text(data.decode("utf-8", errors="replace"))


def main() -> None:
    guard_processor_imports()
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
