"""The detector's policies on simulated clocks, and where a failed node's fragments go."""

from __future__ import annotations

import random
import threading

import pytest

from medusa.catalog.client import CatalogError
from medusa.catalog.model import Entry, Kind
from medusa.detector.policy import DetectorConfig, Health, PhiAccrualPolicy, TimeoutPolicy, phi
from medusa.detector.service import FailureDetector, HeartbeatGaps
from medusa.detector.takeover import Takeover, choose_target, next_replica, take_over
from medusa.endpoints import Endpoints
from tests.waiting import wait_for

pytestmark = pytest.mark.unit


def _beats(policy, interval: float, count: int, jitter: float = 0.0, seed: int = 1) -> float:
    rng = random.Random(seed)
    at = 0.0
    for _ in range(count):
        at += interval + rng.uniform(-jitter, jitter)
        policy.heartbeat(at)
    return at


@pytest.mark.parametrize("config", [DetectorConfig(policy="timeout"), DetectorConfig()])
def test_a_silent_node_is_suspected_then_declared_failed(config) -> None:
    policy = config.policy_for_node()
    last = _beats(policy, config.interval_s, 50, jitter=0.05)
    assert policy.assess(last + 0.3) == Health.ALIVE
    # Suspected once late by more than heartbeats ever were here (phi 7: about 0.5 s).
    suspected_at = config.suspect_after_s if config.policy == "timeout" \
        else config.interval_s + 0.6
    assert policy.assess(last + suspected_at + 0.05) == Health.SUSPECT
    # Never failed within its acceptable pause, always failed well past it.
    assert policy.assess(last + config.interval_s + config.acceptable_pause_s - 0.1) != \
        Health.FAILED
    assert policy.assess(last + config.interval_s + config.acceptable_pause_s + 1.5) == \
        Health.FAILED


@pytest.mark.parametrize("config", [DetectorConfig(policy="timeout"), DetectorConfig()])
def test_a_slow_node_within_the_acceptable_pause_is_never_declared_failed(config) -> None:
    policy = config.policy_for_node()
    rng = random.Random(7)
    at = 0.0
    for _ in range(500):  # heartbeats delayed by up to the whole pause, as under CPU load
        gap = config.interval_s + rng.uniform(0, config.acceptable_pause_s * 0.95)
        for step in range(1, 20):
            assert policy.assess(at + gap * step / 20) != Health.FAILED
        at += gap
        policy.heartbeat(at)


def test_phi_grows_with_silence_and_adapts_to_jitter() -> None:
    assert phi(0.1, 1.0, 0.1) < 0.01
    assert phi(1.0, 1.0, 0.1) == pytest.approx(0.30, abs=0.01)
    assert phi(2.0, 1.0, 0.1) > phi(1.5, 1.0, 0.1) > 1
    steady = PhiAccrualPolicy(1.0, 8.0, 0.0, 0.5, min_std_s=0.01)
    jittery = PhiAccrualPolicy(1.0, 8.0, 0.0, 0.5, min_std_s=0.01)
    last_steady = _beats(steady, 0.5, 100)
    last_jittery = _beats(jittery, 0.5, 100, jitter=0.3)
    assert steady.suspicion(last_steady + 0.9) > jittery.suspicion(last_jittery + 0.9)


def test_heartbeat_gaps_keep_the_longest_and_the_percentiles() -> None:
    gaps = HeartbeatGaps()
    assert gaps.summary() == {"count": 0}
    at = 0.0
    for step in [0.5] * 98 + [1.2, 0.6]:
        at += step
        gaps.arrived(at)
    gaps.arrived(at)  # the same moment again: no gap
    summary = gaps.summary()
    assert summary["count"] == 99 and summary["p50_s"] == 0.5
    assert summary["longest_s"] == 1.2 and summary["p99_s"] == 1.2


def test_the_policies_reject_inconsistent_thresholds() -> None:
    with pytest.raises(ValueError, match="suspect-after"):
        TimeoutPolicy(5.0, 1.0)
    with pytest.raises(ValueError, match="phi-suspect"):
        PhiAccrualPolicy(9.0, 8.0, 1.0, 0.5)


def _node(name: str, secondary: str | None = None) -> Entry:
    return Entry(kind=Kind.NODES, name=name, version=1, updated_at=0,
                 spec={"status": "up", "secondary": secondary})


def _fragment(name: str, node: str, ha: str = "passive", replica: str | None = None) -> Entry:
    return Entry(kind=Kind.FRAGMENTS, name=name, version=1, updated_at=0,
                 spec={"network": "alpha/n", "boxes": ["b"], "node": node, "ha": ha,
                       "replica": replica})


