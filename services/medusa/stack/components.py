"""The real components of the local federation: how each is started and how we know it answers."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx
from confluent_kafka.admin import AdminClient

from medusa import credentials
from medusa.credential_files import registry_kafka_login
from medusa.errors import MedusaError
from medusa.settings import (
    EXTERNAL_ENDPOINT_FIELDS,
    REPO_ROOT,
    kafka_config,
    spark_kafka_options,
)
from medusa.stack.layout import BrokerLayout, ParticipantLayout, StackLayout
from medusa.stack.pins import pinned
from medusa.stack.services import ServiceCommands

INFRA = REPO_ROOT / "infra"
BROKER_SESSION_MS = 9_000
"""How long a controller waits for a broker's heartbeat before fencing it (Kafka's own)."""
SINGLE_BROKER_SESSION_MS = 30_000
"""The same for a cluster of one broker, which has no other to take its partitions over."""


class ComponentMissingError(MedusaError, RuntimeError):
    """A component is not installed; ``medusa install`` (make setup) fetches it."""


class StartupError(MedusaError, RuntimeError):
    """A component cannot start as it is (its log, or the message, says why)."""


@dataclass(frozen=True)
class Component:
    name: str
    """Unique within the stack, e.g. ``kafka-alpha``."""
    command: list[str]
    env: dict[str, str]
    endpoint: str
    ready: Callable[[], bool]
    prepare: Callable[[], None] | None = None
    """One-time set-up before the first start (e.g. formatting Kafka's storage)."""


def java_binary(layout: StackLayout) -> str:
    java_home = layout.settings.java_home or (
        Path(os.environ["JAVA_HOME"]) if os.environ.get("JAVA_HOME") else None)
    if java_home is not None:
        return str(java_home / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise ComponentMissingError("no java on PATH; set MEDUSA_JAVA_HOME to a JDK 17+")
    return found


def kafka_libs(layout: StackLayout) -> Path:
    version = pinned(INFRA / "maven" / "kafka" / "pom.xml", "kafka.version")
    libs = layout.settings.cache_dir / "kafka" / version / "libs"
    if not (libs.parent / ".installed").is_file():
        raise ComponentMissingError(f"Kafka {version} is not installed in {libs}")
    return libs


def registry_home(layout: StackLayout) -> Path:
    version = pinned(INFRA / "maven" / "registry" / "pom.xml", "apicurio.version")
    home = layout.settings.cache_dir / "apicurio" / version
    if not (home / ".installed").is_file():
        raise ComponentMissingError(f"Apicurio Registry {version} is not installed in {home}")
    return home


def go_binary(layout: StackLayout, name: str) -> Path:
    binary = layout.settings.cache_dir / "bin" / name
    if not binary.is_file():
        raise ComponentMissingError(f"{name} is not installed in {binary.parent}")
    return binary


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, base64url without padding (as kafka-storage does).

    Like Kafka's own ids it never starts with "-", which kafka-storage would read as an option.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def kafka_admin_ready(bootstrap: str, timeout_s: float = 2.0) -> bool:
    admin = AdminClient(kafka_config(bootstrap, {"log_level": 0}, socket_timeout_ms=2000))
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except Exception:
        return False
    return bool(metadata.brokers)


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    try:
        return httpx.get(url, timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def fresh(path: Path, within_s: float) -> bool:
    """Whether a file was touched in the last ``within_s`` seconds (an agent's heartbeat)."""
    try:
        return time.time() - path.stat().st_mtime <= within_s
    except OSError:
        return False


def health_checks(layout: StackLayout) -> dict[str, tuple[str, Callable[[], bool]]]:
    """Each component's endpoint and the check that says it answers; needs no installation."""
    checks: dict[str, tuple[str, Callable[[], bool]]] = {}
    for participant in layout.participants:
        checks[f"kafka-{participant.name}"] = (participant.bootstrap,
                                               partial(kafka_admin_ready, participant.bootstrap))
    registry_health = f"http://127.0.0.1:{layout.settings.registry_management_port}/health/ready"
    checks["registry"] = (f"http://127.0.0.1:{layout.settings.registry_internal_port}",
                          lambda: http_ok(registry_health))
    gateway_health = f"http://127.0.0.1:{layout.settings.registry_port}/gateway/health"
    checks["registry-gateway"] = (layout.registry_url, lambda: http_ok(gateway_health))
    health = f"http://127.0.0.1:{layout.settings.jaeger_health_port}/status"
    checks["jaeger"] = (layout.jaeger_query_url, lambda: http_ok(health))
    checks["catalog"] = (layout.catalog_url, lambda: http_ok(f"{layout.catalog_url}/health"))
    checks["detector"] = (layout.detector_url,
                          lambda: http_ok(f"{layout.detector_url}/health"))
    for name in layout.bpm_participants:
        alive = layout.bpm_alive_file(name)
        checks[f"bpm-{name}"] = (f"{alive} (BPM agent)",
                                 partial(fresh, alive, layout.bpm_alive_within_s))
    if layout.links:
        checks["toxiproxy"] = (layout.toxiproxy_url,
                               lambda: http_ok(f"{layout.toxiproxy_url}/version"))
    if layout.settings.stack_hdfs:
        jmx = (f"http://127.0.0.1:{layout.settings.hdfs_base_port + 1}/jmx"
               "?qry=Hadoop:service=NameNode,name=FSNamesystemState")
        checks["hdfs-namenode"] = (layout.hdfs_uri or "", lambda: http_ok(jmx))
        checks["hdfs-datanode"] = (f"127.0.0.1:{layout.settings.hdfs_base_port + 2}",
                                   lambda: http_ok(jmx))
    if layout.settings.stack_s3 and layout.s3_endpoint:
        from medusa.stack.s3 import s3_api_answers

        checks["s3"] = (layout.s3_endpoint, partial(s3_api_answers, layout.s3_endpoint))
    return checks


def kafka_broker(layout: StackLayout, participant: ParticipantLayout,
                 broker: BrokerLayout) -> Component:
    libs = kafka_libs(layout)
    java = java_binary(layout)
    classpath = f"{libs}/*"
    properties = broker.data_dir / "server.properties"
    log_file = layout.logs_dir / f"{broker.component}.log"
    log_options = [f"-Dlog4j2.configurationFile={INFRA / 'kafka' / 'log4j2.properties'}",
                   f"-Dmedusa.kafka.log.file={log_file}",
                   f"-Dmedusa.kafka.authorizer.log.file={authorizer_log(layout, broker)}"]
    links = layout.links_to(participant)
    brokers = participant.broker_layouts
    single = len(brokers) == 1

    def prepare() -> None:
        stack = credentials.ensure(layout.credentials_file,
                                   [p.name for p in layout.participants])
        broker.data_dir.mkdir(parents=True, exist_ok=True)
        participant.data_dir.mkdir(parents=True, exist_ok=True)
        template = (INFRA / "kafka" / "server.properties.template").read_text()
        scram_login = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        peer_ports = {link.listener: broker.peer_listener_port(link.viewer) for link in links}
        advertised = {link.listener: port for link in links
                      for _, port, behind in link.proxies if behind == broker}
        # One broker: a dynamic quorum of itself. Several: a static quorum of all of them.
        quorum = (f"controller.quorum.bootstrap.servers=127.0.0.1:{broker.controller_port}"
                  if single else "controller.quorum.voters=" + ",".join(
                      f"{b.node_id}@127.0.0.1:{b.controller_port}" for b in brokers))
        replicas = min(3, len(brokers))
        text = (
            template.replace("@PEER_LISTENERS@", "".join(
                f",{name}://127.0.0.1:{port}" for name, port in peer_ports.items()))
            .replace("@PEER_ADVERTISED@", "".join(
                f",{name}://127.0.0.1:{port}" for name, port in advertised.items()))
            .replace("@PEER_PROTOCOLS@", "".join(f",{name}:SASL_PLAINTEXT"
                                                 for name in peer_ports))
            .replace("@PEER_JAAS@", "\n".join(
                f"listener.name.{name.lower()}.scram-sha-256.sasl.jaas.config={scram_login}"
                for name in peer_ports))
            .replace("@QUORUM@", quorum)
            .replace("@REPLICAS@", str(replicas))
            .replace("@MIN_ISR@", str(max(1, replicas - 1)))
            .replace("@NODE_ID@", str(broker.node_id))
            .replace("@BROKER_PORT@", str(broker.broker_port))
            .replace("@CONTROLLER_PORT@", str(broker.controller_port))
            .replace("@LOG_DIRS@", str(broker.data_dir / "log"))
            .replace("@ADVERTISED_HOST@", "127.0.0.1")
            .replace("@OWNER@", participant.name)
            .replace("@SESSION_MS@", str(SINGLE_BROKER_SESSION_MS if single else
                                         BROKER_SESSION_MS))
            .replace("@ADMIN_PASSWORD@", stack.secret(credentials.ADMIN).kafka_password)
        )
        credentials.write_private(properties, text)
        if (broker.data_dir / "log" / "meta.properties").is_file():
            if not participant.scram_file.is_file():
                raise StartupError(
                    f"Kafka {participant.name}'s data in {broker.data_dir} was made "
                    "without authentication; remove it with `medusa down --purge`")
            return  # formatted by an earlier run: keep its data, cluster id and users
        # Every broker of a cluster shares its id: the first one formatted makes it.
        if broker.index == 0 or not participant.cluster_id_file.is_file():
            participant.cluster_id_file.write_text(new_cluster_id() + "\n")
        cluster_id = participant.cluster_id_file.read_text().strip()
        # The principals' SCRAM credentials go into the metadata log as it is made, so
        # every client can authenticate from the first start.
        users = [argument for name, secret in stack.principals.items()
                 for argument in ("--add-scram", f"{credentials.SCRAM_MECHANISM}=[name={name},"
                                                 f"password={secret.kafka_password}]")]
        formatted = subprocess.run(
            [java, "-Xmx256m", *log_options, "-Dmedusa.kafka.log.level=WARN",
             "-cp", classpath,
             "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(properties),
             *(["--standalone"] if single else []), *users],
            check=False, capture_output=True, text=True,
        )
        if formatted.returncode != 0:
            output = (formatted.stderr or formatted.stdout).strip().splitlines()
            raise RuntimeError(f"formatting the storage of {broker.component} failed: "
                               f"{' / '.join(output[-3:])}")
        participant.scram_file.write_text("\n".join(stack.principals) + "\n")

    return Component(
        name=broker.component,
        command=[java, *layout.settings.kafka_heap.split(), "-XX:+UseG1GC", *log_options,
                 "-cp", classpath, "kafka.Kafka", str(properties)],
        env={},
        endpoint=broker.address,
        ready=partial(kafka_admin_ready, broker.address) if not single
        else health_checks(layout)[f"kafka-{participant.name}"][1],
        prepare=prepare,
    )


def authorizer_log(layout: StackLayout, broker: BrokerLayout) -> Path:
    """Where a broker logs the requests its ACLs refused."""
    return layout.logs_dir / f"{broker.component}-refused.log"


@contextlib.contextmanager
def client_properties_file(bootstrap: str, **extra: object) -> Iterator[Path]:
    """A Java Kafka client's configuration of the cluster at ``bootstrap`` (with this
    process's login), in a file of the owner's that is gone afterwards: Kafka's own tools
    read it, rather than taking the password on a command line that ``ps`` shows."""
    java = {k.removeprefix("kafka."): v for k, v in spark_kafka_options(bootstrap).items()}
    with tempfile.TemporaryDirectory(prefix="medusa-client-") as folder:
        path = Path(folder) / "client.properties"
        credentials.write_private(path, "".join(f"{k}={v}\n" for k, v in {**java, **extra}.items()))
        yield path


def registry_java(layout: StackLayout) -> str:
    """Apicurio 3 needs Java 21+, newer than the machine's default Java 17."""
    if layout.settings.registry_java is not None:
        return str(layout.settings.registry_java)
    found = subprocess.run(["bash", str(INFRA / "registry" / "find_java.sh")],
                           capture_output=True, text=True, check=False)
    if found.returncode != 0:
        raise ComponentMissingError(
            f"the schema registry needs Java 21 or newer: {found.stderr.strip()}")
    return found.stdout.strip()


def schema_registry(layout: StackLayout) -> Component:
    home = registry_home(layout)
    s = layout.settings
    # Its data lives in the first participant's Kafka (KafkaSQL), so it survives restarts.
    storage_kafka = layout.participants[0].bootstrap
    storage_login = layout.run_dir / "registry-kafka.properties"

    def prepare() -> None:
        # The Kafka clients' login, in a file of the owner's rather than on the command line.
        stack = credentials.ensure(layout.credentials_file,
                                   [p.name for p in layout.participants])
        credentials.write_private(storage_login, registry_kafka_login(stack))

    return Component(
        name="registry",
        command=[registry_java(layout), *s.registry_heap.split(),
                 "-Dquarkus.config.locations="
                 f"{INFRA / 'registry' / 'registry.properties'},{storage_login}",
                 f"-Dquarkus.http.port={s.registry_internal_port}",
                 f"-Dquarkus.management.port={s.registry_management_port}",
                 f"-Dapicurio.kafkasql.bootstrap.servers={storage_kafka}",
                 "-jar", str(home / "quarkus-run.jar")],
        env={},
        endpoint=health_checks(layout)["registry"][0],
        ready=health_checks(layout)["registry"][1],
        prepare=prepare,
    )


def registry_gateway(layout: StackLayout, services: ServiceCommands) -> Component:
    """The registry's front door: writes need a participant's token."""
    return Component(
        name="registry-gateway",
        command=services.registry_gateway(layout.settings.registry_port),
        env={**service_env(layout),
             "MEDUSA_REGISTRY_INTERNAL_PORT": str(layout.settings.registry_internal_port)},
        endpoint=layout.registry_url,
        ready=health_checks(layout)["registry-gateway"][1],
    )


def jaeger(layout: StackLayout) -> Component:
    s = layout.settings
    return Component(
        name="jaeger",
        command=[str(go_binary(layout, "jaeger")), "--config",
                 str(INFRA / "jaeger" / "config.yaml")],
        env={
            "JAEGER_OTLP_GRPC_PORT": str(s.jaeger_otlp_grpc_port),
            "JAEGER_OTLP_HTTP_PORT": str(s.jaeger_otlp_http_port),
            "JAEGER_QUERY_HTTP_PORT": str(s.jaeger_query_port),
            "JAEGER_QUERY_GRPC_PORT": str(s.jaeger_query_grpc_port),
            "JAEGER_HEALTH_PORT": str(s.jaeger_health_port),
            "JAEGER_METRICS_PORT": str(s.jaeger_metrics_port),
        },
        endpoint=layout.jaeger_query_url,
        ready=health_checks(layout)["jaeger"][1],
    )


def service_env(layout: StackLayout) -> dict[str, str]:
    """The environment of the stack's own services: this stack's run folder and credentials,
    and none of the endpoints the caller's MEDUSA_EXTERNAL_* may name (another stack's)."""
    cleared = {f"MEDUSA_{name.upper()}": "" for name in EXTERNAL_ENDPOINT_FIELDS}
    return {**cleared, "MEDUSA_RUN_DIR": str(layout.run_dir),
            "MEDUSA_CREDENTIALS_FILE": str(layout.credentials_file)}


def catalog(layout: StackLayout, services: ServiceCommands) -> Component:
    """The project's own catalog service."""
    return Component(
        name="catalog",
        command=services.catalog(layout.settings.catalog_port,
                                                   layout.catalog_home),
        env=service_env(layout),
        endpoint=layout.catalog_url,
        ready=health_checks(layout)["catalog"][1],
    )


def detector(layout: StackLayout, services: ServiceCommands) -> Component:
    """The failure detector, watching every participant's nodes."""
    return Component(
        name="detector",
        command=services.detector(layout.settings.detector_port),
        env=service_env(layout),
        endpoint=layout.detector_url,
        ready=health_checks(layout)["detector"][1],
    )


def bpm_agent(layout: StackLayout, participant: str,
              services: ServiceCommands) -> Component:
    """A participant's BPM agent; it touches its heartbeat file every step."""
    return Component(
        name=f"bpm-{participant}",
        command=services.bpm_agent(
            participant, layout.settings.bpm_interval_s, layout.bpm_alive_file(participant)),
        env=service_env(layout),
        endpoint=f"participant {participant}",
        ready=health_checks(layout)[f"bpm-{participant}"][1],
    )


def toxiproxy(layout: StackLayout) -> Component:
    """The links between participants: one proxy per ordered pair, created at start-up."""
    config = layout.run_dir / "toxiproxy.json"

    def prepare() -> None:
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps(
            [{"name": proxy, "listen": f"127.0.0.1:{port}",
              "upstream": f"127.0.0.1:{broker.peer_listener_port(link.viewer)}",
              "enabled": True}
             for link in layout.links for proxy, port, broker in link.proxies], indent=2))

    return Component(
        name="toxiproxy",
        command=[str(go_binary(layout, "toxiproxy-server")), "-host", "127.0.0.1",
                 "-port", str(layout.settings.toxiproxy_port), "-config", str(config)],
        env={},
        endpoint=layout.toxiproxy_url,
        ready=health_checks(layout)["toxiproxy"][1],
        prepare=prepare,
    )


def kafka_components(layout: StackLayout) -> list[Component]:
    return [kafka_broker(layout, participant, broker) for participant in layout.participants
            for broker in participant.broker_layouts]


def link_components(layout: StackLayout) -> list[Component]:
    """What carries the links between participants (nothing with one participant)."""
    return [toxiproxy(layout)] if layout.links else []


def service_components(layout: StackLayout,
                       services: ServiceCommands) -> list[Component]:
    """What starts once Kafka answers (the registry keeps its data in Kafka); ``services``:
    the commands of the project's own services."""
    return [schema_registry(layout), registry_gateway(layout, services), jaeger(layout),
            catalog(layout, services), detector(layout, services)]


def storage_components(layout: StackLayout) -> list[Component]:
    """Shared stores for checkpoints, when asked for: a local HDFS (``medusa up --hdfs``),
    a local S3-compatible object store (``medusa up --s3``)."""
    found: list[Component] = []
    if layout.settings.stack_hdfs:
        from medusa.stack.hdfs import HdfsPorts, LocalHdfs, hdfs_components, hdfs_libs

        libs = hdfs_libs(layout.settings.cache_dir)
        hdfs = LocalHdfs(layout.run_dir / "hdfs",
                         HdfsPorts.from_base(layout.settings.hdfs_base_port),
                         java_binary(layout), libs)
        found += hdfs_components(hdfs)
    if layout.settings.stack_s3:
        found.append(local_s3(layout))
    return found


def local_s3(layout: StackLayout) -> Component:
    """s3proxy on ``s3_port``, its files in ``<run dir>/s3``; its one identity is the
    settings' key, or the stack's (the ``admin`` principal's token)."""
    from medusa.stack.s3 import LocalS3, s3_component, s3proxy_libs

    settings = layout.settings
    libs = s3proxy_libs(settings.cache_dir)
    secret = settings.s3_secret_key.get_secret_value() if settings.s3_secret_key else None
    if secret is None:
        stack = credentials.ensure(layout.credentials_file,
                                   [p.name for p in layout.participants])
        secret = stack.secret(credentials.ADMIN).token
    store = LocalS3(layout.run_dir / "s3", settings.s3_port, java_binary(layout), libs,
                    settings.s3_access_key, secret, buckets=[settings.s3_bucket])
    return s3_component(store)


def agent_components(layout: StackLayout,
                     services: ServiceCommands) -> list[Component]:
    """What starts once the catalog answers: each participant's BPM agent (if enabled)."""
    return [bpm_agent(layout, participant, services) for participant in layout.bpm_participants]
