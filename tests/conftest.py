"""Shared fixtures: the real federation for integration and e2e tests.

The stack is started once per test session, in this order of preference:
1. existing endpoints named by MEDUSA_EXTERNAL_KAFKA and MEDUSA_EXTERNAL_REGISTRY_URL;
2. containers, when a Docker engine answers (testcontainers);
3. the project's local launcher (`medusa up`), on test ports in a temporary run folder.
"""

from __future__ import annotations

import os
import re
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from medusa.endpoints import Endpoints, resolve
from medusa.settings import StackSettings
from medusa.settings import kafka_config as client_config
from medusa.stack.layout import StackLayout
from tests.federation_processes import NodeProcess, SharedNodes
from tests.hdfs_fixtures import hdfs, installed_hdfs  # noqa: F401 (fixtures)
from tests.s3_fixtures import installed_s3, s3_store  # noqa: F401 (fixtures)

# Test ports stay clear of a developer's own `medusa up` on the default ports, and below
# the kernel's ephemeral range (32768 and up), where outgoing connections take ports.
TEST_PORTS = {
    "kafka_base_port": 29092, "registry_port": 28081, "registry_management_port": 28082,
    "registry_internal_port": 28083,
    "jaeger_otlp_grpc_port": 24317,
    "jaeger_otlp_http_port": 24318, "jaeger_query_port": 26686, "jaeger_query_grpc_port": 26685,
    "jaeger_health_port": 23133, "jaeger_metrics_port": 28888, "toxiproxy_port": 28474,
    "catalog_port": 28090,
    "detector_port": 28091,
    # Three participants, for BPM's spike over two partners; the tests run their own BPM
    # agents, so that no agent acts on another test's contracts.
    "stack_participants": 3, "stack_bpm_agents": False,
}


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
    except Exception:
        return False
    return True


class LocalFederation:
    """The launcher-managed stack of this test session."""

    def __init__(self, run_dir: Path) -> None:
        # The tests' own clients find the stack's credentials through the run folder.
        os.environ["MEDUSA_RUN_DIR"] = str(run_dir)
        self.settings = StackSettings(run_dir=run_dir, **TEST_PORTS)
        self.layout = StackLayout.from_settings(self.settings)

    def start(self) -> Endpoints:
        from medusa.stack.install import install
        from medusa.stack.launcher import up
        from medusa_apps.services import SERVICE_COMMANDS

        install(self.settings)
        return up(self.layout, SERVICE_COMMANDS)

    def stop(self) -> None:
        from medusa.stack.launcher import down

        down(self.layout, purge=True)


@pytest.fixture(scope="session")
def local_federation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFederation | None]:
    """The local launcher's stack, or None when the tests run against other endpoints."""
    external = StackSettings()
    if external.external_kafka and external.external_registry_url:
        yield None
        return
    # Containers only when asked: a Docker engine that merely runs (as for the compose
    # deployment) must not take the suite off the local launcher.
    if os.environ.get("MEDUSA_TEST_USE_CONTAINERS", "never") == "always" and _docker_answers():
        yield None
        return
    federation = LocalFederation(tmp_path_factory.mktemp("federation"))
    try:
        federation.start()
        yield federation
    finally:
        federation.stop()


