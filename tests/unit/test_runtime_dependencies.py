"""Every runtime dependency in pyproject.toml is imported by the product packages; what only
the tests or the tools use belongs in the ``dev`` extra."""

from __future__ import annotations

import ast
import re
import tomllib

import pytest

from medusa.settings import REPO_ROOT

pytestmark = pytest.mark.unit

PRODUCT = (REPO_ROOT / "services", REPO_ROOT / "spark_apps")
MODULE_OF = {
    "confluent-kafka": "confluent_kafka",
    "faust-streaming": "faust",
    "opentelemetry-sdk": "opentelemetry.sdk",
    "opentelemetry-exporter-otlp-proto-grpc": "opentelemetry.exporter.otlp.proto.grpc",
    "pydantic-settings": "pydantic_settings",
    "pyyaml": "yaml",
}
"""A distribution whose module is named otherwise than the distribution."""


def _runtime_distributions() -> list[str]:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    return [re.split(r"[\[<>=!~; ]", spec, maxsplit=1)[0].lower()
            for spec in project["dependencies"]]


def _imported_modules() -> set[str]:
    modules: set[str] = set()
    for root in PRODUCT:
        for path in root.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    modules.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules.add(node.module)
    return modules


def _imports(modules: set[str], wanted: str) -> bool:
    return any(module == wanted or module.startswith(wanted + ".") for module in modules)


def test_every_runtime_dependency_is_imported_by_the_product() -> None:
    modules = _imported_modules()
    unused = [dist for dist in _runtime_distributions()
              if not _imports(modules, MODULE_OF.get(dist, dist.replace("-", "_")))]
    assert not unused, (f"runtime dependencies no product module imports: {unused}; "
                        "move them to the dev extra (or drop them)")


def test_the_check_reads_module_names_from_distribution_names() -> None:
    assert _imports({"opentelemetry.sdk.trace"}, "opentelemetry.sdk")
    assert not _imports({"opentelemetry.sdkx"}, "opentelemetry.sdk")
