"""Load and its cost, as BPM prices it (Balazinska et al., NSDI 2004).

A fragment's *load* is the share of one processing slot it needs, measured from its
query's recent batches over a sliding window: the larger of the time it was busy (batch
durations over the window) and the time it would need to keep up (rows arrived over the
window at the speed it processes rows while busy, counting the growth of its backlog).
The second exceeds the first when the fragment falls behind, so an overloaded fragment
shows the load it asks for, not only the slot it got. A node's *capacity* is in the same
unit: its slots (cores by default). A participant's utilisation u is the load of every
fragment on its nodes over their total capacity, and its cost is D(u) = u / (1 - u). A
fragment's marginal cost is the change in D from removing it (at its host) or adding it
(at a partner).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

MAX_UTILISATION = 0.99
"""D grows without bound as u nears 1: beyond this u it goes on along its tangent there, so
that it stays finite, yet more load on an overloaded participant still costs more (a flat
D would make adding load to it free, and load would flow back into the overload)."""
DEFAULT_WINDOW_S = 30.0
SETTLED_AFTER_S = 1.5 * DEFAULT_WINDOW_S
"""A fragment's load is *settled* once it has run this long where it runs: before, the
window holds the batches of its start (or of its hand-over's catch-up), which are slower
than its steady ones, so BPM neither offers it nor brings it home yet."""


@dataclass(frozen=True)
class BatchSample:
    """One micro-batch of a query: when it ended, how long it took, how many rows it read,
    and how many rows were waiting behind it in its sources."""

    ended_ms: int
    duration_ms: int
    rows: int
    behind: int = 0

    @classmethod
    def of(cls, progress: Mapping[str, Any]) -> BatchSample | None:
        """From one of Spark's query progress reports (``recentProgress``); None if it lacks
        the fields."""
        try:
            started = datetime.fromisoformat(str(progress["timestamp"]).replace("Z", "+00:00"))
            duration = int(progress.get("batchDuration") or 0)
            rows = int(progress.get("numInputRows") or 0)
            behind = sum(int(float((source.get("metrics") or {}).get(
                "maxOffsetsBehindLatest") or 0)) for source in progress.get("sources") or [])
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        return cls(int(started.timestamp() * 1000) + duration, duration, rows, behind)


@dataclass(frozen=True)
class FragmentLoad:
    busy: float
    """Share of the window its batches were running."""
    demand: float
    """Share of the window it would need to process what arrived in it."""

    @property
    def load(self) -> float:
        return max(self.busy, self.demand)


def fragment_load(samples: Iterable[BatchSample], now_ms: int,
                  window_s: float = DEFAULT_WINDOW_S) -> FragmentLoad:
    """The load of a query from its batches that ended within the last ``window_s``."""
    window_ms = window_s * 1000
    recent = [s for s in samples if now_ms - window_ms < s.ended_ms <= now_ms]
    busy_ms = sum(s.duration_ms for s in recent)
    working = [s for s in recent if s.rows > 0]
    rows = sum(s.rows for s in working)
    working_ms = sum(s.duration_ms for s in working)
    # Rows that arrived = rows read + the growth of the backlog; each takes what a row took.
    grown = max(0, recent[-1].behind - recent[0].behind) if recent else 0
    demand_ms = (rows + grown) * working_ms / rows if rows and working_ms else 0.0
    return FragmentLoad(busy=busy_ms / window_ms, demand=demand_ms / window_ms)


def cost(utilisation: float) -> float:
    """D(u) = u / (1 - u), continued linearly beyond ``MAX_UTILISATION``."""
    u = max(utilisation, 0.0)
    if u <= MAX_UTILISATION:
        return u / (1.0 - u)
    at_cap = MAX_UTILISATION / (1.0 - MAX_UTILISATION)
    slope = 1.0 / (1.0 - MAX_UTILISATION) ** 2  # D'(u) = 1 / (1 - u)^2
    return at_cap + slope * (u - MAX_UTILISATION)


def utilisation(load: float, capacity: float) -> float:
    return load / capacity if capacity > 0 else float("inf")


def cost_of_removing(total_load: float, capacity: float, load: float) -> float:
    """How much D falls when a fragment of ``load`` leaves a participant."""
    return cost(utilisation(total_load, capacity)) - \
        cost(utilisation(max(0.0, total_load - load), capacity))


def cost_of_adding(total_load: float, capacity: float, load: float) -> float:
    """How much D rises when a fragment of ``load`` comes to a participant."""
    return cost(utilisation(total_load + load, capacity)) - \
        cost(utilisation(total_load, capacity))


@dataclass(frozen=True)
class ParticipantLoad:
    """A participant's load from its nodes' newest reports."""

    participant: str
    capacity: float
    load: float
    fragments: dict[str, float]
    """Fragment -> its load (with its standby replica's, when that runs here too)."""
    unsettled: frozenset[str] = frozenset()
    """Fragments that started here too recently for their load to be known."""

    @property
    def utilisation(self) -> float:
        return utilisation(self.load, self.capacity)

    @property
    def cost(self) -> float:
        return cost(self.utilisation)

    def marginal_cost(self, fragment: str) -> float:
        """What running ``fragment`` costs it (the fall of D if it left)."""
        return cost_of_removing(self.load, self.capacity, self.fragments.get(fragment, 0.0))

    def cost_of_taking(self, load: float) -> float:
        return cost_of_adding(self.load, self.capacity, load)


def participant_loads(reports: Iterable[Mapping[str, Any]]) -> dict[str, ParticipantLoad]:
    """Per participant, from each node's newest load report (reports of nodes that do not
    measure load, without a capacity, are left out)."""
    capacity: dict[str, float] = {}
    fragments: dict[str, dict[str, float]] = {}
    unsettled: dict[str, set[str]] = {}
    for report in reports:
        if not report.get("capacity"):
            continue
        participant = str(report.get("participant") or str(report["node"]).split("/", 1)[0])
        capacity[participant] = capacity.get(participant, 0.0) + float(report["capacity"])
        own = fragments.setdefault(participant, {})
        for fragment in report.get("fragments") or []:
            # An active standby replica runs the query too: its load adds to the fragment's.
            name = str(fragment["fragment"])
            own[name] = own.get(name, 0.0) + float(fragment.get("load") or 0.0)
            running_s = fragment.get("running_s")
            if running_s is not None and float(running_s) < SETTLED_AFTER_S:
                unsettled.setdefault(participant, set()).add(name)
    return {p: ParticipantLoad(p, capacity[p], sum(fragments[p].values()), fragments[p],
                               frozenset(unsettled.get(p, ())))
            for p in capacity}
