"""Checks a network before anything runs: structure first, then types with Spark's analyzer."""

from __future__ import annotations

from dataclasses import dataclass, field
from graphlib import CycleError, TopologicalSorter

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from medusa.schemas import load_schema
from medusa_spark.avro_types import WIDENS_TO, struct_of, type_name
from medusa_spark.boxes import BOX_TYPES, Box, BoxError
from medusa_spark.boxes.port import PortBox
from medusa_spark.boxes.process import ProcessBox
from medusa_spark.network.model import NetworkError, NetworkSpec
from medusa_spark.streams import ID, STIME, TYPE

ENVELOPE_FIELDS = [StructField(TYPE, StringType()), StructField(ID, StringType()),
                   StructField(STIME, TimestampType())]


@dataclass
class Plan:
    """A validated network: boxes in dependency order and how they are wired."""

    network: NetworkSpec
    boxes: dict[str, Box]
    order: list[str]
    inputs: dict[str, dict[str, str]]
    """Box -> port -> upstream stream or box."""
    output_stream: dict[str, str | None]
    """Box -> the declared stream it writes, or None (an intermediate topic)."""
    output_schemas: dict[str, StructType] = field(default_factory=dict)
    """Box -> the struct of its output fields (filled by check_types)."""


def check_structure(network: NetworkSpec) -> Plan:
    boxes: dict[str, Box] = {}
    for name, spec in network.boxes.items():
        if name in network.streams:
            raise NetworkError(f"box {name!r}: a stream has the same name")
        box_type = BOX_TYPES.get(spec.type)
        if box_type is None:
            raise NetworkError(f"box {name!r}, field 'type': unknown box type {spec.type!r} "
                               f"(known: {', '.join(sorted(BOX_TYPES))})")
        params = dict(spec.params)
        try:
            boxes[name] = box_type(name, params)
        except BoxError as error:
            raise NetworkError(str(error)) from None

    inputs: dict[str, dict[str, str]] = {name: {} for name in boxes}
    output_stream: dict[str, str | None] = {name: None for name in boxes}
    written_by: dict[str, str] = {}
    for index, arrow in enumerate(network.arrows):
        where = f"arrow {index + 1} ({arrow.source} -> {arrow.target})"
        source_is_box = arrow.source in boxes
        if not source_is_box and arrow.source not in network.streams:
            raise NetworkError(f"{where}: dangling arrow, {arrow.source!r} is neither a "
                               "stream nor a box")
        target = arrow.target_box
        if target in network.streams and arrow.target_port is None:
            if not source_is_box:
                raise NetworkError(f"{where}: an arrow from a stream must go to a box")
            if output_stream[arrow.source] is not None:
                raise NetworkError(f"box {arrow.source!r}: writes more than one stream "
                                   f"({output_stream[arrow.source]}, {target})")
            if target in written_by:
                raise NetworkError(f"stream {target!r}: written by both {written_by[target]!r} "
                                   f"and {arrow.source!r}")
            output_stream[arrow.source] = target
            written_by[target] = arrow.source
            continue
        if target not in boxes:
            raise NetworkError(f"{where}: dangling arrow, {arrow.target!r} is neither a "
                               "stream nor a box")
        box = boxes[target]
        if box.ports == ("*",):
            port = arrow.target_port or f"in{len(inputs[target]) + 1}"
        else:
            port = arrow.target_port or (box.ports[0] if len(box.ports) == 1 else "")
            if port not in box.ports:
                raise NetworkError(f"box {target!r}: {where} must name one of its ports "
                                   f"({', '.join(box.ports)}), e.g. {target}.{box.ports[0]}")
        if port in inputs[target]:
            raise NetworkError(f"box {target!r}: port {port!r} has two incoming arrows")
        inputs[target][port] = arrow.source

    for name, box in boxes.items():
        missing = [p for p in box.ports if p != "*" and p not in inputs[name]
                   and not box.optional_ports]
        if missing or not inputs[name]:
            raise NetworkError(f"box {name!r}: no arrow into port(s) "
                               f"{', '.join(missing or ['in'])}")
    for stream in network.streams:
        used = stream in written_by or any(stream in ports.values() for ports in inputs.values())
        if not used:
            raise NetworkError(f"stream {stream!r}: no arrow comes from or goes to it")

    _check_ports(boxes, inputs, output_stream)
    graph = {name: {src for src in ports.values() if src in boxes}
             for name, ports in inputs.items()}
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as error:
        cycle = " -> ".join(error.args[1])
        raise NetworkError(f"the network has a cycle: {cycle}") from None
    return Plan(network, boxes, order, inputs, output_stream)


