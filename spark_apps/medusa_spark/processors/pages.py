"""A processor's state held in pages, each pickled on its own and kept pickled until it
changes: a process box's state is pickled every batch, and a large one of which a batch
changes a few pages pays for those alone.

Linear Road's road holds a car under the second of the half minute it reports in (a car
reports every 30 s), so a batch of a second or two changes two or three pages of thirty.
"""

from __future__ import annotations

import pickle
from collections.abc import Hashable, Iterator, Mapping
from types import MappingProxyType
from typing import Any


class Pages:
    """Page id -> a dict. ``read`` a page to look, ``write`` it to change it: only a page
    asked for by ``write`` is pickled again."""

    def __init__(self) -> None:
        self._pages: dict[Hashable, dict[Any, Any]] = {}
        self._pickled: dict[Hashable, bytes] = {}
        """Page id -> its pickled form, for the pages unchanged since it was made."""

    def read(self, page: Hashable) -> Mapping[Any, Any]:
        """The page, to look at only (empty if there is none)."""
        return self._pages.get(page, _EMPTY)

    def write(self, page: Hashable) -> dict[Any, Any]:
        """The page, to change (made if there is none)."""
        self._pickled.pop(page, None)
        return self._pages.setdefault(page, {})

    def ids(self) -> list[Hashable]:
        return list(self._pages)

    def drop_empty(self, page: Hashable) -> None:
        if page in self._pages and not self._pages[page]:
            del self._pages[page]
            self._pickled.pop(page, None)

    def __iter__(self) -> Iterator[tuple[Hashable, Mapping[Any, Any]]]:
        """(page id, page) to look at."""
        return iter(list(self._pages.items()))

    def __len__(self) -> int:
        return sum(len(page) for page in self._pages.values())

    def __getstate__(self) -> dict[Hashable, bytes]:
        for page, entries in self._pages.items():
            if page not in self._pickled:
                self._pickled[page] = pickle.dumps(entries, protocol=5)
        return dict(self._pickled)

    def __setstate__(self, pickled: dict[Hashable, bytes]) -> None:
        self._pickled = dict(pickled)
        self._pages = {page: pickle.loads(data) for page, data in pickled.items()}


_EMPTY: Mapping[Any, Any] = MappingProxyType({})
"""What ``read`` gives for a page that is not there (never changed: ``write`` makes one)."""
