"""What the network fuzz targets check: a network text is accepted (parsed, and its structure
checked) or refused with a NetworkError that names the box and field, or the top-level key.

Imported by fuzz_network_text.py and fuzz_network_structured.py inside
``atheris.instrument_imports``, so the project modules it imports are instrumented.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import yaml

from medusa_spark.boxes import process
from medusa_spark.network.model import NetworkError, NetworkSpec, parse_network
from medusa_spark.network.validate import check_structure

NETWORKS_DIR = Path(process.__file__).resolve().parents[1] / "networks"
"""The repo's example networks, the seeds of the fuzzers."""
PROCESSOR_MODULES = ("medusa_spark.processors.linear_road",)
"""The only modules a process box may import while fuzzing (the examples' processors)."""
TOP_LEVEL_KEYS = tuple(NetworkSpec.model_fields)

_NAMED = re.compile(r"""\b(box|stream|field) ('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")
_ARROW = re.compile(r"\barrow \d+ \(")
_YAML_POSITION = re.compile(r"not valid YAML: .*\b(line \d+|position \d+)", re.DOTALL)
_CYCLE = re.compile(r"the network has a cycle: (.+)$")


def _guarded_import(name: str, package: str | None = None) -> ModuleType:
    # A fuzzed `processor` must not import (and so run) arbitrary modules, e.g. antigravity.
    if name in PROCESSOR_MODULES:
        return importlib.import_module(name, package)
    raise ModuleNotFoundError(f"No module named {name!r} (not importable while fuzzing)")


def guard_processor_imports() -> None:
    for module in PROCESSOR_MODULES:
        importlib.import_module(module)  # once, before fuzzing, not per input
    process.importlib = SimpleNamespace(import_module=_guarded_import)  # type: ignore[assignment]


def _names(raw: Any, section: str) -> list[str]:
    entries = raw.get(section) if isinstance(raw, dict) else None
    return [str(name) for name in entries] if isinstance(entries, dict) else []


def _named(message: str) -> list[tuple[str, str]]:
    """The (kind, name) pairs a message names, e.g. ("box", "per_sensor"); names are written
    with repr(), so they are read back with literal_eval."""
    named = []
    for kind, literal in _NAMED.findall(message):
        try:
            named.append((kind, str(ast.literal_eval(literal))))
        except (ValueError, SyntaxError):
            continue  # quotes from the input itself, not a name the parser wrote
    return named


def names_a_field(message: str, raw: Any) -> bool:
    """Whether a rejection of the document ``raw`` (its YAML, None if it is none) names the
    box or stream with the field, an arrow, or a top-level key."""
    boxes, streams = _names(raw, "boxes"), _names(raw, "streams")
    top_level = {*TOP_LEVEL_KEYS, *(map(str, raw) if isinstance(raw, dict) else ())}
    for kind, name in _named(message):
        if (kind == "box" and name in boxes) or (kind == "stream" and name in streams):
            return True
        # A top-level key, or a path under it ('arrows.0.from').
        if kind == "field" and (name in top_level or name.split(".")[0] in top_level):
            return True
    if cycle := _CYCLE.search(message):
        return all(name in boxes for name in cycle.group(1).split(" -> "))
    # Text that is no YAML mapping has no fields: its position, or the keys expected, will do.
    return bool(_ARROW.search(message) or _YAML_POSITION.search(message)
                or "expected a mapping with streams, boxes and arrows" in message
                or "not valid YAML: collections nested too deeply" in message)


def check_network_text(text: str) -> None:
    """Parses ``text`` and checks its structure; fails unless it passes or is refused with a
    message that names a field."""
    try:
        check_structure(parse_network(text))
    except NetworkError as error:
        try:
            raw = yaml.safe_load(text)  # as parse_network read it: libyaml may differ
        except (yaml.YAMLError, RecursionError):
            raw = None
        if not names_a_field(str(error), raw):
            raise AssertionError(f"rejection names no field: {str(error)!r}") from error

