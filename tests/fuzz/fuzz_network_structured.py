"""Fuzzes ``parse_network`` and ``check_structure`` with networks built from the repo's
examples: the fuzzed bytes pick an example and change a few of its fields (replace, delete,
rename, add, copy), so inputs get past the YAML reader into the model's and the structure's
checks.

Input format: the bytes drive a FuzzedDataProvider, which draws integers from the end: the
last byte picks the example, the one before it how many changes (0: the example as it is),
so corpus/network_structured/example_N (bytes 0, N) is example N unchanged. Run:
``python tests/fuzz/fuzz_network_structured.py -runs=10000 -max_len=256 [corpus dirs]``.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import atheris

# Imported uninstrumented first: instrumenting them would only slow every run down.
import pandas  # noqa: F401
import pydantic  # noqa: F401
import pyspark.sql  # noqa: F401
import yaml

with atheris.instrument_imports(include=["medusa", "medusa_spark"]):
    from network_checks import (
        NETWORKS_DIR,
        TOP_LEVEL_KEYS,
        check_network_text,
        guard_processor_imports,
    )

    from medusa_spark.boxes import BOX_TYPES

SEED_FILES = [*sorted(NETWORKS_DIR.glob("*.yaml")),
              *sorted((Path(__file__).parent / "corpus" / "network_text").glob("*.yaml"))]
SEEDS = [yaml.safe_load(path.read_text()) for path in SEED_FILES]
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml when there: faster


def _words(node: Any) -> set[str]:
    if isinstance(node, dict):
        return {str(key) for key in node} | {w for value in node.values() for w in _words(value)}
    if isinstance(node, list):
        return {w for item in node for w in _words(item)}
    return {node} if isinstance(node, str) else set()


# Names and values that mean something to the checks, so that changes rewire boxes and
# arrows instead of only making strings no check knows.
VOCABULARY = sorted(
    set().union(*map(_words, SEEDS)) | set(BOX_TYPES) | set(TOP_LEVEL_KEYS)
    | {"tumbling", "sliding", "session", "passive", "active", "in", "left", "right", "*",
       "0 seconds", "-5 seconds", "1 minute 30 seconds", "2 milliseconds", "10 hours"})


def fuzzed_name(fdp: atheris.FuzzedDataProvider) -> str:
    if fdp.ConsumeBool():
        return str(fdp.PickValueInList(VOCABULARY))
    return str(fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 12)))


def fuzzed_value(fdp: atheris.FuzzedDataProvider, depth: int = 0) -> Any:
    kind = fdp.ConsumeIntInRange(0, 9 if depth < 2 else 6)
    if kind == 0:
        return fuzzed_name(fdp)
    if kind == 1:  # a box's port, e.g. pair.left
        return f"{fdp.PickValueInList(VOCABULARY)}.{fdp.PickValueInList(VOCABULARY)}"
    if kind == 2:
        return f"{fdp.ConsumeIntInRange(-100, 100)} {fuzzed_name(fdp)}"  # duration-like
    if kind == 3:
        return fdp.ConsumeInt(4)
    if kind == 4:
        return fdp.ConsumeRegularFloat()
    if kind == 5:
        return fdp.ConsumeBool()
    if kind == 6:
        return None
    if kind == 7:
        return [fuzzed_value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 3))]
    return {fuzzed_name(fdp): fuzzed_value(fdp, depth + 1)
            for _ in range(fdp.ConsumeIntInRange(0, 3))}


def mutate(doc: Any, fdp: atheris.FuzzedDataProvider) -> Any:
    """``doc`` with one field changed; returns the new document (the root may be replaced)."""
    parent: Any = None
    key: Any = None
    node = doc
    while isinstance(node, dict | list) and node and fdp.ConsumeProbability() < 0.8:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        parent, key = node, keys[fdp.ConsumeIntInRange(0, len(keys) - 1)]
        node = parent[key]
    operation = fdp.ConsumeIntInRange(0, 4)
    if operation == 3 or parent is None:  # add a field or item to the node
        if isinstance(node, dict):
            node[fuzzed_name(fdp)] = fuzzed_value(fdp)
        elif isinstance(node, list):
            node.insert(fdp.ConsumeIntInRange(0, len(node)), fuzzed_value(fdp))
        elif parent is None:
            return fuzzed_value(fdp)
        else:
            parent[key] = fuzzed_value(fdp)
    elif operation == 0:
        parent[key] = fuzzed_value(fdp)
    elif operation == 1:
        del parent[key]
    elif operation == 2 and isinstance(parent, dict):  # rename, e.g. a box
        parent[fuzzed_name(fdp)] = parent.pop(key)
    elif isinstance(parent, dict):  # copy under a new name, e.g. a second box like one
        parent[fuzzed_name(fdp)] = copy.deepcopy(node)
    else:
        parent.append(copy.deepcopy(node))
    return doc


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    doc = copy.deepcopy(SEEDS[fdp.ConsumeIntInRange(0, len(SEEDS) - 1)])
    for _ in range(fdp.ConsumeIntInRange(0, 3)):
        doc = mutate(doc, fdp)
    check_network_text(yaml.dump(doc, Dumper=DUMPER, sort_keys=False))


def main() -> None:
    guard_processor_imports()
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
