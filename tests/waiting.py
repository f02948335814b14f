"""Waiting in a test for something the system does on its own time.

Every wait of the tests goes through these functions, and each has a bound. ``wait_until``
and ``wait_for`` fail saying what did not happen; ``first_within`` gives up quietly, for
a wait whose outcome the checks after it tell better (or a read that may find nothing).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

What = str | Callable[[], str]
"""What is awaited; a function when the failure should tell what was seen by then."""


def _failed(what: What, at_most_s: float) -> str:
    return f"{what() if callable(what) else what} within {at_most_s:.0f}s"


def first_within(probe: Callable[[], T | None], at_most_s: float,
                 interval_s: float = 0.5) -> T | None:
    """Polls ``probe`` every ``interval_s`` until it gives a truthy value, and returns it;
    None when ``at_most_s`` passed without one."""
    started = time.monotonic()
    while not (found := probe()):
        if time.monotonic() - started >= at_most_s:
            return None
        time.sleep(interval_s)
    return found


def wait_for(what: What, probe: Callable[[], T | None], at_most_s: float,
             interval_s: float = 0.5) -> T:
    """Polls ``probe`` every ``interval_s`` until it gives a truthy value, and returns it;
    fails saying ``what`` did not happen within ``at_most_s``."""
    found = first_within(probe, at_most_s, interval_s)
    assert found, _failed(what, at_most_s)
    return found


def wait_until(what: What, done: Callable[[], bool], at_most_s: float,
               at_least_s: float = 0.0, interval_s: float = 0.5) -> None:
    """Polls ``done`` every ``interval_s`` (for ``at_least_s`` at least); fails saying
    ``what`` did not happen within ``at_most_s``."""
    started = time.monotonic()
    while time.monotonic() - started < at_least_s or not done():
        assert time.monotonic() - started < at_most_s, _failed(what, at_most_s)
        time.sleep(interval_s)
