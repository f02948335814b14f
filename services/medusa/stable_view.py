"""A consumer's view of a DPC stream: the stable output with corrections applied.

Borealis's output protocol: stable tuples; during a failure, TENTATIVE tuples;
after healing, an UNDO that names the last stable tuple to keep (its tuple id;
empty for "before the first tuple"), the corrected STABLE tuples, then REC_DONE.
A stable tuple whose id was already seen is a duplicate and is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from medusa.envelope import TupleRecord, TupleType
from medusa.errors import MedusaError


class StreamProtocolError(MedusaError, ValueError):
    """A sequence that breaks the DPC output protocol, e.g. an UNDO naming an unknown tuple."""


@dataclass
class StableView:
    stable: list[TupleRecord] = field(default_factory=list)
    tentative: list[TupleRecord] = field(default_factory=list)
    reconciling: bool = False
    """True between an UNDO and its REC_DONE."""
    watermark: int | None = None
    """Highest BOUNDARY stime seen."""
    duplicates_dropped: int = 0
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
                self._undo_to(record.tuple_id)
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

    def _undo_to(self, last_kept_id: str) -> None:
        self.tentative.clear()
        if not last_kept_id:
            keep = 0
        else:
            positions = [i for i, r in enumerate(self.stable) if r.tuple_id == last_kept_id]
            if not positions:
                raise StreamProtocolError(
                    f"UNDO names tuple {last_kept_id!r}, which is not a stable tuple of this stream"
                )
            keep = positions[-1] + 1
        for undone in self.stable[keep:]:
            self._stable_ids.discard(undone.tuple_id)
        del self.stable[keep:]

    def stable_values(self) -> list[Any]:
        return [record.value for record in self.stable]

    def current_values(self) -> list[Any]:
        """What a reader sees now: stable tuples followed by the tentative ones."""
        return [record.value for record in (*self.stable, *self.tentative)]


def stable_view(records: Iterable[TupleRecord]) -> StableView:
    return StableView().apply_all(records)
