"""Where each component of the local federation listens, and where its files go."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from medusa.settings import DEFAULT_PARTICIPANT_NAMES, StackSettings

BROKER_PORT_STRIDE = 1000
"""Broker b (from 0) of a participant has the ports of broker 0 plus b times this."""

PROXY_BLOCK = 64
"""The proxies to broker b of every cluster come b times this after broker 0's."""


@dataclass(frozen=True)
class BrokerLayout:
    """One broker (and KRaft controller) of a participant's cluster."""

    participant: str
    index: int
    """0 for the first; its node id is index + 1."""
    broker_port: int
    controller_port: int
    data_dir: Path

    @property
    def node_id(self) -> int:
        return self.index + 1

    @property
    def component(self) -> str:
        """Its name in the stack: ``kafka-alpha``, then ``kafka-alpha-2``, ..."""
        return f"kafka-{self.participant}" + (f"-{self.node_id}" if self.index else "")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def peer_listener_port(self, viewer: ParticipantLayout) -> int:
        """The listener that ``viewer``'s services reach through the link's proxy (the
        ports after the controller's, one per participant: at most 8 fit the stride)."""
        return self.broker_port + 2 + viewer.index


@dataclass(frozen=True)
class ParticipantLayout:
    name: str
    index: int
    broker_port: int
    controller_port: int
    data_dir: Path
    brokers: int = 1

    @property
    def broker_layouts(self) -> tuple[BrokerLayout, ...]:
        return tuple(
            BrokerLayout(self.name, b, self.broker_port + b * BROKER_PORT_STRIDE,
                         self.controller_port + b * BROKER_PORT_STRIDE,
                         self.data_dir if b == 0 else
                         self.data_dir.with_name(f"{self.name}-{b + 1}"))
            for b in range(self.brokers))

    @property
    def bootstrap(self) -> str:
        """Every broker: a client still finds the cluster when one is down."""
        return ",".join(broker.address for broker in self.broker_layouts)

    @property
    def cluster_id_file(self) -> Path:
        return self.data_dir / "cluster.id"

    @property
    def scram_file(self) -> Path:
        """The principals whose SCRAM credentials the storage was formatted with."""
        return self.data_dir / "scram.users"

    def peer_listener_port(self, viewer: ParticipantLayout) -> int:
        return self.broker_layouts[0].peer_listener_port(viewer)


@dataclass(frozen=True)
class LinkLayout:
    """How one participant's services reach another's Kafka cluster: through a toxiproxy
    proxy per broker, so the link can be cut, healed and slowed (``medusa fault``)."""

    cluster: ParticipantLayout
    viewer: ParticipantLayout
    proxy_port: int
    """The proxy to the cluster's first broker; broker b's is ``PROXY_BLOCK`` * b later."""

    @property
    def name(self) -> str:
        return link_name(self.cluster.name, self.viewer.name)

    @property
    def proxies(self) -> list[tuple[str, int, BrokerLayout]]:
        """(proxy name, its port, the broker behind it): the link's name for the first
        broker, ``<link>#<node id>`` for the others."""
        return [(self.name if broker.index == 0 else f"{self.name}#{broker.node_id}",
                 self.proxy_port + broker.index * PROXY_BLOCK, broker)
                for broker in self.cluster.broker_layouts]

    @property
    def bootstrap(self) -> str:
        """The cluster as the viewer's services know it: the proxies."""
        return ",".join(f"127.0.0.1:{port}" for _, port, _ in self.proxies)

    @property
    def upstream_port(self) -> int:
        return self.cluster.peer_listener_port(self.viewer)

    @property
    def upstream(self) -> str:
        return f"127.0.0.1:{self.upstream_port}"

    @property
    def listener(self) -> str:
        """The name of the cluster's listener for this link."""
        return f"FROM_{self.viewer.name.upper()}"


def link_name(cluster: str, viewer: str) -> str:
    return f"{cluster}-from-{viewer}"