def test_a_passive_fragment_goes_to_the_secondary_else_the_least_loaded_node_of_the_participant():
    failed = _node("alpha/a1", secondary="beta/b1")
    box = _fragment("alpha/n/x", "alpha/a1")
    live = {n: _node(n) for n in ("beta/b1", "alpha/a2", "alpha/a3")}
    assert choose_target(failed, box, live, {}) == ("beta/b1", "passive")
    del live["beta/b1"]
    assert choose_target(failed, box, live, {"alpha/a2": 3, "alpha/a3": 1}) == \
        ("alpha/a3", "passive")
    assert choose_target(failed, box, {"beta/b2": _node("beta/b2")}, {}) == (None, "passive")


def test_a_secondary_at_a_partner_takes_over_only_under_a_contract() -> None:
    failed = _node("alpha/a1", secondary="beta/b1")
    box = _fragment("alpha/n/x", "alpha/a1")
    live = {n: _node(n) for n in ("beta/b1", "alpha/a2")}
    assert choose_target(failed, box, live, {}, may_host=lambda n: n.startswith("alpha/")) \
        == ("alpha/a2", "passive")
    assert choose_target(failed, box, {"beta/b1": live["beta/b1"]}, {},
                         may_host=lambda n: n.startswith("alpha/")) == (None, "passive")


def test_an_active_fragment_goes_to_its_replica_which_gets_a_replica_of_its_own():
    failed = _node("alpha/a1", secondary="alpha/a2")
    box = _fragment("alpha/n/x", "alpha/a1", ha="active", replica="alpha/a2")
    live = {"alpha/a2": _node("alpha/a2", secondary="alpha/a3"), "alpha/a3": _node("alpha/a3")}
    assert choose_target(failed, box, live, {}) == ("alpha/a2", "active")
    assert next_replica("alpha/a2", "alpha/a1", live) == "alpha/a3"
    live["alpha/a2"] = _node("alpha/a2", secondary="alpha/a1")
    assert next_replica("alpha/a2", "alpha/a1", live) is None


class FakeCatalog:
    """The catalog client's reads and read-modify-writes, in memory."""

    def __init__(self) -> None:
        self.entries: dict[tuple[Kind, str], Entry] = {}
        self.unavailable = False

    def add(self, kind: Kind, name: str, spec: dict) -> None:
        self.entries[(kind, name)] = Entry(kind=kind, name=name, version=1, updated_at=0,
                                           spec=spec)

    def get(self, kind: Kind, name: str) -> Entry | None:
        return self.entries.get((kind, name))

    def list(self, kind: Kind, **filters: str | None) -> list[Entry]:
        return [e for (k, _), e in sorted(self.entries.items()) if k == kind and all(
            value is None or e.spec.get(key) == value for key, value in filters.items())]

    def update(self, kind: Kind, name: str, change) -> Entry | None:  # type: ignore[no-untyped-def]
        if self.unavailable:
            raise CatalogError("catalog at fake did not answer")
        current = self.entries.get((kind, name))
        wanted = change(dict(current.spec) if current else None)
        if wanted is None:
            return current
        version = current.version + 1 if current else 1
        self.entries[(kind, name)] = Entry(kind=kind, name=name, version=version,
                                           updated_at=version, spec=wanted)
        return self.entries[(kind, name)]


def _federation() -> tuple[FakeCatalog, FailureDetector]:
    catalog = FakeCatalog()
    for name, secondary in (("alpha/a1", "alpha/a2"), ("alpha/a2", "alpha/a1")):
        catalog.add(Kind.NODES, name, {"status": "up", "incarnation": f"{name}#1",
                                       "secondary": secondary,
                                       "spark_ui": f"http://127.0.0.1:404{name[-1]}"})
    catalog.add(Kind.FRAGMENTS, "alpha/n/x", {"network": "alpha/n", "boxes": ["f", "g"],
                                              "node": "alpha/a1", "phase": "running",
                                              "checkpoint": "/c/x"})
    catalog.add(Kind.FRAGMENTS, "alpha/n/y", {"network": "alpha/n", "boxes": ["h"],
                                              "node": "alpha/a1", "phase": "running",
                                              "ha": "active", "replica": "alpha/a2",
                                              "replica_ready": True})
    endpoints = Endpoints(kafka={"alpha": "unused:9092"}, registry_url="", otlp_endpoint="",
                          jaeger_query_url="")
    detector = FailureDetector(endpoints, catalog, DetectorConfig())  # type: ignore[arg-type]
    return catalog, detector


