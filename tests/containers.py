"""The federation as containers of the images built here (`make compose-images` or
`infra/compose.sh images`), through testcontainers, for `MEDUSA_TEST_USE_CONTAINERS=always`
on a machine with a Docker engine: one KRaft Kafka per participant, the registry and
Jaeger, on a network of their own, each published on 127.0.0.1 only. Unlike the compose
deployment, the brokers take clients without authentication (the tests' own)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from medusa.endpoints import Endpoints

MEDUSA_IMAGE = "medusa:local"
REGISTRY_IMAGE = "medusa-registry:local"
PARTICIPANTS = ("alpha", "beta", "gamma", "delta")

# A single-node KRaft broker: clients on 9092 (advertised where the host reaches it), the
# other containers on 9094 (advertised by name), the controller on 9093.
KAFKA_START = """set -e
cat > /tmp/server.properties <<EOF
node.id=1
process.roles=broker,controller
controller.quorum.bootstrap.servers=localhost:9093
controller.listener.names=CONTROLLER
listeners=HOST://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093,INTERNAL://0.0.0.0:9094
advertised.listeners=HOST://127.0.0.1:$HOST_PORT,INTERNAL://$NAME:9094
listener.security.protocol.map=HOST:PLAINTEXT,CONTROLLER:PLAINTEXT,INTERNAL:PLAINTEXT
inter.broker.listener.name=INTERNAL
log.dirs=/var/lib/kafka/data
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
EOF
kafka-storage format --standalone -t bWVkdXNhLXRlc3QtMDAx -c /tmp/server.properties
exec kafka-server-start /tmp/server.properties
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _published(container: Any, port: int, host_port: int | None = None) -> Any:
    """``port`` published on 127.0.0.1 only (the Docker SDK takes an (ip, port) pair, which
    testcontainers' ``with_bind_ports`` does not pass on)."""
    container.ports[port] = ("127.0.0.1", host_port or _free_port())
    return container


@contextmanager
def container_federation(participants: int = 2) -> Iterator[Endpoints]:
    from testcontainers.core.config import testcontainers_config
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.network import Network
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    def logged(message: str, timeout_s: int) -> Any:
        return LogMessageWaitStrategy(message).with_startup_timeout(timeout_s)

    # Its reaper's image would come from a registry; the ExitStack removes what it starts.
    testcontainers_config.ryuk_disabled = True
    with ExitStack() as stack:
        network = stack.enter_context(Network())
        kafka: dict[str, str] = {}
        for name in PARTICIPANTS[:participants]:
            host_port = _free_port()
            broker = _published(DockerContainer(MEDUSA_IMAGE), 9092, host_port)
            broker = (broker.with_network(network).with_network_aliases(f"kafka-{name}")
                      .with_env("HOST_PORT", str(host_port)).with_env("NAME", f"kafka-{name}")
                      .with_kwargs(entrypoint=["bash", "-c", KAFKA_START])
                      .waiting_for(logged("Kafka Server started", 120)))
            stack.enter_context(broker)
            kafka[name] = f"127.0.0.1:{host_port}"
        first = PARTICIPANTS[0]
        registry = _published(
            DockerContainer(REGISTRY_IMAGE).with_network(network)
            .with_env("APICURIO_KAFKASQL_BOOTSTRAP_SERVERS", f"kafka-{first}:9094")
            .waiting_for(logged("Installed features", 180)), 8080)
        stack.enter_context(registry)
        jaeger = (DockerContainer(MEDUSA_IMAGE).with_network(network)
                  .with_env("JAEGER_HOST", "0.0.0.0")
                  .with_kwargs(entrypoint=["jaeger"])
                  .with_command("--config /opt/medusa/src/infra/jaeger/config.yaml")
                  .waiting_for(logged("Everything is ready", 60)))
        jaeger = _published(_published(jaeger, 4317), 16686)
        stack.enter_context(jaeger)
        yield Endpoints(
            kafka=kafka,
            registry_url=f"http://127.0.0.1:{registry.get_exposed_port(8080)}"
                         "/apis/ccompat/v7",
            otlp_endpoint=f"http://127.0.0.1:{jaeger.get_exposed_port(4317)}",
            jaeger_query_url=f"http://127.0.0.1:{jaeger.get_exposed_port(16686)}",
        )
