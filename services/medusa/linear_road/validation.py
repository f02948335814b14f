"""A Linear Road run's outputs checked against the reference, as the benchmark's validator does.

Pure bookkeeping (no Kafka): given the run's input records with the time each was
published (its Kafka timestamp), the outputs the network wrote (with ``emit_time``) and
the reference's outputs, it counts per output type (SEMANTICS.md, last paragraphs):

- ``expected``: the reference's records; ``got``: the network's.
- ``missing``: expected records no output matches; ``wrong``: outputs that match no
  expected record; ``duplicated``: outputs beyond the one a trigger should have (the
  second toll notification for one report, the second answer to one query...).
  ``got == matched + wrong + duplicated`` and ``wrong + duplicated`` is the multiset's
  extra. Records are compared without ``emit_time``; an account balance (type 2)
  matches when its ``balance`` is the reference's balance at its ``result_time`` and
  that lies within the query's last 60 seconds.
- response time of an output: ``emit_time`` minus the publish time of its input (the
  position report with its ``(xway, vid, time)``, or the query with its ``qid``), or,
  where the outputs carry it, ``read_time`` (when a ``read_committed`` reader got the
  output: the writer's transaction commit and the reader's fetch included);
  ``late``: outputs whose response time is above 5 s. The percentiles (nearest rank)
  count each missing output as infinitely late.

A run passes when no type has a missing, wrong, duplicated or late output.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rich import box
from rich.table import Table

from medusa.latency_stats import percentile, rounded, shown
from medusa.linear_road import records as lr
from medusa.linear_road.records import (
    AccountBalanceQuery,
    DailyExpenditureQuery,
    HistoricalTolls,
    LinearRoadRecord,
    PositionReport,
)

LATE_AFTER_S = 5.0
"""The benchmark's response rule: ``emit - time <= 5`` for every output."""
CONSISTENCY_WINDOW_S = 60
"""An account balance may be as of any second of the query's last minute."""
EXAMPLES_KEPT = 5

Row = Mapping[str, Any]


@dataclass(frozen=True)
class OutputKind:
    """One of the four compared output types."""

    type: int
    name: str
    field: str
    """The reference's attribute, and the key of the run's outputs."""
    topic: str

    @property
    def answers_queries(self) -> bool:
        """Types 2 and 3 answer a query (keyed by ``qid``); 0 and 1 follow a report."""
        return self.type in (2, 3)


OUTPUT_KINDS = (
    OutputKind(0, "toll notifications", "toll_notifications", lr.TOLL_NOTIFICATIONS),
    OutputKind(1, "accident alerts", "accident_alerts", lr.ACCIDENT_ALERTS),
    OutputKind(2, "account balances", "account_balances", lr.ACCOUNT_BALANCES),
    OutputKind(3, "daily expenditures", "daily_expenditures", lr.DAILY_EXPENDITURES),
)


class Reference(Protocol):
    """What validation needs of ``medusa.linear_road.reference.ReferenceOutput``."""

    @property
    def toll_notifications(self) -> Sequence[Row]: ...

    @property
    def accident_alerts(self) -> Sequence[Row]: ...

    @property
    def account_balances(self) -> Sequence[Row]: ...

    @property
    def daily_expenditures(self) -> Sequence[Row]: ...

    def balance_at(self, vid: int, second: int) -> int: ...


@dataclass(frozen=True)
class Published:
    """An input record and when it was published (its Kafka timestamp, epoch ms)."""

    record: LinearRoadRecord | HistoricalTolls
    publish_ms: int


# -- percentiles ------------------------------------------------------------------------------
# The nearest rank, as medusa_apps.bench.live computes it (which this package may not import).








# -- triggers: the input record each output answers -----------------------------------------


