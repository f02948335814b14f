"""Traces through OpenTelemetry, exported over OTLP to Jaeger.

Each service and node calls ``configure`` once with its own service name. Spans
cross processes as W3C ``traceparent`` strings: in Kafka headers for sampled
tuples, and in the catalog for a takeover. Tracing never breaks processing:
an unreachable collector costs dropped spans, nothing else.
"""

from __future__ import annotations

import atexit
import logging
import random
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from medusa.envelope import TRACEPARENT_HEADER

_propagator = TraceContextTextMapPropagator()
_provider: TracerProvider | None = None


def configure(service_name: str, otlp_endpoint: str | None) -> Tracer:
    """Exports this process's spans to ``otlp_endpoint`` (OTLP gRPC); none when it is unset."""
    global _provider
    if _provider is None:
        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        if otlp_endpoint:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter(endpoint=otlp_endpoint, insecure=True, timeout=5)
            provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=1000))
        # Export failures are logged by the SDK once per batch; keep them short.
        logging.getLogger("opentelemetry.exporter.otlp").setLevel(logging.ERROR)
        trace.set_tracer_provider(provider)
        _provider = provider
        atexit.register(shutdown)  # the spans still buffered go out when the process ends
    return trace.get_tracer("medusa")


def shutdown() -> None:
    """Sends the spans still buffered; call before the process exits."""
    global _provider
    if _provider is not None:
        _provider.force_flush(5000)
        _provider.shutdown()
        _provider = None


def traceparent(span: Span) -> str | None:
    """The span's W3C traceparent; None when nothing is traced (no provider configured)."""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get(TRACEPARENT_HEADER)


def context_of(parent: str | bytes | None) -> Context | None:
    """The context a ``traceparent`` names, for a child span; None for no or a bad one."""
    if not parent:
        return None
    text = parent.decode() if isinstance(parent, bytes) else parent
    context = _propagator.extract({TRACEPARENT_HEADER: text})
    return context if trace.get_current_span(context).get_span_context().is_valid else None


def header_traceparent(headers: Sequence[tuple[str, bytes | str | None]] | None) -> str | None:
    for key, value in headers or ():
        if key == TRACEPARENT_HEADER and value:
            return value.decode() if isinstance(value, bytes) else value
    return None


class Sampler:
    """Picks the tuples whose journey is traced: one in ``every`` (0: none)."""

    def __init__(self, every: int, seed: int | None = None) -> None:
        self.every = every
        self._random = random.Random(seed)

    def __call__(self) -> bool:
        return self.every > 0 and self._random.randrange(self.every) == 0

