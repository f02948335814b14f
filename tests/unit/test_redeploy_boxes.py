"""A redeploy replaces a changed fragment beside itself when the boxes it gains are new to
the network and those it loses are gone from it; a box moving between two fragments
restarts both (each would cut at a stime of its own)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from medusa_spark.deploy import _moved_box

pytestmark = pytest.mark.unit


def _placed(name: str, before: list[str] | None, after: list[str]) -> Any:
    entry = None if before is None else SimpleNamespace(spec={"boxes": before})
    return SimpleNamespace(name=name, fragment=SimpleNamespace(boxes=dict.fromkeys(after)),
                           before=entry, instances=())


def _moved(placed: list[Any], withdrawn: list[list[str]] | None = None) -> list[str | None]:
    deployment: Any = SimpleNamespace(
        placed=placed, withdrawn=[SimpleNamespace(spec={"boxes": b}) for b in withdrawn or []])
    return [_moved_box(deployment, p, [p.before]) if p.before else None for p in placed]


def test_a_box_new_to_the_network_joins_a_fragment_without_a_restart() -> None:
    assert _moved([_placed("a", ["f"], ["f", "new"]), _placed("b", ["w"], ["w"])]) == \
        [None, None]


def test_a_box_removed_from_the_network_leaves_without_a_restart() -> None:
    assert _moved([_placed("a", ["f", "gone"], ["f"]), _placed("b", ["w"], ["w"])]) == \
        [None, None]


def test_a_box_moving_between_fragments_restarts_both() -> None:
    assert _moved([_placed("a", ["f", "m"], ["f"]), _placed("b", ["w"], ["w", "m"])]) == \
        ["m", "m"]


def test_a_box_of_a_withdrawn_fragment_joining_another_is_a_move() -> None:
    assert _moved([_placed("a", ["f"], ["f", "m"])], withdrawn=[["m"]]) == ["m"]
