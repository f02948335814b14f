"""A standby replica reconciles in place (``node.hosting``): its writer records the REDO it
saw and raises it, and the node rolls the stopped query back. Between the two the query
is still stopping; a node that looked then started a query redoing beside the standby,
and that query, left behind by the in-place reconciliation, kept the fragment in
STABILIZATION for good (a reader-side primary never took its output back)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from medusa_spark.node import hosting as hosting_module
from medusa_spark.node.hosting import Hosting
from medusa_spark.node.state import HostedFragment, dpc_state, published_dpc_state
from medusa_spark.reconcile import ReconcileRequired

pytestmark = pytest.mark.unit

NAME = "alpha/net/f"


class _Run:
    """A fragment's query as the node sees it: a standby whose writer saw a REDO."""

    def __init__(self, standby: bool, stopped: bool) -> None:
        self.standby = stopped or standby
        request = ReconcileRequired(NAME, 1, 7)
        self.writer = SimpleNamespace(redo_requested=request, dpc_state="STABLE",
                                      error=request if stopped else None,
                                      close=lambda: None)
        self.stopped = stopped
        self.checkpoint = "/nowhere"
        self.query = SimpleNamespace(runId="run", isActive=not stopped)
        self.abandoned = False

    def fenced(self) -> bool:
        return False

    def reconcile_requested(self) -> ReconcileRequired | None:
        return self.writer.error if self.stopped else None

    def failure(self) -> str | None:
        return None

    def abandon(self) -> None:
        self.abandoned = True


def _hosting(started: list[str]) -> Hosting:
    hosting = Hosting.__new__(Hosting)
    hosting.node = SimpleNamespace(global_name="alpha/n1", spark=None)
    hosting._reporting = SimpleNamespace(publish_dpc_state=lambda *a: None)
    hosting.moves = SimpleNamespace(abandon=lambda *a: None)

    def redo_beside(hosted: HostedFragment, network: Any) -> bool:
        started.append("beside")
        hosted.redo = _Run(standby=True, stopped=False)  # type: ignore[assignment]
        return True
    hosting._redo_beside = redo_beside  # type: ignore[method-assign]
    return hosting


def _hosted(run: _Run) -> HostedFragment:
    return HostedFragment(NAME, 1, run, 0.0)  # type: ignore[arg-type]


def test_a_standby_whose_query_is_still_stopping_gets_no_redo_beside() -> None:
    started: list[str] = []
    hosted = _hosted(_Run(standby=True, stopped=False))
    _hosting(started).watch(hosted, SimpleNamespace(spec={}), SimpleNamespace())
    assert started == [] and hosted.redo is None


def test_a_serving_query_redoes_beside_itself() -> None:
    started: list[str] = []
    hosted = _hosted(_Run(standby=False, stopped=False))
    _hosting(started).watch(hosted, SimpleNamespace(spec={}), SimpleNamespace())
    assert started == ["beside"]


def test_the_in_place_reconciliation_drops_a_query_redoing_beside(monkeypatch) -> None:
    started: list[str] = []
    hosting = _hosting(started)
    hosted = _hosted(_Run(standby=True, stopped=True))
    beside = _Run(standby=True, stopped=False)
    hosted.redo = beside  # type: ignore[assignment]
    restarted = _Run(standby=True, stopped=False)
    monkeypatch.setattr(hosting_module.state_stores, "release", lambda *a: None)
    monkeypatch.setattr(hosting_module, "stop_redo", _stop_redo)
    monkeypatch.setattr(Hosting, "_roll_back_and_start",
                        lambda self, *a, **k: (restarted, 5, 0))
    hosting.watch(hosted, SimpleNamespace(spec={}), SimpleNamespace())
    assert hosted.run is restarted and hosted.redo is None and beside.abandoned
    restarted.writer.redo_requested = None  # the restarted query has not seen the REDO yet
    assert dpc_state(hosted, {"dpc_state": "STABLE"}) == "STABLE"


def _stop_redo(hosted: HostedFragment) -> bool:  # no checkpoint to delete here
    redo, hosted.redo = hosted.redo, None
    if redo is None:
        return False
    redo.abandon()
    return True


def test_a_primary_that_yielded_its_output_shows_stable_only_once_it_writes_it_again() -> None:
    hosted = _hosted(_Run(standby=True, stopped=False))
    hosted.run.writer.redo_requested = None  # restarted: the REDO ahead is not read yet
    hosted.sunion = SimpleNamespace(state=lambda: {"dpc_state": "STABLE"})  # type: ignore
    hosted.yielded = True
    assert published_dpc_state(hosted) == "STABILIZATION"
    hosted.yielded = False  # took the output back
    assert published_dpc_state(hosted) == "STABLE"
    # Fenced by the replica, before it has noticed: the catalog names the replica serving.
    assert published_dpc_state(hosted, replica_serves=True) == "STABILIZATION"


def test_a_redo_with_its_corrections_done_catches_up_before_it_takes_over(monkeypatch
                                                                        ) -> None:
    """Once a redo has REC_DONE in its buffer, only the input that came meanwhile is left:
    it goes on at the catch-up priority, not a rebuild's, which on a busy machine might
    never close the gap; it takes over once caught up."""
    hosting = Hosting.__new__(Hosting)
    hosting.node = SimpleNamespace(global_name="alpha/n1", spark=None)
    hosted = _hosted(_Run(standby=False, stopped=False))
    redo = _Run(standby=True, stopped=False)
    redo.writer.dpc = SimpleNamespace(skip_epoch=1, rec_done_epoch=0)
    asked: list[str] = []
    redo.catch_up = lambda: asked.append("catch up")  # type: ignore[attr-defined]
    hosted.redo = redo  # type: ignore[assignment]
    caught = [False]
    monkeypatch.setattr(hosting_module, "caught_up", lambda run: caught[0])
    monkeypatch.setattr(Hosting, "_switch_to_redo",
                        lambda self, hosted, request: asked.append("switch"))

    hosting._redo_beside(hosted, SimpleNamespace())
    assert asked == []  # still redoing the period: a rebuild's priority
    redo.writer.dpc.rec_done_epoch = 1
    hosting._redo_beside(hosted, SimpleNamespace())
    assert asked == ["catch up"]
    caught[0] = True
    hosting._redo_beside(hosted, SimpleNamespace())
    assert asked == ["catch up", "switch"]
