"""Dependencies point one way: ``medusa_spark`` uses the core ``medusa``, ``medusa_apps``
(the CLI, demo, benchmarks) uses both, and nothing imports upwards."""

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


def _violations(package: str, forbidden: tuple[str, ...]) -> list[str]:
    root = PACKAGES[package]
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for line, module in _imported(tree):
            if module.split(".")[0] in forbidden:
                found.append(f"{path.relative_to(REPO_ROOT)}:{line} imports {module}")
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


def test_every_package_is_where_the_check_looks() -> None:
    for package, root in PACKAGES.items():
        assert (root / "__init__.py").is_file(), f"{package}: no {root}/__init__.py"
        assert Path(__import__(package).__file__).parent == root
