"""The SUnion's rules have one specification: the recorded vectors of buckets.py
(``tests/vectors/sunion_buckets.json``). The Python SUnion replays them here; the JVM one
(``medusa.spark.sunion.Buckets``) in ``tests/integration/test_jvm_sunion_vectors.py``."""

from __future__ import annotations

import json

import pytest

from tests.vectors import sunion_buckets

pytestmark = pytest.mark.unit


def test_the_vectors_cover_every_release_kind_and_outcome() -> None:
    seen = set()
    for vector in sunion_buckets.load():
        for op in vector["ops"]:
            if op["op"] == "release" and op["expect"] is not None:
                seen.add(op["expect"]["kind"])
            elif op["op"] in ("add_tuple", "dpc_state"):
                seen.add(op["expect"])
    assert seen >= {"stable", "tentative", "redo", "held", "late", "already released",
                    "STABLE", "UP_FAILURE", "STABILIZATION"}


def test_buckets_py_replays_every_vector() -> None:
    for vector in sunion_buckets.load():
        sunion_buckets.replay(vector)


def test_the_recorded_vectors_are_those_buckets_py_records_now() -> None:
    """The file is written from the unit tests and seeded walks: a change of the rules (or
    of those tests) shows here, and ``python -m tests.vectors.sunion_buckets`` writes it
    anew, for the JVM SUnion to follow."""
    recorded = sunion_buckets.load()
    fresh = json.loads(json.dumps(sunion_buckets.generate()))
    assert [v["name"] for v in fresh] == [v["name"] for v in recorded]
    for new, old in zip(fresh, recorded, strict=True):
        assert _without_clocks(new) == _without_clocks(old), \
            f"{old['name']} records differently now"


def _without_clocks(vector: dict) -> dict:
    """Some unit tests leave the real clocks in (their rules do not depend on them): the
    readings differ from run to run, what the rules answered does not."""
    return {**vector, "ops": [{**op, "clock": len(op["clock"]), "wall": len(op["wall"])}
                              for op in vector["ops"]]}
