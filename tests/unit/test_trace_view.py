"""A trace as a timeline: each span under its parent, in order, on one time scale."""

from __future__ import annotations

import pytest

from medusa.jaeger_client import Trace, TracedSpan
from medusa.trace_view import KINDS, text_lines, timeline, write_png

pytestmark = pytest.mark.unit


def _span(span_id: str, name: str, parent: str | None, start_s: float, duration_s: float,
          service: str = "medusa-detector") -> TracedSpan:
    return TracedSpan(span_id, name, service, parent, int(1_000_000_000 + start_s * 1e6),
                      int(duration_s * 1e6), {})


FAILURE = Trace("t1", [
    _span("d", "declaration", "r", 3.9, 0.2),
    _span("t", "takeover alpha/net/windows", "r", 4.3, 9.0, "medusa-node alpha/node-2"),
    _span("r", "node failure alpha/node-1", None, 0.0, 4.1),
    _span("f", "first output", "t", 13.0, 0.0, "medusa-node alpha/node-2"),
    _span("m", "heartbeats missed", "r", 0.0, 2.5),
    _span("p", "placement alpha/net/windows", "d", 4.0, 0.01),
])


def test_spans_come_under_their_parent_in_order_of_start() -> None:
    rows = timeline(FAILURE)
    assert [(row.span.name.split()[0], row.depth) for row in rows] == [
        ("node", 0), ("heartbeats", 1), ("declaration", 1), ("placement", 2),
        ("takeover", 1), ("first", 2)]
    assert rows[0].offset_s == 0.0 and rows[-1].offset_s == pytest.approx(13.0)


def test_a_span_whose_parent_is_missing_is_a_root() -> None:
    orphan = Trace("t2", [_span("x", "takeover", "gone", 1.0, 1.0)])
    assert [(row.span.name, row.depth) for row in timeline(orphan)] == [("takeover", 0)]


def test_text_lines_show_start_duration_bar_name_and_service() -> None:
    lines = text_lines(FAILURE, width=20)
    assert len(lines) == 6
    first_output = lines[-1]
    assert first_output.startswith("  13.000s    0.000s |")
    assert first_output.endswith("    first output  [medusa-node alpha/node-2]")
    # The takeover's bar starts a third of the way and covers most of the rest.
    bar = lines[4].split("|")[1]
    assert len(bar) == 20 and bar.index("█") == 6 and bar.count("█") == 14


def test_the_png_is_written(tmp_path) -> None:
    path = write_png(FAILURE, tmp_path / "failure.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_partition_trace_shows_an_instant_before_the_span_that_starts_with_it() -> None:
    sunion, node = "medusa-sunion", "medusa-node beta/node-1"
    partition = Trace("t3", [
        _span("s", "stabilization", "r", 9.0, 1.5, sunion),
        _span("h", "heal", "r", 9.0, 0.0, sunion),
        _span("r", "up-failure beta/net/pair", None, 0.0, 10.5, sunion),
        _span("c", "REC_DONE beta/net/pair", "r", 12.0, 4.0, node),
        _span("d", "delay", "r", 0.0, 3.0, sunion),
        _span("t", "tentative release", "r", 3.0, 0.01, sunion),
        _span("k", "reconcile beta/net/pair", "r", 11.0, 0.5, node),
    ])
    assert [(row.span.name.split()[0], row.depth) for row in timeline(partition)] == [
        ("up-failure", 0), ("delay", 1), ("tentative", 1), ("heal", 1), ("stabilization", 1),
        ("reconcile", 1), ("REC_DONE", 1)]
    assert KINDS["partition"] == ("medusa-sunion", "up-failure ")
