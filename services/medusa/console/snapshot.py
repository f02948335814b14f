"""The console's picture of the federation at one moment, as JSON for the page: the
catalog's entries joined with the nodes' load reports, the ledger, the recent traces, the
links' state and the operators' actions. Pure: every source is passed in."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from opentelemetry.trace import get_current_span

from medusa.catalog.model import Entry, Kind
from medusa.console.graph import network_graph
from medusa.contracts import Contract
from medusa.federation_status import build_status
from medusa.load import cost
from medusa.tracing import context_of


def _contract(entry: Entry, now_ms: int) -> dict[str, Any]:
    try:
        contract = Contract.of(entry)
    except ValueError:  # an entry the model no longer reads: show it as stored
        return {"name": entry.name, **entry.spec, "state": "?", "in_force": False}
    return {"name": entry.name, **entry.spec, "state": contract.state(now_ms),
            "in_force": contract.in_force(now_ms), "low": contract.low}


def _trace_id(traceparent: str | None) -> str | None:
    """The trace id (hex, as Jaeger names it) of a W3C traceparent; None for none."""
    context = context_of(traceparent)
    if context is None:
        return None
    return format(get_current_span(context).get_span_context().trace_id, "032x")


def build_snapshot(entries: Mapping[Kind, list[Entry]], reports: Mapping[str, dict[str, Any]],
                   now_ms: int, *, ledger: dict[str, Any] | None = None,
                   traces: dict[str, Any] | None = None,
                   links: list[dict[str, Any]] | None = None,
                   actions: list[dict[str, Any]] | None = None,
                   revision: int = 0, jaeger_ui_url: str | None = None) -> dict[str, Any]:
    nodes = entries.get(Kind.NODES, [])
    fragments = entries.get(Kind.FRAGMENTS, [])
    status = build_status(entries.get(Kind.PARTICIPANTS, []), nodes, fragments,
                          dict(reports), now_ms)
    node_specs = {entry.name: entry.spec for entry in nodes}
    shown_nodes = []
    for node in status.nodes:
        spec = node_specs.get(node.name, {})
        shown = {**asdict(node), "participant": node.name.split("/", 1)[0],
                 "incarnation": spec.get("incarnation")}
        if node.status != "up":  # its last report tells of a node that no longer runs
            shown.update(utilisation=None, load=None)
        shown["cost"] = cost(shown["utilisation"]) if shown["utilisation"] is not None else None
        shown_nodes.append(shown)
    shown_fragments = [asdict(fragment) for fragment in status.fragments]
    for shown, entry in zip(shown_fragments, sorted(fragments, key=lambda f: f.name),
                            strict=True):
        shown["instance"] = entry.spec.get("instance")
        shown["contract"] = entry.spec.get("contract")
        shown["takeover_trace"] = _trace_id(entry.spec.get("takeover_trace"))
    box_rates = {box["name"]: (box["input_rate"], box["processing_rate"])
                 for fragment in shown_fragments for box in fragment["boxes"]}
    lags = {fragment["name"]: fragment["lag"] for fragment in shown_fragments}
    networks = []
    for network in entries.get(Kind.NETWORKS, []):
        own = [f for f in fragments if f.spec.get("network") == network.name]
        networks.append(network_graph(network.name, network.spec.get("definition", ""), own,
                                      box_rates, lags))
    offers = [{"name": entry.name, **entry.spec, "trace_id": _trace_id(entry.spec.get("trace"))}
              for entry in entries.get(Kind.OFFERS, [])]
    return {
        "generated_ms": now_ms,
        "revision": revision,
        "participants": status.participants,
        "nodes": shown_nodes,
        "fragments": shown_fragments,
        "networks": networks,
        "contracts": [_contract(entry, now_ms) for entry in entries.get(Kind.CONTRACTS, [])],
        "offers": sorted(offers, key=lambda o: o.get("made_at") or 0, reverse=True),
        "ledger": ledger or {},
        "traces": traces or {},
        "links": links,
        "actions": actions or [],
        "jaeger_ui_url": jaeger_ui_url,
    }
