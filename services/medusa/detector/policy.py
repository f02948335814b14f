"""When silence means failure: a fixed timeout, or the phi-accrual detector.

Both judge one node from the arrival times of its heartbeats and say ALIVE,
SUSPECT or FAILED. Both honour an acceptable pause: a node that is merely slow
(its CPU saturated, a long GC) keeps beating late, and is not declared dead as
long as its heartbeats come within the pause.

Phi accrual (Hayashibara et al., as in Akka and Cassandra) models the intervals
between heartbeats as a normal distribution over a sliding window and reports
phi = -log10(P(a heartbeat comes later than now)). Its threshold adapts to how
regular the node's heartbeats have been: a node whose heartbeats jitter gets
more slack than one that beats like a clock.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal, Protocol


class Health(StrEnum):
    ALIVE = "alive"
    SUSPECT = "suspect"
    FAILED = "failed"


class Policy(Protocol):
    last: float | None
    """When the last heartbeat arrived."""

    def heartbeat(self, at: float) -> None:
        """A heartbeat arrived at ``at`` (seconds, monotonic)."""

    def assess(self, now: float) -> Health: ...

    def suspicion(self, now: float) -> float:
        """How strongly silence suggests failure (seconds silent, or phi)."""


@dataclass(frozen=True)
class DetectorConfig:
    policy: Literal["timeout", "phi"] = "phi"
    interval_s: float = 0.25
    """How often nodes send heartbeats."""
    acceptable_pause_s: float = 0.45
    """Silence a live node may show (GC, CPU saturation) before it can be declared dead."""
    suspect_after_s: float = 0.6
    """timeout: silence after which the node is suspected."""
    phi_suspect: float = 7.0
    phi_failed: float = 8.0
    window: int = 100
    min_std_s: float = 0.1

    def policy_for_node(self) -> Policy:
        if self.policy == "timeout":
            return TimeoutPolicy(self.suspect_after_s, self.interval_s + self.acceptable_pause_s)
        return PhiAccrualPolicy(self.phi_suspect, self.phi_failed, self.acceptable_pause_s,
                                self.interval_s, self.window, self.min_std_s)


class TimeoutPolicy:
    """Suspect after ``suspect_after_s`` of silence, failed after ``fail_after_s``."""

    def __init__(self, suspect_after_s: float, fail_after_s: float) -> None:
        if not 0 < suspect_after_s <= fail_after_s:
            raise ValueError("the timeout policy needs 0 < suspect-after <= fail-after")
        self.suspect_after_s = suspect_after_s
        self.fail_after_s = fail_after_s
        self.last: float | None = None

    def heartbeat(self, at: float) -> None:
        self.last = at if self.last is None else max(self.last, at)

    def suspicion(self, now: float) -> float:
        return 0.0 if self.last is None else max(0.0, now - self.last)

    def assess(self, now: float) -> Health:
        silent = self.suspicion(now)
        if silent >= self.fail_after_s:
            return Health.FAILED
        return Health.SUSPECT if silent >= self.suspect_after_s else Health.ALIVE


class PhiAccrualPolicy:
    def __init__(self, phi_suspect: float, phi_failed: float, acceptable_pause_s: float,
                 first_interval_s: float, window: int = 100, min_std_s: float = 0.1) -> None:
        if not 0 < phi_suspect <= phi_failed:
            raise ValueError("the phi policy needs 0 < phi-suspect <= phi-failed")
        self.phi_suspect = phi_suspect
        self.phi_failed = phi_failed
        self.acceptable_pause_s = acceptable_pause_s
        self.min_std_s = min_std_s
        # Seeded with the configured interval, so the first seconds are judged sensibly.
        self.intervals: deque[float] = deque([first_interval_s, first_interval_s], maxlen=window)
        self.last: float | None = None

    def heartbeat(self, at: float) -> None:
        if self.last is not None and at > self.last:
            self.intervals.append(at - self.last)
        self.last = at if self.last is None else max(self.last, at)

    def _phi(self, now: float, pause_s: float) -> float:
        if self.last is None:
            return 0.0
        mean = sum(self.intervals) / len(self.intervals)
        variance = sum((x - mean) ** 2 for x in self.intervals) / len(self.intervals)
        std = max(math.sqrt(variance), self.min_std_s)
        return phi(now - self.last, mean + pause_s, std)

    def suspicion(self, now: float) -> float:
        """Phi with the acceptable pause granted: what a failure is declared on."""
        return self._phi(now, self.acceptable_pause_s)

    def assess(self, now: float) -> Health:
        if self.suspicion(now) >= self.phi_failed:
            return Health.FAILED
        # Suspected as soon as heartbeats are late by the node's own record, pause or not.
        return Health.SUSPECT if self._phi(now, 0.0) >= self.phi_suspect else Health.ALIVE


def phi(elapsed: float, mean: float, std: float) -> float:
    """-log10 of the probability that a heartbeat comes more than ``elapsed`` after the last.

    Uses the logistic approximation of the normal CDF (as Akka does), which stays finite
    far out in the tail.
    """
    y = min(max((elapsed - mean) / std, -10.0), 10.0)  # beyond, phi is 0 or huge anyway
    e = max(math.exp(-y * (1.5976 + 0.070566 * y * y)), 1e-300)
    if elapsed > mean:
        return -math.log10(e / (1.0 + e))
    return -math.log10(1.0 - 1.0 / (1.0 + e))
