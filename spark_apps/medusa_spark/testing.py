"""Running a box or a fragment on tuples given in Python: no Kafka, no registry.

The tuples are laid out as the SUnion would write them (wire-format Avro values,
envelope headers, ``medusa.input``), one file per micro-batch, and the fragment's
real query reads them as a stream (``maxFilesPerTrigger=1``), so windows,
watermarks, joins and late tuples behave as they do on Kafka, batch by batch.
Its real writer collects the records it would write instead of producing them.

    outputs = run_network(spark, network, [[tuple_a, tuple_b, boundary_at(60_000)], ...])
    outputs["segment_stats"]  # the decoded results, with their type, id and stime

A box on its own takes one call: each input port reads a stream named as the port.

    found = run_box(spark, "filter", {"predicate": "speed > 0"},
                    [[Tuple("in", at(1), report), boundary(60)]])
"""

from __future__ import annotations

import io
import json
import struct
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import fastavro
import yaml
from pyspark import cloudpickle
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    StringType,
    StructField,
    StructType,
)

from medusa.envelope import ID_HEADER, STIME_HEADER, TENTATIVE_HEADER, TYPE_HEADER
from medusa.schemas import load_schema
from medusa_spark.avro_types import record_schema, struct_of
from medusa_spark.boxes.process import Processor
from medusa_spark.fragment import FragmentOutput, FragmentWiring, build_fragment
from medusa_spark.fragment_run import start_stream, state_store_provider
from medusa_spark.fragment_writer import FragmentWriter
from medusa_spark.network.fragments import Fragment, fragments_of
from medusa_spark.network.model import NetworkSpec, parse_network
from medusa_spark.network.validate import Plan, validate
from medusa_spark.soutput import OutRecord
from medusa_spark.streams import INPUT_HEADER, KafkaStream, wire_prefix

KAFKA_ROW = StructType([
    StructField("key", BinaryType()), StructField("value", BinaryType()),
    StructField("headers", ArrayType(StructType([
        StructField("key", StringType()), StructField("value", BinaryType())]))),
])


BASE_MS = 86_400_000
"""Where ``at`` puts 0 s: clear of stime 0, which Spark reads as "no watermark"."""


def at(seconds: float) -> int:
    """The stime ``seconds`` after ``BASE_MS``."""
    return BASE_MS + round(seconds * 1000)


@dataclass(frozen=True)
class Tuple:
    """A tuple of a fragment input, or (``input`` None) a BOUNDARY of the SUnion."""

    input: str | None
    stime: int
    value: dict[str, Any] | None = None
    id: str | None = None
    type: str = "STABLE"
    raw: bytes | None = None
    """Sent as the value instead of ``value`` encoded (for undecodable records)."""
    epoch: int | None = None
    """The UP_FAILURE period of the SUnion's TENTATIVE release this record is part of (its
    ``medusa.tentative`` header, on the release's tuples and its BOUNDARY)."""


def boundary_at(stime: int, epoch: int | None = None) -> Tuple:
    return Tuple(None, stime, type="BOUNDARY", id=f"sunion/boundary/0/{stime}", epoch=epoch)


def boundary(seconds: float, epoch: int | None = None) -> Tuple:
    """The SUnion's BOUNDARY at ``at(seconds)``: every input has passed it."""
    return boundary_at(at(seconds), epoch)


@dataclass
class Result:
    type: str
    id: str
    stime: int
    value: dict[str, Any] | None


@dataclass
class CollectingSink:
    """Keeps what a fragment's writer would write."""

    topics: list[str]
    standby: bool = False
    records: list[OutRecord] = field(default_factory=list)

    def write(self, records: Sequence[OutRecord]) -> int:
        self.records.extend(records)
        return len(records)

    def promote(self, keep_tentative: bool = True, from_stime_ms: int | None = None) -> int:
        return 0

    def close(self) -> None:
        pass


def _schema_ids(names: Sequence[str]) -> dict[str, int]:
    return {name: index + 1 for index, name in enumerate(sorted(names))}


def _encode(schema: Any, value: dict[str, Any], schema_id: int) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, value)
    return wire_prefix(schema_id) + buffer.getvalue()


