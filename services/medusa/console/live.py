"""The console's live state in the catalog service: the feeds it keeps (load reports,
ledger, traces, links), the operators' actions, and one snapshot rebuilt every second
that every open page receives."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from medusa.catalog.model import Entry, Kind
from medusa.console.actions import ActionLog, Runners
from medusa.console.feeds import LedgerFeed, NodeLoadFeed, TraceFeed
from medusa.console.snapshot import build_snapshot
from medusa.errors import MedusaError
from medusa.faults import Links

log = logging.getLogger("medusa.console")

INTERVAL_S = 1.0
LINKS_EVERY_S = 3.0
IDLE_AFTER_S = 10.0
"""With no page reading for this long, no snapshot is built (and Jaeger is not asked)."""

Entries = Callable[[], tuple[int, dict[Kind, list[Entry]]]]
"""(the catalog's revision, its entries by kind), read in the catalog's own process."""


class Console:
    def __init__(self, entries: Entries, runners: Runners, *,
                 loads: NodeLoadFeed | None = None, ledger: LedgerFeed | None = None,
                 traces: TraceFeed | None = None, jaeger_ui_url: str | None = None) -> None:
        self.entries = entries
        self.actions = ActionLog(runners)
        self.loads, self.ledger, self.traces = loads, ledger, traces
        self.jaeger_ui_url = jaeger_ui_url
        self._links: list[dict[str, Any]] | None = None
        self._links_read = 0.0
        self._lock = threading.Lock()
        self._sequence = 0
        self._payload = json.dumps(self._build())
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._last_read = time.monotonic()

    def start(self) -> Console:
        for feed in (self.loads, self.ledger, self.traces):
            if feed is not None:
                feed.start()
        threading.Thread(target=self._loop, name="console", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        for feed in (self.loads, self.ledger, self.traces):
            if feed is not None:
                feed.stop()

    def latest(self) -> tuple[int, str]:
        """(sequence, the snapshot as JSON): the sequence grows with every new snapshot."""
        if not self.active():
            self._wake.set()  # the first reader after a quiet spell: rebuild at once
        self._last_read = time.monotonic()
        with self._lock:
            return self._sequence, self._payload

    def active(self) -> bool:
        """Whether a page (or a client of the snapshot) has read lately."""
        return time.monotonic() - self._last_read < IDLE_AFTER_S

    def refresh(self) -> None:
        """Rebuild now rather than at the next tick (after an action starts)."""
        self._wake.set()

    def trace(self, trace_id: str) -> dict[str, Any] | None:
        return self.traces.trace(trace_id) if self.traces is not None else None

    def _loop(self) -> None:
        while not self._stopped.is_set():
            if not self.active():
                self._wake.wait(INTERVAL_S)
                self._wake.clear()
                continue
            try:
                payload = json.dumps(self._build())
            except Exception:  # a bad entry must not stop the page's updates
                log.exception("console: building the snapshot failed")
            else:
                with self._lock:
                    if payload != self._payload:
                        self._sequence += 1
                        self._payload = payload
            self._wake.wait(INTERVAL_S)
            self._wake.clear()

    def _read_links(self) -> list[dict[str, Any]] | None:
        url = self.actions.runners.toxiproxy_url
        if url is None:
            return None
        if time.monotonic() - self._links_read >= LINKS_EVERY_S:
            self._links_read = time.monotonic()
            try:
                with Links(url, timeout_s=2.0) as links:
                    self._links = [{**asdict(state), "link": state.link,
                                    "cluster": state.cluster, "viewer": state.viewer,
                                    "condition": state.condition}
                                   for state in links.states()]
            except MedusaError as error:
                log.debug("console: links unknown: %s", error)
                self._links = []
        return self._links

    def _build(self) -> dict[str, Any]:
        revision, entries = self.entries()
        now_ms = int(time.time() * 1000)
        return build_snapshot(
            entries, self.loads.reports() if self.loads is not None else {}, now_ms,
            ledger=self.ledger.view() if self.ledger is not None else None,
            traces=self.traces.view() if self.traces is not None else None,
            links=self._read_links(), actions=self.actions.recent(), revision=revision,
            jaeger_ui_url=self.jaeger_ui_url)
