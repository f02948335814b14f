"""Grouping a network's boxes into fragments, and the fingerprint that keeps a changed
fragment from resuming an old checkpoint."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from medusa_spark.network.fragments import fragment_delays, group
from medusa_spark.network.model import NetworkError, parse_network
from medusa_spark.network.validate import check_structure

pytestmark = pytest.mark.unit


def _network(fragments: dict[str, str] | None = None, **overrides: Any) -> Any:
    boxes: dict[str, Any] = {
        "moving": {"type": "filter", "params": {"predicate": "speed > 0"}},
        "per_minute": {"type": "aggregate", "params": {
            "window": {"type": "tumbling", "size": "60 seconds"}, "group_by": ["seg"],
            "aggregates": {"cars": {"count": "vid"}}, "fields": {"seg": "seg", "cars": "cars"}}},
        "stopped": {"type": "filter", "params": {"predicate": "speed = 0"}},
    }
    for box, name in (fragments or {}).items():
        boxes[box]["fragment"] = name
    raw = {"name": "t", "participant": "alpha",
           "streams": {"reports": {"topic": "in.reports", "participant": "alpha",
                                   "schema": "position_report"}},
           "boxes": boxes,
           "arrows": [{"from": "reports", "to": "moving"}, {"from": "moving", "to": "per_minute"},
                      {"from": "reports", "to": "stopped"}],
           **overrides}
    return check_structure(parse_network(yaml.safe_dump(raw, sort_keys=False)))


def test_boxes_on_one_node_form_one_fragment_when_connected() -> None:
    plan = _network()
    fragments = group(plan, {"moving": "alpha/n1", "per_minute": "alpha/n1",
                             "stopped": "alpha/n1"})
    # stopped has no arrow to the others inside the node: a query of its own.
    assert {n: f.boxes for n, f in fragments.items()} == {
        "alpha-n1": ("moving", "per_minute"), "alpha-n1-2": ("stopped",)}
    chain = fragments["alpha-n1"]
    assert chain.inputs == ("reports",)
    assert chain.outputs == ("per_minute",), "moving is read only inside the fragment"


def test_a_box_read_by_another_fragment_is_an_output_of_its_own() -> None:
    fragments = group(_network(), {"moving": "alpha/n1", "per_minute": "alpha/n2",
                                   "stopped": "alpha/n1"})
    assert fragments["alpha-n1"].outputs == ("moving",)
    assert fragments["alpha-n2"].inputs == ("moving",)


def test_named_fragments_win_and_must_hang_together() -> None:
    named = group(_network({"moving": "check", "per_minute": "windows"}))
    assert named["check"].boxes == ("moving",) and named["windows"].boxes == ("per_minute",)
    with pytest.raises(NetworkError, match="field 'fragment': fragment 'apart' is not connected"):
        group(_network({"per_minute": "apart", "stopped": "apart", "moving": "check"}))


def test_the_fingerprint_follows_what_the_query_would_run() -> None:
    def fingerprint(prefix: str = "", **overrides: Any) -> str:
        plan = _network({"moving": "f", "per_minute": "f"}, **overrides)
        return group(plan)["f"].fingerprint(plan, prefix)

    same = fingerprint()
    assert fingerprint() == same
    assert fingerprint(prefix="other.") != same, "another topic prefix: a fresh checkpoint"
    moved = fingerprint(streams={"reports": {"topic": "in.elsewhere", "participant": "alpha",
                                             "schema": "position_report"}})
    assert moved != same, "another input topic: a fresh checkpoint"


def test_the_fingerprint_ignores_the_kind_of_standby() -> None:
    """A redeploy that changes ``ha`` alone starts or stops a replica; the fragment's query,
    stateless or not, goes on (``ha: active`` keeps a fragment off Real-time Mode, which a
    micro-batch network does not ask for anyway)."""
    for boxes in ({"moving": "f"}, {"moving": "f", "per_minute": "f"}):
        passive = _network(boxes)
        active = _network(boxes, boxes={
            **passive.network.model_dump(mode="json")["boxes"],
            "moving": {**passive.network.model_dump(mode="json")["boxes"]["moving"],
                       "ha": "active"}})
        assert group(active)["f"].ha == "active"
        assert group(active)["f"].fingerprint(active) == \
            group(passive)["f"].fingerprint(passive), boxes


def test_a_box_asking_for_memory_puts_its_fragments_state_there_in_another_checkpoint() -> None:
    """Spark keeps the store a checkpoint began with, so a changed store must not resume
    it; the default store leaves fingerprints as they were before boxes could choose."""
    on_rocksdb = _network({"moving": "f", "per_minute": "f"})
    boxes = on_rocksdb.network.model_dump(mode="json")["boxes"]
    in_memory = _network({"moving": "f", "per_minute": "f"}, boxes={
        **boxes, "per_minute": {**boxes["per_minute"], "state_store": "memory"}})
    assert group(on_rocksdb)["f"].state_store == "rocksdb"
    assert group(in_memory)["f"].state_store == "memory"
    assert group(in_memory)["f"].fingerprint(in_memory) != \
        group(on_rocksdb)["f"].fingerprint(on_rocksdb)
    with pytest.raises(NetworkError, match=r"box 'moving', field 'state_store'"):
        _network(boxes={**boxes, "moving": {**boxes["moving"], "state_store": "disk"}})


def test_a_new_reader_of_an_output_keeps_the_fingerprint() -> None:
    """A redeploy that adds a box downstream leaves the fragment it reads running."""
    before = _network({"moving": "f", "per_minute": "f", "stopped": "g"})
    after = _network({"moving": "f", "per_minute": "f", "stopped": "g"}, boxes={
        **before.network.model_dump(mode="json")["boxes"],
        "busy": {"type": "filter", "params": {"predicate": "cars > 10"}, "fragment": "h"}},
        arrows=[*[{"from": a.source, "to": a.target} for a in before.network.arrows],
                {"from": "per_minute", "to": "busy"}])
    assert group(after)["f"].fingerprint(after) == group(before)["f"].fingerprint(before)
    changed = _network({"moving": "f", "per_minute": "f", "stopped": "g"}, boxes={
        **before.network.model_dump(mode="json")["boxes"],
        "moving": {"type": "filter", "params": {"predicate": "speed > 5"}, "fragment": "f"}})
    assert group(changed)["f"].fingerprint(changed) != group(before)["f"].fingerprint(before)


def test_the_availability_bound_is_split_along_the_longest_chain_of_fragments() -> None:
    one = _network(fragments={"moving": "a", "per_minute": "a", "stopped": "c"},
                   availability_bound="4 seconds", trigger="1 second")
    assert fragment_delays(one, group(one)) == {"a": 3000, "c": 3000}
    # moving -> per_minute crosses two fragments: D = (4 s - 2 triggers) / 2.
    two = _network(fragments={"moving": "a", "per_minute": "b", "stopped": "c"},
                   availability_bound="4 seconds", trigger="1 second")
    assert fragment_delays(two, group(two)) == {"a": 1000, "b": 1000, "c": 1000}
    none = _network()
    assert set(fragment_delays(none, group(none)).values()) == {None}


def test_a_bound_the_chain_cannot_keep_is_rejected_naming_the_field() -> None:
    tight = _network(fragments={"moving": "a", "per_minute": "b", "stopped": "c"},
                     availability_bound="2 seconds", trigger="1 second")
    with pytest.raises(NetworkError, match=r"field 'availability_bound'.*chain of 2"):
        fragment_delays(tight, group(tight))
    with pytest.raises(NetworkError, match="availability_bound"):
        _network(availability_bound="soon")


def test_deploy_cuts_unconnected_boxes_into_fragments_of_their_own() -> None:
    """The grouping `medusa deploy` uses: boxes placed on one node, or on no node, that do
    not hang together by arrows become separate fragments, never an error."""
    from medusa_spark.deploy import _grouping

    plan = _network()
    on_one_node = {box: "alpha/n1" for box in plan.network.boxes}
    fragments, nodes = _grouping(plan, {}, on_one_node)
    assert {n: f.boxes for n, f in fragments.items()} == {
        "alpha-n1": ("moving", "per_minute"), "alpha-n1-2": ("stopped",)}
    assert nodes == {"alpha-n1": "alpha/n1", "alpha-n1-2": "alpha/n1"}
    fragments, nodes = _grouping(plan, {}, {})
    assert {n: f.boxes for n, f in fragments.items()} == {
        "alpha": ("moving", "per_minute"), "alpha-2": ("stopped",)}
    assert nodes == {}


def test_a_scaled_fragment_is_redeployed_as_the_fragment_its_instances_are_of() -> None:
    """Its instances keep their boxes' fragment, and none is taken for a withdrawn one."""
    from medusa.catalog.model import Entry, Kind
    from medusa_spark.deploy import _deployed, _grouping

    def entry(name: str, index: int | None, node: str) -> Entry:
        spec: dict[str, Any] = {"network": "alpha/t", "node": node,
                                "boxes": ["moving", "per_minute"]}
        if index is not None:
            spec["instance"] = {"of": "f", "index": index, "count": 2}
        return Entry(kind=Kind.FRAGMENTS, name=f"alpha/t/{name}", version=1, updated_at=0,
                     spec=spec)

    existing, instances = _deployed([entry("f--g1-1", 1, "alpha/n2"),
                                     entry("f--g1-0", 0, "alpha/n1"),
                                     entry("g", None, "alpha/n1")])
    assert [e.name for e in instances["f"]] == ["alpha/t/f--g1-0", "alpha/t/f--g1-1"]
    assert existing["f"].name == "alpha/t/f--g1-0" and set(existing) == {"f", "g"}
    existing["g"].spec["boxes"] = ["stopped"]
    fragments, _ = _grouping(_network(), existing, {})
    assert {n: f.boxes for n, f in fragments.items()} == {
        "f": ("moving", "per_minute"), "g": ("stopped",)}


