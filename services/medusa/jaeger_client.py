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


def find_traces(query_url: str, service: str, operation: str | None = None,
                lookback_s: int = 3600, limit: int = 20) -> list[Trace]:
    params: dict[str, Any] = {"service": service, "limit": limit, "lookback": f"{lookback_s}s",
                              "start": (time.time_ns() // 1000) - lookback_s * 1_000_000,
                              "end": time.time_ns() // 1000}
    if operation:
        params["operation"] = operation
    response = httpx.get(f"{query_url}/api/traces", params=params, timeout=10)
    response.raise_for_status()
    return [parse_trace(raw) for raw in response.json().get("data") or []]


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
