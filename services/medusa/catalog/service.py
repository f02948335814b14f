"""``medusa catalog serve``: the store, the API, and the participants the federation has."""

from __future__ import annotations

import logging

import uvicorn

from medusa.catalog.api import NetworkCheck, create_app
from medusa.catalog.model import Kind, ParticipantSpec
from medusa.catalog.store import CATALOG_TOPIC, CatalogStore
from medusa.stack.endpoints import Endpoints

log = logging.getLogger("medusa.catalog")


def seed_participants(store: CatalogStore, endpoints: Endpoints) -> None:
    """Registers the participants the endpoints name, unless the catalog has them already."""
    for name, bootstrap in endpoints.kafka.items():
        if store.get(Kind.PARTICIPANTS, name) is None:
            spec = ParticipantSpec(kafka_bootstrap=bootstrap, registry_url=endpoints.registry_url)
            store.put(Kind.PARTICIPANTS, name, spec.model_dump(mode="json"), None)
            log.info("catalog: registered participant %s (%s)", name, bootstrap)


def serve(endpoints: Endpoints, home: str, host: str, port: int,
          topic: str = CATALOG_TOPIC, check_network: NetworkCheck | None = None) -> None:
    """Runs until interrupted; the state lives in ``topic`` on ``home``'s cluster.

    ``check_network`` vets the definition of every network written (see ``NetworkCheck``).
    """
    store = CatalogStore(endpoints.bootstrap(home), topic).start()
    seed_participants(store, endpoints)
    try:
        uvicorn.run(create_app(store, check_network), host=host, port=port, log_level="warning")
    finally:
        store.close()
