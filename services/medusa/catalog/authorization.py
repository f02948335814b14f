"""Who may change what in the catalog: the rules behind its write API's 403s.

A write is made by a principal (see ``medusa.credentials``): ``admin``, the federation's own
services (the detector, the operator), may change anything; a participant P may change:

- participants: P itself;
- nodes, streams and networks: those named ``P/...``;
- fragments: its own (``P/...``). Another's fragment only while P hosts it, and then only
  what a node reports about it (phase, checkpoint, errors, readiness, DPC state...):
  - P hosts it when the current spec names a node of P as ``node``, ``replica``,
    ``warm_target``, ``released_by`` or ``reader_replica``; or when P's node releases it
    (``released_by``, phase ``moving`` to ``released``), since a moving fragment's spec
    names its new node only, not the node it leaves. Such a release keeps the checkpoint:
    the new node copies the one the spec names already, so a participant that merely
    claims to be the old node cannot slip in state of its own;
  - P changes only the fields a node reports (``HOST_REPORTED_FIELDS``): ``warm_target``
    only to clear it, ``released_by`` only to a node of P, ``serving`` only to its
    reader-side replica or none. Everything else is the owner's
    decision: where it runs (``node``, ``replica``), what it is (``network``, ``boxes``...)
    and what it may reach (``reads``, ``writes``, ``contract``, from which the partners'
    Kafka ACLs are made). So a host cannot hand another's fragment to a third party, take it
    onto another of its nodes, nor open the owner's topics to itself; and a field added to
    the spec later is the owner's until it is listed here;
  - only the owner places a new fragment or withdraws one (nodes never delete fragments);
- contracts and offers: those P is a party to (``origin`` or ``host``), before and after
  the write, under terms both parties agreed to:
  - a new one is filed under P's name (a contract by its proposer, an offer by its origin),
    so nobody proposes or offers in another's name;
  - a contract's terms (all but ``status``, ``accepted_at`` and ``ends_at``) change only
    while it is proposed, by its proposer; it becomes active only from proposed, by the
    other party (its acceptance);
  - an offer's terms (all but ``status``, ``reason``, ``node`` and ``decided_at``) never
    change; only its host answers it (``accepted`` or ``refused``) or names the node that
    takes it, one of its own.

The rules see the entity's spec before (``current``) and after (``new``) the write; None
for a create or a delete. They are pure, so they are tested without HTTP (see ``api``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from medusa.catalog.model import SPECS, Kind
from medusa.credentials import ADMIN

Spec = dict[str, Any]

NAMED_BY_OWNER = frozenset({Kind.PARTICIPANTS, Kind.NODES, Kind.STREAMS, Kind.NETWORKS})
"""Kinds whose name alone says whose they are."""

HOSTING_FIELDS = ("node", "replica", "warm_target", "released_by", "reader_replica")
"""The fields of a fragment that name a node taking part in running it."""
HOST_REPORTED_FIELDS = frozenset({
    "phase", "checkpoint", "released_by", "takeover_trace", "error", "restarts",
    "warm_target", "warm_ready", "replica_ready", "retired_watermark_ms", "sunion_topic",
    "emit_cut_ms", "dpc_state", "serving"})
"""What the nodes running another's fragment write of it (``medusa_spark.node``); the
other fields are its owner's."""

CONTRACT_ANSWER_FIELDS = frozenset({"status", "accepted_at", "ends_at"})
OFFER_ANSWER_FIELDS = frozenset({"status", "reason", "node", "decided_at"})


def refusal(principal: str, kind: Kind, name: str, current: Spec | None,
            new: Spec | None) -> str | None:
    """Why ``principal`` may not write ``new`` over ``current`` (None for a create or a
    delete) at ``kind``/``name``; None when it may. The reason names all three."""
    if principal == ADMIN:
        return None
    verb = "remove" if new is None else "change"
    refused = f"participant {principal} cannot {verb} {kind.singular} {name}"
    owner = name.split("/", 1)[0]
    if kind in NAMED_BY_OWNER:
        return None if owner == principal else f"{refused}: it is {owner}'s"
    if kind is Kind.FRAGMENTS:
        why = _fragment(principal, owner, current, new)
    elif kind is Kind.CONTRACTS:
        why = _contract(principal, owner, current, new)
    else:
        why = _offer(principal, owner, current, new)
    return None if why is None else f"{refused}: {why}"


