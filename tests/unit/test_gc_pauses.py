"""The cyclic collector held off over hot paths, and given back as it was."""

from __future__ import annotations

import gc
import threading

import pytest

from medusa.gc_pauses import collector_held_off

pytestmark = pytest.mark.unit


def test_the_collector_runs_again_when_the_last_of_overlapping_holds_ends() -> None:
    assert gc.isenabled()
    first_in, second_done = threading.Event(), threading.Event()
    seen: list[bool] = []

    def second() -> None:
        first_in.wait(5)
        with collector_held_off():
            seen.append(gc.isenabled())
        second_done.set()

    thread = threading.Thread(target=second)
    thread.start()
    with collector_held_off():
        first_in.set()
        second_done.wait(5)
        seen.append(gc.isenabled())  # the other hold ended; this one still holds
    thread.join(5)
    assert seen == [False, False]
    assert gc.isenabled()


def test_a_collector_off_before_stays_off_after() -> None:
    gc.disable()
    try:
        with collector_held_off():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_runs_again_after_a_failing_body() -> None:
    try:
        with collector_held_off():
            raise ValueError("the batch failed")
    except ValueError:
        pass
    assert gc.isenabled()
