"""Linear Road's processors: the benchmark's rules (services/medusa/linear_road/SEMANTICS.md)
computed as the records come, for the ``process`` boxes of networks/linear_road.yaml and
networks/linear_road_partitioned.yaml.

``Road`` takes position reports and gives toll notifications, accident alerts and the
charges of rule 10 (a car's toll, when it leaves the segment it was notified for). It
runs two ways:

- as one group (no key, ``linear_road.yaml``): every expressway's reports and the account
  balance queries (which name only the car) in one state, the balances kept beside the
  cars and answered at once;
- keyed by (xway, dir) (``linear_road_partitioned.yaml``), as SEEP and the Storm
  implementations partition it: one direction of one expressway per group, with the cars
  on it, its segments' statistics and its accidents; its charges go on to ``Accounts``,
  keyed by vid, which answers the balance queries.

``Expenditures`` answers the daily expenditure queries from the cars' historical tolls, in
both networks.

Rows come in stime order, and within one second in the order of the inputs (reports
before queries, charges before queries), so when the first report of minute m on a
road arrives the statistics of minute m-1 there are complete, and the accidents active
in minute m are known (one detected in m acts from m+1; one cleared in m still acts in
m). Partitioned, a car changes expressway or direction only by a new trip, after a
report on the exit lane (the benchmark's traffic): a car that reappeared on another road
without one would stay stopped on the first.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, ClassVar, NamedTuple

import pandas as pd
from pyspark.sql.types import IntegerType, StructField, StructType

from medusa_spark.boxes.process import Processor
from medusa_spark.streams import ID, STIME

EXIT_LANE = 4
FEET_PER_SEGMENT = 5280
SEGMENTS = 100
ZONE = 4
LAV_MINUTES = 5
TOLL_MAX_LAV = 40
TOLL_MIN_CARS = 50
ANSWER_WINDOW_S = 60


def _ints(*names: str) -> StructType:
    return StructType([StructField(name, IntegerType(), False) for name in names])


def _frames(outputs: dict[str, StructType], rows: dict[str, list[tuple[Any, ...]]]
            ) -> dict[str, pd.DataFrame]:
    """Each port's rows (``_id``, ``_stime``, then its fields) as the frame it returns."""
    return {port: pd.DataFrame(found, columns=[ID, STIME, *(f.name for f in
                                                           outputs[port].fields)])
            for port, found in rows.items()}


def _column(rows: pd.DataFrame, name: str) -> Any:
    """A field's values, or None for each row when no input of the batch has the field."""
    return rows[name].to_numpy() if name in rows.columns else [None] * len(rows)


def minute(time: int) -> int:
    return time // 60 + 1


Segment = tuple[int, int, int]  # (xway, dir, seg)
Place = tuple[int, int, int]  # (xway, dir, pos): where an accident is


class Car(NamedTuple):
    """A car's latest report and what follows from it. Kept in the state as a plain tuple:
    the state is pickled every batch, and 50,000 cars an expressway make objects costly."""

    xway: int
    dir: int
    lane: int
    pos: int
    seg: int
    same: int
    """Consecutive reports at this (xway, dir, lane, pos), counted up to 4."""
    stopped: bool
    """Stopped here (at its xway, dir and pos)."""
    pending_toll: int
    """The toll of its last notification, charged when it leaves that segment; -1: none."""


NO_TOLL = -1


@dataclass
class Accident:
    detected: int
    """Minute of detection: it acts from the next one."""
    cleared: int | None = None
    """Minute of clearing: it acts through it."""

    def active(self, m: int) -> bool:
        return self.detected < m and (self.cleared is None or m <= self.cleared)


