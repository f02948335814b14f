"""When to scale a keyed stateful fragment out or in, from the nodes' load reports.

Out: one of its instances has been a bottleneck (its node reports ``bottleneck_s``: it
needs more than the whole window to process what arrives, or its batches take longer
than its trigger) for ``out_after_s``, it runs as fewer than ``max_instances``, and a node
of its participant has spare capacity (utilisation below ``spare_utilisation``). In: every
instance has needed less than ``in_below_load`` of a slot for ``in_after_s``. After a
step, the fragment is left alone for ``cooldown_s``: the new instances rebuild their
state first, and their loads settle. The gap between the two thresholds and the two
waits is the hysteresis that keeps a fragment from flapping.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field


class AutoscalePolicy(BaseModel):
    out_after_s: float = Field(30.0, gt=0)
    in_below_load: float = Field(0.25, ge=0)
    in_after_s: float = Field(120.0, ge=0)
    cooldown_s: float = Field(90.0, ge=0)
    max_instances: int = Field(4, ge=1, le=16)
    spare_utilisation: float = Field(0.7, gt=0)


@dataclass(frozen=True)
class InstanceLoad:
    name: str
    """The catalog name of the fragment or of one of its instances."""
    node: str
    load: float
    bottleneck_s: float


@dataclass(frozen=True)
class Decision:
    fragment: str
    """participant/network/fragment."""
    instances: int
    to: int
    nodes: list[str]
    reason: str


@dataclass
class AutoscaleState:
    """What the policy remembers between its steps."""

    quiet_since: dict[str, float] = field(default_factory=dict)
    """Fragment -> since when all its instances have been below ``in_below_load``."""
    last_step: dict[str, float] = field(default_factory=dict)


def base_fragment(name: str) -> str:
    """The fragment an instance belongs to (an instance is ``<fragment>--g<step>-<i>``)."""
    return name.split("--", 1)[0]


def group_instances(reports: Iterable[Mapping[str, Any]],
                    placed: Mapping[str, Collection[str]]) -> dict[str, list[InstanceLoad]]:
    """Fragment -> the loads of its running instances, from the nodes' newest reports.

    Only the instances in ``placed`` (fragment -> the catalog's names of its instances now)
    count: a node's report may be older than the last step and still list the instances
    it retired. A fragment some of whose instances no report lists yet is left out."""
    grouped: dict[str, list[InstanceLoad]] = {}
    for report in reports:
        for fragment in report.get("fragments") or []:
            name = str(fragment["fragment"])
            if fragment.get("state") != "running" or \
                    name not in placed.get(base_fragment(name), ()):
                continue
            grouped.setdefault(base_fragment(name), []).append(InstanceLoad(
                name, str(report["node"]), float(fragment.get("load") or 0.0),
                float(fragment.get("bottleneck_s") or 0.0)))
    return {fragment: loads for fragment, loads in grouped.items()
            if {i.name for i in loads} == set(placed[fragment])}


def decide(policy: AutoscalePolicy, reports: Sequence[Mapping[str, Any]],
           scalable: Mapping[str, Collection[str]], state: AutoscaleState, now: float
           ) -> list[Decision]:
    """The steps to take now, for the fragments in ``scalable`` (keyed, see ``scaling``;
    fragment -> the catalog's names of its instances)."""
    spare = sorted((float(r.get("utilisation") or 0.0), str(r["node"])) for r in reports
                   if float(r.get("utilisation") or 0.0) < policy.spare_utilisation)
    decisions = []
    for fragment, instances in sorted(group_instances(reports, scalable).items()):
        if now - state.last_step.get(fragment, float("-inf")) < policy.cooldown_s:
            continue
        count = len(instances)
        participant = fragment.split("/")[0]
        used = [i.node for i in instances]
        worst = max(instances, key=lambda i: i.bottleneck_s)
        if worst.bottleneck_s >= policy.out_after_s and count < policy.max_instances:
            free = [node for _, node in spare if node.startswith(f"{participant}/")
                    and node not in used]
            if free:
                decisions.append(Decision(
                    fragment, count, count + 1, used + free[:1],
                    f"{worst.name} has been a bottleneck for {worst.bottleneck_s:.0f}s; "
                    f"{free[0]} has spare capacity"))
                continue
        if count > 1 and all(i.load < policy.in_below_load for i in instances):
            since = state.quiet_since.setdefault(fragment, now)
            if now - since >= policy.in_after_s:
                keep = sorted(used)[:count - 1]
                decisions.append(Decision(
                    fragment, count, count - 1, keep,
                    f"its {count} instances have each needed under {policy.in_below_load:g} "
                    f"of a slot for {now - since:.0f}s"))
        else:
            state.quiet_since.pop(fragment, None)
    return decisions
