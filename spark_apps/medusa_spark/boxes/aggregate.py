"""aggregate: windowed aggregation on stime (tumbling, sliding or session), with group-by.

A result's stime is Spark's ``window_time`` of its window (its last instant), which
keeps the event-time marker, so an operator downstream in the same fragment can
window or join the results again: everything a result depends on has a stime no
larger, and windows that close later give larger ones. Its id is
the box, the group and the window start, so the same result always gets the same
id. It is TENTATIVE when any tuple in its window was.

``expiry`` says how closed windows leave the state: ``scan``, Spark's own aggregation,
which goes through all of its state each batch; or ``timers`` (tumbling and sliding
windows), whose batches cost what they bring and close, whatever the state holds (see
``timed_windows``). The results are the same; a ``timers`` aggregate's results carry no
event-time marker, so a box that windows them again goes in another fragment.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    IntegerType,
    IntegralType,
    StructField,
    StructType,
    TimestampType,
)

from medusa_spark.boxes.base import Box, BoxParams, envelope
from medusa_spark.boxes.timed_windows import (
    STIME_US,
    TENTATIVE_FLAG,
    WINDOW_END,
    WINDOW_START,
    Aggregate,
    TimedWindows,
    Windows,
)
from medusa_spark.durations import duration_ms
from medusa_spark.streams import STIME, TYPE

ALL = "_all"
"""The one group of an aggregate without ``group_by`` (``expiry: timers`` needs a key)."""
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
    expiry: Literal["scan", "timers"] = "scan"
    """How closed windows leave the state. ``scan``: Spark's own aggregation; with the
    RocksDB state store its eviction goes through the windows the watermark closed only
    (an index of the keys by window end), with ``state_store: memory`` through the whole
    state every batch the watermark moves. ``timers``: each window's
    end is an event-time timer, so a batch costs what it brings and closes, whatever the
    state holds, at a Python call per group with rows or closing windows in a batch
    (about a millisecond: for a large state kept by few groups a batch, not by many new
    ones); tumbling and sliding windows, the RocksDB state store, and no box that windows
    its results again in the same fragment."""

    @model_validator(mode="after")
    def _timers_need_fixed_windows(self) -> AggregateParams:
        if self.expiry == "timers" and self.window.type == "session":
            raise ValueError("expiry 'timers' takes tumbling and sliding windows; a session "
                             "window closes on a gap, not at a time known when it opens")
        return self


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
        if params.expiry == "timers":  # Spark's own plan gives the results' types
            results = self._timed(frame, grouped.schema)
            stime = F.timestamp_micros(F.unix_micros(F.col("window_end")) - 1)
        else:
            results = grouped.select(
                "*", F.col("_window.start").alias("window_start"),
                F.col("_window.end").alias("window_end"))
            stime = F.window_time(F.col("_window"))
        if params.having:
            having = params.having
            results = self.analyse(lambda: results.where(F.expr(having)), "params.having")
        names = params.fields or {n: n for n in [*params.group_by, *params.aggregates]}
        key = [F.col(g).cast("string") for g in params.group_by]
        columns = envelope(
            F.when(F.col("_tentative") == 1, F.lit("TENTATIVE")).otherwise(F.lit("STABLE")),
            F.concat_ws("/", F.lit(self.box_id), *key,
                        F.unix_millis(F.col("window_start")).cast("string")),
            stime,
        )
        for name, expression in names.items():
            self.analyse(lambda e=expression: results.select(F.expr(e)), name)
            columns.append(F.expr(expression).alias(name))
        return results.select(*columns)

    def _timed(self, frame: DataFrame, typed: StructType) -> DataFrame:
        """The results of ``expiry: timers``: group fields, aggregates, ``_tentative``,
        window_start and window_end, as Spark's own aggregation gives them (``typed``)."""
        params = self.params
        spec = params.window
        size = duration_ms(spec.size or "")
        windows = Windows(size * 1000, duration_ms(spec.slide or spec.size or "") * 1000,
                          duration_ms(spec.offset) * 1000 if spec.offset else 0)
        aggregates = [Aggregate(name, *next(iter(given.items())))
                      for name, given in params.aggregates.items()]
        keys = list(params.group_by) or [ALL]
        fields = [f for f in dict.fromkeys(a.field for a in aggregates)
                  if f != "*" and f not in keys]
        source = frame.withColumn(ALL, F.lit(0)) if not params.group_by else frame
        selected = source.select(
            *keys, F.unix_micros(F.col(STIME)).alias(STIME_US),
            F.when(F.col(TYPE) == "TENTATIVE", 1).otherwise(0).alias(TENTATIVE_FLAG),
            *fields)
        types = {f.name: f.dataType for f in typed.fields}
        key_types = {f.name: f.dataType for f in source.schema.fields}
        output = StructType(
            [StructField(k, key_types[k]) for k in keys]
            + [StructField(a.name, types[a.name]) for a in aggregates]
            + [StructField(TENTATIVE_FLAG, IntegerType()),
               StructField(WINDOW_START, TimestampType()),
               StructField(WINDOW_END, TimestampType())])
        integral = {a.name for a in aggregates if isinstance(types[a.name], IntegralType)}
        processor = TimedWindows(windows, keys, aggregates, selected.columns, integral)
        results = selected.groupBy(*keys).transformWithStateInPandas(
            processor, output, "Append", "EventTime")
        return results.drop(ALL) if not params.group_by else results
