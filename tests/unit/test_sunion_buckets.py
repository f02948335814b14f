"""The SUnion's bucket logic, in memory: release order, waiting for every partition,
boundaries without tuples, resume positions, late tuples, a deterministic order."""

from __future__ import annotations

import random

import pytest

from medusa.sunion.buckets import Buckets, HeldTuple, Outcome, restored_partitions
from medusa.sunion.config import SUnionConfig

pytestmark = pytest.mark.unit

TOPICS = {"a": "topic.a", "b": "topic.b"}


class Feed:
    """Numbers each input partition's records like Kafka offsets."""

    def __init__(self, buckets: Buckets) -> None:
        self.buckets = buckets
        self.next_offset: dict[tuple[str, int], int] = {}

    def _offset(self, input_name: str, partition: int) -> int:
        key = (input_name, partition)
        offset = self.next_offset.get(key, 0)
        self.next_offset[key] = offset + 1
        return offset

    def tuple(self, input_name: str, partition: int, stime: int) -> Outcome:
        offset = self._offset(input_name, partition)
        return self.buckets.add_tuple(_held(input_name, partition, offset, stime))

    def boundary(self, input_name: str, partition: int, stime: int) -> None:
        self.buckets.add_boundary(input_name, partition, self._offset(input_name, partition),
                                  stime)


def _held(input_name: str, partition: int, offset: int, stime: int) -> HeldTuple:
    return HeldTuple(stime, input_name, partition, offset, None, b"\x00v", [],
                     f"{input_name}/{partition}/{offset}")


def _buckets(partitions: dict[str, int] | None = None, bucket_ms: int = 1000) -> Buckets:
    buckets = Buckets(bucket_ms, TOPICS)
    for name, count in (partitions or {"a": 1, "b": 1}).items():
        for partition in range(count):
            buckets.add_partition(name, partition, 0)
    return buckets


def _ids(tuples: list[HeldTuple]) -> list[tuple[str, int, int]]:
    return [(t.input, t.partition, t.offset) for t in tuples]


def test_a_bucket_waits_for_the_boundary_of_every_input_partition() -> None:
    buckets = _buckets({"a": 2, "b": 1})
    feed = Feed(buckets)
    feed.tuple("a", 0, 100)
    feed.tuple("b", 0, 200)
    feed.boundary("a", 0, 1000)
    feed.boundary("b", 0, 1000)
    assert buckets.release() is None, "partition a/1 never showed a boundary"
    feed.boundary("a", 1, 999)
    assert buckets.release() is None, "a/1's boundary has not passed the bucket's end"
    feed.boundary("a", 1, 1000)
    release = buckets.release()
    assert release is not None and release.through == 1000
    assert [t.stime for t in release.tuples] == [100, 200]
    assert buckets.held_tuples == 0 and buckets.released_through == 1000


def test_buckets_go_out_in_order_and_a_run_of_them_as_one_release() -> None:
    buckets = _buckets()
    feed = Feed(buckets)
    for stime in (2500, 300, 1700, 2100, 900):
        feed.tuple("a", 0, stime)
    feed.tuple("b", 0, 1200)
    feed.boundary("a", 0, 2600)
    feed.boundary("b", 0, 1500)
    first = buckets.release()
    assert first is not None and first.through == 1000
    assert [t.stime for t in first.tuples] == [300, 900]
    feed.boundary("b", 0, 3000)
    second = buckets.release()
    assert second is not None and second.through == 2000
    assert [t.stime for t in second.tuples] == [1200, 1700]
    assert buckets.held_buckets == 1 and buckets.held_tuples == 2
    assert buckets.release() is None


def test_boundaries_without_tuples_make_one_empty_release_for_the_whole_run() -> None:
    buckets = _buckets()
    feed = Feed(buckets)
    feed.boundary("a", 0, 5400)
    feed.boundary("b", 0, 7000)
    release = buckets.release()
    assert release is not None and release.through == 5000 and release.tuples == []
    assert buckets.release() is None
    feed.boundary("a", 0, 5999)
    assert buckets.release() is None, "no new bucket is complete"


def test_boundaries_never_go_back() -> None:
    buckets = _buckets()
    feed = Feed(buckets)
    feed.boundary("a", 0, 3000)
    feed.boundary("a", 0, 1000)  # a stale one, e.g. re-read after a restart
    feed.boundary("b", 0, 3000)
    release = buckets.release()
    assert release is not None and release.through == 3000


def test_the_order_does_not_depend_on_the_arrival_order() -> None:
    records = [(name, partition, offset, stime)
               for name, partition in (("a", 0), ("a", 1), ("b", 0))
               for offset, stime in enumerate(sorted(random.Random(partition).choices(
                   range(0, 3000, 7), k=40)))]
    records += [("b", 1, 0, 1400), ("b", 1, 1, 1400), ("b", 1, 2, 1400)]  # same stime
    outputs = []
    for seed in range(5):
        shuffled = list(records)
        random.Random(seed).shuffle(shuffled)
        buckets = _buckets({"a": 2, "b": 2})
        for name, partition, offset, stime in shuffled:
            assert buckets.add_tuple(_held(name, partition, offset, stime)) is Outcome.HELD
        for name, partition in buckets.partitions:
            buckets.add_boundary(name, partition, 10_000, 3000)
        release = buckets.release()
        assert release is not None
        outputs.append(_ids(release.tuples))
    assert all(output == outputs[0] for output in outputs)
    expected = sorted(records, key=lambda r: (r[3], r[0], r[1], r[2]))
    assert outputs[0] == [(n, p, o) for n, p, o, _ in expected]


