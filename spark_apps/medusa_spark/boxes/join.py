"""join: a windowed stream-stream join of a left and a right input.

Tuples match when their keys are equal and the right tuple's stime lies within
``within`` of the left one's. ``fields`` are expressions over ``l.<field>`` and
``r.<field>``; in a left outer join the ``r`` side of an unmatched tuple is null.
A result is TENTATIVE when either side is; its id names both sides. Its stime is
the stime of one side, taken as is so that it keeps its event-time marker for the
operators downstream in the same fragment: the left's, unless the right tuple is
never earlier (``lower`` >= 0) in an inner join.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from medusa_spark.avro_types import type_name
from medusa_spark.boxes.base import Box, BoxParams, envelope, tentative_if_any
from medusa_spark.durations import duration_ms
from medusa_spark.streams import ID, STIME, TYPE


class TimeBound(BoxParams):
    lower: str = "0 seconds"
    """r.stime >= l.stime + lower (may be negative, e.g. '-30 seconds')."""
    upper: str = "0 seconds"
    """r.stime <= l.stime + upper."""


class JoinParams(BoxParams):
    keys: list[tuple[str, str]] = Field(min_length=1)
    """Pairs [left field, right field] that must be equal (YAML reads a bare 'on' as true)."""
    within: TimeBound
    how: Literal["inner", "left_outer"] = "inner"
    condition: str | None = None
    """Extra join condition over l.* and r.*."""
    fields: dict[str, str]
    """Output field -> expression over l.* and r.*."""
    where: str | None = None
    """Predicate over l.* and r.*, applied to the joined tuples."""


def _interval(text: str) -> F.Column:
    return F.expr(f"INTERVAL {duration_ms(text)} MILLISECONDS")


class JoinBox(Box):
    type_name = "join"
    ports = ("left", "right")
    Params = JoinParams
    params: JoinParams
    stateful = True
    emits_on_watermark = True

    def reach_ms(self) -> int:
        bound = self.params.within
        if self._stime_side() == "l":
            # A right tuple arriving later may match a left one up to ``upper`` before it.
            return max(0, duration_ms(bound.upper))
        return 0

    def _stime_side(self) -> str:
        inner_and_right_later = (self.params.how == "inner"
                                 and duration_ms(self.params.within.lower) >= 0)
        return "r" if inner_and_right_later else "l"

    def apply(self, inputs: dict[str, DataFrame]) -> DataFrame:
        params = self.params
        left, right = inputs["left"], inputs["right"]
        for left_field, right_field in params.keys:
            self.require_fields(left, [left_field], "keys (left)")
            self.require_fields(right, [right_field], "keys (right)")
            left_type = type_name(left.schema[left_field].dataType)
            right_type = type_name(right.schema[right_field].dataType)
            if left_type != right_type:
                raise self.field_error(left_field, f"joined with {right_field!r}, but one is "
                                                   f"{left_type} and the other {right_type}")
        lhs, rhs = left.alias("l"), right.alias("r")
        right_stime, left_stime = F.col(f"r.{STIME}"), F.col(f"l.{STIME}")
        condition = (right_stime >= left_stime + _interval(params.within.lower)) & (
            right_stime <= left_stime + _interval(params.within.upper))
        for left_field, right_field in params.keys:
            condition = condition & (F.col(f"l.{left_field}") == F.col(f"r.{right_field}"))
        if params.condition:
            extra = params.condition
            self.analyse(lambda: lhs.join(rhs, F.expr(extra)), "params.condition")
            condition = condition & F.expr(extra)
        joined = lhs.join(rhs, condition, "leftouter" if params.how == "left_outer" else "inner")
        if params.where:
            where = params.where
            joined = self.analyse(lambda: joined.where(F.expr(where)), "params.where")
        columns = envelope(
            tentative_if_any(F.col(f"l.{TYPE}"), F.col(f"r.{TYPE}")),
            F.concat_ws("/", F.lit(self.box_id), F.col(f"l.{ID}"),
                        F.coalesce(F.col(f"r.{ID}"), F.lit("-"))),
            F.col(f"{self._stime_side()}.{STIME}"),
        )
        for name, expression in params.fields.items():
            self.analyse(lambda e=expression: joined.select(F.expr(e)), name)
            columns.append(F.expr(expression).alias(name))
        return joined.select(*columns)
