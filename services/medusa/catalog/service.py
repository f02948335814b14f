"""``medusa catalog serve``: the store, the API, and the participants the federation has."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

import uvicorn
from fastapi import FastAPI

from medusa.access import AccessSync, Snapshot, keep_in_sync
from medusa.catalog.api import NetworkCheck, create_app
from medusa.catalog.model import Entry, Kind, ParticipantSpec
from medusa.catalog.store import CATALOG_TOPIC, CatalogStore
from medusa.endpoints import Endpoints

log = logging.getLogger("medusa.catalog")


def seed_participants(store: CatalogStore, endpoints: Endpoints) -> None:
    """Registers the participants the endpoints name, unless the catalog has them already."""
    for name, bootstrap in endpoints.kafka.items():
        if store.get(Kind.PARTICIPANTS, name) is None:
            spec = ParticipantSpec(kafka_bootstrap=bootstrap, registry_url=endpoints.registry_url)
            store.put(Kind.PARTICIPANTS, name, spec.model_dump(mode="json"), None)
            log.info("catalog: registered participant %s (%s)", name, bootstrap)


Extension = Callable[[FastAPI, CatalogStore], None]
"""Adds to the service's app what runs beside the API in its process (the console)."""


def serve(endpoints: Endpoints, home: str, host: str, port: int,
          topic: str = CATALOG_TOPIC, check_network: NetworkCheck | None = None,
          tokens: Mapping[str, str] | None = None, access: bool = True,
          extend: Extension | None = None) -> None:
    """Runs until interrupted; the state lives in ``topic`` on ``home``'s cluster.

    ``check_network`` vets the definition of every network written (see ``NetworkCheck``);
    ``tokens`` maps each write token to its principal (see ``medusa.credentials``), None
    leaves writes open to anyone who reaches the port. With ``access`` (and tokens), the
    clusters' ACLs follow the catalog (``medusa.access``). ``extend`` adds routes of
    its own to the app, reading the store in this process.
    """
    if tokens is None:
        log.warning("catalog: writes are not authenticated (no tokens given): anyone who "
                    "reaches %s:%d can change the catalog", host, port)
    store = CatalogStore(endpoints.bootstrap(home), topic).start()
    seed_participants(store, endpoints)
    stopped = threading.Event()
    if tokens is not None and access:
        # The clusters' ACLs follow what the catalog says each participant may reach.
        sync = AccessSync(endpoints.kafka)
        threading.Thread(target=keep_in_sync, args=(sync, _snapshot(store), stopped),
                         name="access", daemon=True).start()
    app = create_app(store, check_network, tokens)
    if extend is not None:
        extend(app, store)
    try:
        # An open console page's event stream never ends by itself: without a bound, a
        # stop would wait for every browser to leave.
        uvicorn.run(app, host=host, port=port, log_level="warning",
                    timeout_graceful_shutdown=2)
    finally:
        stopped.set()
        store.close()


def _snapshot(store: CatalogStore) -> Snapshot:
    def snapshot() -> tuple[int, list[Entry], list[Entry], list[Entry]]:
        revision = store.revision  # read first: a change after it is seen next round
        return (revision, store.entries(Kind.FRAGMENTS, ""), store.entries(Kind.CONTRACTS, ""),
                store.entries(Kind.STREAMS, ""))
    return snapshot
