"""aggregate: windowed aggregation on stime (tumbling, sliding or session), with group-by.

A result's stime is Spark's ``window_time`` of its window (its last instant), which
keeps the event-time marker, so an operator downstream in the same fragment can
window or join the results again: everything a result depends on has a stime no
larger, and windows that close later give larger ones. Its id is
the box, the group and the window start, so the same result always gets the same
id. It is TENTATIVE when any tuple in its window was.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from medusa_spark.boxes.base import Box, BoxParams, envelope
from medusa_spark.durations import duration_ms
from medusa_spark.streams import STIME, TYPE

FUNCTIONS = ("count", "count_distinct", "sum", "avg", "min", "max", "first", "last")
NUMERIC_ONLY = ("sum", "avg")


class WindowSpec(BoxParams):
    type: Literal["tumbling", "sliding", "session"] = "tumbling"
    size: str | None = None
    """Window length, e.g. '60 seconds' (tumbling and sliding)."""
    slide: str | None = None
    """Distance between window starts (sliding)."""
    offset: str | None = None
    """Shift of the window starts from the epoch, e.g. '1 millisecond'."""
    gap: str | None = None
    """Inactivity that closes a session (session)."""

    @model_validator(mode="after")
    def _complete(self) -> WindowSpec:
        needed = {"tumbling": ("size",), "sliding": ("size", "slide"), "session": ("gap",)}
        for name in needed[self.type]:
            if getattr(self, name) is None:
                raise ValueError(f"a {self.type} window needs '{name}'")
        for name in ("size", "slide", "offset", "gap"):
            value = getattr(self, name)
            if value is not None:
                duration_ms(value)
        return self


class AggregateParams(BoxParams):
    window: WindowSpec
    group_by: list[str] = Field(default_factory=list)
    aggregates: dict[str, dict[Literal[FUNCTIONS], str]]  # type: ignore[valid-type]
    """Output field -> {function: input field}; count takes '*' too."""
    having: str | None = None
    """Predicate over the results (group fields, aggregates, window_start, window_end)."""
    fields: dict[str, str] | None = None
    """Output fields as expressions over the results; group fields + aggregates by default."""


class AggregateBox(Box):
    type_name = "aggregate"
    Params = AggregateParams
    params: AggregateParams
    stateful = True
    emits_on_watermark = True

    def _window(self) -> Column:
        spec = self.params.window
        if spec.type == "session":
            return F.session_window(F.col(STIME), spec.gap or "")
        size = spec.size or ""  # present: checked by WindowSpec
        slide = spec.slide or size
        if spec.offset:
            return F.window(F.col(STIME), size, slide, spec.offset)
        return F.window(F.col(STIME), size, slide)

    def _aggregate(self, frame: DataFrame, name: str, function: str, field: str) -> Column:
        if field == "*" and function == "count":
            return F.count(F.lit(1)).alias(name)
        self.require_fields(frame, [field], f"aggregate {name!r}")
        if function in NUMERIC_ONLY:
            self.require_numeric(frame.schema, field, f"{function} in aggregate {name!r}")
        column = F.col(field)
        built = {
            "count": lambda: F.count(column),
            "count_distinct": lambda: F.size(F.collect_set(column)),
            "sum": lambda: F.sum(column),
            "avg": lambda: F.avg(column),
            "min": lambda: F.min(column),
            "max": lambda: F.max(column),
            "first": lambda: F.min_by(column, F.col(STIME)),
            "last": lambda: F.max_by(column, F.col(STIME)),
        }[function]()
        return built.alias(name)

    def apply(self, inputs: dict[str, DataFrame]) -> DataFrame:
        frame = inputs["in"]
        params = self.params
        self.require_fields(frame, params.group_by, "group_by")
        if not params.aggregates:
            raise self.field_error("params.aggregates", "name at least one aggregate")
        aggregates = []
        for name, spec in params.aggregates.items():
            if len(spec) != 1:
                raise self.field_error(name, "give exactly one function: {function: field}")
            ((function, field),) = spec.items()
            aggregates.append(self._aggregate(frame, name, function, field))
        tentative = F.max(F.when(F.col(TYPE) == "TENTATIVE", 1).otherwise(0)).alias("_tentative")
        grouped = frame.groupBy(self._window().alias("_window"), *params.group_by).agg(
            *aggregates, tentative)
        results = grouped.select(
            "*", F.col("_window.start").alias("window_start"),
            F.col("_window.end").alias("window_end"))
        if params.having:
            having = params.having
            results = self.analyse(lambda: results.where(F.expr(having)), "params.having")
        names = params.fields or {n: n for n in [*params.group_by, *params.aggregates]}
        key = [F.col(g).cast("string") for g in params.group_by]
        columns = envelope(
            F.when(F.col("_tentative") == 1, F.lit("TENTATIVE")).otherwise(F.lit("STABLE")),
            F.concat_ws("/", F.lit(self.box_id), *key,
                        F.unix_millis(F.col("window_start")).cast("string")),
            F.window_time(F.col("_window")),
        )
        for name, expression in names.items():
            self.analyse(lambda e=expression: results.select(F.expr(e)), name)
            columns.append(F.expr(expression).alias(name))
        return results.select(*columns)