def _check_ports(boxes: dict[str, Box], inputs: dict[str, dict[str, str]],
                 output_stream: dict[str, str | None]) -> None:
    """A process box is read by port boxes only, and each writes a declared stream: a
    fragment then writes all its ports from one pass (see ``fragment``)."""
    for name, box in boxes.items():
        upstream = inputs[name].get("in")
        if isinstance(box, PortBox):
            if not isinstance(boxes.get(upstream or ""), ProcessBox):
                raise NetworkError(f"box {name!r}, field 'in': a port box reads a process box, "
                                   f"not {upstream!r}")
            if output_stream[name] is None:
                raise NetworkError(f"box {name!r}: a port box must write a declared stream")
        elif any(isinstance(boxes.get(src), ProcessBox) for src in inputs[name].values()):
            raise NetworkError(f"box {name!r}: reads a process box directly; read one of its "
                               "ports through a port box")
    for name, box in boxes.items():
        if isinstance(box, ProcessBox) and output_stream[name] is not None:
            raise NetworkError(f"box {name!r}: a process box writes through port boxes, "
                               f"not to stream {output_stream[name]!r}")


def empty_stream(spark: SparkSession, fields: StructType) -> DataFrame:
    return spark.createDataFrame([], StructType([*ENVELOPE_FIELDS, *fields.fields]))


def stream_struct(network: NetworkSpec, stream: str) -> StructType:
    spec = network.streams[stream]
    try:
        return struct_of(load_schema(spec.schema_name).text)
    except KeyError as error:
        raise NetworkError(f"stream {stream!r}, field 'schema': {error.args[0]}") from None


def value_struct(frame: DataFrame) -> StructType:
    return StructType([f for f in frame.schema.fields if not f.name.startswith("_")])


def check_types(plan: Plan, spark: SparkSession) -> Plan:
    """Builds every box on empty inputs: fields and types are checked by Spark's analyzer."""
    network = plan.network
    frames: dict[str, DataFrame] = {}
    for stream in network.streams:
        frames[stream] = empty_stream(spark, stream_struct(network, stream))
    for name in plan.order:
        box = plan.boxes[name]
        try:
            output = box.apply({port: frames[src] for port, src in plan.inputs[name].items()})
        except BoxError as error:
            raise NetworkError(str(error)) from None
        struct = value_struct(output)
        for column in struct.fields:
            try:
                type_name(column.dataType)
            except ValueError as error:
                raise NetworkError(f"box {name!r}, field {column.name!r}: {error}") from None
        declared = plan.output_stream[name]
        if declared is not None:
            _check_declared(name, declared, struct, stream_struct(network, declared))
        frames[name] = output
        plan.output_schemas[name] = struct
    return plan


def _check_declared(box: str, stream: str, produced: StructType, declared: StructType) -> None:
    produced_types = {f.name: type_name(f.dataType) for f in produced.fields}
    for field_ in declared.fields:
        if field_.name not in produced_types:
            if field_.name == "emit_time":
                continue  # stamped by the writer
            raise NetworkError(f"box {box!r}, field {field_.name!r}: stream {stream!r} needs it "
                               "but the box does not produce it")
        have, want = produced_types[field_.name], type_name(field_.dataType)
        if want not in WIDENS_TO.get(have, {have}):
            raise NetworkError(f"box {box!r}, field {field_.name!r}: type mismatch, the box "
                               f"produces {have} but stream {stream!r} has {want}")
    extra = set(produced_types) - {f.name for f in declared.fields}
    if extra:
        raise NetworkError(f"box {box!r}, field {sorted(extra)[0]!r}: not in the schema of "
                           f"stream {stream!r}")


def validate(network: NetworkSpec, spark: SparkSession) -> Plan:
    return check_types(check_structure(network), spark)
