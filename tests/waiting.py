"""Waiting in a test for something the system does on its own time."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(what: str, done: Callable[[], bool], at_most_s: float,
               at_least_s: float = 0.0) -> None:
    """Polls ``done`` every half second (for ``at_least_s`` at least); fails saying ``what``
    did not happen within ``at_most_s``."""
    started = time.monotonic()
    while time.monotonic() - started < at_least_s or not done():
        assert time.monotonic() - started < at_most_s, f"{what} within {at_most_s:.0f}s"
        time.sleep(0.5)