@dataclass
class Triggers:
    """Publish times (epoch ms) of the inputs outputs answer; the earliest of repeats."""

    reports: dict[tuple[int, int, int], int] = field(default_factory=dict)
    """(xway, vid, time) -> publish ms."""
    xways: dict[tuple[int, int], int | None] = field(default_factory=dict)
    """(vid, time) -> the xway of the car's report then; None when it reported on two."""
    queries: dict[tuple[int, int], int] = field(default_factory=dict)
    """(output type, qid) -> publish ms."""

    @classmethod
    def of(cls, inputs: Iterable[Published]) -> Triggers:
        triggers = cls()
        for published in inputs:
            triggers.add(published)
        return triggers

    def add(self, published: Published) -> None:
        record, ms = published.record, published.publish_ms
        if isinstance(record, PositionReport):
            _keep_earliest(self.reports, (record.xway, record.vid, record.time), ms)
            car = (record.vid, record.time)
            self.xways[car] = record.xway if self.xways.get(car, record.xway) == record.xway \
                else None
        elif isinstance(record, AccountBalanceQuery):
            _keep_earliest(self.queries, (2, record.qid), ms)
        elif isinstance(record, DailyExpenditureQuery):
            _keep_earliest(self.queries, (3, record.qid), ms)

    def publish_ms(self, kind: OutputKind, row: Row) -> int | None:
        """When the input that ``row`` answers was published; None when it is unknown."""
        if kind.answers_queries:
            return self.queries.get((kind.type, row.get("qid", -1)))
        vid, time = row.get("vid", -1), row.get("time", -1)
        found = self.reports.get((row.get("xway", -1), vid, time))
        xway = self.xways.get((vid, time))
        if found is None and xway is not None:  # a wrong xway, but only one report fits
            found = self.reports[(xway, vid, time)]
        return found


def _keep_earliest(index: dict[Any, int], key: Hashable, ms: int) -> None:
    index[key] = min(ms, index.get(key, ms))


# -- timings ----------------------------------------------------------------------------------


EMIT_TIME = "emit_time"
"""When the network's writer emitted an output (epoch ms), in the output itself."""
READ_TIME = "read_time"
"""When a ``read_committed`` reader got an output (epoch ms), added by the reader."""


def emit_seconds(time: int, response_s: float) -> float:
    """An output's emit in simulation seconds: its input went out ``time`` seconds after
    second 0 (real time), so it was emitted ``time + response`` seconds in."""
    return time + response_s


@dataclass(frozen=True)
class Timing:
    """One output's response: ``emit_time`` minus its input's publish time."""

    time: int
    response_s: float

    @property
    def emit_s(self) -> float:
        return emit_seconds(self.time, self.response_s)


def response_s(row: Row, publish_ms: int, answered_at: str = EMIT_TIME) -> float:
    return (int(row[answered_at]) - publish_ms) / 1000.0


def timings(kind: OutputKind, rows: Iterable[Row], triggers: Triggers,
            answered_at: str = EMIT_TIME) -> list[Timing]:
    """The response of each output whose input is known (and that has its ``answered_at``
    time: ``emit_time``, or ``read_time``)."""
    found = []
    for row in rows:
        published = triggers.publish_ms(kind, row)
        if published is not None and row.get(answered_at) is not None:
            found.append(Timing(int(row.get("time", 0)),
                                response_s(row, published, answered_at)))
    return found


BENCHMARK_FIELDS = {
    0: ("vid", "time", "emit", "lav", "toll"),
    1: ("time", "emit", "seg"),
    2: ("time", "emit", "result_time", "qid", "balance"),
    3: ("time", "emit", "qid", "expenditure"),
}
"""Each output type's tuple after its type, in the order of the benchmark's paper."""


def benchmark_lines(outputs: Mapping[str, Sequence[Row]], triggers: Triggers) -> list[str]:
    """The run's outputs as the benchmark writes them, ``Emit`` in simulation seconds
    (the output's time plus its response time, rounded down); ``-1`` where unknown."""
    lines = []
    for kind in OUTPUT_KINDS:
        for row in outputs.get(kind.field, []):
            published = triggers.publish_ms(kind, row)
            emit = (-1 if published is None or row.get(EMIT_TIME) is None else
                    math.floor(emit_seconds(int(row["time"]), response_s(row, published))))
            values = {**row, "emit": emit}
            lines.append(",".join(str(v) for v in (kind.type, *(values[f] for f in
                                                             BENCHMARK_FIELDS[kind.type]))))
    return lines


# -- matching ---------------------------------------------------------------------------------


def without_emit(row: Row) -> dict[str, Any]:
    return {name: value for name, value in row.items() if name not in (EMIT_TIME, READ_TIME)}


def output_key(kind: OutputKind, row: Row) -> Hashable:
    """What one output answers: a query's qid, or a report's (xway, vid, time)."""
    if kind.answers_queries:
        return row.get("qid")
    return (row.get("xway"), row.get("vid"), row.get("time"))


def same_record(got: Row, wanted: Row) -> bool:
    return without_emit(got) == without_emit(wanted)


