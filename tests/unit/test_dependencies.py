"""Dependencies point one way: ``medusa_spark`` uses the core ``medusa``, ``medusa_apps``
(the CLI, demo, benchmarks) uses both, and nothing imports upwards (nor starts a process of
a package above it with ``python -m``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from medusa.settings import REPO_ROOT

pytestmark = pytest.mark.unit

PACKAGES = {
    "medusa": REPO_ROOT / "services" / "medusa",
    "medusa_spark": REPO_ROOT / "spark_apps" / "medusa_spark",
    "medusa_apps": REPO_ROOT / "services" / "medusa_apps",
}
FORBIDDEN = {
    "medusa": ("medusa_spark", "medusa_apps"),
    "medusa_spark": ("medusa_apps",),
}


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """Every absolute module an import statement names, with its line (at any depth)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.extend([(node.lineno, node.module)])
    return found


def _run_as_module(tree: ast.AST) -> list[tuple[int, str]]:
    """Every module a literal command runs with ``-m`` (``[python, "-m", "pkg", ...]``),
    with its line: starting a package's process depends on it as much as importing it."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple):
            for flag, module in zip(node.elts, node.elts[1:], strict=False):
                if isinstance(flag, ast.Constant) and flag.value == "-m" and \
                        isinstance(module, ast.Constant) and isinstance(module.value, str):
                    found.append((module.lineno, module.value))
    return found


def _violations(package: str, forbidden: tuple[str, ...]) -> list[str]:
    root = PACKAGES[package]
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        where = path.relative_to(REPO_ROOT)
        for line, module in _imported(tree):
            if module.split(".")[0] in forbidden:
                found.append(f"{where}:{line} imports {module}")
        for line, module in _run_as_module(tree):
            if module.split(".")[0] in forbidden:
                found.append(f"{where}:{line} starts python -m {module}")
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_a_package_does_not_import_the_ones_built_on_it(package: str) -> None:
    assert PACKAGES[package].is_dir()
    violations = _violations(package, FORBIDDEN[package])
    assert not violations, (f"{package} must not import {' or '.join(FORBIDDEN[package])}:\n"
                            + "\n".join(violations))


def test_the_check_sees_an_import_anywhere_in_a_module() -> None:
    tree = ast.parse("import os\ndef f():\n    from medusa_spark.node import Node\n"
                     "    import medusa_apps.cli as cli\n")
    assert _imported(tree) == [(1, "os"), (3, "medusa_spark.node"), (4, "medusa_apps.cli")]


def test_the_check_sees_a_package_started_as_a_process() -> None:
    tree = ast.parse('import sys\ncommand = [sys.executable, "-m", "medusa_apps", "catalog"]\n'
                     'other = ("java", "-m", "x")\nflags = ["-m"]\n')
    assert _run_as_module(tree) == [(2, "medusa_apps"), (3, "x")]


def test_every_package_is_where_the_check_looks() -> None:
    for package, root in PACKAGES.items():
        assert (root / "__init__.py").is_file(), f"{package}: no {root}/__init__.py"
        assert Path(__import__(package).__file__).parent == root
