"""The secondary's rehearsals (``node.rehearsals``): each backed-up fragment's query runs
once per wiring, again after a while when its source had nothing to read, never for a
fragment whose takeover would run in Real-time Mode, and a failed one stays failed."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from medusa_spark.network.execution import MICRO_BATCH, REAL_TIME
from medusa_spark.node import rehearsals
from medusa_spark.node.rehearsals import Rehearsals

pytestmark = pytest.mark.unit


class Script:
    """What each rehearsal of a wiring does: read rows (True), find none (False), fail."""

    def __init__(self, outcomes: dict[str, Any]) -> None:
        self.outcomes = outcomes
        self.runs: list[str] = []

    def __call__(self, _spark: Any, _plan: Any, wiring: Any,
                 _stop: threading.Event | None = None) -> bool:
        self.runs.append(wiring)
        outcome = self.outcomes[wiring]
        if isinstance(outcome, Exception):
            raise outcome
        return bool(outcome)


@pytest.fixture
def script(monkeypatch: pytest.MonkeyPatch) -> Script:
    found = Script({"w1": True, "w2": True, "empty": False, "broken": RuntimeError("no"),
                    "realtime": True})
    monkeypatch.setattr(rehearsals, "rehearse", found)
    monkeypatch.setattr(rehearsals, "execution_of", lambda _p, wiring, _s: (
        REAL_TIME if wiring == "realtime" else MICRO_BATCH, ""))
    return found


def passes(wirings: list[str]) -> Rehearsals:
    done = Rehearsals(spark=None, node_name="alpha/a2")  # type: ignore[arg-type]
    for wiring in wirings:
        done.start("alpha/n/f", plan=None, wiring=wiring)  # type: ignore[arg-type]
        done._pool.submit(lambda: None).result()  # the rehearsal before the next pass
    return done


def test_a_fragment_is_rehearsed_once_per_wiring(script: Script) -> None:
    passes(["w1", "w1", "w1", "w2", "w2"]).stop()
    assert script.runs == ["w1", "w2"]


def test_an_empty_source_is_tried_again_after_a_while(script: Script) -> None:
    done = passes(["empty", "empty"])
    assert script.runs == ["empty"]
    wiring, retry_at = done._done["alpha/n/f"]
    assert wiring == "empty" and retry_at > 0
    done._done["alpha/n/f"] = ("empty", 0.0)  # the while has passed
    done.start("alpha/n/f", plan=None, wiring="empty")  # type: ignore[arg-type]
    done._pool.submit(lambda: None).result()
    done.stop()
    assert script.runs == ["empty", "empty"]


def test_a_failed_rehearsal_is_not_repeated(script: Script) -> None:
    passes(["broken", "broken", "broken"]).stop()
    assert script.runs == ["broken"]


def test_a_real_time_takeover_is_not_rehearsed(script: Script) -> None:
    passes(["realtime", "realtime"]).stop()
    assert script.runs == []


def test_nothing_is_rehearsed_after_stop(script: Script) -> None:
    done = Rehearsals(spark=None, node_name="alpha/a2")  # type: ignore[arg-type]
    done.stop()
    done.start("alpha/n/f", plan=None, wiring="w1")  # type: ignore[arg-type]
    assert script.runs == []
