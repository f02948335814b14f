"""Checks shared by the tests that move, scale or take over a fragment under input."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Entry, Kind
from medusa.sensor_windows import OutputWatch
from medusa_spark.deploy import resolve_fragment
from tests.waiting import first_within, wait_for, wait_until

TAIL_S = 8.0
"""Input that goes on after a scenario's last step: results computed across it."""


def runs(entry: Entry | None, on: str | None = None, away_from: str | None = None) -> bool:
    """Whether the fragment of ``entry`` runs (on node ``on``; on another than
    ``away_from``)."""
    return (entry is not None and entry.spec.get("phase") == "running"
            and (on is None or entry.spec["node"] == on)
            and (away_from is None or entry.spec["node"] != away_from))


def wait_fragment_running(catalog: CatalogClient, fragment: str, on: str | None = None,
                          away_from: str | None = None, timeout_s: float = 240) -> Entry:
    """Until ``fragment`` runs (on node ``on``; on another than ``away_from``), and its
    entry then. ``fragment`` is a fragment's name or a box of it, as ``medusa move`` takes
    them (``resolve_fragment``)."""
    where = (f" on {on}" if on else "") + (f" away from {away_from}" if away_from else "")
    return wait_for(f"{fragment} running{where}", lambda: (
        entry if runs(entry := resolve_fragment(catalog, fragment), on, away_from) else None),
        timeout_s)


def wait_running_on(catalog: CatalogClient, box: str, node: str, timeout_s: float = 240
                    ) -> None:
    """Until the fragment holding ``box`` runs on ``node``."""
    wait_fragment_running(catalog, box, on=node, timeout_s=timeout_s)


def box_nodes(catalog: CatalogClient, network: str) -> dict[str, str]:
    """Box -> the node running its fragment."""
    return _boxes_on(catalog.list(Kind.FRAGMENTS, network=network))


def _boxes_on(entries: list[Entry]) -> dict[str, str]:
    return {box: e.spec["node"] for e in entries for box in e.spec["boxes"]}


def wait_network_running(catalog: CatalogClient, network: str,
                         placement: dict[str, str] | None = None,
                         timeout_s: float = 240) -> None:
    """Until every fragment of ``network`` runs (each box on its node of ``placement``,
    when given)."""
    def placed() -> bool:
        entries = catalog.list(Kind.FRAGMENTS, network=network)
        if not entries or not all(runs(e) for e in entries):
            return False
        where = _boxes_on(entries)
        return all(where.get(box) == node for box, node in (placement or {}).items())
    wait_until(f"{network} running" + (f" as placed ({placement})" if placement else ""),
               placed, timeout_s)


def assert_exactly_once(ids: Iterable[str], expected: Iterable[str], across: str) -> None:
    """Every expected result id came, none twice, none unexpected."""
    counts = Counter(ids)
    wanted = set(expected)
    duplicated = [i for i, n in counts.items() if n > 1]
    missing = wanted - set(counts)
    assert not duplicated, f"results written twice across {across}: {duplicated[:5]}"
    assert not missing, f"results lost across {across}: {sorted(missing)[:5]}"
    assert set(counts) == wanted, f"unexpected results: {sorted(set(counts) - wanted)[:5]}"


def wait_first_result(watch: OutputWatch, topic: str, timeout_s: float = 180) -> None:
    """Until ``topic`` has a result (or the time is up: the test's checks then say why)."""
    first_within(lambda: bool(watch.ids(topic)), timeout_s)


def wait_result_after(watch: OutputWatch, topic: str, timeout_s: float = 120) -> None:
    """Until ``topic`` has a result written from now on: the fragment has emitted since a
    step."""
    since = time.time_ns() // 1_000_000
    wait_until(f"a result on {topic} written after the step",
               lambda: any(a.appended_ms > since for a in watch.arrived(topic)), timeout_s)
