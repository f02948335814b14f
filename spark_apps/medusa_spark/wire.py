"""The Confluent wire format in Spark: magic byte, 4-byte schema id, Avro body."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro

WIRE_HEADER_BYTES = 5


def schema_id(value: Column) -> Column:
    """The registry id of the schema a record was written with."""
    return F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("int")


def decode_avro(value: Column, writer_schema: str) -> Column:
    """Decode the Avro body with the writer's schema (fetched from the registry by id)."""
    body = F.substring(value, WIRE_HEADER_BYTES + 1, 2**31 - 1)
    return from_avro(body, writer_schema, {"mode": "PERMISSIVE"})


def header(name: str) -> Column:
    """A Kafka record header as a string (the envelope headers are ASCII)."""
    # The first header of that name, as filter(...)[0] would find it, but without a lambda:
    # a lambda has no generated code, which turns whole-stage code generation off for the
    # plan around it. get() gives null for index -1 (no such header), where [] fails.
    return F.expr(f"CAST(get(headers, array_position(headers.key, '{name}') - 1).value "
                  "AS STRING)")
