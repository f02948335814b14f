"""Whether a participant's heartbeat path carries records on time.

Nodes' heartbeats reach the detector through their participant's Kafka cluster. When
that path stalls (the broker busy flushing gigabytes, the machine's disk saturated), every
node there falls silent at once, and a detector judging each node alone declares them all
failed and moves their fragments for nothing. So the detector sends a canary record of its
own through each path every ``interval_s`` and reads it back with the heartbeats: while a
canary is overdue, silence on that path is the path's, and no node of that participant is
declared failed (they stay suspected, and are judged again once the canaries come back;
a node that really failed is declared then). Cassandra's failure detector skips its
verdicts after a pause of its own for the same reason.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

CANARY_HEADER = "medusa.detector.canary"
"""Marks a detector's canary record: its value is the detector's id and the send time
(monotonic seconds, that detector's clock), space-separated."""


@dataclass
class Path:
    pending: deque[float] = field(default_factory=deque)
    """Send times of the canaries not back yet, oldest first."""


class HeartbeatPaths:
    def __init__(self, late_after_s: float) -> None:
        self.late_after_s = late_after_s
        self._paths: dict[str, Path] = {}

    def sent(self, participant: str, at: float) -> None:
        self._paths.setdefault(participant, Path()).pending.append(at)

    def arrived(self, participant: str, sent_at: float) -> None:
        """A canary sent at ``sent_at`` came back: the path carried everything sent before."""
        path = self._paths.setdefault(participant, Path())
        while path.pending and path.pending[0] <= sent_at:
            path.pending.popleft()

    def stalled(self, participant: str, now: float) -> bool:
        """Whether the oldest canary not back yet on this path is overdue."""
        path = self._paths.get(participant)
        return bool(path and path.pending and now - path.pending[0] > self.late_after_s)

    def overdue_s(self, participant: str, now: float) -> float:
        path = self._paths.get(participant)
        return now - path.pending[0] if path and path.pending else 0.0
