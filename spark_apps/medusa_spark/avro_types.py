"""Avro record schemas <-> Spark struct types, for the flat records boxes exchange."""

from __future__ import annotations

import json
import re
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from medusa.errors import MedusaError

_PRIMITIVES: dict[str, DataType] = {
    "int": IntegerType(), "long": LongType(), "float": FloatType(), "double": DoubleType(),
    "string": StringType(), "boolean": BooleanType(),
}
_AVRO_NAMES = {type(v): k for k, v in _PRIMITIVES.items()}

# Widenings Avro's schema resolution allows; anything else is a type mismatch.
WIDENS_TO: dict[str, set[str]] = {
    "int": {"int", "long", "float", "double"},
    "long": {"long", "float", "double"},
    "float": {"float", "double"},
    "double": {"double"},
    "string": {"string"},
    "boolean": {"boolean"},
    "timestamp": {"timestamp"},
}


class UnsupportedAvroTypeError(MedusaError, ValueError):
    pass


def _field_type(avro_type: Any) -> tuple[DataType, bool]:
    """(Spark type, nullable) of an Avro field type."""
    if isinstance(avro_type, list):
        branches = [t for t in avro_type if t != "null"]
        if len(branches) != 1:
            raise UnsupportedAvroTypeError(f"only [null, T] unions are supported, got {avro_type}")
        return _field_type(branches[0])[0], True
    if isinstance(avro_type, dict):
        if avro_type.get("logicalType") == "timestamp-millis" and avro_type["type"] == "long":
            return TimestampType(), False
        if avro_type.get("type") in _PRIMITIVES:
            return _PRIMITIVES[avro_type["type"]], False
        if avro_type.get("type") == "array" and avro_type.get("items") in _PRIMITIVES:
            return ArrayType(_PRIMITIVES[avro_type["items"]], containsNull=False), False
        raise UnsupportedAvroTypeError(f"unsupported Avro type {json.dumps(avro_type)}")
    if avro_type in _PRIMITIVES:
        return _PRIMITIVES[avro_type], False
    raise UnsupportedAvroTypeError(f"unsupported Avro type {avro_type!r}")


def struct_of(avro_schema: str | dict[str, Any]) -> StructType:
    raw = json.loads(avro_schema) if isinstance(avro_schema, str) else avro_schema
    fields = []
    for field in raw["fields"]:
        spark_type, nullable = _field_type(field["type"])
        fields.append(StructField(field["name"], spark_type, nullable))
    return StructType(fields)


def type_name(data_type: DataType) -> str:
    """The Avro-side name of a Spark type ('timestamp' for timestamp-millis)."""
    if isinstance(data_type, TimestampType):
        return "timestamp"
    if isinstance(data_type, ArrayType) and type(data_type.elementType) in _AVRO_NAMES:
        return f"array<{_AVRO_NAMES[type(data_type.elementType)]}>"
    try:
        return _AVRO_NAMES[type(data_type)]
    except KeyError:
        raise UnsupportedAvroTypeError(
            f"type {data_type.simpleString()} cannot be written as Avro by a box") from None


def record_schema(struct: StructType, name: str, namespace: str) -> str:
    """An Avro record schema for a struct; every field nullable (results may lack a value)."""
    fields = []
    for field in struct.fields:
        avro_type: Any = type_name(field.dataType)
        if isinstance(field.dataType, TimestampType):
            avro_type = {"type": "long", "logicalType": "timestamp-millis"}
        elif isinstance(field.dataType, ArrayType):
            avro_type = {"type": "array", "items": type_name(field.dataType.elementType)}
        fields.append({"name": field.name, "type": ["null", avro_type], "default": None})
    record_name = re.sub(r"(^|[_\-.])(\w)", lambda m: m.group(2).upper(), name)
    return json.dumps({"type": "record", "name": record_name, "namespace": namespace,
                       "fields": fields}, separators=(",", ":"))
