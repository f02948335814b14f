"""The federation console in the catalog service's process (``medusa catalog serve``):
its feeds, and the runners of the actions that need the Spark side's code (moving and
scaling a fragment live in ``medusa_spark``, which ``medusa`` itself does not import)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from fastapi import FastAPI

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Entry, Kind
from medusa.catalog.service import Extension
from medusa.catalog.store import CatalogStore
from medusa.console.actions import Runners, ScaleFragment
from medusa.console.feeds import LedgerFeed, NodeLoadFeed, TraceFeed, avro_decoder
from medusa.console.live import Console
from medusa.console.routes import mount_console
from medusa.endpoints import Endpoints
from medusa.registry import registry_client

log = logging.getLogger("medusa.console")

ACTION_TIMEOUT_S = 300.0


def _move(catalog: CatalogClient, fragment: str, node: str) -> str:
    from medusa_spark.deploy import move

    result = move(catalog, fragment, node, ACTION_TIMEOUT_S, log.info)
    return (f"moved {result.fragment} from {result.source} to {result.target} in "
            f"{result.seconds:.1f}s")


def _scaler(endpoints: Endpoints) -> ScaleFragment:
    def scale(catalog: CatalogClient, fragment: str, count: int) -> str:
        from medusa_spark.scaling import scale as scale_fragment

        result = scale_fragment(catalog, endpoints, fragment, count, None, ACTION_TIMEOUT_S,
                                log.info)
        return (f"{result.fragment}: {len(result.after)} instance(s) in "
                f"{result.seconds:.1f}s: {'; '.join(result.after)}")
    return scale


def console_extension(endpoints: Endpoints, tokens: Mapping[str, str] | None, port: int,
                      jaeger_ui_url: str | None = None) -> Extension:
    def extend(app: FastAPI, store: CatalogStore) -> None:
        def entries() -> tuple[int, dict[Kind, list[Entry]]]:
            revision = store.revision
            return revision, {kind: store.entries(kind, "") for kind in Kind}

        decode = avro_decoder(registry_client(endpoints.registry_url))
        runners = Runners(catalog_url=f"http://127.0.0.1:{port}",
                          toxiproxy_url=endpoints.toxiproxy_url or None,
                          move=_move, scale=_scaler(endpoints))
        console = Console(entries, runners, loads=NodeLoadFeed(endpoints.kafka, decode),
                          ledger=LedgerFeed(endpoints.kafka, decode),
                          jaeger_ui_url=jaeger_ui_url)
        # Jaeger is asked only while a page reads (the console must exist to be asked).
        console.traces = TraceFeed(endpoints.jaeger_query_url, wanted=console.active)
        console.start()
        mount_console(app, console, tokens)
        log.info("console: http://127.0.0.1:%d/console", port)
    return extend
