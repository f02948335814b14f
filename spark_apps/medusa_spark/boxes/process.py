"""process: a stateful box written in Python, for logic that windows and joins cannot say.

A ``Processor`` names its input ports and its output ports (each with its fields) and
gets, per group of rows sharing the box's ``key`` (one group when the key is empty), the
rows of a micro-batch of all its inputs in stime order, with the state it returned last
time (any picklable object). It returns its new state and its results per output port.
Spark runs it as one stateful operator (``applyInPandasWithState``): the state is
checkpointed with the query's, so a restarted, moved or rolled-back fragment resumes it
exactly. A processor whose state is many small values under keys of its own declares
``keyed_state`` and gets them as entries checkpointed one by one (see ``keyed_state``;
Spark's ``transformWithStateInPandas`` runs it).

A result keeps the ``_id`` and ``_stime`` the processor gives it; ids must be
deterministic, so that a replayed batch gives the same ids. Results are TENTATIVE from
the first TENTATIVE input on, until the state is rolled back (DPC's reconciliation
restores an earlier checkpoint).

The box's output holds every port's results, told apart by ``_port``; each output port
is read by a ``port`` box (see ``port``), and a fragment writes all of a process box's
ports from one pass over it (Spark would otherwise run the operator once per reader).
"""

from __future__ import annotations

import importlib
import pickle
import warnings
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any, ClassVar

import pandas as pd
from pydantic import Field
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from medusa_spark.boxes.base import Box, BoxParams
from medusa_spark.boxes.keyed_state import EntryStore, KeyedState
from medusa_spark.streams import ID, STABLE, STIME, TENTATIVE, TYPE

PORT = "_port"
INPUT_PORT = "_in"
GROUP = "_group"
PORT_SEPARATOR = "__"


class Processor(ABC):
    """The logic of a process box. Subclasses are instantiated once per Python worker."""

    inputs: ClassVar[tuple[str, ...]]
    """Input port names; rows of one stime come in this order of their ports."""
    outputs: ClassVar[dict[str, StructType]]
    """Output port -> its fields (without the envelope)."""
    keyed_state: ClassVar[bool] = False
    """True: ``state`` is a ``KeyedState`` (its group's entries, each a row of Spark's state
    store, so a checkpoint writes only the entries a batch changed), which ``process``
    changes in place; what it returns as state is not kept. Needs the RocksDB state store."""

    @abstractmethod
    def process(self, state: Any | None, rows: pd.DataFrame) -> tuple[Any, dict[str, pd.DataFrame]]:
        """``rows``: the batch's rows of one group in order, with ``_in`` (the input port),
        ``_id``, ``_stime`` (ms since the epoch) and every input's fields (missing ones
        null). Returns the new state and, per output port, a frame with ``_id``,
        ``_stime`` (ms) and the port's fields."""