def test_the_resume_offset_is_the_smallest_held_offset_else_the_next_to_read() -> None:
    buckets = _buckets()
    feed = Feed(buckets)
    feed.tuple("a", 0, 500)     # offset 0, bucket 0
    feed.tuple("a", 0, 1500)    # offset 1, bucket 1
    feed.tuple("a", 0, 800)     # offset 2, bucket 0 (later offset, older bucket)
    feed.boundary("a", 0, 1600)  # offset 3
    feed.tuple("b", 0, 900)     # offset 0
    feed.boundary("b", 0, 1000)  # offset 1
    assert buckets.resume_offset("a", 0) == 0 and buckets.resume_offset("b", 0) == 0
    release = buckets.release()
    assert release is not None and release.through == 1000
    partitions_a = release.positions["inputs"]["a"]["partitions"]
    partitions_b = release.positions["inputs"]["b"]["partitions"]
    assert partitions_a == {"0": {"resume": 1, "boundary": 1600, "read": 4}}
    assert partitions_b == {"0": {"resume": 2, "boundary": 1000, "read": 2}}
    assert release.positions["released_through"] == 1000
    assert release.positions["inputs"]["a"]["topic"] == "topic.a"


def test_a_restart_from_the_positions_rebuilds_the_held_buckets_and_skips_the_released() -> None:
    log: dict[tuple[str, int], list[tuple[str, int]]] = {("a", 0): [], ("b", 0): []}
    # ^ what each partition holds, like a Kafka log: (kind, stime) by offset

    def append(name: str, kind: str, stime: int) -> None:
        log[(name, 0)].append((kind, stime))

    for kind, stime in (("t", 100), ("t", 1200), ("t", 700), ("B", 1300), ("t", 1400)):
        append("a", kind, stime)
    for kind, stime in (("t", 300), ("B", 1000), ("t", 1100)):
        append("b", kind, stime)

    def feed(buckets: Buckets, starts: dict[str, int]) -> list[HeldTuple]:
        late = []
        for (name, partition), records in log.items():
            for offset in range(starts[name], len(records)):
                kind, stime = records[offset]
                if kind == "B":
                    buckets.add_boundary(name, partition, offset, stime)
                elif buckets.add_tuple(_held(name, partition, offset, stime)) is Outcome.LATE:
                    late.append(_held(name, partition, offset, stime))
        return late

    first = _buckets()
    feed(first, {"a": 0, "b": 0})
    release = first.release()
    assert release is not None and [t.stime for t in release.tuples] == [100, 300, 700]
    positions = release.positions
    held_before = sorted(first.held())

    # A new instance restores the positions and re-reads from the resume offsets.
    second = Buckets(1000, TOPICS, released_through=positions["released_through"])
    starts = {}
    for name in ("a", "b"):
        restored = restored_partitions(positions, name)[0]
        second.add_partition(name, 0, restored.resume, restored)
        starts[name] = restored.resume
    assert starts == {"a": 1, "b": 2}
    assert feed(second, starts) == [], "re-read tuples that went out are skipped, not late"
    assert sorted(second.held()) == held_before
    assert second.release() is None
    assert second.positions() == first.positions()


def test_a_tuple_below_what_was_released_is_late_unless_re_read() -> None:
    buckets = _buckets()
    feed = Feed(buckets)
    feed.tuple("a", 0, 2500)  # offset 0, held
    feed.boundary("a", 0, 2000)  # offset 1
    feed.boundary("b", 0, 2000)
    assert buckets.release() is not None
    assert feed.tuple("a", 0, 1999) is Outcome.LATE  # offset 2: broke the promise
    assert buckets.pass_over("a", 0, 2) is True, "dead-letter it"
    # After a restart, what was read before ("read") is not dead-lettered again.
    positions = buckets.positions()
    restored = restored_partitions(positions, "a")[0]
    assert (restored.resume, restored.read) == (0, 3)
    again = Buckets(1000, TOPICS, released_through=positions["released_through"])
    again.add_partition("a", 0, restored.resume, restored)
    assert again.add_tuple(_held("a", 0, 0, 2500)) is Outcome.HELD
    again.add_boundary("a", 0, 1, 2000)
    assert again.add_tuple(_held("a", 0, 2, 1999)) is Outcome.ALREADY_RELEASED
    assert again.pass_over("a", 0, 2) is False
    assert again.add_tuple(_held("a", 0, 3, 1500)) is Outcome.LATE
    assert again.pass_over("a", 0, 3) is True


def test_a_new_partition_holds_everything_back_until_its_first_boundary() -> None:
    buckets = _buckets()
    feed = Feed(buckets)
    feed.tuple("a", 0, 10)
    feed.boundary("a", 0, 1000)
    buckets.add_partition("b", 1, 0)
    feed.boundary("b", 0, 1000)
    assert buckets.release() is None
    feed.boundary("b", 1, 1000)
    assert buckets.release() is not None


def test_the_config_refuses_repeated_inputs_and_unknown_start_positions() -> None:
    inputs = [{"name": "x", "topic": "t", "bootstrap": "h:1"}]
    SUnionConfig(fragment="f", inputs=inputs, output_topic="o", output_bootstrap="h:1",
                 start_positions={"x": {0: 5}})
    with pytest.raises(ValueError, match="repeated"):
        SUnionConfig(fragment="f", inputs=inputs * 2, output_topic="o", output_bootstrap="h:1")
    with pytest.raises(ValueError, match="unknown"):
        SUnionConfig(fragment="f", inputs=inputs, output_topic="o", output_bootstrap="h:1",
                     start_positions={"y": {0: 5}})
