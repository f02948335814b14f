"""Kafka ACLs made from the catalog: what each principal may reach on others' clusters.

A participant's own principal and ``admin`` are super users of its cluster; any other
principal is refused what no ACL allows. The ACLs follow the catalog:

- A network's clusters are its own participant's and those of the participants that
  published a stream to it (a stream entry of theirs naming the network, which only they
  or the federation's services may write): taking part in a network opens a cluster to it.
- A participant H gets, on each of those clusters, the topics of a fragment of the network
  (its ``reads`` and ``writes``, recorded by the deploy):
  - while a contract with the network's participant as origin and H as host, covering the
    fragment, is in force: from its acceptance, before any load moves, until it has ended;
  - while the fragment or a replica of it is placed on a node of H (by its deploy, or a
    takeover onto a secondary), unless it runs there under a contract: then only while
    that contract is in force.

The parties of a contract in force read each other's node load reports
(``medusa.node-load``): the origin's BPM agent prices and brings home its load by them.
A move across clusters lets the new host read the fragment's SUnion topic on the old
host's cluster (where its inputs stood), while the fragment is released to it or warms up
there for a warm move.

Inputs give Read and Describe, and Write and Create on their dead-letter topic (the SUnion
writes undecodable records there); outputs give Write, Describe and Read (exactly-once reads
back the tail). Consumer groups (all: they hold no data) and the SOutput's transactional ids
(prefix ``medusa.soutput.``) are opened to every principal that has a topic on the cluster.

``AccessSync`` keeps each cluster's ACLs equal to this, adding and removing only the ACLs
of principals other than the cluster's owner and ``admin``. It adds at once and removes
``GRACE_S`` later, so that the old node of a move can finish its last batch.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from medusa.catalog.model import Entry
from medusa.contracts import Contract
from medusa.credentials import ADMIN
from medusa.dead_letters import dead_letter_topic
from medusa.schemas import NODE_LOAD_TOPIC
from medusa.settings import kafka_config

log = logging.getLogger("medusa.access")

Resource = Literal["topic", "group", "transactional_id"]
Operation = Literal["read", "write", "describe", "create"]

TRANSACTIONAL_PREFIX = "medusa.soutput."

GRACE_S = 30.0
"""An ACL no longer wanted is removed this long after: a fragment moved away is still
finishing its last batch on the old node when the catalog already names the new one."""

_RESOURCES: dict[Resource, ResourceType] = {
    "topic": ResourceType.TOPIC, "group": ResourceType.GROUP,
    "transactional_id": ResourceType.TRANSACTIONAL_ID}
_OPERATIONS: dict[Operation, AclOperation] = {
    "read": AclOperation.READ, "write": AclOperation.WRITE,
    "describe": AclOperation.DESCRIBE, "create": AclOperation.CREATE}
_RESOURCE_OF: dict[ResourceType, Resource] = {v: k for k, v in _RESOURCES.items()}
_OPERATION_OF: dict[AclOperation, Operation] = {v: k for k, v in _OPERATIONS.items()}


@dataclass(frozen=True, order=True)
class Grant:
    """One ALLOW ACL on ``cluster`` (a participant's) for ``principal`` (a partner)."""

    cluster: str
    principal: str
    resource: Resource
    name: str
    prefixed: bool
    operation: Operation

    def binding(self) -> AclBinding:
        return AclBinding(_RESOURCES[self.resource], self.name,
                          ResourcePatternType.PREFIXED if self.prefixed
                          else ResourcePatternType.LITERAL,
                          f"User:{self.principal}", "*", _OPERATIONS[self.operation],
                          AclPermissionType.ALLOW)


def _hosts(spec: Mapping[str, object]) -> set[str]:
    """The participants whose nodes run the fragment or a replica of it."""
    nodes = (spec.get("node"), spec.get("replica"), spec.get("warm_target"),
             spec.get("reader_replica"))
    return {node.split("/", 1)[0] for node in nodes if isinstance(node, str)}


def _topic_grants(cluster: str, principal: str, spec: Mapping[str, object]) -> set[Grant]:
    grants: set[Grant] = set()

    def allow(topic: str, *operations: Operation) -> None:
        grants.update(Grant(cluster, principal, "topic", topic, False, operation)
                      for operation in operations)
    for use in spec.get("reads") or []:  # type: ignore[attr-defined]
        if use["participant"] == cluster:
            allow(use["topic"], "read", "describe")
            allow(dead_letter_topic(use["topic"]), "write", "describe", "create")
    for use in spec.get("writes") or []:  # type: ignore[attr-defined]
        if use["participant"] == cluster:
            allow(use["topic"], "write", "describe", "read")
    return grants


def open_clusters(streams: Iterable[Entry]) -> dict[str, set[str]]:
    """Network -> the participants that opened their cluster to it by publishing one of
    their streams to it (a stream entry of theirs naming the network: only they, or the
    federation's services, may write it). Every network's own participant is added by
    ``desired_grants``."""
    opened: dict[str, set[str]] = {}
    for stream in streams:
        network = stream.spec.get("network")
        if isinstance(network, str):
            opened.setdefault(network, set()).add(stream.name.split("/", 1)[0])
    return opened


def _rebase_grants(name: str, spec: Mapping[str, Any]) -> set[Grant]:
    """A fragment released by a node of R to a node of P on another cluster, or warming up
    on P for a warm move from R: P reads where its SUnion stood on R's cluster (only a topic
    named as the fragment's SUnion topics are, so that no one opens another topic of R's by
    naming it here)."""
    topic = spec.get("source_topic")
    _, network, fragment = name.split("/")
    base = fragment.split("--", 1)[0]  # an instance of a scaled-out fragment: f--g2-0
    if not isinstance(topic, str) or not re.fullmatch(
            rf"[A-Za-z0-9._-]*medusa\.{re.escape(network)}\.{re.escape(base)}"
            r"\.[0-9a-f]+\.in(--g\d+-\d+)?", topic):
        return set()
    grants: set[Grant] = set()
    for old, new in ((spec.get("released_by"), spec.get("node")),
                     (spec.get("node"), spec.get("warm_target"))):
        if not (isinstance(old, str) and isinstance(new, str)):
            continue
        old_host, new_host = old.split("/", 1)[0], new.split("/", 1)[0]
        if old_host != new_host:
            grants |= {Grant(old_host, new_host, "topic", topic, False, "read"),
                       Grant(old_host, new_host, "topic", topic, False, "describe")}
    return grants


def desired_grants(fragments: Iterable[Entry], contracts: Iterable[Entry],
                   streams: Iterable[Entry], at_ms: int) -> set[Grant]:
    """Every ACL principals should have now, from the catalog's fragments, contracts and
    streams."""
    in_force = [c for c in map(Contract.of, contracts) if c.in_force(at_ms)]
    opened = open_clusters(streams)
    grants: set[Grant] = set()
    for fragment in fragments:
        spec = fragment.spec
        network = str(spec.get("network") or fragment.name.rsplit("/", 1)[0])
        origin = network.split("/", 1)[0]
        principals = {c.spec.host for c in in_force
                      if c.spec.origin == origin and c.covers(fragment.name)}
        under = spec.get("contract")
        if under is None or any(c.name == under for c in in_force):
            principals |= _hosts(spec)
        clusters = opened.get(network, set()) | {origin}
        for principal in principals - {ADMIN}:
            for cluster in clusters - {principal}:
                grants |= _topic_grants(cluster, principal, spec)
        grants |= _rebase_grants(fragment.name, spec)
    for contract in in_force:  # BPM: the parties see each other's node loads
        for cluster, principal in ((contract.spec.origin, contract.spec.host),
                                   (contract.spec.host, contract.spec.origin)):
            grants.add(Grant(cluster, principal, "topic", NODE_LOAD_TOPIC, False, "read"))
            grants.add(Grant(cluster, principal, "topic", NODE_LOAD_TOPIC, False, "describe"))
    for cluster, principal in {(g.cluster, g.principal) for g in grants}:
        grants.add(Grant(cluster, principal, "group", "*", False, "read"))
        grants.add(Grant(cluster, principal, "group", "*", False, "describe"))
        grants.add(Grant(cluster, principal, "transactional_id", TRANSACTIONAL_PREFIX, True,
                         "write"))
        grants.add(Grant(cluster, principal, "transactional_id", TRANSACTIONAL_PREFIX, True,
                         "describe"))
    return grants


def _grant_of(cluster: str, binding: AclBinding) -> Grant | None:
    """The grant an ACL on the cluster is, if it is one this module could have made."""
    resources, operations = _RESOURCE_OF, _OPERATION_OF
    if (binding.restype not in resources or binding.operation not in operations
            or binding.permission_type != AclPermissionType.ALLOW
            or not binding.principal.startswith("User:")):
        return None
    return Grant(cluster, binding.principal.removeprefix("User:"), resources[binding.restype],
                 binding.name, binding.resource_pattern_type == ResourcePatternType.PREFIXED,
                 operations[binding.operation])


_REFUSALS = ("TopicAuthorizationException", "TOPIC_AUTHORIZATION_FAILED",
             "GroupAuthorizationException", "GROUP_AUTHORIZATION_FAILED",
             "TransactionalIdAuthorizationException", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
             "Not authorized to access")


def explained(error: str, principal: str) -> str:
    """A failure's text, led by what it means when a cluster refused ``principal``."""
    if not any(marker in error for marker in _REFUSALS):
        return error
    return (f"refused by a cluster's ACLs: {principal} may reach a partner's topics only "
            "while a contract in force (or the origin's own placement) gives it the fragment; "
            f"the cluster logged the attempt. {error}")


class AccessSync:
    """Keeps the partners' ACLs on every cluster equal to ``desired_grants``."""

    def __init__(self, clusters: Mapping[str, str], timeout_s: float = 10.0,
                 grace_s: float = GRACE_S) -> None:
        """``clusters``: participant -> bootstrap, reached as ``admin``; an ACL no longer
        wanted goes ``grace_s`` later (see ``GRACE_S``)."""
        self.clusters = dict(clusters)
        self.timeout_s = timeout_s
        self.grace_s = grace_s
        self._unwanted_since: dict[Grant, float] = {}
        self._admins = {name: AdminClient(kafka_config(bootstrap))
                        for name, bootstrap in self.clusters.items()}

    def current(self, cluster: str) -> set[Grant]:
        """The partner ACLs the cluster has (its owner's and admin's are left alone)."""
        # None matches any name, principal and host (the stubs say str).
        anything: Any = None
        everything = AclBindingFilter(ResourceType.ANY, anything, ResourcePatternType.ANY,
                                      anything, anything, AclOperation.ANY,
                                      AclPermissionType.ANY)
        bindings = self._admins[cluster].describe_acls(everything).result(self.timeout_s)
        grants = {_grant_of(cluster, binding) for binding in bindings}
        return {g for g in grants if g is not None and g.principal not in (cluster, ADMIN)}

    def apply(self, wanted: set[Grant]) -> tuple[int, int]:
        """Adds the missing ACLs and removes the extra ones; (added, removed)."""
        added = removed = 0
        for cluster, admin in self._admins.items():
            mine = {g for g in wanted if g.cluster == cluster}
            have = self.current(cluster)
            missing = sorted(mine - have)
            now = time.monotonic()
            for grant in have - mine:
                self._unwanted_since.setdefault(grant, now)
            for grant in [g for g in self._unwanted_since if g.cluster == cluster
                          and (g in mine or g not in have)]:
                del self._unwanted_since[grant]
            extra = sorted(g for g in have - mine
                           if now - self._unwanted_since[g] >= self.grace_s)
            if missing:
                for future in admin.create_acls([g.binding() for g in missing]).values():
                    future.result(self.timeout_s)
                for grant in missing:
                    log.info("access: %s may %s %s %s%s on %s's cluster", grant.principal,
                             grant.operation, grant.resource, grant.name,
                             "*" if grant.prefixed else "", cluster)
            if extra:
                filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type,
                                            b.principal, b.host, b.operation,
                                            b.permission_type)
                           for b in (g.binding() for g in extra)]
                for future in admin.delete_acls(filters).values():
                    future.result(self.timeout_s)
                for grant in extra:
                    del self._unwanted_since[grant]
                    log.info("access: %s may no longer %s %s %s%s on %s's cluster",
                             grant.principal, grant.operation, grant.resource, grant.name,
                             "*" if grant.prefixed else "", cluster)
            added += len(missing)
            removed += len(extra)
        return added, removed


Snapshot = Callable[[], tuple[int, list[Entry], list[Entry], list[Entry]]]
"""(revision, fragments, contracts, streams) of the catalog."""


def keep_in_sync(sync: AccessSync, snapshot: Snapshot, stopped: threading.Event,
                 interval_s: float = 0.5, recheck_s: float = 5.0) -> None:
    """Brings the ACLs up to date whenever the catalog changes, and every ``recheck_s``
    anyway (a revoked contract ends with time), until ``stopped``.

    A cluster that does not answer is tried again next round; its partners keep the access
    they had meanwhile, so a partition does not cut running fragments off their topics.
    """
    applied_revision: int | None = None
    applied_at = 0.0
    while not stopped.wait(interval_s):
        revision, fragments, contracts, streams = snapshot()
        now = time.monotonic()
        if revision == applied_revision and now - applied_at < recheck_s:
            continue
        try:
            sync.apply(desired_grants(fragments, contracts, streams,
                                      time.time_ns() // 1_000_000))
        except Exception as error:  # a cluster away: next round
            log.warning("access: could not bring the ACLs up to date: %s", error)
            continue
        applied_revision, applied_at = revision, now
