"""The SUnion's rules as test vectors: every call made on ``medusa.sunion.buckets.Buckets``
and what it answered, for the Python SUnion and the JVM one to pass alike.

A vector is one ``Buckets`` from its construction on: each operation with its arguments,
the values it read from the two clocks (in the order it read them), its answer, and the
state it left (release points, epoch, failed partitions, held counts). A replay hands
the recorded clock values back in order, so an implementation that reads its clocks in
another order, or another number of times, fails as surely as one that answers wrongly.

The vectors come from two places: the SUnion's own unit tests (every ``Buckets`` they
build, recorded as they run) and seeded random walks over two inputs with boundaries,
late tuples, silent partitions, upstream tentative tuples and UNDOs, and restarts from
the positions. ``python -m tests.vectors.sunion_buckets`` writes them anew (after a
deliberate change of the rules); ``replay`` checks an implementation against them.
"""

from __future__ import annotations

import importlib
import inspect
import json
import random
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from medusa.sunion import buckets as spec
from medusa.sunion.buckets import Buckets, HeldTuple, Release, RestoredPartition

VECTORS = Path(__file__).with_name("sunion_buckets.json")
TEST_MODULES = ("tests.unit.test_sunion_buckets", "tests.unit.test_sunion_dpc")
RANDOM_WALKS = 32


def _release(release: Release | None) -> dict[str, Any] | None:
    if release is None:
        return None
    return {"through": release.through, "kind": release.kind.value, "epoch": release.epoch,
            "tuples": [_tuple(t) for t in release.tuples],
            "uncorrected": [_tuple(t) for t in release.uncorrected],
            "positions": release.positions, "waited_since": release.waited_since}


def _tuple(held: HeldTuple) -> list[Any]:
    return [held.stime, held.input, held.partition, held.offset, held.tentative]


def _state(buckets: Buckets) -> dict[str, Any]:
    return {"released_through": buckets.released_through,
            "stable_through": buckets.stable_through, "epoch": buckets.epoch,
            "failed": sorted([name, partition] for name, partition in buckets.failed),
            "held_tuples": buckets.held_tuples, "held_buckets": buckets.held_buckets}


