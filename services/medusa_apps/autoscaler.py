"""``medusa autoscale``: scales keyed stateful fragments out when they are a bottleneck and
in when they idle (policy: ``medusa.autoscale``), one step at a time, each decision one
trace in Jaeger (its span holds the reason; the scale step's stages are its children)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from opentelemetry import trace

from medusa.autoscale import AutoscalePolicy, AutoscaleState, Decision, base_fragment, decide
from medusa.catalog.client import CatalogClient, CatalogError
from medusa.catalog.model import Kind
from medusa.endpoints import Endpoints
from medusa.federation_status import latest_load_reports
from medusa_spark.network.model import NetworkError, parse_network
from medusa_spark.scaling import ScaleError, fragment_key, scale

log = logging.getLogger("medusa.autoscale")


class Autoscaler:
    def __init__(self, endpoints: Endpoints, registry: SchemaRegistryClient,
                 catalog: CatalogClient, policy: AutoscalePolicy, dry_run: bool = False,
                 report: Callable[[str], None] = log.info) -> None:
        self.endpoints, self.registry, self.catalog = endpoints, registry, catalog
        self.policy, self.dry_run, self.report = policy, dry_run, report
        self.state = AutoscaleState()
        self.tracer = trace.get_tracer("medusa")

    def scalable(self) -> dict[str, set[str]]:
        """The fragments a scale step can split by key (see ``scaling.fragment_key``), each
        with the names of its instances. A fragment some instance of which is not running
        (a step, a move or a redeploy under way) is left out."""
        definitions = {e.name: e.spec["definition"] for e in self.catalog.list(Kind.NETWORKS)}
        found: dict[str, set[str]] = {}
        unsettled: set[str] = set()
        for entry in self.catalog.list(Kind.FRAGMENTS):
            fragment = base_fragment(entry.name)
            if entry.spec.get("phase") != "running" or entry.spec.get("replaced"):
                unsettled.add(fragment)
            if fragment in found:
                found[fragment].add(entry.name)
                continue
            definition = definitions.get(entry.spec["network"])
            if definition is None:
                continue
            try:
                fragment_key(parse_network(definition), list(entry.spec["boxes"]), fragment)
            except (ScaleError, NetworkError):
                continue
            found[fragment] = {entry.name}
        return {fragment: names for fragment, names in found.items()
                if fragment not in unsettled}

    def step(self, now: float | None = None) -> list[Decision]:
        """Reads the newest load reports and takes the steps the policy asks for."""
        reports: list[dict[str, Any]] = list(
            latest_load_reports(self.endpoints, self.registry).values())
        decisions = decide(self.policy, reports, self.scalable(), self.state,
                           time.time() if now is None else now)
        for decision in decisions:
            self._take(decision)
        return decisions

    def _take(self, decision: Decision) -> None:
        attributes: dict[str, str | int | bool] = {
                      "medusa.fragment": decision.fragment,
                      "medusa.autoscale.instances": decision.instances,
                      "medusa.autoscale.to": decision.to,
                      "medusa.autoscale.nodes": ", ".join(decision.nodes),
                      "medusa.autoscale.reason": decision.reason,
                      "medusa.autoscale.dry_run": self.dry_run}
        direction = "out" if decision.to > decision.instances else "in"
        with self.tracer.start_as_current_span(f"autoscale {direction} {decision.fragment}",
                                               attributes=attributes) as span:
            self.report(f"{decision.fragment}: {decision.instances} -> {decision.to} "
                        f"instance(s): {decision.reason}")
            self.state.last_step[decision.fragment] = time.time()
            self.state.quiet_since.pop(decision.fragment, None)
            if self.dry_run:
                return
            try:
                with self.tracer.start_as_current_span("scale step"):
                    result = scale(self.catalog, self.endpoints, decision.fragment,
                                   decision.to, decision.nodes, report=self.report)
                span.set_attribute("medusa.autoscale.seconds", round(result.seconds, 1))
            except (ScaleError, CatalogError, TimeoutError) as error:
                span.set_attribute("medusa.autoscale.error", str(error))
                self.report(f"{decision.fragment}: the step failed: {error}")

    def run(self, interval_s: float, stop: Callable[[], bool]) -> None:
        while not stop():
            try:
                self.step()
            except CatalogError as error:
                log.warning("autoscale: %s; trying again", error)
            time.sleep(interval_s)
