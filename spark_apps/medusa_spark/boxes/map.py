"""map: computes each output field from an expression over the input tuple.

One input tuple gives one output tuple with the same id, unless an expression
is a generator (``explode``); then ``id`` must say how to tell the outputs apart.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from medusa_spark.boxes.base import Box, BoxParams, envelope
from medusa_spark.streams import ID, REALTIME_COLUMNS, STIME, TYPE, kept


class MapParams(BoxParams):
    fields: dict[str, str]
    """Output field -> Spark SQL expression over the input fields."""
    id: str | None = None
    """Expression for the output tuple id; the input's id by default."""
    where: str | None = None
    """Optional predicate applied after the fields are computed."""


class MapBox(Box):
    type_name = "map"
    Params = MapParams
    params: MapParams

    def apply(self, inputs: dict[str, DataFrame]) -> DataFrame:
        frame = inputs["in"]
        if not self.params.fields:
            raise self.field_error("params.fields", "a map needs at least one output field")
        tuple_id = F.expr(self.params.id) if self.params.id else F.col(ID)
        columns = [*envelope(F.col(TYPE), tuple_id, F.col(STIME))]
        for name, expression in self.params.fields.items():
            self.analyse(lambda e=expression: frame.select(F.expr(e)), name)
            columns.append(F.expr(expression).alias(name))
        # A real-time reader's DPC marks and BOUNDARY rows (see REALTIME_COLUMNS).
        columns += [F.col(name) for name in REALTIME_COLUMNS if name in frame.columns]
        result = self.analyse(lambda: frame.select(*columns), "params.id")
        if self.params.where:
            where = self.params.where
            result = self.analyse(lambda: result.where(kept(result, F.expr(where))),
                                  "params.where")
        return result