def _run(detector: FailureDetector, start: float, end: float, beating: set[str],
         incarnation: dict[str, str] | None = None) -> None:
    now = start
    while now < end:
        for node in beating:
            detector.heartbeat(node, (incarnation or {}).get(node, f"{node}#1"), now)
        detector.assess(now)
        now += 0.5


def test_the_detector_declares_a_silent_node_failed_and_places_its_fragments() -> None:
    catalog, detector = _federation()
    detector.refresh(0.0)
    _run(detector, 0.0, 10.0, {"alpha/a1", "alpha/a2"})
    assert not detector.failed
    _run(detector, 10.0, 20.0, {"alpha/a2"})
    assert [e.kind for e in detector.state.events] == ["suspected", "failed"]
    assert catalog.get(Kind.NODES, "alpha/a1").spec["status"] == "failed"
    # The rest of its entry stays as the node wrote it (the console links to its Spark UI).
    assert catalog.get(Kind.NODES, "alpha/a1").spec["spark_ui"] == "http://127.0.0.1:4041"
    x = catalog.get(Kind.FRAGMENTS, "alpha/n/x").spec
    y = catalog.get(Kind.FRAGMENTS, "alpha/n/y").spec
    assert (x["node"], x["phase"], x["checkpoint"], x["released_by"]) == (
        "alpha/a2", "released", "/c/x", "alpha/a1")
    # The active fragment goes to its replica; its next replica would be a2's secondary (a1, dead).
    assert (y["node"], y["replica"], y["replica_ready"]) == ("alpha/a2", None, False)


def test_heartbeats_of_the_failed_incarnation_do_not_revive_it_but_a_new_one_does() -> None:
    catalog, detector = _federation()
    detector.refresh(0.0)
    _run(detector, 0.0, 10.0, {"alpha/a2"})
    assert "alpha/a1" in detector.failed
    _run(detector, 10.0, 15.0, {"alpha/a1", "alpha/a2"})  # the fenced incarnation beats again
    assert "alpha/a1" in detector.failed
    catalog.update(Kind.NODES, "alpha/a1",
                   lambda spec: {**spec, "status": "up", "incarnation": "alpha/a1#2"})
    detector.refresh(15.0)
    _run(detector, 15.0, 25.0, {"alpha/a1", "alpha/a2"},
         {"alpha/a1": "alpha/a1#2", "alpha/a2": "alpha/a2#1"})
    assert "alpha/a1" not in detector.failed
    assert detector.state.events[-1].kind == "recovered"
    assert catalog.get(Kind.FRAGMENTS, "alpha/n/x").spec["node"] == "alpha/a2"  # not taken back


def test_a_declaration_the_catalog_refuses_is_retried() -> None:
    catalog, detector = _federation()
    detector.refresh(0.0)
    catalog.unavailable = True
    _run(detector, 0.0, 10.0, {"alpha/a2"})
    assert not detector.failed
    assert catalog.get(Kind.FRAGMENTS, "alpha/n/x").spec["node"] == "alpha/a1"
    catalog.unavailable = False
    _run(detector, 10.0, 11.0, {"alpha/a2"})
    assert "alpha/a1" in detector.failed
    assert catalog.get(Kind.FRAGMENTS, "alpha/n/x").spec["node"] == "alpha/a2"


def test_a_failed_fragment_is_taken_over_with_its_error_cleared_and_a_lost_replica_replaced():
    catalog = FakeCatalog()
    for name, secondary in (("alpha/a1", "alpha/a2"), ("alpha/a2", "alpha/a3"),
                            ("alpha/a3", "alpha/a1")):
        catalog.add(Kind.NODES, name, {"status": "up", "secondary": secondary})
    catalog.add(Kind.FRAGMENTS, "alpha/n/bad", {
        "network": "alpha/n", "boxes": ["f"], "node": "alpha/a1", "phase": "failed",
        "error": "StreamingQueryException: boom", "restarts": 5, "checkpoint": "/c/bad"})
    catalog.add(Kind.FRAGMENTS, "alpha/n/standby", {
        "network": "alpha/n", "boxes": ["g"], "node": "alpha/a2", "phase": "running",
        "ha": "active", "replica": "alpha/a1", "replica_ready": True})
    catalog.add(Kind.FRAGMENTS, "alpha/n/elsewhere", {
        "network": "alpha/n", "boxes": ["h"], "node": "alpha/a3", "phase": "running"})
    seen: list[Takeover] = []
    done = take_over(catalog, catalog.get(Kind.NODES, "alpha/a1"), "00-t-s-01",  # type: ignore[arg-type]
                     on_fragment=seen.append)
    assert done == seen == [Takeover("alpha/n/bad", "alpha/a1", "alpha/a2", "passive")]
    bad = catalog.get(Kind.FRAGMENTS, "alpha/n/bad").spec
    assert (bad["node"], bad["phase"], bad["error"], bad["restarts"], bad["checkpoint"],
            bad["takeover_trace"]) == ("alpha/a2", "released", None, 0, "/c/bad", "00-t-s-01")
    standby = catalog.get(Kind.FRAGMENTS, "alpha/n/standby").spec
    assert (standby["node"], standby["replica"], standby["replica_ready"]) == (
        "alpha/a2", "alpha/a3", False)
    assert catalog.get(Kind.FRAGMENTS, "alpha/n/elsewhere").version == 1


