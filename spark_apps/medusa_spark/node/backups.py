"""Backups: the secondary of a node keeps, for each passive (upstream-backup) fragment of
that node, its SUnion started and waiting (``SUnion.prepare``: topics, clients and their
connections made), as an active standby's is. A takeover then lets it go instead of
starting a process: the inputs flow again while the query restores its checkpoint,
rather than after the process's start-up. It holds no state: the SUnion's positions
ride in its topic, and it reads them back only when it goes (fencing the failed node's).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from medusa.catalog.model import Entry
from medusa.sunion.config import SUnionConfig
from medusa_spark.sunion_process import SUnionProcess

log = logging.getLogger("medusa.node")


def _same(prepared: SUnionProcess, config: SUnionConfig) -> bool:
    return prepared.config == config.model_copy(
        update={"state_file": prepared.config.state_file})


class Backups:
    """The waiting SUnions of the fragments this node backs up, by fragment name."""

    def __init__(self, node_name: str) -> None:
        self.node_name = node_name
        self._waiting: dict[str, SUnionProcess] = {}

    def keep(self, entries: Mapping[str, Entry],
             prepare: Callable[[Entry], tuple[SUnionConfig, Callable[[], SUnionProcess]]]
             ) -> None:
        """One waiting SUnion for each of ``entries`` (running passive fragments of the
        nodes this one backs up), none for any other. ``prepare`` gives an entry's SUnion
        configuration and how to start it waiting; it may raise, and that fragment goes
        without (its takeover then starts its SUnion as before)."""
        for name in [n for n in self._waiting if n not in entries]:
            self._waiting.pop(name).stop()
        for name, entry in entries.items():
            try:
                config, start = prepare(entry)
            except Exception as error:  # the fragment's own problem; its takeover reports it
                log.debug("%s: no waiting SUnion for %s: %s", self.node_name, name, error)
                continue
            waiting = self._waiting.get(name)
            if waiting is not None and _same(waiting, config):
                waiting.keep_alive()
                continue
            if waiting is not None:
                waiting.stop()
            self._waiting[name] = start()
            log.info("%s: a SUnion of %s waits here, to go if its node fails",
                     self.node_name, name)

    def take(self, name: str, config: SUnionConfig) -> SUnionProcess | None:
        """The fragment's waiting SUnion, when it was prepared as ``config`` asks (the
        caller lets it go); None otherwise (one of another configuration is stopped)."""
        waiting = self._waiting.pop(name, None)
        if waiting is None:
            return None
        if _same(waiting, config) and waiting.alive():
            return waiting
        waiting.stop()
        return None

    def stop(self) -> None:
        for name in list(self._waiting):
            self._waiting.pop(name).stop()