def consistent_balance(got: Row, wanted: Row, reference: Reference) -> bool:
    """A type-2 answer: its balance is the reference's at its ``result_time``, within the
    query's last 60 seconds."""
    time, vid, result_time = wanted["time"], wanted["vid"], got.get("result_time")
    return (got.get("vid") == vid and got.get("time") == time and isinstance(result_time, int)
            and time - CONSISTENCY_WINDOW_S <= result_time <= time
            and got.get("balance") == reference.balance_at(vid, result_time))


Matcher = Callable[[Row, Row], bool]


def matcher_for(kind: OutputKind, reference: Reference) -> Matcher:
    if kind.type == 2:
        return lambda got, wanted: consistent_balance(got, wanted, reference)
    return same_record


@dataclass
class Comparison:
    matched: int = 0
    missing: int = 0
    wrong: int = 0
    duplicated: int = 0
    missing_examples: list[dict[str, Any]] = field(default_factory=list)
    unexpected_examples: list[dict[str, Any]] = field(default_factory=list)

    def note(self, missing: list[Row], unexpected: list[Row]) -> None:
        for rows, kept in ((missing, self.missing_examples),
                           (unexpected, self.unexpected_examples)):
            kept.extend(dict(row) for row in rows[:EXAMPLES_KEPT - len(kept)])


def grouped(kind: OutputKind, rows: Iterable[Row]) -> dict[Hashable, list[Row]]:
    groups: dict[Hashable, list[Row]] = defaultdict(list)
    for row in rows:
        groups[output_key(kind, row)].append(row)
    return groups


def match_key(wanted: Sequence[Row], answers: Sequence[Row], matches: Matcher
              ) -> tuple[list[Row], list[Row]]:
    """The expected records no answer matches, and the answers left over (each answer
    matches at most one record; earlier answers first)."""
    left = list(answers)
    unmatched = []
    for row in wanted:
        hit = next((i for i, answer in enumerate(left) if matches(answer, row)), None)
        if hit is None:
            unmatched.append(row)
        else:
            del left[hit]
    return unmatched, left


def compare(kind: OutputKind, expected: Sequence[Row], got: Sequence[Row],
            matches: Matcher) -> Comparison:
    """Per trigger (report or query): what matched, what is missing, wrong, duplicated."""
    wanted_by_key = grouped(kind, expected)
    got_by_key = grouped(kind, sorted(got, key=lambda row: row.get(EMIT_TIME) or 0))
    result = Comparison()
    for key in wanted_by_key.keys() | got_by_key.keys():
        wanted, answers = wanted_by_key.get(key, []), got_by_key.get(key, [])
        unmatched, left = match_key(wanted, answers, matches)
        matched = len(wanted) - len(unmatched)
        duplicated = max(0, len(answers) - max(len(wanted), 1))
        result.matched += matched
        result.missing += len(unmatched)
        result.duplicated += duplicated
        result.wrong += len(answers) - matched - duplicated
        result.note(unmatched, left)
    return result


# -- results ----------------------------------------------------------------------------------


@dataclass
class TypeResult:
    kind: OutputKind
    expected: int
    got: int
    comparison: Comparison
    timings: list[Timing]
    late_after_s: float = LATE_AFTER_S

    @property
    def missing(self) -> int:
        return self.comparison.missing

    @property
    def wrong(self) -> int:
        return self.comparison.wrong

    @property
    def duplicated(self) -> int:
        return self.comparison.duplicated

    @property
    def late(self) -> int:
        return sum(1 for timing in self.timings if timing.response_s > self.late_after_s)

    @property
    def untimed(self) -> int:
        """Outputs whose input was not found (so no response time)."""
        return self.got - len(self.timings)

    def counted(self) -> list[float]:
        """Response times, with each missing output as ``inf``."""
        return [timing.response_s for timing in self.timings] + [math.inf] * self.missing

    def percentile(self, share: float) -> float | None:
        return percentile(self.counted(), share)

    @property
    def correct(self) -> bool:
        """Every output as the reference has it, once, however late."""
        return not (self.missing or self.wrong or self.duplicated)

    @property
    def passed(self) -> bool:
        return self.correct and not self.late

    def failures(self) -> list[str]:
        """What fails the benchmark's rules for this type, each with how much."""
        found = []
        for count, what in ((self.missing, "missing (never answered)"),
                            (self.wrong, "wrong (not what the rules give)"),
                            (self.duplicated, "duplicated")):
            if count:
                found.append(f"{self.kind.name}: {count:,} of {self.expected:,} {what}")
        if self.late:
            worst = max(timing.response_s for timing in self.timings)
            found.append(f"{self.kind.name}: {self.late:,} of {len(self.timings):,} later than "
                         f"the {self.late_after_s:g} s bound (p99 {shown(self.percentile(0.99))},"
                         f" worst {worst:.2f}s)")
        return found

    def as_dict(self) -> dict[str, Any]:
        return {"type": self.kind.type, "name": self.kind.name, "expected": self.expected,
                "got": self.got, "matched": self.comparison.matched, "missing": self.missing,
                "wrong": self.wrong, "duplicated": self.duplicated, "late": self.late,
                "untimed": self.untimed, "p50_s": rounded(self.percentile(0.5)),
                "p99_s": rounded(self.percentile(0.99)), "max_s": rounded(self.percentile(1.0)),
                "passed": self.passed,
                "missing_examples": self.comparison.missing_examples,
                "unexpected_examples": self.comparison.unexpected_examples}


