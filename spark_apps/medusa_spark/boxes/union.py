"""union: merges streams of the same schema into one."""

from __future__ import annotations

from pyspark.sql import DataFrame

from medusa_spark.avro_types import type_name
from medusa_spark.boxes.base import Box, BoxParams
from medusa_spark.streams import REALTIME_COLUMNS


class UnionParams(BoxParams):
    pass


class UnionBox(Box):
    type_name = "union"
    ports = ("*",)
    Params = UnionParams

    def apply(self, inputs: dict[str, DataFrame]) -> DataFrame:
        ports = sorted(inputs)
        if len(ports) < 2:
            raise self.field_error(None, "a union needs at least two inputs")
        first = inputs[ports[0]]
        expected = _field_types(first)
        for port in ports[1:]:
            other = _field_types(inputs[port])
            for name in sorted(set(expected) | set(other)):
                if expected.get(name) != other.get(name):
                    raise self.field_error(
                        name, f"inputs disagree: {ports[0]} has {expected.get(name, 'no field')}"
                              f", {port} has {other.get(name, 'no field')}")
        result = first
        for port in ports[1:]:
            result = result.unionByName(inputs[port])
        return result


def _field_types(frame: DataFrame) -> dict[str, str]:
    """The tuples' fields and their types (not what a real-time reader's rows carry)."""
    return {f.name: type_name(f.dataType) for f in frame.schema.fields
            if f.name not in REALTIME_COLUMNS}
