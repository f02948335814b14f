"""Where clients find the federation: endpoints named in the settings, else the local stack.

Every side imports it: the services, the nodes and the launcher (which records what it
started). It knows the local stack only through its layout, a description of ports and folders."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from medusa.settings import DEFAULT_PARTICIPANT_NAMES, StackSettings
from medusa.stack.layout import StackLayout, link_name


@dataclass(frozen=True)
class Endpoints:
    kafka: dict[str, str]
    """Participant name -> bootstrap servers."""
    registry_url: str
    otlp_endpoint: str
    jaeger_query_url: str
    catalog_url: str = ""
    links: dict[str, str] = field(default_factory=dict)
    """Link name (``beta-from-alpha``: beta's cluster as alpha's services reach it) ->
    bootstrap servers through the link's proxy."""
    toxiproxy_url: str = ""
    """The API of the proxies on the links, for ``medusa fault``; empty: no proxies."""

    def seen_from(self, participant: str) -> Endpoints:
        """The federation as ``participant``'s services reach it: the other participants'
        clusters through the links (so cutting a link cuts them off), its own directly."""
        kafka = {name: self.links.get(link_name(name, participant), bootstrap)
                 for name, bootstrap in self.kafka.items()}
        return replace(self, kafka=kafka)

    def bootstrap(self, participant: str | None = None) -> str:
        if participant is None:
            return next(iter(self.kafka.values()))
        try:
            return self.kafka[participant]
        except KeyError:
            raise KeyError(
                f"no participant {participant!r} (known: {', '.join(self.kafka)})") from None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def environment(self, run_dir: Path, catalog_url: str | None = None) -> dict[str, str]:
        """The environment that points a child process (a node, an agent) at these
        endpoints."""
        from medusa.credentials import FILE_VARIABLE, process_credentials_file

        # The credentials stay those of the stack, whatever run folder the child gets.
        return {**os.environ, "MEDUSA_RUN_DIR": str(run_dir),
                FILE_VARIABLE: str(process_credentials_file()),
                "MEDUSA_EXTERNAL_CATALOG_URL": catalog_url or self.catalog_url,
                "MEDUSA_EXTERNAL_KAFKA": ",".join(f"{p}={b}" for p, b in self.kafka.items()),
                "MEDUSA_EXTERNAL_REGISTRY_URL": self.registry_url,
                "MEDUSA_EXTERNAL_OTLP_ENDPOINT": self.otlp_endpoint,
                "MEDUSA_EXTERNAL_JAEGER_QUERY_URL": self.jaeger_query_url,
                "MEDUSA_EXTERNAL_KAFKA_LINKS": ",".join(f"{n}={b}"
                                                        for n, b in self.links.items()),
                "MEDUSA_EXTERNAL_TOXIPROXY_URL": self.toxiproxy_url}


def parse_external_kafka(spec: str) -> dict[str, str]:
    """``alpha=h1:9092,beta=h2:9092``; a bare bootstrap names the first participant."""
    if "=" not in spec:
        return {DEFAULT_PARTICIPANT_NAMES[0]: spec}
    kafka: dict[str, str] = {}
    last: str | None = None
    for part in spec.split(","):
        name, sep, bootstrap = part.partition("=")
        if not sep and last is not None and part.strip():
            kafka[last] += f",{part.strip()}"  # another broker of the same cluster
            continue
        if not sep or not name.strip() or not bootstrap.strip():
            raise ValueError(
                f"MEDUSA_EXTERNAL_KAFKA: expected name=host:port[,host:port...][,name=...], "
                f"got {part!r}")
        last = name.strip()
        kafka[last] = bootstrap.strip()
    return kafka


def parse_external_links(spec: str) -> dict[str, str]:
    """``beta-from-alpha=h:p,alpha-from-beta=h:p``: how one participant reaches another."""
    links: dict[str, str] = {}
    last: str | None = None
    for part in spec.split(","):
        name, sep, bootstrap = part.partition("=")
        if not sep and last is not None and part.strip():
            links[last] += f",{part.strip()}"  # the proxy to another broker of the cluster
            continue
        if not sep or "-from-" not in name or not bootstrap.strip():
            raise ValueError(f"MEDUSA_EXTERNAL_KAFKA_LINKS: expected "
                             f"cluster-from-participant=host:port[,...], got {part!r}")
        last = name.strip()
        links[last] = bootstrap.strip()
    return links


def local_endpoints(layout: StackLayout) -> Endpoints:
    return Endpoints(
        kafka={p.name: p.bootstrap for p in layout.participants},
        registry_url=layout.registry_url,
        otlp_endpoint=layout.otlp_endpoint,
        jaeger_query_url=layout.jaeger_query_url,
        catalog_url=layout.catalog_url,
        links={link.name: link.bootstrap for link in layout.links},
        toxiproxy_url=layout.toxiproxy_url if layout.links else "",
    )


def resolve(settings: StackSettings | None = None) -> Endpoints:
    """External endpoints where named; the rest from the running stack's state, or its layout."""
    settings = settings or StackSettings()
    layout = StackLayout.from_settings(settings)
    local = local_endpoints(layout)
    if layout.state_file.is_file():
        recorded = json.loads(layout.state_file.read_text()).get("endpoints")
        if recorded:
            local = Endpoints(**recorded)
    return Endpoints(
        kafka=parse_external_kafka(settings.external_kafka) if settings.external_kafka
        else local.kafka,
        registry_url=settings.external_registry_url or local.registry_url,
        otlp_endpoint=settings.external_otlp_endpoint or local.otlp_endpoint,
        jaeger_query_url=settings.external_jaeger_query_url or local.jaeger_query_url,
        catalog_url=settings.external_catalog_url or local.catalog_url or layout.catalog_url,
        links=parse_external_links(settings.external_kafka_links)
        if settings.external_kafka_links else {} if settings.external_kafka else local.links,
        toxiproxy_url=settings.external_toxiproxy_url or (
            "" if settings.external_kafka else local.toxiproxy_url),
    )
