"""Eventual consistency, checked: an output's stable view against a reference, tuple for tuple.

Both sides are read as DPC streams (STABLE, TENTATIVE, UNDO, REC_DONE, BOUNDARY) and
reduced to their stable views (``stable_view``): UNDOs applied, duplicates dropped. A
side is a topic (read whole, from the start) or a file of JSON lines as ``medusa
consume`` prints them (``type``, ``id``, ``stime``, ``value``). Fields that differ from
run to run by design (``emit_time``, a wall clock) can be left out of the comparison.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medusa.envelope import TupleRecord, TupleType
from medusa.errors import MedusaError
from medusa.stable_view import StableView, stable_view


class VerifyInputError(MedusaError, ValueError):
    """A reference file that is not what ``medusa consume`` prints."""


@dataclass
class Difference:
    missing: list[str] = field(default_factory=list)
    """Ids in the reference's stable view, not in the output's."""
    extra: list[str] = field(default_factory=list)
    """Ids in the output's stable view, not in the reference's."""
    changed: list[tuple[str, Any, Any]] = field(default_factory=list)
    """(id, output value, reference value) where both have the id."""
    unsettled: list[str] = field(default_factory=list)
    """Why the output's view is not final: tentative tuples left, or no REC_DONE yet."""
    compared: int = 0
    beyond_reference: int = 0
    """Tentative tuples of ids the reference has no stable version of: not compared."""

    @property
    def equal(self) -> bool:
        return not (self.missing or self.extra or self.changed or self.unsettled)

    def lines(self, shown: int = 10) -> list[str]:
        """What differs, for people."""
        found = [f"compared {self.compared} stable tuple(s)"]
        for label, ids in (("missing from the output", self.missing),
                           ("not in the reference", self.extra)):
            if ids:
                found.append(f"{len(ids)} {label}: {', '.join(ids[:shown])}"
                             + (" …" if len(ids) > shown else ""))
        for tuple_id, got, wanted in self.changed[:shown]:
            found.append(f"{tuple_id}: output {json.dumps(got, default=str)} "
                         f"!= reference {json.dumps(wanted, default=str)}")
        if len(self.changed) > shown:
            found.append(f"… and {len(self.changed) - shown} more changed tuple(s)")
        found += self.unsettled
        if self.beyond_reference:
            found.append(f"{self.beyond_reference} tentative tuple(s) past what the reference "
                         "settled (e.g. the last windows of an input that ended): not compared")
        return found


def compare(output: StableView, reference: StableView,
            ignore_fields: Iterable[str] = ()) -> Difference:
    ignored = set(ignore_fields)
    got = {r.tuple_id: _comparable(r.value, ignored) for r in output.stable}
    wanted = {r.tuple_id: _comparable(r.value, ignored) for r in reference.stable}
    difference = Difference(compared=len(got))
    difference.missing = sorted(set(wanted) - set(got))
    difference.extra = sorted(set(got) - set(wanted))
    difference.changed = [(i, got[i], wanted[i]) for i in sorted(set(got) & set(wanted))
                          if got[i] != wanted[i]]
    # A tentative result the reference has no stable version of lies past what the
    # reference settled (an input that ended leaves its last buckets tentative on both
    # sides): not compared, but said. One the reference has stably is uncorrected.
    uncorrected = [r for r in output.tentative if r.tuple_id in wanted]
    beyond = len(output.tentative) - len(uncorrected)
    if uncorrected:
        difference.unsettled.append(f"{len(uncorrected)} tentative tuple(s) not yet "
                                    "corrected (the failure has not healed, or its UNDO "
                                    "has not come)")
    difference.beyond_reference = beyond
    if output.reconciling:
        difference.unsettled.append("the output is reconciling: UNDO without REC_DONE yet")
    return difference


def _comparable(value: Any, ignored: set[str]) -> Any:
    if isinstance(value, dict) and ignored:
        return {k: v for k, v in value.items() if k not in ignored}
    return value


def records_from_file(path: Path) -> Iterator[TupleRecord]:
    """The records of a JSON-lines file as ``medusa consume`` prints them."""
    with path.open() as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                yield TupleRecord(TupleType(raw.get("type", "STABLE")), str(raw["id"]),
                                  int(raw.get("stime", 0)), raw.get("value"))
            except (ValueError, KeyError, TypeError) as error:
                raise VerifyInputError(
                    f"{path}:{number}: expected a JSON object with 'id' (and 'type', "
                    f"'stime', 'value') as `medusa consume` prints: {error}") from None


def records_from_topic(kafka: dict[str, Any], registry: Any, topic: str,
                       idle_s: float = 5.0) -> list[TupleRecord]:
    """Every record of a topic, from the start, until none came for ``idle_s``."""
    import uuid

    from medusa.consuming import TupleConsumer

    with TupleConsumer(kafka, registry, [topic], f"medusa-verify-{uuid.uuid4()}") as consumer:
        return [consumed.record for consumed in consumer.drain(idle_s=idle_s)]


def read_side(source: str, kafka: dict[str, Any], registry: Any,
              idle_s: float = 5.0) -> StableView:
    """The stable view of a file (when ``source`` names one) or of a topic."""
    path = Path(source)
    if path.is_file():
        return stable_view(records_from_file(path))
    return stable_view(records_from_topic(kafka, registry, source, idle_s))
