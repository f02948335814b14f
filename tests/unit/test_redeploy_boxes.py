"""A redeploy replaces a changed fragment beside itself when the boxes it gains are new to
the network and those it loses are gone from it; a box moving between two fragments
restarts both (each would cut at a stime of its own)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from medusa.catalog.model import Entry, Kind
from medusa_spark.deploy import _marked_replaced, _moved_box
from medusa_spark.node.hosting import box_members

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


def _entry(name: str, spec: dict[str, Any]) -> Entry:
    return Entry(kind=Kind.FRAGMENTS, name=name, version=1, updated_at=0,
                 spec={"network": "alpha/n", "node": "alpha/a1", **spec})


def test_a_replaced_fragment_lists_its_boxes_under_the_new_definition_too() -> None:
    """Marked for a replacement that adds ``new``: both lists, so that nodes find every box
    of either definition in a fragment; given up, the mark and the list go."""
    spec = {"network": "alpha/n", "node": "alpha/a1", "boxes": ["f"]}
    marked = _marked_replaced(True, ["new", "f"])(spec)
    assert marked is not None and marked["replaced"] and marked["boxes_after"] == ["new", "f"]
    assert _marked_replaced(True, ["new", "f"])(marked) is None  # written once
    unmarked = _marked_replaced(False)(marked)
    assert unmarked is not None and not unmarked["replaced"] and unmarked["boxes_after"] is None
    same = _marked_replaced(True, ["f"])(spec)
    assert same is not None and same["boxes_after"] is None


def test_nodes_find_each_box_of_either_definition_in_the_replaced_fragment() -> None:
    entries = [_entry("alpha/n/loud", {"boxes": ["loud", "gone"], "replaced": True,
                                       "boxes_after": ["in_range", "loud"]}),
               _entry("alpha/n/other", {"boxes": ["w"]})]
    assert box_members(entries) == {"loud": "loud", "gone": "loud", "in_range": "loud",
                                    "w": "other"}
