"""port: one output port of a process box, as a stream of its own.

Its rows are the process box's results of that port, with the port's fields under their
own names. A port box writes a declared stream (see ``validate``), and a fragment
writes all ports of one process box from one pass over it (see ``fragment``).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from medusa_spark.boxes.base import Box, BoxParams
from medusa_spark.boxes.process import PORT, PORT_SEPARATOR
from medusa_spark.streams import ID, STIME, TYPE


class PortParams(BoxParams):
    port: str
    """The process box's output port."""


class PortBox(Box):
    type_name = "port"
    Params = PortParams
    params: PortParams

    def fields(self, frame: DataFrame) -> list[str]:
        """The port's field columns in ``frame`` (the process box's output)."""
        prefix = self.params.port + PORT_SEPARATOR
        found = [c for c in frame.columns if c.startswith(prefix)]
        if PORT not in frame.columns:
            raise self.field_error("in", "a port box reads a process box")
        if not found:
            ports = sorted({c.split(PORT_SEPARATOR)[0] for c in frame.columns
                            if PORT_SEPARATOR in c})
            raise self.field_error("params.port", f"the process box has no port "
                                                  f"{self.params.port!r} (ports: "
                                                  f"{', '.join(ports)})")
        return found

    def column_of(self, field: str) -> str:
        """The process box's column holding the port's ``field``."""
        return self.params.port + PORT_SEPARATOR + field

    def field_names(self, frame: DataFrame) -> list[str]:
        prefix = len(self.params.port) + len(PORT_SEPARATOR)
        return [c[prefix:] for c in self.fields(frame)]

    def columns(self, frame: DataFrame) -> list[Column]:
        """The port's fields, renamed to their own names."""
        return [F.col(self.column_of(name)).alias(name) for name in self.field_names(frame)]

    def apply(self, inputs: dict[str, DataFrame]) -> DataFrame:
        frame = inputs["in"]
        columns = self.columns(frame)
        return frame.where(F.col(PORT) == self.params.port).select(
            TYPE, ID, STIME, *columns)
