"""The tests' waits (tests/waiting.py): each returns as soon as what it waits for is there,
and fails, or gives up, at its bound saying what did not happen."""

from __future__ import annotations

import itertools
import time

import pytest

from tests.waiting import first_within, wait_for, wait_until

pytestmark = pytest.mark.unit


def test_wait_for_gives_the_probes_first_truthy_value() -> None:
    answers = iter([None, 0, "found", "later"])
    assert wait_for("an answer", lambda: next(answers), 1, interval_s=0) == "found"


def test_a_wait_that_runs_out_says_what_did_not_happen() -> None:
    with pytest.raises(AssertionError, match=r"^the answer within 0s$"):
        wait_for("the answer", lambda: None, 0.05, interval_s=0.01)
    seen = itertools.count()
    with pytest.raises(AssertionError, match=r"^ready \(seen \d+\) within 0s$"):
        wait_until(lambda: f"ready (seen {next(seen)})", lambda: False, 0.05, interval_s=0.01)


def test_first_within_gives_up_quietly() -> None:
    assert first_within(lambda: None, 0.05, interval_s=0.01) is None
    assert first_within(lambda: [1], 0.05) == [1]


def test_wait_until_waits_at_least_as_asked() -> None:
    started = time.monotonic()
    wait_until("done", lambda: True, 1, at_least_s=0.05, interval_s=0.01)
    assert time.monotonic() - started >= 0.05
