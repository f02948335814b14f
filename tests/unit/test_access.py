"""Which ACLs the catalog's fragments, contracts and streams give (``medusa.access``)."""

from __future__ import annotations

from typing import Any

import pytest

from medusa.access import Grant, desired_grants, explained
from medusa.catalog.model import Entry, Kind

pytestmark = pytest.mark.unit

HOUR_MS = 3_600_000


def fragment(name: str, node: str, reads: list[tuple[str, str]],
             writes: list[tuple[str, str]], **spec: Any) -> Entry:
    network = name.rsplit("/", 1)[0]
    return Entry(kind=Kind.FRAGMENTS, name=name, version=1, updated_at=0, spec={
        "network": network, "boxes": ["b"], "node": node,
        "reads": [{"participant": p, "topic": t} for p, t in reads],
        "writes": [{"participant": p, "topic": t} for p, t in writes], **spec})


def contract(name: str, origin: str, host: str, movable: list[str], status: str = "active",
             ends_at: int | None = None) -> Entry:
    return Entry(kind=Kind.CONTRACTS, name=name, version=1, updated_at=0, spec={
        "origin": origin, "host": host, "price": 1.0, "movable": movable,
        "proposed_by": origin, "status": status,
        "accepted_at": 0 if status != "proposed" else None, "ends_at": ends_at})


def stream(name: str, network: str) -> Entry:
    return Entry(kind=Kind.STREAMS, name=name, version=1, updated_at=0,
                 spec={"topic": name.split("/")[1], "schema_subject": "s", "network": network})