def _decode(schema: Any, value: bytes) -> dict[str, Any]:
    assert value[:1] == b"\x00"
    _ = struct.unpack(">I", value[1:5])
    return dict(fastavro.schemaless_reader(io.BytesIO(value[5:]), schema))  # type: ignore[arg-type]


class FragmentHarness:
    """A fragment of a validated network, wired to files and a collecting sink."""

    def __init__(self, spark: SparkSession, plan: Plan, fragment: Fragment) -> None:
        self.spark = spark
        self.plan = plan
        self.fragment = fragment
        network = plan.network
        schemas: dict[str, str] = {}
        for name in fragment.inputs:
            if name in network.streams:
                schemas[name] = load_schema(network.streams[name].schema_name).text
            else:
                schemas[name] = record_schema(plan.output_schemas[name], name, "medusa.test")
        for box in fragment.outputs:
            declared = plan.output_stream[box]
            schemas[box] = (load_schema(network.streams[declared].schema_name).text
                            if declared else
                            record_schema(plan.output_schemas[box], box, "medusa.test"))
        ids = _schema_ids(list(schemas))
        self.streams = {name: KafkaStream(f"test.{name}", "memory", ids[name], text)
                        for name, text in schemas.items()}
        self.parsed = {name: fastavro.parse_schema(json.loads(text))
                       for name, text in schemas.items()}
        outputs = {box: FragmentOutput(box, self.streams[box], struct_of(schemas[box]),
                                       tuple(network.boxes[box].key), 1)
                   for box in fragment.outputs}
        self.wiring = FragmentWiring(
            network=f"{network.participant}/{network.name}", fragment=fragment,
            source=KafkaStream("test.sunion", "memory", 0, ""),
            inputs={name: self.streams[name] for name in fragment.inputs},
            outputs=outputs, bucket_ms=1000, fingerprint="test", topic_prefix="")

    def _row(self, tuple_: Tuple, index: int) -> tuple[None, bytes | None, list[Any]]:
        headers: list[Any] = [(TYPE_HEADER, tuple_.type.encode()),
                              (ID_HEADER, (tuple_.id or f"t{index}").encode()),
                              (STIME_HEADER, str(tuple_.stime).encode())]
        value: bytes | None = tuple_.raw
        if tuple_.epoch is not None:
            headers.append((TENTATIVE_HEADER, str(tuple_.epoch).encode()))
        if tuple_.input is not None:
            headers.append((INPUT_HEADER, tuple_.input.encode()))
            if value is None and tuple_.value is not None:
                value = _encode(self.parsed[tuple_.input], tuple_.value,
                                self.streams[tuple_.input].schema_id)
        return (None, value, headers)

    def run(self, batches: Sequence[Sequence[Tuple]],
            prepare: Callable[[FragmentWriter], None] | None = None
            ) -> dict[str, list[Result]]:
        """Each inner sequence is one micro-batch; returns each output's results and
        BOUNDARY records, in the order they would be written. ``prepare`` is given the
        writer before the first batch (to set a scale step's cut, say)."""
        # A state store's background maintenance may still write into the checkpoint as
        # the query ends: a directory left behind then is no failure of the fragment.
        with tempfile.TemporaryDirectory(prefix="medusa-testing-",
                                         ignore_cleanup_errors=True) as scratch:
            folder = Path(scratch) / "in"
            folder.mkdir()
            count = 0
            for number, batch in enumerate(batches):
                rows = [self._row(t, count + i) for i, t in enumerate(batch)]
                count += len(rows)
                frame = self.spark.createDataFrame(rows, KAFKA_ROW)
                frame.coalesce(1).write.parquet(str(folder / f"batch-{number:05d}"))
                # One folder per batch; the reader sees each file as one micro-batch.
                for part in (folder / f"batch-{number:05d}").glob("*.parquet"):
                    part.rename(folder / f"{number:05d}.parquet")
            for leftover in folder.glob("batch-*"):
                for path in leftover.iterdir():
                    path.unlink()
                leftover.rmdir()
            raw = (self.spark.readStream.schema(KAFKA_ROW).option("maxFilesPerTrigger", 1)
                   .parquet(str(folder)))
            sink = CollectingSink(sorted(s.topic for s in self.streams.values()))
            writer = FragmentWriter(self.plan, self.wiring, sinks=[sink])
            if prepare is not None:
                prepare(writer)
            stream = (build_fragment(self.plan, self.wiring, raw).writeStream
                      .foreachBatch(writer)
                      .option("checkpointLocation", str(Path(scratch) / "checkpoint"))
                      .trigger(availableNow=True))
            # In the state store a node gives the fragment's query.
            query = start_stream(self.spark, stream, None,
                                 state_store_provider(self.plan, self.fragment))
            query.awaitTermination()
            error = query.exception()
            if error is not None:
                raise RuntimeError(f"fragment {self.fragment.name} failed: {error}")
        by_topic = {self.streams[box].topic: box for box in self.fragment.outputs}
        results: dict[str, list[Result]] = {box: [] for box in self.fragment.outputs}
        for record in sink.records:
            box = by_topic[record.topic]
            headers = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in record.headers}
            value = (None if record.value is None
                     else _decode(self.parsed[box], record.value))
            results[box].append(Result(str(headers[TYPE_HEADER]), str(headers[ID_HEADER]),
                                       int(str(headers[STIME_HEADER])), value))
        return results