@pytest.fixture(scope="session")
def federation(local_federation: LocalFederation | None) -> Iterator[Endpoints]:
    if local_federation is not None:
        yield resolve(local_federation.settings)
        return
    external = StackSettings()
    if external.external_kafka and external.external_registry_url:
        yield resolve(external)
        return
    from tests.containers import container_federation

    with container_federation() as endpoints:
        yield endpoints


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name of this test alone."""
    name = re.sub(r"[^a-zA-Z0-9._-]", "-", request.node.name)[:80]
    return f"test.{name}.{uuid.uuid4().hex[:8]}"


@pytest.fixture
def kafka_config(federation: Endpoints) -> dict[str, Any]:
    return client_config(federation.bootstrap())


@pytest.fixture
def registry(federation: Endpoints):  # type: ignore[no-untyped-def]
    from medusa.registry import registry_client

    return registry_client(federation.registry_url)


@pytest.fixture(scope="module")
def registry_module(federation: Endpoints):  # type: ignore[no-untyped-def]
    """A registry client shared by a module's fixtures."""
    from medusa.registry import registry_client

    return registry_client(federation.registry_url)


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """One SparkSession with the connector jars for every test that runs boxes."""
    from medusa_spark.session import spark_session

    session = spark_session("medusa-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def test_tracing(federation: Endpoints):  # type: ignore[no-untyped-def]
    """This test process's spans (producers and sinks) go to the federation's Jaeger."""
    from opentelemetry import trace

    from medusa import tracing

    tracing.configure("medusa-tests", federation.otlp_endpoint)
    yield trace.get_tracer_provider()
    tracing.shutdown()


@pytest.fixture(scope="session")
def shared_nodes(federation: Endpoints, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[SharedNodes]:
    """The nodes e2e modules share (``SharedNodes``); none runs until a module asks."""
    global _shared_nodes
    nodes = _shared_nodes = SharedNodes(federation, tmp_path_factory.mktemp("shared-nodes"))
    try:
        yield nodes
    finally:
        nodes.stop()
        _shared_nodes = None


_shared_nodes: SharedNodes | None = None
"""The session's shared nodes, once started: a failing test's report shows their logs."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Iterator[None]:
    """A test that fails beside the shared nodes (in its set-up too: a module's scenario
    runs there) shows what they last said: CI keeps no node log."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed and call.when != "teardown" and _shared_nodes is not None and \
            "shared_nodes" in getattr(item, "fixturenames", ()):
        report.sections.append(("the shared nodes' last lines", _shared_nodes.narratives()))


@pytest.fixture(scope="module")
def beta_node(shared_nodes: SharedNodes) -> NodeProcess:
    """beta's first shared node, running."""
    return shared_nodes.ready()[SharedNodes.B1]


@pytest.fixture(scope="module")
def alpha_beta_nodes(shared_nodes: SharedNodes) -> dict[str, NodeProcess]:
    """The first shared node of alpha and of beta, running, by participant."""
    ready = shared_nodes.ready()
    return {"alpha": ready[SharedNodes.A1], "beta": ready[SharedNodes.B1]}


@pytest.fixture(scope="module")
def alpha_nodes(shared_nodes: SharedNodes) -> list[NodeProcess]:
    """alpha's two shared nodes, running; each is the other's secondary."""
    ready = shared_nodes.ready()
    return [ready[SharedNodes.A1], ready[SharedNodes.A2]]


@pytest.fixture(scope="module")
def links(federation: Endpoints):  # type: ignore[no-untyped-def]
    """The proxies on the links between participants (medusa fault); every link is healed
    when the module is done."""
    from medusa.faults import Links

    if not federation.toxiproxy_url:
        pytest.skip("this federation has no proxies on its links (containers)")
    with Links(federation.toxiproxy_url) as opened:
        try:
            yield opened
        finally:
            opened.heal()


def pytest_configure(config: pytest.Config) -> None:
    """A session stopped with SIGTERM (a timeout, ``kill``) tears its stack down as Ctrl-C
    does: its fixtures' finalizers run, so no federation is left holding the test ports."""
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, interrupt)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--screenshots", action="store_true",
                     help="Write the console's screenshots of each state tested to "
                          "bench-results/console/ (tests/e2e/test_console.py).")


KIND_MARKERS = ("unit", "integration", "e2e", "fuzz", "scenario", "compose")
"""Every test says what it needs: `make test-unit` and CI's selections go by these."""


LAST_OF_E2E = "tests/e2e/test_demo.py"
"""Runs after the other e2e modules: it stops the shared nodes (a user's federation has the
demo's node alone), which would otherwise start again for the modules after it."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unmarked = [item.nodeid for item in items
                if not any(item.get_closest_marker(kind) for kind in KIND_MARKERS)]
    if unmarked:
        raise pytest.UsageError(
            f"{len(unmarked)} test(s) carry none of the markers {', '.join(KIND_MARKERS)} "
            f"(set pytestmark in the module): {', '.join(unmarked[:10])}")
    last = [item for item in items if item.nodeid.startswith(LAST_OF_E2E)]
    rest = [item for item in items if not item.nodeid.startswith(LAST_OF_E2E)]
    after = max((n + 1 for n, item in enumerate(rest) if item.nodeid.startswith("tests/e2e/")),
                default=len(rest))
    items[:] = rest[:after] + last + rest[after:]
