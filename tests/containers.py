"""The federation as containers, for machines with a Docker engine (testcontainers)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from medusa.stack.endpoints import Endpoints

KAFKA_IMAGE = "apache/kafka:4.1.0"
REGISTRY_IMAGE = "apicurio/apicurio-registry:3.0.9"
JAEGER_IMAGE = "jaegertracing/jaeger:2.13.0"


@contextmanager
def container_federation(participants: int = 2) -> Iterator[Endpoints]:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs
    from testcontainers.kafka import KafkaContainer

    with ExitStack() as stack:
        kafka: dict[str, str] = {}
        for name in ("alpha", "beta", "gamma", "delta")[:participants]:
            container = stack.enter_context(KafkaContainer(KAFKA_IMAGE).with_kraft())
            kafka[name] = container.get_bootstrap_server()
        registry = stack.enter_context(
            DockerContainer(REGISTRY_IMAGE).with_exposed_ports(8080))
        wait_for_logs(registry, "Installed features", timeout=120)
        jaeger = stack.enter_context(
            DockerContainer(JAEGER_IMAGE).with_exposed_ports(4317, 16686))
        host = registry.get_container_host_ip()
        yield Endpoints(
            kafka=kafka,
            registry_url=f"http://{host}:{registry.get_exposed_port(8080)}/apis/ccompat/v7",
            otlp_endpoint=f"http://{host}:{jaeger.get_exposed_port(4317)}",
            jaeger_query_url=f"http://{host}:{jaeger.get_exposed_port(16686)}",
        )
