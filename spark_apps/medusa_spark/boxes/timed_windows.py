"""An aggregate's windows kept by Spark's ``transformWithStateInPandas``, closed by timers.

Spark's own streaming aggregation finds the windows a watermark closes by going through
every window it holds, each batch the watermark moves: a batch costs in proportion to
the whole state (a second and more at 1.8 GB on this machine, see docs/benchmarks.md),
on the running fragment and again on a replica that takes it over. Here a window's end
is an event-time timer, which Spark keeps in an index ordered by time: a batch pays for
the rows it brings and the windows that close, whatever the state holds. The price is a
Python call per group with rows or closing windows in a batch (about a millisecond), so
Spark's own stays the default (``expiry: scan``) and this one is asked for
(``expiry: timers``).

The results are Spark's own in append mode: a row goes into every window (tumbling or
sliding) that holds its stime; a window is emitted once, in the batch whose watermark
reaches its end, and then forgotten. A row for a window that this batch's watermark has
reached is late and left out, where Spark's own lets it into a window the batch before's
watermark had not reached: a fragment's SUnion delivers its buckets in stime order, each
batch's rows at or after the watermark, so neither sees such a row there. The state per
group is a map from window start to the window's accumulators.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

STIME_US = "_stime_us"
"""The input's stime in microseconds since the epoch."""
TENTATIVE_FLAG = "_tentative"
"""1 for a TENTATIVE input row (and, in a result, for a window that held one), else 0."""
WINDOW_START, WINDOW_END = "window_start", "window_end"


@dataclass(frozen=True)
class Windows:
    """Tumbling (``slide == size``) or sliding windows, in microseconds, as Spark's
    ``window()`` lays them out."""

    size_us: int
    slide_us: int
    offset_us: int = 0

    def starts(self, stime_us: int) -> list[int]:
        """The starts of the windows that hold ``stime_us``."""
        last = stime_us - (stime_us - self.offset_us) % self.slide_us
        found = []
        for index in range(math.ceil(self.size_us / self.slide_us)):
            start = last - index * self.slide_us
            if start <= stime_us < start + self.size_us:
                found.append(start)
        return found


@dataclass(frozen=True)
class Aggregate:
    """One output field: ``function`` over input ``field`` ('*' counts rows)."""

    name: str
    function: str
    field: str


def _empty(function: str) -> Any:
    return {"count": 0, "count_distinct": set(), "avg": (0, 0)}.get(function)


def _add(function: str, held: Any, value: Any, stime_us: int) -> Any:
    """The accumulator ``held`` with ``value`` (at ``stime_us``) added."""
    if function == "count":
        return held + (value is not None)
    if value is None:
        return held
    if function == "count_distinct":
        held.add(value)
        return held
    if function == "sum":
        return value if held is None else held + value
    if function == "avg":
        return held[0] + value, held[1] + 1
    if function == "min":
        return value if held is None or value < held else held
    if function == "max":
        return value if held is None or value > held else held
    if function == "first":  # the value at the smallest stime (the first one there)
        return (stime_us, value) if held is None or stime_us < held[0] else held
    if function == "last":  # the value at the largest stime (the first one there)
        return (stime_us, value) if held is None or stime_us > held[0] else held
    raise ValueError(f"unknown aggregate function {function!r}")


def _result(function: str, held: Any) -> Any:
    if function == "count_distinct":
        return len(held)
    if function == "avg":
        return held[0] / held[1] if held[1] else None
    if function in ("first", "last"):
        return None if held is None else held[1]
    return held


class TimedWindows(StatefulProcessor):
    """The stateful processor of an aggregate box with ``expiry: timers``.

    Its input: the group fields, ``STIME_US``, ``TENTATIVE_FLAG`` and the aggregated
    fields, named by ``columns`` (pyspark hands a column whose name begins with '_' to
    this operator renamed by its position). Its output: the group fields, the aggregates,
    ``TENTATIVE_FLAG``, ``WINDOW_START`` and ``WINDOW_END`` (``output_columns``)."""

    def __init__(self, windows: Windows, group_by: list[str], aggregates: list[Aggregate],
                 columns: list[str], integral: set[str]) -> None:
        self._windows = windows
        self._group_by = group_by
        self._aggregates = aggregates
        self._columns = columns
        self._integral = integral
        """Aggregates whose results are integers (pandas hands integers with nulls over as
        floats)."""

    @property
    def output_columns(self) -> list[str]:
        return [*self._group_by, *(a.name for a in self._aggregates), TENTATIVE_FLAG,
                WINDOW_START, WINDOW_END]

    def init(self, handle: StatefulProcessorHandle) -> None:
        self._handle = handle
        self._open = handle.getMapState("windows", "start long", "held binary")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        closed_up_to_ms = timerValues.getCurrentWatermarkInMs()
        frame = pd.concat([part.set_axis(self._columns, axis=1) for part in rows],
                          ignore_index=True)
        fields = {a.field for a in self._aggregates if a.field != "*"}
        values = {f: frame[f].tolist() for f in fields}
        changed: dict[int, dict[str, Any]] = {}
        for index, (stime_us, tentative) in enumerate(zip(
                frame[STIME_US].tolist(), frame[TENTATIVE_FLAG].tolist(), strict=True)):
            for start in self._windows.starts(int(stime_us)):
                end_ms = (start + self._windows.size_us) // 1000
                if end_ms <= closed_up_to_ms:
                    continue  # late: its window closes by this batch's watermark
                held = changed.get(start)
                if held is None:
                    held = self._held(start, end_ms)
                    changed[start] = held
                for aggregate in self._aggregates:
                    value = 1 if aggregate.field == "*" else values[aggregate.field][index]
                    held[aggregate.name] = _add(aggregate.function, held[aggregate.name],
                                                _plain(value), int(stime_us))
                held[TENTATIVE_FLAG] = max(held[TENTATIVE_FLAG], int(tentative))
        for start, held in changed.items():
            self._open.updateValue((start,), (pickle.dumps(held, protocol=5),))
        return iter([])

    def _held(self, start: int, end_ms: int) -> dict[str, Any]:
        """The window's accumulators: as held, or new (and its end a timer)."""
        found = self._open.getValue((start,))
        if found is not None:
            return pickle.loads(found[0])
        self._handle.registerTimer(end_ms)
        held: dict[str, Any] = {a.name: _empty(a.function) for a in self._aggregates}
        held[TENTATIVE_FLAG] = 0
        return held

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        end_us = expiredTimerInfo.getExpiryTimeInMs() * 1000
        start = end_us - self._windows.size_us
        found = self._open.getValue((start,))
        if found is None:
            return
        self._open.removeKey((start,))
        held = pickle.loads(found[0])
        row = [*key, *(self._typed(a.name, _result(a.function, held[a.name]))
                       for a in self._aggregates),
               held[TENTATIVE_FLAG], _timestamp(start), _timestamp(end_us)]
        yield pd.DataFrame([row], columns=self.output_columns)

    def _typed(self, name: str, value: Any) -> Any:
        return int(value) if value is not None and name in self._integral else value

    def close(self) -> None:
        pass


def _plain(value: Any) -> Any:
    """A pandas cell as a plain value (NaN and NaT as None)."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NaT:
        return None
    return value.item() if hasattr(value, "item") else value


def _timestamp(micros: int) -> pd.Timestamp:
    return pd.Timestamp(micros, unit="us", tz="UTC")