@dataclass
class RoadState:
    cars: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """vid -> its ``Car`` as a plain tuple."""
    balances: dict[int, int] = field(default_factory=dict)
    """vid -> the tolls charged to it here (its balance, when the road is one group)."""
    speeds: dict[tuple[int, int, int, int], dict[int, tuple[int, int]]] = field(
        default_factory=dict)
    """(xway, dir, seg, minute) -> vid -> (sum of speeds, reports): the open minutes."""
    statistics: dict[Segment, dict[int, tuple[int, Fraction]]] = field(default_factory=dict)
    """Segment -> minute -> (cars, mean of the cars' mean speeds), for closed minutes."""
    stopped: dict[Place, set[int]] = field(default_factory=dict)
    accidents: dict[Place, list[Accident]] = field(default_factory=dict)
    minute: int = 0
    """The minute of the latest record."""
    lavs: dict[tuple[Segment, int], int | None] = field(default_factory=dict)
    """(segment, minute) -> its LAV: it reads closed minutes alone, so it holds for the
    whole minute (computed once, not per report: exact arithmetic costs)."""

    def __setstate__(self, saved: dict[str, Any]) -> None:
        # State pickled before a field was added resumes with that field empty.
        self.__dict__.update(RoadState().__dict__ | saved)


class Road(Processor):
    """The road: all of it as one group, or one direction of one expressway a group (the
    box's key ``[xway, dir]``, no balance queries wired)."""

    inputs: ClassVar[tuple[str, ...]] = ("reports", "balance_queries")
    outputs: ClassVar[dict[str, StructType]] = {
        "toll_notifications": _ints("vid", "time", "xway", "dir", "seg", "lav", "toll"),
        "accident_alerts": _ints("vid", "time", "xway", "dir", "seg"),
        "account_balances": _ints("qid", "vid", "time", "result_time", "balance"),
        "charges": _ints("vid", "time", "toll"),
    }

    def process(self, state: Any | None, rows: pd.DataFrame
                ) -> tuple[Any, dict[str, pd.DataFrame]]:
        road: RoadState = state if state is not None else RoadState()
        out: dict[str, list[tuple[Any, ...]]] = {port: [] for port in self.outputs}
        columns = [_column(rows, c) for c in
                   ("_in", STIME, "time", "vid", "speed", "xway", "lane", "dir", "seg",
                    "pos", "qid")]  # no qid column when no balance queries are wired
        for port, stime, *values in zip(*columns, strict=True):
            time, vid = int(values[0]), int(values[1])
            self._advance(road, minute(time))
            if port == "reports":
                speed, xway, lane, direction, seg, pos = (int(v) for v in values[2:8])
                self._report(road, out, stime, time, vid, speed, xway, lane, direction, seg,
                             pos)
            else:
                qid = int(values[8])
                out["account_balances"].append(
                    (f"lr/balance/{qid}", stime, qid, vid, time, time,
                     road.balances.get(vid, 0)))
        return road, _frames(self.outputs, out)

    # Minutes ---------------------------------------------------------------------------

    def _advance(self, road: RoadState, m: int) -> None:
        """Closes the statistics of the minutes before ``m``; forgets what no rule needs."""
        if m <= road.minute:
            return
        road.minute = m
        for key in [k for k in road.speeds if k[3] < m]:
            per_car = road.speeds.pop(key)
            # The mean of the cars' mean speeds, exact: over the counts' common multiple
            # (a car reports once or twice a minute), one Fraction, not one per car.
            common = math.lcm(*(count for _, count in per_car.values()))
            total = sum(speed * (common // count) for speed, count in per_car.values())
            road.statistics.setdefault(key[:3], {})[key[3]] = (
                len(per_car), Fraction(total, common * len(per_car)))
        for segment, minutes in list(road.statistics.items()):
            for old in [k for k in minutes if k < m - LAV_MINUTES]:
                del minutes[old]
            if not minutes:
                del road.statistics[segment]
        for place, found in list(road.accidents.items()):
            found[:] = [a for a in found if a.cleared is None or a.cleared >= m - 1]
            if not found:
                del road.accidents[place]
        road.lavs.clear()

    def _lav(self, road: RoadState, segment: Segment, m: int) -> int | None:
        if (segment, m) in road.lavs:
            return road.lavs[segment, m]
        minutes = road.statistics.get(segment, {})
        speeds = [minutes[k][1] for k in range(m - LAV_MINUTES, m) if k in minutes]
        lav = None
        if speeds:
            mean = sum(speeds, Fraction(0)) / len(speeds)
            lav = int(mean + Fraction(1, 2))  # rounded, halves up (speeds are not negative)
        road.lavs[segment, m] = lav
        return lav

    def _accident_ahead(self, road: RoadState, xway: int, direction: int, seg: int,
                        m: int) -> int | None:
        """The segment of the nearest accident active in minute m within four segments
        downstream (in the direction of travel), or None."""
        nearest: int | None = None
        for (a_xway, a_dir, pos), found in road.accidents.items():
            if a_xway != xway or a_dir != direction or not any(a.active(m) for a in found):
                continue
            a_seg = pos // FEET_PER_SEGMENT
            distance = a_seg - seg if direction == 0 else seg - a_seg
            if 0 <= distance <= ZONE and (nearest is None or distance < abs(nearest - seg)):
                nearest = a_seg
        return nearest

    def _toll(self, road: RoadState, segment: Segment, m: int, lav: int | None) -> int:
        cars = road.statistics.get(segment, {}).get(m - 1, (0, Fraction(0)))[0]
        if lav is None or lav >= TOLL_MAX_LAV or cars <= TOLL_MIN_CARS:
            return 0
        if self._accident_ahead(road, *segment, m) is not None:
            return 0
        return 2 * (cars - TOLL_MIN_CARS) ** 2

    # Reports ---------------------------------------------------------------------------

    def _report(self, road: RoadState, out: dict[str, list[tuple[Any, ...]]], stime: Any,
                time: int, vid: int, speed: int, xway: int, lane: int, direction: int,
                seg: int, pos: int) -> None:
        m = minute(time)
        speeds = road.speeds.setdefault((xway, direction, seg, m), {})
        total, count = speeds.get(vid, (0, 0))
        speeds[vid] = (total + speed, count + 1)

        saved = road.cars.get(vid)
        last = Car._make(saved) if saved is not None else None
        new_trip = last is None or last.lane == EXIT_LANE or last.xway != xway
        same_place = (last is not None and not new_trip and
                      (last.dir, last.lane, last.pos) == (direction, lane, pos))
        triggers = lane != EXIT_LANE and (new_trip or last is None or last.seg != seg)
        if last is not None and last.stopped and not same_place:
            self._leave(road, (last.xway, last.dir, last.pos), vid, m)
        same = min(last.same + 1, 4) if last is not None and same_place else 1
        stopped = same_place and last is not None and last.stopped
        if same >= 4 and not stopped:
            stopped = True
            self._stop(road, (xway, direction, pos), vid, m)
        # Left by the exit, a car's last segment is not charged.
        pending = NO_TOLL if new_trip or last is None else last.pending_toll
        if triggers:
            segment = (xway, direction, seg)
            lav = self._lav(road, segment, m)
            toll = self._toll(road, segment, m, lav)
            out["toll_notifications"].append(
                (f"lr/toll/{vid}/{time}", stime, vid, time, xway, direction, seg, lav or 0,
                 toll))
            ahead = self._accident_ahead(road, xway, direction, seg, m)
            if ahead is not None:
                out["accident_alerts"].append(
                    (f"lr/alert/{vid}/{time}", stime, vid, time, xway, direction, ahead))
            if pending > 0:  # rule 10: charged on leaving the segment (a 0 changes nothing)
                road.balances[vid] = road.balances.get(vid, 0) + pending
                out["charges"].append((f"lr/charge/{vid}/{time}", stime, vid, time, pending))
            pending = toll
        if lane == EXIT_LANE and not stopped:
            road.cars.pop(vid, None)  # its next report starts a trip, whatever it kept
        else:
            road.cars[vid] = (xway, direction, lane, pos, seg, same, stopped, pending)

    def _stop(self, road: RoadState, place: Place, vid: int, m: int) -> None:
        cars = road.stopped.setdefault(place, set())
        cars.add(vid)
        found = road.accidents.setdefault(place, [])
        if len(cars) >= 2 and not any(a.cleared is None for a in found):
            found.append(Accident(detected=m))

    def _leave(self, road: RoadState, place: Place, vid: int, m: int) -> None:
        cars = road.stopped.get(place, set())
        cars.discard(vid)
        if len(cars) < 2:
            for accident in road.accidents.get(place, []):
                if accident.cleared is None:
                    accident.cleared = m
        if not cars:
            road.stopped.pop(place, None)


class Accounts(Processor):
    """Cars' accounts (the box's key is ``[vid]``, hashed into ``key_buckets``): the sum of
    each car's charges, and the answer to each of its balance queries (rule 11, as of the
    query's own second). The state is the bucket's balances, vid -> tolls charged, an entry
    per car (``keyed_state``): a batch's checkpoint writes the balances it changed."""

    inputs: ClassVar[tuple[str, ...]] = ("charges", "balance_queries")
    outputs: ClassVar[dict[str, StructType]] = {
        "account_balances": _ints("qid", "vid", "time", "result_time", "balance"),
    }
    keyed_state: ClassVar[bool] = True

    def process(self, state: Any | None, rows: pd.DataFrame
                ) -> tuple[Any, dict[str, pd.DataFrame]]:
        balances: MutableMapping[int, int] = state if state is not None else {}
        answers: list[tuple[Any, ...]] = []
        for port, stime, time, vid, toll, qid in zip(
                rows["_in"].to_numpy(), rows[STIME].to_numpy(), rows["time"].to_numpy(),
                rows["vid"].to_numpy(), _column(rows, "toll"), _column(rows, "qid"),
                strict=True):
            car = int(vid)
            if port == "charges":
                balances[car] = balances.get(car, 0) + int(toll)
            else:
                answers.append((f"lr/balance/{int(qid)}", stime, int(qid), car, int(time),
                                int(time), balances.get(car, 0)))
        return balances, _frames(self.outputs, {"account_balances": answers})


HISTORY_BLOCK = 64
"""Cars whose histories share a state entry (``vid // HISTORY_BLOCK``): new cars come with
consecutive ids, so a batch's histories change a few entries, not one each."""


class Expenditures(Processor):
    """Daily expenditures (rule 12): each car's historical tolls, kept as they come, and the
    answer to each of its daily expenditure queries, ``tolls[day - 1]`` of its history on
    that expressway (0 without one), at once.

    The histories are ``keyed_state`` entries of ``HISTORY_BLOCK`` cars each, (vid, xway) ->
    the tolls as int32 bytes, so a batch's checkpoint writes the entries it changed and a
    batch goes through none of the rest (a windowed join goes through all it holds to
    evict, every batch). Kept for the whole run, as the reference keeps them."""

    inputs: ClassVar[tuple[str, ...]] = ("history", "queries")
    outputs: ClassVar[dict[str, StructType]] = {
        "daily_expenditures": _ints("qid", "vid", "time", "xway", "day", "expenditure"),
    }
    keyed_state: ClassVar[bool] = True

    def process(self, state: Any | None, rows: pd.DataFrame
                ) -> tuple[Any, dict[str, pd.DataFrame]]:
        blocks: MutableMapping[int, dict[tuple[int, int], bytes]] = \
            state if state is not None else {}
        answers: list[tuple[Any, ...]] = []
        for port, stime, time, vid, xway, tolls, qid, day in zip(
                rows["_in"].to_numpy(), rows[STIME].to_numpy(), rows["time"].to_numpy(),
                rows["vid"].to_numpy(), rows["xway"].to_numpy(), _column(rows, "tolls"),
                _column(rows, "qid"), _column(rows, "day"), strict=True):
            car, road = int(vid), int(xway)
            block = car // HISTORY_BLOCK
            if port == "history":
                held = blocks.get(block, {})
                held[(car, road)] = array("i", (int(toll) for toll in tolls)).tobytes()
                blocks[block] = held  # set again: a changed entry is written back
                continue
            history = blocks.get(block, {}).get((car, road))
            spent = _day_toll(history, int(day)) if history is not None else 0
            answers.append((f"lr/expenditure/{int(qid)}", stime, int(qid), car, int(time),
                            road, int(day), spent))
        return blocks, _frames(self.outputs, {"daily_expenditures": answers})


def _day_toll(history: bytes, day: int) -> int:
    tolls = array("i")
    tolls.frombytes(history)
    return tolls[day - 1] if 1 <= day <= len(tolls) else 0