def test_no_node_is_declared_failed_while_its_participants_heartbeat_path_is_stalled() -> None:
    catalog, detector = _federation()
    detector.refresh(0.0)
    _run(detector, 0.0, 10.0, {"alpha/a1", "alpha/a2"})
    detector.paths.sent("alpha", 9.9)
    detector.paths.arrived("alpha", 9.9)
    detector.paths.sent("alpha", 10.0)  # the path stalls: this canary does not come back
    _run(detector, 10.0, 20.0, set())  # every node there falls silent with it
    assert not detector.failed
    assert catalog.get(Kind.NODES, "alpha/a1").spec["status"] == "up"
    assert {e.kind for e in detector.state.events} == {"suspected"}
    detector.paths.arrived("alpha", 10.0)  # the path carries records again; a1 stays silent
    _run(detector, 20.0, 25.0, {"alpha/a2"})
    assert list(detector.failed) == ["alpha/a1"]
    assert catalog.get(Kind.NODES, "alpha/a2").spec["status"] == "up"


def test_no_node_is_declared_failed_right_after_a_pause_of_the_detector_itself() -> None:
    _, detector = _federation()
    detector.refresh(0.0)
    now = 0.0
    while now < 10.0:  # passes every 0.1 s, both nodes beating
        for node in ("alpha/a1", "alpha/a2"):
            detector.heartbeat(node, f"{node}#1", now)
        detector.judge(now)
        now = round(now + 0.1, 1)
    # The detector is away for 2 s (descheduled, a slow catalog call): it reads nothing.
    # Its first pass back, before the heartbeats of those seconds are read, declares nothing.
    detector.judge(12.0)
    assert not detector.failed and detector.state.local_pauses == 1
    assert {e.kind for e in detector.state.events} == {"suspected"}
    detector.heartbeat("alpha/a2", "alpha/a2#1", 12.05, sent_at_ms=11_950)
    detector.judge(12.1)
    assert not detector.failed
    # a1 really is silent: declared once the grace after the pause is over.
    now = 12.2
    while now < 13.0:
        detector.heartbeat("alpha/a2", "alpha/a2#1", now)
        detector.judge(now)
        now = round(now + 0.1, 1)
    assert list(detector.failed) == ["alpha/a1"]


def test_a_cleared_suspicion_says_whether_the_node_or_the_way_held_its_heartbeats() -> None:
    _, detector = _federation()
    detector.refresh(0.0)
    for step in range(40):  # beats every 0.25 s, as sent
        for node in ("alpha/a1", "alpha/a2"):
            detector.heartbeat(node, f"{node}#1", step * 0.25, sent_at_ms=step * 250)
        detector.assess(step * 0.25)
    detector.assess(10.75)  # a1's next beats were sent on time but arrive 1 s late
    for node in ("alpha/a1", "alpha/a2"):
        detector.heartbeat(node, f"{node}#1", 10.8, sent_at_ms=10_000)
    detector.assess(10.8)
    cleared = [e for e in detector.state.events if e.kind == "cleared"]
    assert cleared and all(e.detail == "its heartbeats were sent 0.2s apart" for e in cleared)


def test_the_catalog_is_read_beside_the_heartbeats_and_applied_by_the_loop() -> None:
    _, detector = _federation()
    detector.refresh_s = 0.05
    reader = threading.Thread(target=detector._list_nodes, daemon=True)
    reader.start()
    try:
        listed = wait_for("the node list read", detector._take_listed, 10, interval_s=0.05)
    finally:
        detector.stop()
        reader.join(5)
    assert not detector.watched  # read, not applied: only the loop changes what is watched
    detector.refresh(0.0, listed)
    assert set(detector.watched) == {"alpha/a1", "alpha/a2"}
    assert not reader.is_alive()
