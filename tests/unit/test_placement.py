"""Placement: a file's choices are checked and kept; the rest goes where the load is least."""

import pytest

from medusa.placement import NodeSlot, PlacementError, parse_placement, place

pytestmark = pytest.mark.unit

NODES = [NodeSlot("alpha/n1"), NodeSlot("alpha/n2"), NodeSlot("beta/n1")]


def test_boxes_go_to_nodes_of_their_participant_and_spread() -> None:
    placed = place({"a": "alpha", "b": "alpha", "c": "alpha", "d": "beta"}, NODES, {})
    assert placed == {"a": "alpha/n1", "b": "alpha/n2", "c": "alpha/n1", "d": "beta/n1"}


def test_a_participant_without_nodes_borrows_any_node() -> None:
    placed = place({"a": "gamma"}, NODES, {})
    assert placed["a"] in {n.name for n in NODES}


def test_boxes_already_running_and_capacity_count() -> None:
    nodes = [NodeSlot("alpha/busy", capacity=1, boxes=3), NodeSlot("alpha/big", capacity=4)]
    placed = place({f"b{i}": "alpha" for i in range(4)}, nodes, {})
    assert set(placed.values()) == {"alpha/big"}


def test_given_placement_is_kept_and_counted() -> None:
    placed = place({"a": "alpha", "b": "alpha"}, NODES, {"a": "beta/n1"})
    assert placed == {"a": "beta/n1", "b": "alpha/n1"}


def test_unknown_box_or_node_is_named() -> None:
    with pytest.raises(PlacementError, match="box 'x': the network has no such box"):
        place({"a": "alpha"}, NODES, {"x": "alpha/n1"})
    with pytest.raises(PlacementError, match="box 'a': node 'alpha/n9' is not a running node"):
        place({"a": "alpha"}, NODES, {"a": "alpha/n9"})


def test_no_node_at_all_says_how_to_start_one() -> None:
    with pytest.raises(PlacementError, match="medusa node"):
        place({"a": "alpha"}, [], {})


def test_placement_files() -> None:
    assert parse_placement("a: alpha/n1\nb: beta/n1\n") == {"a": "alpha/n1", "b": "beta/n1"}
    assert parse_placement("boxes:\n  a: alpha/n1\n") == {"a": "alpha/n1"}
    with pytest.raises(PlacementError, match="box 'a': expected a node as participant/node"):
        parse_placement("a: n1\n", "p.yaml")
    with pytest.raises(PlacementError, match="expected a mapping"):
        parse_placement("- a\n")