class _Clock:
    """Wraps a clock and notes the values it gave since the last ``taken``."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.given: list[float] = []

    def __call__(self) -> float:
        value = self.clock()
        self.given.append(value)
        return value

    def taken(self) -> list[float]:
        given, self.given = self.given, []
        return given


class Recorder:
    """Collects the vectors of every ``Recording`` made while it is installed."""

    def __init__(self) -> None:
        self.vectors: list[dict[str, Any]] = []
        self.name = "vector"

    def buckets_class(self) -> type[Buckets]:
        recorder = self

        class Recording(Buckets):
            def __init__(self, bucket_ms: int, topics: Any, released_through: int | None = None,
                         max_delay_ms: int | None = None, tentative_through: int | None = None,
                         epoch: int = 0, clock: Callable[[], float] = spec.time.monotonic,
                         wall_clock: Callable[[], float] = spec.time.time) -> None:
                self._rec_clock = _Clock(clock)
                self._rec_wall = _Clock(wall_clock)
                self._rec_depth = 0
                super().__init__(bucket_ms, topics, released_through, max_delay_ms,
                                 tentative_through, epoch, self._rec_clock, self._rec_wall)
                self._rec_ops: list[dict[str, Any]] = []
                made = sum(v["name"].startswith(recorder.name + "#") for v in recorder.vectors)
                recorder.vectors.append({
                    "name": f"{recorder.name}#{made}",
                    "bucket_ms": bucket_ms, "topics": dict(topics),
                    "released_through": released_through, "max_delay_ms": max_delay_ms,
                    "tentative_through": tentative_through, "epoch": epoch,
                    "ops": self._rec_ops})

            @contextmanager
            def _op(self, op: dict[str, Any]) -> Iterator[dict[str, Any]]:
                outer = self._rec_depth == 0
                self._rec_depth += 1
                try:
                    yield op
                finally:
                    self._rec_depth -= 1
                if outer:
                    op["clock"] = self._rec_clock.taken()
                    op["wall"] = self._rec_wall.taken()
                    op["state"] = _state(self)
                    self._rec_ops.append(op)

            def add_partition(self, input_name: str, partition: int, start_offset: int,
                              restored: RestoredPartition | None = None) -> spec.PartitionState:
                with self._op({"op": "add_partition", "input": input_name,
                               "partition": partition, "start": start_offset,
                               "restored": None if restored is None else {
                                   "resume": restored.resume, "boundary": restored.boundary,
                                   "read": restored.read,
                                   "tentative_boundary": restored.tentative_boundary}}):
                    return super().add_partition(input_name, partition, start_offset, restored)

            def add_tuple(self, held: HeldTuple) -> spec.Outcome:
                with self._op({"op": "add_tuple", "tuple": _tuple(held)}) as op:
                    outcome = super().add_tuple(held)
                    op["expect"] = outcome.value
                    return outcome

            def add_boundary(self, input_name: str, partition: int, offset: int, stime: int,
                             tentative: bool = False) -> None:
                with self._op({"op": "add_boundary", "input": input_name,
                               "partition": partition, "offset": offset, "stime": stime,
                               "tentative": tentative}):
                    super().add_boundary(input_name, partition, offset, stime, tentative)

            def undo(self, input_name: str, partition: int, offset: int) -> int:
                with self._op({"op": "undo", "input": input_name, "partition": partition,
                               "offset": offset}) as op:
                    op["expect"] = super().undo(input_name, partition, offset)
                    return int(op["expect"])

            def pass_over(self, input_name: str, partition: int, offset: int) -> bool:
                with self._op({"op": "pass_over", "input": input_name,
                               "partition": partition, "offset": offset}) as op:
                    op["expect"] = super().pass_over(input_name, partition, offset)
                    return bool(op["expect"])

            def release(self) -> Release | None:
                with self._op({"op": "release"}) as op:
                    release = super().release()
                    op["expect"] = _release(release)
                    return release

            def reannouncement(self) -> Release | None:
                with self._op({"op": "reannouncement"}) as op:
                    release = super().reannouncement()
                    op["expect"] = _release(release)
                    return release

            def frontier(self) -> int | None:
                with self._op({"op": "frontier"}) as op:
                    op["expect"] = super().frontier()
                    return op["expect"]  # type: ignore[no-any-return]

            def resume_offset(self, input_name: str, partition: int) -> int:
                with self._op({"op": "resume_offset", "input": input_name,
                               "partition": partition}) as op:
                    op["expect"] = super().resume_offset(input_name, partition)
                    return int(op["expect"])

            def positions(self) -> dict[str, Any]:
                with self._op({"op": "positions"}) as op:
                    op["expect"] = super().positions()
                    return op["expect"]  # type: ignore[no-any-return]

            @property
            def dpc_state(self) -> spec.DpcState:
                with self._op({"op": "dpc_state"}) as op:
                    state = Buckets.dpc_state.fget(self)  # type: ignore[attr-defined]
                    op["expect"] = state.value
                    return state  # type: ignore[no-any-return]

        return Recording


def _from_unit_tests(recorder: Recorder) -> None:
    """Runs the SUnion's unit tests with every ``Buckets`` they make recorded."""
    recording = recorder.buckets_class()
    for module_name in TEST_MODULES:
        module = importlib.import_module(module_name)
        original = module.Buckets
        module.Buckets = recording
        try:
            for name, test in sorted(inspect.getmembers(module, inspect.isfunction)):
                if name.startswith("test_") and not inspect.signature(test).parameters:
                    recorder.name = f"{module_name.rsplit('.', 1)[1]}::{name}"
                    test()
        finally:
            module.Buckets = original