def test_the_shipped_networks_group_without_naming_fragments() -> None:
    from medusa.settings import REPO_ROOT
    from medusa_spark.deploy import _grouping

    shipped = sorted((REPO_ROOT / "spark_apps" / "medusa_spark" / "networks").glob("*.yaml"))
    assert shipped
    for path in shipped:
        plan = check_structure(parse_network(path.read_text(), str(path)))
        fragments, _ = _grouping(plan, {}, {})
        assert sorted(b for f in fragments.values() for b in f.boxes) == sorted(
            plan.network.boxes), path.name


def test_a_checkpoint_is_resumed_only_by_the_same_definition() -> None:
    """A move or takeover resumes the checkpoint another node wrote; a redeploy with other
    topics (a second `make demo`) or another definition starts afresh."""
    from medusa_spark.fragment_run import same_definition

    moved = ("/run/checkpoints/alpha/n1/alpha/linear-road/demo-1.alpha-4f2a",
             "hdfs://nn:9000/medusa/alpha/n2/alpha/linear-road/demo-1.alpha-4f2a/")
    assert same_definition(*moved)
    assert same_definition(moved[0], moved[0] + ".replica"), "a warm move's replica"
    assert not same_definition("/c/alpha/n1/alpha/linear-road/demo-1.alpha-4f2a",
                               "/c/alpha/n1/alpha/linear-road/demo-2.alpha-4f2a")
    assert not same_definition("/c/alpha/n1/alpha/linear-road/alpha-4f2a",
                               "/c/alpha/n1/alpha/linear-road/alpha-9b01")


