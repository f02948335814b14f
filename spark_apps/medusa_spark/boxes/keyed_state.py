"""A process box's state held as entries, each checkpointed on its own.

A processor whose state is many small values under keys of its own (Linear Road's
balances, by car) declares ``keyed_state``: it gets its group's state as a
``KeyedState``, a mapping it reads and changes in place. Each entry is a row of its own
in Spark's state store (a ``MapState`` of ``transformWithStateInPandas``), so a batch
writes the entries it changed, and a checkpoint (RocksDB's changelog) costs what changed,
not the whole state as one pickled value does.

An entry is fetched from the store the first time it is read in a call and kept for the
rest of it; changes are written when the call ends (``flush``). Keys are told apart by
their pickled form: use plain values (``int``, ``str``, tuples of them), not numpy's.
Going through every entry (``iter``, ``len``) reads them all from the store: a processor
that needs that often is better served by one state value.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Hashable, Iterator, MutableMapping
from typing import Any

_ABSENT = object()
"""A key with no entry: none in the store, or removed in this call."""


def encode(value: Any) -> bytes:
    return pickle.dumps(value, protocol=5)


def decode(data: bytes) -> Any:
    return pickle.loads(data)


class EntryStore:
    """Where a ``KeyedState``'s entries live: a ``MapState`` of (key bytes) -> (value bytes),
    or a dict in the tests."""

    def __init__(self, read: Callable[[bytes], bytes | None], write: Callable[[bytes, bytes], None],
                 remove: Callable[[bytes], object], listing: Callable[[], Iterator[bytes]]) -> None:
        self.read, self.write, self.remove, self.listing = read, write, remove, listing

    @classmethod
    def of_map_state(cls, state: Any) -> EntryStore:
        """``state``: a pyspark ``MapState`` with key ``key binary`` and value ``value binary``."""

        def read(key: bytes) -> bytes | None:
            found = state.getValue((key,))
            return None if found is None else bytes(found[0])

        return cls(read, lambda key, value: state.updateValue((key,), (value,)),
                   lambda key: state.removeKey((key,)),
                   lambda: (bytes(k[0]) for k in state.keys()))  # noqa: SIM118 (a MapState)

    @classmethod
    def of_dict(cls, entries: dict[bytes, bytes]) -> EntryStore:
        return cls(entries.get, entries.__setitem__, lambda key: entries.pop(key, None),
                   lambda: iter(list(entries)))


class KeyedState(MutableMapping[Hashable, Any]):
    """One group's entries: read through to the store once each, written back by ``flush``."""

    def __init__(self, store: EntryStore) -> None:
        self._store = store
        self._seen: dict[Hashable, Any] = {}
        """Key -> its value as read or last set, or ``_ABSENT``."""
        self._changed: set[Hashable] = set()

    def _value(self, key: Hashable) -> Any:
        if key not in self._seen:
            data = self._store.read(encode(key))
            self._seen[key] = _ABSENT if data is None else decode(data)
        return self._seen[key]

    def __getitem__(self, key: Hashable) -> Any:
        value = self._value(key)
        if value is _ABSENT:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, Hashable):
            return False
        return self._value(key) is not _ABSENT

    def __setitem__(self, key: Hashable, value: Any) -> None:
        self._seen[key] = value
        self._changed.add(key)

    def __delitem__(self, key: Hashable) -> None:
        if key not in self:
            raise KeyError(key)
        self._seen[key] = _ABSENT
        self._changed.add(key)

    def __iter__(self) -> Iterator[Hashable]:
        stored = [decode(k) for k in self._store.listing()]
        listed = set()
        for key in [*stored, *self._changed]:
            if key not in listed and key in self:
                listed.add(key)
                yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def flush(self) -> int:
        """Writes the changed entries to the store; how many."""
        for key in self._changed:
            value = self._seen[key]
            if value is _ABSENT:
                self._store.remove(encode(key))
            else:
                self._store.write(encode(key), encode(value))
        written = len(self._changed)
        self._changed.clear()
        return written