def harness(spark: SparkSession, network: NetworkSpec,
            fragment_of: dict[str, str] | None = None, fragment: str = "all",
            outputs: Sequence[str] | None = None) -> FragmentHarness:
    """The harness of one fragment; by default the whole network is one fragment.
    ``outputs`` names the boxes whose results to see (by default those that leave it)."""
    plan = validate(network, spark)
    member = fragment_of or {box: "all" for box in plan.order}
    chosen = fragments_of(plan, member)[fragment]
    if outputs is not None:
        chosen = replace(chosen, outputs=tuple(b for b in chosen.boxes if b in outputs))
    return FragmentHarness(spark, plan, chosen)


def run_network(spark: SparkSession, network: NetworkSpec,
                batches: Sequence[Sequence[Tuple]],
                outputs: Sequence[str] | None = None,
                prepare: Callable[[FragmentWriter], None] | None = None
                ) -> dict[str, list[Result]]:
    """The whole network as one fragment, fed ``batches``; see ``FragmentHarness.run``."""
    return harness(spark, network, outputs=outputs).run(batches, prepare)


def data(results: Sequence[Result]) -> list[Result]:
    """The results without the BOUNDARY records."""
    return [r for r in results if r.type != "BOUNDARY"]


def network_of(boxes: Mapping[str, Mapping[str, Any]], arrows: Sequence[tuple[str, str]],
               streams: Mapping[str, str], **options: Any) -> NetworkSpec:
    """A network named ``t`` of one partition: ``streams`` maps each stream to its schema
    (under schemas/), ``arrows`` are (from, to) pairs; ``options`` are network fields."""
    return parse_network(yaml.safe_dump({
        "name": "t", "partitions": 1, "trigger": "200 milliseconds",
        "streams": {name: {"topic": f"in.{name}", "participant": "alpha", "schema": schema}
                    for name, schema in streams.items()},
        "boxes": dict(boxes), "arrows": [{"from": a, "to": b} for a, b in arrows],
        **options}, sort_keys=False))


def box_network(box_type: str, params: Mapping[str, Any] | None = None,
                inputs: Mapping[str, str] | None = None) -> NetworkSpec:
    """One box named ``box``; each of its input ports (``inputs``: port -> schema, by
    default one port ``in`` of position reports) reads a stream named as the port."""
    ports = dict(inputs or {"in": "position_report"})
    return network_of({"box": {"type": box_type, "params": dict(params or {})}},
                      [(port, f"box.{port}") for port in ports], ports)


def run_box(spark: SparkSession, box_type: str, params: Mapping[str, Any] | None,
            batches: Sequence[Sequence[Tuple]],
            inputs: Mapping[str, str] | None = None) -> list[Result]:
    """The results of one box (see ``box_network``) fed ``batches``, without the
    BOUNDARY records."""
    return data(run_network(spark, box_network(box_type, params, inputs), batches)["box"])


def processor_path(processor: type[Processor]) -> str:
    """``module:Class`` of a processor written in a test, for a process box's params.

    Spark's Python workers do not import the test's module: it travels with the query by
    value instead (the shipped processors are imported, as on a node)."""
    cloudpickle.register_pickle_by_value(sys.modules[processor.__module__])
    return f"{processor.__module__}:{processor.__qualname__}"