def test_a_redo_s_checkpoint_is_the_fragment_s_after_it_took_over() -> None:
    """After a redo beside the query took the output over, the catalog names its copy
    (``.redo-N``): a restart on that node resumes it in place, another node copies it;
    neither starts afresh."""
    from medusa_spark.fragment_run import is_redo_copy, same_definition

    canonical = "/c/alpha/n1/alpha/pair/dpc.beta-4f2a"
    assert same_definition(canonical + ".redo-2", canonical)
    assert same_definition(canonical + ".redo-12", "/c/beta/n2/alpha/pair/dpc.beta-4f2a")
    assert is_redo_copy(canonical + ".redo-2", canonical)
    assert not is_redo_copy(canonical + ".redo-2", "/c/beta/n2/alpha/pair/dpc.beta-4f2a")
    assert not is_redo_copy(canonical + ".replica", canonical)
    assert not same_definition(canonical + ".redo-2", "/c/alpha/n1/alpha/pair/dpc.beta-9b01")



def test_a_fragment_runs_one_process_box() -> None:
    """Spark runs one applyInPandasWithState per query: Linear Road's accounts, put in the
    road's fragment and fed by its port straight, are refused, naming the box."""
    from medusa.settings import REPO_ROOT

    networks = REPO_ROOT / "spark_apps/medusa_spark/networks"
    raw = yaml.safe_load((networks / "linear_road_partitioned.yaml").read_text())
    for box in ("accounts", "balances"):
        raw["boxes"][box]["fragment"] = "road"
    raw["arrows"] = [{**a, "from": "charges"} if a["to"] == "accounts.charges" else a
                     for a in raw["arrows"]]
    plan = check_structure(parse_network(yaml.safe_dump(raw, sort_keys=False)))
    with pytest.raises(NetworkError, match="box 'accounts', field 'fragment': fragment 'road' "
                                           "already has process box 'road'"):
        group(plan)


def _timed_chain(fragments: dict[str, str], state_store: str = "rocksdb") -> Any:
    """An aggregate with ``expiry: timers``, a filter of its results, and an aggregate of
    those, in the fragments given."""
    boxes = {
        "per_10s": {"type": "aggregate", "state_store": state_store, "params": {
            "window": {"type": "tumbling", "size": "10 seconds"}, "group_by": ["seg"],
            "aggregates": {"n": {"count": "*"}}, "expiry": "timers"}},
        "busy": {"type": "filter", "params": {"predicate": "n > 1"}},
        "per_minute": {"type": "aggregate", "params": {
            "window": {"type": "tumbling", "size": "60 seconds"},
            "aggregates": {"total": {"sum": "n"}}}},
    }
    for box, name in fragments.items():
        boxes[box]["fragment"] = name
    return _network(boxes=boxes, arrows=[
        {"from": "reports", "to": "per_10s"}, {"from": "per_10s", "to": "busy"},
        {"from": "busy", "to": "per_minute"}])


def test_an_aggregate_with_timers_is_not_windowed_again_in_its_fragment() -> None:
    with pytest.raises(NetworkError, match=r"box 'per_minute', field 'fragment'.*'per_10s'"):
        group(_timed_chain({"per_10s": "f", "busy": "f", "per_minute": "f"}))
    apart = group(_timed_chain({"per_10s": "f", "busy": "f", "per_minute": "g"}))
    assert set(apart) == {"f", "g"}
    with pytest.raises(NetworkError, match=r"box 'per_10s', field 'state_store'.*timers"):
        group(_timed_chain({"per_10s": "f", "busy": "f", "per_minute": "g"}, "memory"))
