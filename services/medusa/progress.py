"""Progress display for long-running commands: a bar (or spinner) with the current rate."""

from __future__ import annotations

import time
from collections import deque
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


class RateProgress:
    """Counts items and shows the rate over the last few seconds, and failures."""

    def __init__(self, description: str, total: float | None = None,
                 console: Console | None = None, window_s: float = 5.0) -> None:
        self._window_s = window_s
        self._samples: deque[tuple[float, int]] = deque()
        self.count = 0
        self.failed = 0
        self.started = time.monotonic()
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[count]:>10,} sent"),
            TextColumn("{task.fields[rate]:>9,.0f}/s"),
            TextColumn("[red]{task.fields[failed]} failed"),
            TimeElapsedColumn(),
            console=console or Console(stderr=True),
            transient=False,
        )
        self._task = self._progress.add_task(description, total=total, count=0, rate=0.0,
                                             failed=0)

    def __enter__(self) -> RateProgress:
        self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._progress.stop()

    def update(self, count: int, failed: int, completed: float | None = None) -> None:
        now = time.monotonic()
        self.count, self.failed = count, failed
        self._samples.append((now, count))
        while self._samples and now - self._samples[0][0] > self._window_s:
            self._samples.popleft()
        first_t, first_count = self._samples[0]
        rate = (count - first_count) / (now - first_t) if now > first_t else 0.0
        self._progress.update(self._task, count=count, failed=failed, rate=rate,
                              completed=completed)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started
