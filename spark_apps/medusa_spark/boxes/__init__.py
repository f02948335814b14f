"""Aurora's boxes as transformations of streaming DataFrames; ``BOX_TYPES`` names them."""

from medusa_spark.boxes.aggregate import AggregateBox
from medusa_spark.boxes.base import Box, BoxError
from medusa_spark.boxes.filter import FilterBox
from medusa_spark.boxes.join import JoinBox
from medusa_spark.boxes.map import MapBox
from medusa_spark.boxes.port import PortBox
from medusa_spark.boxes.process import ProcessBox
from medusa_spark.boxes.union import UnionBox

BOX_TYPES: dict[str, type[Box]] = {
    box.type_name: box for box in (FilterBox, MapBox, UnionBox, AggregateBox, JoinBox, ProcessBox,
                                   PortBox)
}

__all__ = ["BOX_TYPES", "Box", "BoxError"]
