"""filter: keeps the tuples for which a predicate (Spark SQL) holds."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType

from medusa_spark.boxes.base import Box, BoxParams
from medusa_spark.streams import kept


class FilterParams(BoxParams):
    predicate: str


class FilterBox(Box):
    type_name = "filter"
    Params = FilterParams
    params: FilterParams

    def apply(self, inputs: dict[str, DataFrame]) -> DataFrame:
        frame = inputs["in"]
        predicate = self.analyse(lambda: frame.select(F.expr(self.params.predicate)),
                                 "params.predicate")
        if not isinstance(predicate.schema[0].dataType, BooleanType):
            raise self.field_error("params.predicate", "the predicate must be true or false, "
                                   f"not {predicate.schema[0].dataType.simpleString()}")
        return frame.where(kept(frame, F.expr(self.params.predicate)))
