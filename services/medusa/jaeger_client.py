"""Reading traces back from Jaeger's HTTP query API (``/api/traces``)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class TracedSpan:
    span_id: str
    name: str
    service: str
    parent_id: str | None
    """The CHILD_OF reference: the span this one hangs under in its trace."""
    start_us: int
    duration_us: int
    attributes: dict[str, Any]


@dataclass(frozen=True)
class Trace:
    trace_id: str
    spans: list[TracedSpan]

    def named(self, prefix: str) -> list[TracedSpan]:
        return [s for s in self.spans if s.name.startswith(prefix)]

    def one(self, prefix: str) -> TracedSpan:
        found = self.named(prefix)
        if len(found) != 1:
            raise LookupError(f"trace {self.trace_id}: {len(found)} spans named {prefix!r}, "
                              f"not one (spans: {sorted(s.name for s in self.spans)})")
        return found[0]

    def parent(self, span: TracedSpan) -> TracedSpan | None:
        return next((s for s in self.spans if s.span_id == span.parent_id), None)


def parse_trace(raw: dict[str, Any]) -> Trace:
    services = {key: p["serviceName"] for key, p in raw.get("processes", {}).items()}
    spans = []
    for span in raw["spans"]:
        parent = next((r["spanID"] for r in span.get("references", [])
                       if r.get("refType") == "CHILD_OF"), None)
        spans.append(TracedSpan(
            span_id=span["spanID"], name=span["operationName"],
            service=services.get(span.get("processID", ""), ""), parent_id=parent,
            start_us=int(span["startTime"]), duration_us=int(span["duration"]),
            attributes={t["key"]: t["value"] for t in span.get("tags", [])}))
    return Trace(raw["traceID"], spans)


TIMEOUT_S = 10.0
"""How long one request to Jaeger's query API may take."""


def _get(query_url: str, path: str, params: dict[str, Any] | None = None,
         timeout_s: float = TIMEOUT_S, client: httpx.Client | None = None) -> httpx.Response:
    """``GET {query_url}{path}``, through ``client`` when given (one connection pool)."""
    url = f"{query_url}{path}"
    if client is not None:
        return client.get(url, params=params, timeout=timeout_s)
    return httpx.get(url, params=params, timeout=timeout_s)


def _traces(response: httpx.Response) -> list[Trace]:
    """The traces of an answer of the query API (``{"data": [...]}``)."""
    return [parse_trace(raw) for raw in response.json().get("data") or []]


def find_traces(query_url: str, service: str, operation: str | None = None,
                lookback_s: int = 3600, limit: int = 20,
                client: httpx.Client | None = None) -> list[Trace]:
    """The newest traces with a span of ``service`` (named ``operation``, when given)."""
    params: dict[str, Any] = {"service": service, "limit": limit, "lookback": f"{lookback_s}s",
                              "start": (time.time_ns() // 1000) - lookback_s * 1_000_000,
                              "end": time.time_ns() // 1000}
    if operation:
        params["operation"] = operation
    response = _get(query_url, "/api/traces", params, client=client)
    response.raise_for_status()
    return _traces(response)


def fetch_trace(query_url: str, trace_id: str, timeout_s: float = TIMEOUT_S,
                client: httpx.Client | None = None) -> Trace | None:
    """One trace by its id (Jaeger's ``GET /api/traces/{id}``); None when Jaeger has none."""
    response = _get(query_url, f"/api/traces/{trace_id}", timeout_s=timeout_s, client=client)
    if response.status_code == 404:
        return None
    response.raise_for_status()
    found = _traces(response)
    return found[0] if found else None


def wait_for_trace(query_url: str, service: str, operation: str | None, has: list[str],
                   timeout_s: float = 60.0) -> Trace:
    """The newest trace with a span ``operation`` of ``service`` that has spans named
    with each prefix in ``has``, as many as it is listed (spans of other processes
    arrive later)."""
    deadline = time.monotonic() + timeout_s
    latest: list[Trace] = []
    while time.monotonic() < deadline:
        try:
            latest = find_traces(query_url, service, operation)
        except httpx.HTTPError:
            latest = []
        for found in sorted(latest, key=lambda t: -max(s.start_us for s in t.spans)):
            if all(len(found.named(prefix)) >= has.count(prefix) for prefix in set(has)):
                return found
        time.sleep(1)
    names = [sorted(s.name for s in t.spans) for t in latest]
    raise TimeoutError(f"no trace of {service}/{operation} with spans {has} within "
                       f"{timeout_s:.0f}s; found: {names}")