COLUMNS = ("type", "expected", "got", "missing", "wrong", "duplicated", "late", "p50", "p99",
           "max")
SHORT_HEADERS = {"duplicated": "dup."}
"""Headers shortened in the terminal's table, so that it fits 80 columns."""


@dataclass
class Validation:
    types: list[TypeResult]
    late_after_s: float = LATE_AFTER_S

    @property
    def passed(self) -> bool:
        return all(result.passed for result in self.types)

    @property
    def correct(self) -> bool:
        """Every output equals the reference (the response rule aside)."""
        return all(result.correct for result in self.types)

    def failures(self) -> list[str]:
        """Each rule or bound that failed, and by how much; empty when the run passed."""
        return [line for result in self.types for line in result.failures()]

    def result(self, type_: int) -> TypeResult:
        return next(result for result in self.types if result.kind.type == type_)

    def as_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "late_after_s": self.late_after_s,
                "types": [result.as_dict() for result in self.types]}

    def rows(self) -> list[list[str]]:
        """The table's cells: one row per output type."""
        return [[f"{r.kind.type} {r.kind.name}", f"{r.expected:,}", f"{r.got:,}",
                 f"{r.missing:,}", f"{r.wrong:,}", f"{r.duplicated:,}", f"{r.late:,}",
                 shown(r.percentile(0.5)), shown(r.percentile(0.99)),
                 shown(r.percentile(1.0))] for r in self.types]

    def table(self) -> Table:
        """Fits an 80-column terminal: the type's name wraps, numbers never do."""
        table = Table(title="Linear Road outputs against the reference",
                      box=box.SIMPLE_HEAD, padding=0, show_edge=False)
        for number, column in enumerate(COLUMNS):
            if number == 0:
                table.add_column(column, min_width=len("notifications"))
            else:
                table.add_column(SHORT_HEADERS.get(column, column), justify="right",
                                 no_wrap=True)
        for result, cells in zip(self.types, self.rows(), strict=True):
            table.add_row(*cells, style=None if result.passed else "red")
        return table

    def text(self) -> str:
        """The table as plain text, columns aligned."""
        lines = [list(COLUMNS), *self.rows()]
        widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS))]
        return "\n".join(
            " | ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(line, widths, strict=True)))
            for line in lines)


def validate_type(kind: OutputKind, reference: Reference, got: Sequence[Row],
                  triggers: Triggers, late_after_s: float = LATE_AFTER_S,
                  answered_at: str = EMIT_TIME) -> TypeResult:
    expected: Sequence[Row] = getattr(reference, kind.field)
    comparison = compare(kind, expected, got, matcher_for(kind, reference))
    return TypeResult(kind, len(expected), len(got), comparison,
                      timings(kind, got, triggers, answered_at), late_after_s)


def validate(inputs: Iterable[Published], outputs: Mapping[str, Sequence[Row]],
             reference: Reference, late_after_s: float = LATE_AFTER_S,
             answered_at: str = EMIT_TIME) -> Validation:
    """The run's outputs (per ``OutputKind.field``, each with ``emit_time``) against the
    reference computed from ``inputs``; response times end at ``answered_at``
    (``READ_TIME``: as a ``read_committed`` reader saw them, where the outputs carry it)."""
    triggers = Triggers.of(inputs)
    return Validation([validate_type(kind, reference, outputs.get(kind.field, []), triggers,
                                     late_after_s, answered_at)
                       for kind in OUTPUT_KINDS], late_after_s)