class _Walk:
    """A seeded random feed: two inputs (one of two partitions), producers whose
    boundaries move on, some late tuples, a partition that falls silent (D), an upstream
    in UP_FAILURE sending tentative tuples and boundaries then an UNDO, and restarts from
    a release's positions that re-read each partition from its resume offset."""

    def __init__(self, seed: int, recording: type[Buckets]) -> None:
        self.rng = random.Random(seed)
        self.recording = recording
        self.bucket_ms = self.rng.choice([100, 250, 1000])
        self.delay = self.rng.choice([None, 2 * self.bucket_ms, 5 * self.bucket_ms])
        self.now = 1000.0
        self.topics = {"left": "t.left", "right": "t.right"}
        self.partitions = [("left", 0), ("right", 0)] + \
            ([("right", 1)] if self.rng.random() < 0.5 else [])
        self.log: dict[tuple[str, int], list[tuple[str, int]]] = {p: [] for p in self.partitions}
        """What each partition holds, by offset: (kind, stime)."""
        self.read: dict[tuple[str, int], int] = {}
        self.stime: dict[tuple[str, int], int] = {p: 0 for p in self.partitions}
        self.silent: set[tuple[str, int]] = set()
        self.upstream_failed: set[tuple[str, int]] = set()
        self.buckets = self._new(None)

    def _clock(self) -> float:
        return self.now

    def _new(self, positions: dict[str, Any] | None) -> Buckets:
        kwargs: dict[str, Any] = {}
        if positions is not None:
            kwargs = {"released_through": positions["released_through"],
                      "tentative_through": positions.get("tentative_through"),
                      "epoch": positions.get("epoch", 0)}
        buckets = self.recording(self.bucket_ms, self.topics, max_delay_ms=self.delay,
                                 clock=self._clock, wall_clock=self._clock, **kwargs)
        for name, partition in self.partitions:
            restored = spec.restored_partitions(positions, name).get(partition)
            start = restored.resume if restored else 0
            buckets.add_partition(name, partition, start, restored)
            self.read[(name, partition)] = start
        return buckets

    def _append(self, key: tuple[str, int], kind: str, stime: int) -> None:
        self.log[key].append((kind, stime))

    def _produce(self) -> None:
        rng = self.rng
        for key in self.partitions:
            if key in self.silent:
                continue
            stime = self.stime[key]
            for _ in range(rng.randint(0, 2)):
                late = rng.random() < 0.03
                at = stime - rng.randint(1, self.bucket_ms) if late else \
                    stime + rng.randint(0, self.bucket_ms)
                self._append(key, "T" if key in self.upstream_failed else "t", max(0, at))
            if rng.random() < 0.7:
                stime += rng.randint(1, 2) * self.bucket_ms // rng.choice([1, 2])
                self.stime[key] = stime
                self._append(key, "B" if key in self.upstream_failed else "b", stime)

    def _consume(self) -> None:
        for key in self.partitions:
            records = self.log[key]
            upto = len(records) if self.rng.random() < 0.8 else \
                self.rng.randint(self.read[key], len(records))
            for offset in range(self.read[key], upto):
                kind, stime = records[offset]
                name, partition = key
                if kind in ("t", "T"):
                    held = HeldTuple(stime, name, partition, offset, None, b"\x00", [],
                                     f"{name}/{partition}/{offset}", kind == "T")
                    if self.buckets.add_tuple(held) is spec.Outcome.LATE:
                        self.buckets.pass_over(name, partition, offset)
                elif kind in ("b", "B"):
                    self.buckets.add_boundary(name, partition, offset, stime, kind == "B")
                elif kind == "U":
                    self.buckets.undo(name, partition, offset)
            self.read[key] = upto

    def run(self, steps: int) -> None:
        rng = self.rng
        last_positions = None
        for step in range(steps):
            roll = rng.random()
            if roll < 0.04 and not self.silent:
                self.silent.add(rng.choice(self.partitions))
            elif roll < 0.10 and self.silent:
                self.silent.clear()
            elif roll < 0.13 and not self.upstream_failed:
                self.upstream_failed.add(rng.choice(self.partitions))
            elif roll < 0.18 and self.upstream_failed:
                for key in self.upstream_failed:
                    self._append(key, "U", 0)
                self.upstream_failed.clear()
            self._produce()
            self._consume()
            self.now += rng.choice([0.05, 0.1, self.bucket_ms / 1000, 1.0])
            release = self.buckets.release()
            if release is not None:
                last_positions = release.positions
            elif rng.random() < 0.1:
                self.buckets.reannouncement()
            if rng.random() < 0.1:
                self.buckets.dpc_state  # noqa: B018 (recorded as an operation)
            if last_positions is not None and step > 10 and rng.random() < 0.03:
                self.buckets = self._new(json.loads(json.dumps(last_positions)))
        self.buckets.positions()


