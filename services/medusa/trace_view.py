"""A trace read back from Jaeger, shown as a timeline: lines for a terminal, bars in a PNG.

The locally built Jaeger has no UI, so this is how a node failure's trace (missed
heartbeats, suspicion, declaration, placements, takeovers, first outputs) or a partition's
(a fragment's UP_FAILURE period: delay, tentative release, heal, stabilization, the
reconciliation and REC_DONE) is looked at here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from medusa.jaeger_client import Trace, TracedSpan, find_traces

FAILURE_ROOT = "node failure "
"""The root span of a failure's trace (the detector's declaration of a node)."""
PARTITION_ROOT = "up-failure "
"""The root span of a partition's trace (a fragment's SUnion in UP_FAILURE, until its REDO;
see ``medusa.sunion.failure_trace``)."""
MOVE_ROOT = "move "
"""The root span of a BPM move's trace (the origin's agent, when it offers the fragment)."""
AUTOSCALE_ROOT = "autoscale "
"""The root span of an autoscale decision (``medusa autoscale``), with its scale step."""
KINDS = {"failure": ("medusa-detector", FAILURE_ROOT),
         "partition": ("medusa-sunion", PARTITION_ROOT),
         "move": ("medusa-bpm", MOVE_ROOT),
         "autoscale": ("medusa-autoscale", AUTOSCALE_ROOT)}
"""Kind of trace -> the service that starts it and its root span's name prefix."""


@dataclass(frozen=True)
class Row:
    """A span placed on the trace's timeline."""

    span: TracedSpan
    depth: int
    """0 for a root, 1 for its children, and so on."""
    offset_s: float
    """Start, in seconds after the trace's first span."""

    @property
    def duration_s(self) -> float:
        return self.span.duration_us / 1e6


def roots(trace: Trace) -> list[TracedSpan]:
    """Spans with no parent in the trace."""
    ids = {span.span_id for span in trace.spans}
    return [span for span in trace.spans if span.parent_id not in ids]


def timeline(trace: Trace) -> list[Row]:
    """Every span, each under its parent, siblings in order of their start (an instant
    before a longer span that starts with it)."""
    if not trace.spans:
        return []
    start_us = min(span.start_us for span in trace.spans)
    children: dict[str | None, list[TracedSpan]] = {}
    for span in trace.spans:
        children.setdefault(span.parent_id, []).append(span)
    rows: list[Row] = []

    def place(span: TracedSpan, depth: int) -> None:
        rows.append(Row(span, depth, (span.start_us - start_us) / 1e6))
        for child in sorted(children.get(span.span_id, []),
                            key=lambda s: (s.start_us, s.duration_us)):
            place(child, depth + 1)

    for root in sorted(roots(trace), key=lambda s: s.start_us):
        place(root, 0)
    return rows


def recent(query_url: str, kind: str, last: int, lookback_s: int) -> list[Trace]:
    """The ``last`` newest traces of ``kind`` (see ``KINDS``), newest first."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: expected one of {', '.join(sorted(KINDS))}")
    service, prefix = KINDS[kind]
    found = [trace for trace in find_traces(query_url, service, lookback_s=lookback_s,
                                            limit=max(20, 4 * last))
             if any(root.name.startswith(prefix) for root in roots(trace))]
    found.sort(key=lambda t: min(s.start_us for s in t.spans), reverse=True)
    return found[:last]


def title(trace: Trace) -> str:
    named = sorted(roots(trace), key=lambda s: s.start_us)
    return f"{named[0].name if named else 'trace'} (trace {trace.trace_id})"


def text_lines(trace: Trace, width: int = 40) -> list[str]:
    """One line per span: its start after the first span, its duration, a bar on a common
    scale, then the span's name (indented by its depth) and its service."""
    rows = timeline(trace)
    if not rows:
        return []
    end_s = max(row.offset_s + row.duration_s for row in rows) or 1.0
    lines = []
    for row in rows:
        first = int(row.offset_s / end_s * (width - 1))
        length = max(1, round(row.duration_s / end_s * width))
        bar = (" " * first + "█" * length)[:width].ljust(width)
        lines.append(f"{row.offset_s:8.3f}s {row.duration_s:8.3f}s |{bar}| "
                     f"{'  ' * row.depth}{row.span.name}  [{row.span.service}]")
    return lines


def write_png(trace: Trace, path: Path) -> Path:
    """The timeline as horizontal bars, one per span, coloured by service."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = timeline(trace)
    services = sorted({row.span.service for row in rows})
    colours = {service: plt.get_cmap("tab10")(index % 10)
               for index, service in enumerate(services)}
    figure, axes = plt.subplots(figsize=(11, 0.45 * len(rows) + 1.6))
    # A span of no length (an instant) still shows as a thin bar, however long the trace.
    shortest_s = 0.004 * max(row.offset_s + row.duration_s for row in rows)
    for index, row in enumerate(rows):
        axes.barh(index, max(row.duration_s, shortest_s), left=row.offset_s,
                  color=colours[row.span.service])
    axes.set_yticks(range(len(rows)))
    axes.set_yticklabels(["  " * row.depth + row.span.name for row in rows], fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("seconds after the trace's first span")
    axes.set_title(title(trace), fontsize=10)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[s]) for s in services]
    # Beside the bars, not over them.
    axes.legend(handles, services, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
