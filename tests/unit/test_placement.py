"""Placement: a file's choices are checked and kept; the rest goes where the load is least."""

import pytest

from medusa.placement import NodeSlot, PlacementError, parse_placement, place

pytestmark = pytest.mark.unit

NODES = [NodeSlot("alpha/n1"), NodeSlot("alpha/n2"), NodeSlot("beta/n1")]


def test_fragments_go_to_nodes_of_their_participant_and_spread() -> None:
    placed = place({"f1": "alpha", "f2": "alpha", "f3": "alpha", "f4": "beta"}, NODES, {})
    assert placed == {"f1": "alpha/n1", "f2": "alpha/n2", "f3": "alpha/n1", "f4": "beta/n1"}


def test_a_participant_without_nodes_borrows_any_node() -> None:
    placed = place({"f": "gamma"}, NODES, {})
    assert placed["f"] in {n.name for n in NODES}


def test_fragments_already_running_and_capacity_count() -> None:
    nodes = [NodeSlot("alpha/busy", capacity=1, fragments=3), NodeSlot("alpha/big", capacity=4)]
    placed = place({f"f{i}": "alpha" for i in range(4)}, nodes, {})
    assert set(placed.values()) == {"alpha/big"}
    # Positional, as the deploy builds them: name, capacity, fragments already there.
    assert NodeSlot("alpha/x", 2.0, 5).fragments == 5


def test_given_placement_is_kept_and_counted() -> None:
    placed = place({"f1": "alpha", "f2": "alpha"}, NODES, {"f1": "alpha/n1"})
    assert placed == {"f1": "alpha/n1", "f2": "alpha/n2"}
    placed = place({"f1": "alpha", "f2": "alpha"}, NODES, {"f1": "beta/n1"})
    assert placed == {"f1": "beta/n1", "f2": "alpha/n1"}


def test_unknown_fragment_or_node_is_named() -> None:
    with pytest.raises(PlacementError, match="fragment 'x': the network has no such fragment"):
        place({"f": "alpha"}, NODES, {"x": "alpha/n1"})
    with pytest.raises(PlacementError,
                       match="fragment 'f': node 'alpha/n9' is not a running node"):
        place({"f": "alpha"}, NODES, {"f": "alpha/n9"})


def test_no_node_at_all_says_how_to_start_one() -> None:
    with pytest.raises(PlacementError, match="medusa node"):
        place({"f": "alpha"}, [], {})
    assert place({}, [], {}) == {}


def test_placement_files() -> None:
    assert parse_placement("a: alpha/n1\nb: beta/n1\n") == {"a": "alpha/n1", "b": "beta/n1"}
    assert parse_placement("boxes:\n  a: alpha/n1\n") == {"a": "alpha/n1"}
    assert parse_placement("fragments:\n  f: beta/n1\n") == {"f": "beta/n1"}
    assert parse_placement("boxes: alpha/n1\n") == {"boxes": "alpha/n1"}  # a box so named
    with pytest.raises(PlacementError, match="'a': expected a node as participant/node"):
        parse_placement("a: n1\n", "p.yaml")
    with pytest.raises(PlacementError, match="expected a mapping"):
        parse_placement("- a\n")