def generate() -> list[dict[str, Any]]:
    recorder = Recorder()
    _from_unit_tests(recorder)
    recording = recorder.buckets_class()
    for seed in range(RANDOM_WALKS):
        recorder.name = f"random_walk_{seed}"
        _Walk(seed, recording).run(60)
    return recorder.vectors


# -- replay --------------------------------------------------------------------------


class ReplayError(AssertionError):
    pass


class _Replayed:
    """Hands out the recorded values of one clock, operation by operation."""

    def __init__(self, vector: str) -> None:
        self.vector = vector
        self.values: list[float] = []

    def load(self, values: list[float]) -> None:
        self.values = list(values)

    def __call__(self) -> float:
        if not self.values:
            raise ReplayError(f"{self.vector}: read a clock more often than recorded")
        return self.values.pop(0)


def replay(vector: dict[str, Any]) -> None:
    """Replays one vector on ``buckets.py``; raises ReplayError at the first difference."""
    name = vector["name"]
    clock, wall = _Replayed(name), _Replayed(name)
    buckets = Buckets(vector["bucket_ms"], vector["topics"], vector["released_through"],
                      vector["max_delay_ms"], vector["tentative_through"], vector["epoch"],
                      clock, wall)
    for index, op in enumerate(vector["ops"]):
        clock.load(op["clock"])
        wall.load(op["wall"])
        got = _apply(buckets, op)
        where = f"{name} op {index} ({op['op']})"
        if "expect" in op and got != op["expect"]:
            raise ReplayError(f"{where}: expected {op['expect']!r}, got {got!r}")
        if clock.values or wall.values:
            raise ReplayError(f"{where}: read a clock less often than recorded")
        if _state(buckets) != op["state"]:
            raise ReplayError(f"{where}: state {_state(buckets)!r}, expected {op['state']!r}")


def _apply(buckets: Buckets, op: dict[str, Any]) -> Any:
    kind = op["op"]
    if kind == "add_partition":
        restored = op["restored"]
        buckets.add_partition(op["input"], op["partition"], op["start"],
                              None if restored is None else RestoredPartition(**restored))
        return None
    if kind == "add_tuple":
        stime, name, partition, offset, tentative = op["tuple"]
        return buckets.add_tuple(HeldTuple(stime, name, partition, offset, None, b"", [],
                                           "", tentative)).value
    if kind == "add_boundary":
        buckets.add_boundary(op["input"], op["partition"], op["offset"], op["stime"],
                             op["tentative"])
        return None
    if kind in ("undo", "pass_over"):
        return getattr(buckets, kind)(op["input"], op["partition"], op["offset"])
    if kind == "release":
        return json.loads(json.dumps(_release(buckets.release())))
    if kind == "reannouncement":
        return json.loads(json.dumps(_release(buckets.reannouncement())))
    if kind == "frontier":
        return buckets.frontier()
    if kind == "resume_offset":
        return buckets.resume_offset(op["input"], op["partition"])
    if kind == "positions":
        return json.loads(json.dumps(buckets.positions()))
    if kind == "dpc_state":
        return buckets.dpc_state.value
    raise ReplayError(f"unknown operation {kind!r}")


def load() -> list[dict[str, Any]]:
    return json.loads(VECTORS.read_text())["vectors"]  # type: ignore[no-any-return]


def main() -> None:
    vectors = json.loads(json.dumps(generate()))  # as a reader of the file sees them
    for vector in vectors:
        replay(vector)
    VECTORS.write_text(json.dumps({
        "about": "The SUnion's bucket rules (services/medusa/sunion/buckets.py) as recorded "
                 "calls; written by `python -m tests.vectors.sunion_buckets`.",
        "vectors": vectors}, separators=(",", ":")) + "\n")
    ops = sum(len(v["ops"]) for v in vectors)
    print(f"{len(vectors)} vectors, {ops} operations -> {VECTORS}", file=sys.stderr)


if __name__ == "__main__":
    main()
