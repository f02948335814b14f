"""A consumer's view of a DPC stream: the stable output with corrections applied.

Borealis's output protocol: stable tuples; during a failure, TENTATIVE tuples;
after healing, an UNDO back to the last stable tuple (every tentative tuple since is
withdrawn), the corrected STABLE tuples, then REC_DONE. A stable tuple whose id was
already seen is a duplicate and is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from medusa.envelope import TupleRecord, TupleType


@dataclass
class StableView:
    stable: list[TupleRecord] = field(default_factory=list)
    tentative: list[TupleRecord] = field(default_factory=list)
    reconciling: bool = False
    """True between an UNDO and its REC_DONE."""
    watermark: int | None = None
    """Highest BOUNDARY stime seen."""
    duplicates_dropped: int = 0
    undone: int = 0
    """Tentative tuples withdrawn by UNDOs."""
    _stable_ids: set[str] = field(default_factory=set, repr=False)

    def apply(self, record: TupleRecord) -> None:
        match record.type:
            case TupleType.STABLE:
                if record.tuple_id in self._stable_ids:
                    self.duplicates_dropped += 1
                    return
                self._stable_ids.add(record.tuple_id)
                self.stable.append(record)
            case TupleType.TENTATIVE:
                self.tentative.append(record)
            case TupleType.UNDO:
                self.undone += len(self.tentative)
                self.tentative.clear()
                self.reconciling = True
            case TupleType.REC_DONE:
                self.reconciling = False
            case TupleType.BOUNDARY:
                if self.watermark is None or record.stime > self.watermark:
                    self.watermark = record.stime

    def apply_all(self, records: Iterable[TupleRecord]) -> StableView:
        for record in records:
            self.apply(record)
        return self

    def stable_values(self) -> list[Any]:
        return [record.value for record in self.stable]

    def current_values(self) -> list[Any]:
        """What a reader sees now: stable tuples followed by the tentative ones."""
        return [record.value for record in (*self.stable, *self.tentative)]


def stable_view(records: Iterable[TupleRecord]) -> StableView:
    return StableView().apply_all(records)
