"""What every box has: a stable id, typed parameters, input ports, and one output.

``apply`` gets each input port's data rows (envelope columns ``_type``, ``_id``,
``_stime`` and the record's fields) and returns the output's data rows. BOUNDARY
rows never reach a box: its fragment turns the watermark into the boundaries of
its outputs (see ``fragment``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import NumericType, StructType

from medusa.errors import MedusaError
from medusa_spark.streams import ID, STABLE, STIME, TENTATIVE, TYPE


class BoxError(MedusaError, ValueError):
    """A box that cannot work as declared; names the box and the offending field."""

    def __init__(self, box: str, field: str | None, message: str) -> None:
        where = f"box {box!r}" + (f", field {field!r}" if field else "")
        super().__init__(f"{where}: {message}")
        self.box = box
        self.field = field


class BoxParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Box(ABC):
    type_name: ClassVar[str]
    ports: ClassVar[tuple[str, ...]] = ("in",)
    """Input port names; ``("*",)`` takes any number of inputs."""
    Params: ClassVar[type[BoxParams]]
    stateful: ClassVar[bool] = False
    emits_on_watermark: ClassVar[bool] = False
    """Whether some of its results come out only once the watermark passes them (a window
    closing, a join's tuple left unmatched): a batch after the input that made them."""
    optional_ports: ClassVar[bool] = False
    """Whether ports may stay without an arrow (at least one must have one)."""

    def __init__(self, box_id: str, params: dict[str, Any] | None) -> None:
        self.box_id = box_id
        try:
            self.params = self.Params.model_validate(params or {})
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(part) for part in first["loc"]) or None
            raise BoxError(box_id, f"params.{field}" if field else "params",
                           first["msg"]) from None

    @abstractmethod
    def apply(self, inputs: dict[str, DataFrame]) -> DataFrame:
        """The output's data rows, built from the inputs' data rows."""

    def reach_ms(self) -> int:
        """How far below the watermark a result the box emits later may lie (joins)."""
        return 0

    # Helpers for subclasses -------------------------------------------------

    def field_error(self, field: str | None, message: str) -> BoxError:
        return BoxError(self.box_id, field, message)

    def require_fields(self, frame: DataFrame, fields: list[str], role: str) -> None:
        names = set(frame.columns)
        for field in fields:
            if field not in names:
                known = ", ".join(c for c in frame.columns if not c.startswith("_"))
                raise self.field_error(field, f"{role} names a field not in the input "
                                              f"schema (fields: {known})")

    def require_numeric(self, schema: StructType, field: str, role: str) -> None:
        data_type = schema[field].dataType
        if not isinstance(data_type, NumericType):
            raise self.field_error(field, f"{role} needs a number, but the field is "
                                          f"{data_type.simpleString()}")

    def analyse(self, build: Any, field: str | None) -> Any:
        """Run Spark's analyzer on ``build()``; its complaints become BoxErrors."""
        try:
            return build()
        except AnalysisException as error:
            raise self.field_error(field, _first_line(error)) from None


def _first_line(error: AnalysisException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def tentative_if_any(*types: Column) -> Column:
    """A result is TENTATIVE when anything it depends on is."""
    condition = None
    for column in types:
        is_tentative = F.coalesce(column == F.lit(TENTATIVE), F.lit(False))
        condition = is_tentative if condition is None else condition | is_tentative
    assert condition is not None
    return F.when(condition, F.lit(TENTATIVE)).otherwise(F.lit(STABLE))


def envelope(type_: Column, tuple_id: Column, stime: Column) -> list[Column]:
    return [type_.alias(TYPE), tuple_id.alias(ID), stime.alias(STIME)]