@dataclass(frozen=True)
class StackLayout:
    settings: StackSettings
    participants: tuple[ParticipantLayout, ...]

    @classmethod
    def from_settings(cls, settings: StackSettings) -> StackLayout:
        participants = tuple(
            ParticipantLayout(
                name=DEFAULT_PARTICIPANT_NAMES[i],
                index=i,
                broker_port=settings.kafka_base_port + 10 * i,
                controller_port=settings.kafka_base_port + 10 * i + 1,
                data_dir=settings.run_dir / "kafka" / DEFAULT_PARTICIPANT_NAMES[i],
                brokers=settings.kafka_brokers,
            )
            for i in range(settings.stack_participants)
        )
        return cls(settings, participants)

    @property
    def run_dir(self) -> Path:
        return self.settings.run_dir

    @property
    def credentials_file(self) -> Path:
        """The principals' secrets (``medusa.credentials``): the run folder's, unless the
        settings name another stack's to share."""
        from medusa.credentials import credentials_file

        return self.settings.credentials_file or credentials_file(self.run_dir)

    @property
    def logs_dir(self) -> Path:
        return self.run_dir / "logs"

    @property
    def state_file(self) -> Path:
        return self.run_dir / "stack.json"

    @property
    def registry_url(self) -> str:
        return f"http://127.0.0.1:{self.settings.registry_port}/apis/ccompat/v7"

    @property
    def otlp_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.settings.jaeger_otlp_grpc_port}"

    @property
    def jaeger_query_url(self) -> str:
        return f"http://127.0.0.1:{self.settings.jaeger_query_port}"

    @property
    def catalog_url(self) -> str:
        return f"http://127.0.0.1:{self.settings.catalog_port}"

    @property
    def detector_url(self) -> str:
        return f"http://127.0.0.1:{self.settings.detector_port}"

    @property
    def catalog_home(self) -> str:
        return self.settings.catalog_participant or self.participants[0].name

    @property
    def bpm_participants(self) -> list[str]:
        """The participants whose BPM agent ``up`` starts."""
        return [p.name for p in self.participants] if self.settings.stack_bpm_agents else []

    def bpm_alive_file(self, participant: str) -> Path:
        return self.run_dir / f"bpm-{participant}.alive"

    @property
    def bpm_alive_within_s(self) -> float:
        """An agent that has not stepped for this long does not answer (a step may wait
        for a slow catalog)."""
        return max(30.0, 3 * self.settings.bpm_interval_s)

    @property
    def toxiproxy_url(self) -> str:
        return f"http://127.0.0.1:{self.settings.toxiproxy_port}"

    @property
    def links(self) -> list[LinkLayout]:
        """One link per ordered pair of participants; proxies listen after toxiproxy's port."""
        base = self.settings.toxiproxy_port + 1
        count = len(DEFAULT_PARTICIPANT_NAMES)
        return [LinkLayout(cluster, viewer, base + cluster.index * count + viewer.index)
                for cluster in self.participants for viewer in self.participants
                if cluster is not viewer]

    def links_to(self, cluster: ParticipantLayout) -> list[LinkLayout]:
        return [link for link in self.links if link.cluster is cluster]

    def participant(self, name: str) -> ParticipantLayout:
        for participant in self.participants:
            if participant.name == name:
                return participant
        known = ", ".join(p.name for p in self.participants)
        raise KeyError(f"no participant {name!r} (known: {known})")

    def all_ports(self) -> dict[int, str]:
        """Every port the stack binds, with what binds it (for clash reports)."""
        s = self.settings
        ports: dict[int, str] = {}
        for p in self.participants:
            for broker in p.broker_layouts:
                ports[broker.broker_port] = (
                    f"Kafka broker of participant {p.name}, {broker.component}")
                ports[broker.controller_port] = (
                    f"Kafka controller of participant {p.name}, {broker.component}")
        for link in self.links:
            for proxy, port, broker in link.proxies:
                ports[broker.peer_listener_port(link.viewer)] = (
                    f"Kafka broker {broker.component}, for {link.viewer.name}")
                ports[port] = f"toxiproxy link {proxy}"
        ports[s.registry_port] = "registry gateway"
        ports[s.registry_management_port] = "schema registry health"
        ports[s.registry_internal_port] = "schema registry (behind its gateway)"
        ports[s.jaeger_otlp_grpc_port] = "Jaeger OTLP gRPC"
        ports[s.jaeger_otlp_http_port] = "Jaeger OTLP HTTP"
        ports[s.jaeger_query_port] = "Jaeger query API"
        ports[s.jaeger_query_grpc_port] = "Jaeger query gRPC API"
        ports[s.jaeger_health_port] = "Jaeger health check"
        ports[s.jaeger_metrics_port] = "Jaeger metrics"
        ports[s.catalog_port] = "catalog"
        ports[s.detector_port] = "failure detector"
        ports[s.toxiproxy_port] = "toxiproxy API"
        if s.stack_hdfs:
            for port in range(s.hdfs_base_port, s.hdfs_base_port + 6):
                ports[port] = "local HDFS"
        if s.stack_s3:
            ports[s.s3_port] = "local S3 object store"
        return ports

    @property
    def s3_endpoint(self) -> str | None:
        """The local S3-compatible object store's API, when the stack runs one."""
        return f"http://127.0.0.1:{self.settings.s3_port}" if self.settings.stack_s3 else None

    @property
    def hdfs_uri(self) -> str | None:
        """The local HDFS, when the stack runs one."""
        return f"hdfs://127.0.0.1:{self.settings.hdfs_base_port}" \
            if self.settings.stack_hdfs else None