def _fragment(principal: str, owner: str, current: Spec | None, new: Spec | None
              ) -> str | None:
    if owner == principal:
        return None
    theirs = f"it is {owner}'s"
    if current is None or new is None:
        return f"{theirs}, and only {owner} places or withdraws it"
    hosts = any(_of(principal, _value(Kind.FRAGMENTS, current, f)) for f in HOSTING_FIELDS)
    releases = (not hosts and _value(Kind.FRAGMENTS, current, "phase") == "moving"
                and _value(Kind.FRAGMENTS, new, "phase") == "released"
                and _of(principal, _value(Kind.FRAGMENTS, new, "released_by")))
    if not (hosts or releases):
        return f"{theirs} and not hosted on a node of {principal}"
    changed = _changed(Kind.FRAGMENTS, current, new,
                       _other_fields(Kind.FRAGMENTS, HOST_REPORTED_FIELDS))
    if changed:
        return f"{theirs}, and only {owner} changes its {', '.join(changed)}"
    warm_target = _value(Kind.FRAGMENTS, new, "warm_target")
    if warm_target not in (None, _value(Kind.FRAGMENTS, current, "warm_target")):
        return f"{theirs}, and only {owner} starts a warm move (warm_target)"
    serving = _value(Kind.FRAGMENTS, new, "serving")
    if serving not in (None, _value(Kind.FRAGMENTS, current, "reader_replica")):
        return f"{theirs}, and serving {serving} is not its reader-side replica"
    released_by = _value(Kind.FRAGMENTS, new, "released_by")
    if released_by not in (None, _value(Kind.FRAGMENTS, current, "released_by")) and \
            not _of(principal, released_by):
        return f"{theirs}, and released_by {released_by} is not a node of {principal}"
    if releases and _changed(Kind.FRAGMENTS, current, new, ("checkpoint",)):
        return (f"{theirs}, and a node it does not name releases it with the checkpoint it "
                "names")
    return None


def _contract(principal: str, filer: str, current: Spec | None, new: Spec | None
              ) -> str | None:
    why = _not_a_party(principal, current, new)
    if why is not None:
        return why
    if current is None:
        return None if new is None or filer == principal else (
            f"it is filed under {filer}, and only {filer} proposes it")
    if new is None:
        return None
    terms = _changed(Kind.CONTRACTS, current, new, _other_fields(Kind.CONTRACTS,
                                                                CONTRACT_ANSWER_FIELDS))
    proposer = current["proposed_by"]
    if terms and (principal != proposer or current.get("status") != "proposed"):
        return (f"only its proposer {proposer} changes its terms ({', '.join(terms)}), "
                "and only while it is proposed")
    if new.get("status") == "active" and current.get("status") != "active" and (
            principal == proposer or current.get("status") != "proposed"):
        return (f"it becomes active only when the party that did not propose it "
                f"({_other(current, proposer)}) accepts the proposal")
    return None


def _offer(principal: str, filer: str, current: Spec | None, new: Spec | None
           ) -> str | None:
    why = _not_a_party(principal, current, new)
    if why is not None:
        return why
    if current is None:
        return None if new is None or filer == principal else (
            f"it is filed under {filer}, and only its origin {filer} makes it")
    if new is None:
        return None
    terms = _changed(Kind.OFFERS, current, new, _other_fields(Kind.OFFERS, OFFER_ANSWER_FIELDS))
    if terms:
        return f"its terms ({', '.join(terms)}) do not change once it is made"
    host = current["host"]
    answered = new.get("status") in ("accepted", "refused") and \
        new.get("status") != current.get("status")
    if (answered or _changed(Kind.OFFERS, current, new, ("node",))) and principal != host:
        return f"only its host {host} answers it and names the node that takes it"
    node = new.get("node")
    if node is not None and node != current.get("node") and not _of(host, node):
        return f"node {node} is not a node of its host {host}"
    return None


def _not_a_party(principal: str, current: Spec | None, new: Spec | None) -> str | None:
    for spec, when in ((current, "is"), (new, "would be")):
        if spec is not None and principal not in (spec.get("origin"), spec.get("host")):
            return (f"it {when} between {spec.get('origin')} and {spec.get('host')}, "
                    f"not {principal}")
    return None


def _other(spec: Spec, party: str) -> str:
    return str(spec["host"] if party == spec["origin"] else spec["origin"])


def _of(participant: str, node: Any) -> bool:
    """Whether ``node`` (``participant/node``, or None) is one of ``participant``'s."""
    return isinstance(node, str) and node.split("/", 1)[0] == participant


def _value(kind: Kind, spec: Spec, field: str) -> Any:
    """A field of a spec, or its default: an entry written before the field existed
    lacks it."""
    if field in spec:
        return spec[field]
    return SPECS[kind].model_fields[field].get_default(call_default_factory=True)


def _changed(kind: Kind, current: Spec, new: Spec, fields: Iterable[str]) -> list[str]:
    return [f for f in fields if _value(kind, current, f) != _value(kind, new, f)]


def _other_fields(kind: Kind, excluded: frozenset[str]) -> list[str]:
    return [f for f in SPECS[kind].model_fields if f not in excluded]