def topics(grants: set[Grant], principal: str, cluster: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for g in grants:
        if g.principal == principal and g.cluster == cluster and g.resource == "topic":
            found.setdefault(g.name, set()).add(g.operation)
    return found


ON_ALPHA = fragment("alpha/lr/f1", "alpha/n1", [("alpha", "in")], [("alpha", "out")])


def test_a_fragment_at_home_gives_nobody_anything() -> None:
    assert desired_grants([ON_ALPHA], [], [], 0) == set()


def test_an_accepted_contract_opens_the_covered_topics_to_its_host_before_any_move() -> None:
    grants = desired_grants([ON_ALPHA], [contract("alpha/c", "alpha", "beta", ["alpha/lr"])],
                            [], 0)
    assert topics(grants, "beta", "alpha") == {
        "in": {"read", "describe"}, "in.dlq": {"write", "describe", "create"},
        "out": {"write", "describe", "read"},
        "medusa.node-load": {"read", "describe"}}  # for BPM, both ways
    assert topics(grants, "alpha", "beta") == {"medusa.node-load": {"read", "describe"}}
    assert topics(grants, "gamma", "alpha") == {}
    assert Grant("alpha", "beta", "transactional_id", "medusa.soutput.", True,
                 "write") in grants


def test_a_contract_that_covers_another_fragment_opens_only_the_load_reports() -> None:
    grants = desired_grants([ON_ALPHA], [contract("alpha/c", "alpha", "beta",
                                                  ["alpha/lr/f2"])], [], 0)
    assert topics(grants, "beta", "alpha") == {"medusa.node-load": {"read", "describe"}}
    assert topics(grants, "alpha", "beta") == {"medusa.node-load": {"read", "describe"}}


@pytest.mark.parametrize("state", [
    {"status": "proposed"},
    {"status": "revoked", "ends_at": HOUR_MS},  # ended before "now" below
])
def test_a_proposed_or_ended_contract_opens_nothing(state: dict[str, Any]) -> None:
    grants = desired_grants([ON_ALPHA], [contract("alpha/c", "alpha", "beta", ["alpha/lr"],
                                                  **state)], [], 2 * HOUR_MS)
    assert grants == set()


def test_a_revoked_contract_keeps_the_access_until_its_period_ends() -> None:
    revoked = contract("alpha/c", "alpha", "beta", ["alpha/lr"], status="revoked",
                       ends_at=HOUR_MS)
    assert topics(desired_grants([ON_ALPHA], [revoked], [], HOUR_MS - 1), "beta", "alpha")


def test_a_fragment_moved_under_a_contract_loses_its_access_when_the_contract_ends() -> None:
    moved = fragment("alpha/lr/f1", "beta/n1", [("alpha", "in")], [("alpha", "out")],
                     contract="alpha/c")
    ended = contract("alpha/c", "alpha", "beta", ["alpha/lr"], status="revoked", ends_at=1)
    assert desired_grants([moved], [ended], [], 2) == set()
    active = contract("alpha/c", "alpha", "beta", ["alpha/lr"])
    assert topics(desired_grants([moved], [active], [], 2), "beta", "alpha")


def test_a_fragment_its_origin_placed_on_a_partner_node_opens_its_topics_there() -> None:
    placed = fragment("alpha/lr/f1", "beta/n1", [("alpha", "in")], [("alpha", "out")])
    assert set(topics(desired_grants([placed], [], [], 0), "beta", "alpha")) == {
        "in", "in.dlq", "out"}


def test_a_replica_on_a_partner_node_gets_the_topics_too() -> None:
    replicated = fragment("alpha/lr/f1", "alpha/n1", [("alpha", "in")], [("alpha", "out")],
                          replica="gamma/n2")
    assert topics(desired_grants([replicated], [], [], 0), "gamma", "alpha")


def test_a_third_participants_topic_is_not_opened_by_naming_it() -> None:
    spy = fragment("beta/spy/f1", "beta/n1", [("alpha", "secret")], [("beta", "copy")])
    assert desired_grants([spy], [], [], 0) == set()


def test_publishing_a_stream_to_a_network_opens_that_cluster_to_it() -> None:
    union = fragment("alpha/dpc/f1", "alpha/n1", [("alpha", "a"), ("beta", "b")],
                     [("alpha", "out")])
    grants = desired_grants([union], [], [stream("beta/b", "alpha/dpc")], 0)
    assert set(topics(grants, "alpha", "beta")) == {"b", "b.dlq"}
    assert desired_grants([union], [], [stream("beta/b", "alpha/other")], 0) == set()


def test_a_refusal_is_explained_and_other_errors_are_left_alone() -> None:
    refusal = "org.apache.kafka.common.errors.TopicAuthorizationException: Not authorized"
    assert explained(refusal, "beta").startswith("refused by a cluster's ACLs: beta")
    assert explained("boom", "beta") == "boom"


class _Done:
    """A future that has its result already."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self, _timeout: float | None = None) -> Any:
        return self.value


class _FakeAdmin:
    """The three ACL calls of an AdminClient, over a set of bindings."""

    def __init__(self) -> None:
        self.bindings: list[Any] = []

    def describe_acls(self, _filter: Any) -> _Done:
        return _Done(list(self.bindings))

    def create_acls(self, bindings: list[Any]) -> dict[Any, _Done]:
        self.bindings.extend(bindings)
        return {b: _Done(None) for b in bindings}

    def delete_acls(self, filters: list[Any]) -> dict[Any, _Done]:
        gone = {(f.restype, f.name, f.resource_pattern_type, f.principal, f.operation)
                for f in filters}
        self.bindings = [b for b in self.bindings if (
            b.restype, b.name, b.resource_pattern_type, b.principal, b.operation) not in gone]
        return {f: _Done([]) for f in filters}


def test_an_acl_no_longer_wanted_goes_after_the_grace_and_one_wanted_again_stays(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from medusa import access

    clock = [1000.0]
    monkeypatch.setattr(access.time, "monotonic", lambda: clock[0])
    sync = access.AccessSync({"alpha": "127.0.0.1:1"}, grace_s=30.0)
    admin = _FakeAdmin()
    sync._admins = {"alpha": admin}  # type: ignore[dict-item]
    placed = fragment("alpha/lr/f1", "beta/n1", [("alpha", "in")], [("alpha", "out")])
    wanted = desired_grants([placed], [], [], 0)
    assert sync.apply(wanted) == (len(wanted), 0)
    assert sync.current("alpha") == wanted
    assert sync.apply(set()) == (0, 0)  # no longer wanted: the grace starts
    clock[0] += 29
    assert sync.apply(set()) == (0, 0)
    clock[0] += 2
    assert sync.apply(set()) == (0, len(wanted))
    assert sync.current("alpha") == set()
    sync.apply(wanted)
    sync.apply(set())
    clock[0] += 20
    sync.apply(wanted)  # wanted again within the grace: kept, and its clock forgotten
    clock[0] += 20
    assert sync.apply(wanted) == (0, 0)
    assert sync.current("alpha") == wanted


def test_a_fragment_released_across_clusters_lets_its_new_host_read_where_it_stood() -> None:
    released = fragment("alpha/sw/f1", "alpha/n1", [("alpha", "in")], [("alpha", "out")],
                        released_by="beta/n2", phase="released",
                        source_topic="p.medusa.sw.f1.0a1b2c.in")
    assert topics(desired_grants([released], [], [], 0), "alpha", "beta") == {
        "p.medusa.sw.f1.0a1b2c.in": {"read", "describe"}}
    elsewhere = fragment("alpha/sw/f1", "alpha/n1", [], [], released_by="beta/n2",
                         source_topic="beta-secrets")
    assert desired_grants([elsewhere], [], [], 0) == set()


def test_a_warm_move_across_clusters_lets_its_target_read_where_the_fragment_stands() -> None:
    warming = fragment("alpha/sw/f1", "alpha/n1", [("alpha", "in")], [("alpha", "out")],
                       warm_target="beta/n2", phase="running",
                       source_topic="p.medusa.sw.f1.0a1b2c.in")
    assert topics(desired_grants([warming], [], [], 0), "beta", "alpha")[
        "p.medusa.sw.f1.0a1b2c.in"] >= {"read", "describe"}
    within = fragment("alpha/sw/f1", "alpha/n1", [], [], warm_target="alpha/n2",
                      source_topic="p.medusa.sw.f1.0a1b2c.in")
    assert desired_grants([within], [], [], 0) == set()