def load_processor(path: str) -> type[Processor]:
    """``package.module:Class`` -> the class; ValueError saying what is wrong."""
    module_name, _, class_name = path.partition(":")
    if not module_name or not class_name:
        raise ValueError(f"expected 'package.module:Class', got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except (ImportError, TypeError) as error:  # TypeError: a relative name ('..x')
        raise ValueError(f"cannot import {module_name!r}: {error}") from None
    found = getattr(module, class_name, None)
    if not (isinstance(found, type) and issubclass(found, Processor)):
        raise ValueError(f"{path!r} is not a Processor class")
    return found


def port_column(port: str, field: str) -> str:
    return f"{port}{PORT_SEPARATOR}{field}"


class ProcessParams(BoxParams):
    processor: str
    """``package.module:Class`` of a ``Processor``."""
    key: list[str] = Field(default_factory=list)
    """Fields (of every input) whose values group the rows; empty: one group."""
    key_buckets: int | None = Field(None, ge=1, le=4096)
    """Group by a hash of ``key`` into this many buckets instead of by its values: one
    call (and one state) per bucket, holding many keys, which the processor tells apart.
    For a key with many values that each bring a row or two a batch (Linear Road's cars):
    every group costs its call about a millisecond of Python, whatever its rows."""


class ProcessBox(Box):
    type_name = "process"
    Params = ProcessParams
    params: ProcessParams
    stateful = True
    optional_ports = True

    def __init__(self, box_id: str, params: dict[str, Any] | None) -> None:
        super().__init__(box_id, params)
        try:
            self.processor = load_processor(self.params.processor)
        except ValueError as error:
            raise self.field_error("params.processor", str(error)) from None
        self.ports = self.processor.inputs  # type: ignore[misc]

    def output_struct(self) -> StructType:
        fields = [StructField(TYPE, StringType()), StructField(ID, StringType()),
                  StructField(STIME, TimestampType()), StructField(PORT, StringType())]
        for port, struct in self.processor.outputs.items():
            fields.extend(StructField(port_column(port, f.name), f.dataType, True)
                          for f in struct.fields)
        return StructType(fields)

    def _merged(self, inputs: dict[str, DataFrame]) -> DataFrame:
        """Every input's rows in one frame: ``_in``, the envelope, and all inputs' fields."""
        ports = [port for port in self.ports if port in inputs]
        types: dict[str, Any] = {}
        for port in ports:
            for f in inputs[port].schema.fields:
                if f.name.startswith("_"):
                    continue
                seen = types.setdefault(f.name, f.dataType)
                if seen != f.dataType:
                    raise self.field_error(f.name, f"inputs disagree on its type "
                                                   f"({seen.simpleString()}, "
                                                   f"{f.dataType.simpleString()})")
        for field in self.params.key:
            for port in ports:
                self.require_fields(inputs[port], [field], f"key (input {port!r})")
        merged: DataFrame | None = None
        for port in ports:
            frame = inputs[port]
            columns = [F.lit(port).alias(INPUT_PORT), F.col(TYPE), F.col(ID),
                       F.unix_millis(F.col(STIME)).alias(STIME)]
            columns += [F.col(name) if name in frame.columns
                        else F.lit(None).cast(data_type).alias(name)
                        for name, data_type in types.items()]
            selected = frame.select(*columns)
            merged = selected if merged is None else merged.unionByName(selected)
        assert merged is not None
        return merged

    def apply(self, inputs: dict[str, DataFrame]) -> DataFrame:
        merged = self._merged(inputs)
        keys = [F.col(k) for k in self.params.key]
        if not keys or self.params.key_buckets:  # one group, or the key's hash buckets
            group = F.pmod(F.xxhash64(*keys), F.lit(self.params.key_buckets)) if keys \
                else F.lit(0)
            merged, keys = merged.withColumn(GROUP, group), [F.col(GROUP)]
        state_struct = StructType([StructField("state", BinaryType()),
                                   StructField("tentative", BooleanType())])
        output = self.output_struct()
        if self.processor.keyed_state:
            return merged.groupBy(*keys).transformWithStateInPandas(
                _KeyedRunner(self.processor, output, merged.columns), output, "Append", "None")
        run = _runner(self.processor, output)
        return merged.groupBy(*keys).applyInPandasWithState(
            run, output, state_struct, "append", GroupStateTimeout.NoTimeout)


def _ordered(frames: Iterator[pd.DataFrame], order: dict[str, int]) -> pd.DataFrame:
    """A group's rows of one batch, in stime order, then input port, then id."""
    rows = pd.concat(list(frames), ignore_index=True)
    rows["_order"] = rows[INPUT_PORT].map(order)
    rows = rows.sort_values([STIME, "_order", ID], kind="stable").drop(columns="_order")
    return rows.reset_index(drop=True)


def _quiet_concat_warnings() -> None:
    # pyspark's own serializer concatenates frames with all-null columns (the ports a
    # batch has no results for) and pandas warns about it at every batch.
    warnings.filterwarnings("ignore", category=FutureWarning,
                            message="The behavior of DataFrame concatenation")


def _results(processor_type: type[Processor], output: StructType,
             results: dict[str, pd.DataFrame], tentative: bool) -> pd.DataFrame | None:
    """A processor's results per port as the box's output rows (None: no results)."""
    ports = processor_type.outputs
    parts = []
    for port, frame in results.items():
        if frame is None or frame.empty:
            continue
        if port not in ports:
            raise ValueError(f"processor {processor_type.__name__} returned port {port!r}, "
                             f"not one of {sorted(ports)}")
        part = pd.DataFrame({
            TYPE: TENTATIVE if tentative else STABLE,
            ID: frame[ID].astype(str).to_numpy(),
            STIME: pd.to_datetime(frame[STIME].astype("int64"), unit="ms", utc=True),
            PORT: port,
        })
        for field in ports[port].fields:
            part[port_column(port, field.name)] = frame[field.name].to_numpy()
        parts.append(part)
    if not parts:
        return None
    return pd.concat(parts, ignore_index=True).reindex(columns=[f.name for f in output.fields])


def _runner(processor_type: type[Processor], output: StructType) -> Any:
    """The function Spark calls per group; it builds its processor on first use."""
    order = {port: index for index, port in enumerate(processor_type.inputs)}
    instance: list[Processor] = []

    def run(_key: Any, frames: Iterator[pd.DataFrame], state: GroupState
            ) -> Iterator[pd.DataFrame]:
        if not instance:
            _quiet_concat_warnings()
            instance.append(processor_type())
        rows = _ordered(frames, order)
        saved, tentative = (pickle.loads(state.get[0]), bool(state.get[1])) if state.exists \
            else (None, False)
        tentative = tentative or bool((rows[TYPE] == TENTATIVE).any())
        new_state, results = instance[0].process(saved, rows)
        state.update((pickle.dumps(new_state, protocol=5), tentative))
        frame = _results(processor_type, output, results, tentative)
        if frame is not None:
            yield frame

    return run


class _KeyedRunner(StatefulProcessor):
    """A processor with ``keyed_state``, as Spark's ``transformWithStateInPandas`` runs it:
    the group's entries in a map state, its TENTATIVE mark in a value state."""

    def __init__(self, processor_type: type[Processor], output: StructType,
                 columns: list[str]) -> None:
        self._type = processor_type
        self._output = output
        self._order = {port: index for index, port in enumerate(processor_type.inputs)}
        self._columns = columns
        """The input's column names: pyspark hands this operator a column whose name begins
        with '_' renamed by its position ('_in' as '_1'), in the input's order."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        _quiet_concat_warnings()
        self._processor = self._type()
        self._entries = handle.getMapState("entries", "key binary", "value binary")
        self._tentative = handle.getValueState("tentative", "tentative boolean")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: Any) -> Iterator[pd.DataFrame]:
        frame = _ordered((part.set_axis(self._columns, axis=1) for part in rows), self._order)
        marked = self._tentative.get()
        was_tentative = bool(marked[0]) if marked is not None else False
        tentative = was_tentative or bool((frame[TYPE] == TENTATIVE).any())
        state = KeyedState(EntryStore.of_map_state(self._entries))
        _, results = self._processor.process(state, frame)
        state.flush()
        if tentative and not was_tentative:
            self._tentative.update((True,))
        out = _results(self._type, self._output, results, tentative)
        if out is not None:
            yield out

    def close(self) -> None:
        pass
