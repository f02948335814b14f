"""Latency bookkeeping shared by the Linear Road benchmark and the demo.

Percentiles use the nearest rank. A toll notification the reference expects but
that never arrived counts as infinitely late: a run that loses or withholds
results cannot meet the bound by leaving them out.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from medusa.latency_stats import percentile, shown


class LatencyProgress:
    """A live line: input sent and its rate, results received, and their p50/p99 latency."""

    def __init__(self, description: str, total_s: float | None,
                 console: Console | None = None, window_s: float = 5.0) -> None:
        self._window_s = window_s
        self._samples: list[tuple[float, int]] = []
        self.started = time.monotonic()
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=24),
            TextColumn("{task.fields[sent]:>10,} sent"),
            TextColumn("{task.fields[rate]:>7,.0f}/s"),
            TextColumn("{task.fields[results]:>8,} results"),
            TextColumn("p50 {task.fields[p50]:>6}"),
            TextColumn("p99 {task.fields[p99]:>6}"),
            TimeElapsedColumn(),
            console=console or Console(stderr=True),
            transient=False,
        )
        self._task = self._progress.add_task(description, total=total_s, sent=0, rate=0.0,
                                             results=0, p50="-", p99="-")

    def __enter__(self) -> LatencyProgress:
        self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._progress.stop()

    def update(self, sent: int, results: int, latencies: Sequence[float],
               completed: float | None = None) -> None:
        now = time.monotonic()
        self._samples.append((now, sent))
        self._samples = [(t, c) for t, c in self._samples if now - t <= self._window_s]
        first_t, first_count = self._samples[0]
        rate = (sent - first_count) / (now - first_t) if now > first_t else 0.0
        self._progress.update(self._task, sent=sent, rate=rate, results=results,
                              p50=shown(percentile(latencies, 0.5)),
                              p99=shown(percentile(latencies, 0.99)), completed=completed)
