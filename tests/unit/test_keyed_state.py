"""A process box's state as entries (``keyed_state``): each read from the store once, only the
changed ones written back, and a fragment that would hold them in memory refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from medusa_spark.boxes.keyed_state import EntryStore, KeyedState, decode, encode
from medusa_spark.network.fragments import group
from medusa_spark.network.model import NetworkError, parse_network
from medusa_spark.network.validate import check_structure

pytestmark = pytest.mark.unit


class CountingStore:
    """A dict behind an ``EntryStore`` that counts what reaches it."""

    def __init__(self, entries: dict[int, int]) -> None:
        self.entries = {encode(k): encode(v) for k, v in entries.items()}
        self.reads = self.writes = self.removals = 0

    def store(self) -> EntryStore:
        def read(key: bytes) -> bytes | None:
            self.reads += 1
            return self.entries.get(key)

        def write(key: bytes, value: bytes) -> None:
            self.writes += 1
            self.entries[key] = value

        def remove(key: bytes) -> None:
            self.removals += 1
            del self.entries[key]

        return EntryStore(read, write, remove, lambda: iter(list(self.entries)))

    def plain(self) -> dict[int, int]:
        return {decode(k): decode(v) for k, v in self.entries.items()}


def test_an_entry_is_read_once_and_only_changed_entries_are_written() -> None:
    backing = CountingStore({car: 10 for car in range(1000)})
    state = KeyedState(backing.store())
    for _ in range(3):
        state[7] = state.get(7, 0) + 5
    state[2000] = state.get(2000, 0) + 1
    assert backing.reads == 2 and backing.writes == 0  # cars 7 and 2000, once each
    assert state.flush() == 2
    assert backing.writes == 2
    assert backing.plain()[7] == 25 and backing.plain()[2000] == 1
    assert state.flush() == 0, "nothing changed since"


def test_a_removed_entry_is_gone_from_the_mapping_and_the_store() -> None:
    backing = CountingStore({1: 1, 2: 2})
    state = KeyedState(backing.store())
    del state[1]
    assert 1 not in state and state.get(1) is None
    with pytest.raises(KeyError):
        del state[1]
    with pytest.raises(KeyError):
        state[3]
    state[4] = 4
    assert sorted(state) == [2, 4] and len(state) == 2
    state.flush()
    assert backing.plain() == {2: 2, 4: 4} and backing.removals == 1


def test_a_fragment_in_memory_refuses_a_processor_with_entries() -> None:
    path = Path(__file__).parents[2] / "spark_apps/medusa_spark/networks/"
    raw = yaml.safe_load((path / "linear_road_partitioned.yaml").read_text())
    raw["boxes"]["accounts"]["state_store"] = "memory"
    plan = check_structure(parse_network(yaml.safe_dump(raw, sort_keys=False)))
    with pytest.raises(NetworkError, match=r"box 'accounts', field 'state_store'.*RocksDB"):
        group(plan)

