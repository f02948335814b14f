"""The secondary's waiting SUnions (``node.backups``): one per backed-up passive fragment,
replaced when its configuration changes, stopped when the fragment is gone, and handed to
a takeover only when it was prepared as the takeover asks."""

from __future__ import annotations

from typing import Any

import pytest

from medusa.catalog.model import Entry, Kind
from medusa.sunion.config import SUnionConfig, SUnionInput
from medusa_spark.node.backups import Backups

pytestmark = pytest.mark.unit


class FakeSUnion:
    def __init__(self, config: SUnionConfig) -> None:
        self.config = config.model_copy(update={"state_file": "/somewhere/state.json"})
        self.stopped = False

    def alive(self) -> bool:
        return not self.stopped

    def keep_alive(self) -> bool:
        return False

    def stop(self) -> None:
        self.stopped = True


def config(topic: str = "in") -> SUnionConfig:
    return SUnionConfig(fragment="alpha/n/f", inputs=[SUnionInput(
        name="readings", topic=topic, bootstrap="127.0.0.1:1")], output_topic="n.f.in",
        output_bootstrap="127.0.0.1:1", bucket_ms=1000, max_delay_ms=None)


def entry(name: str = "alpha/n/f") -> Entry:
    return Entry(kind=Kind.FRAGMENTS, name=name, participant="alpha", version=1, updated_at=0,
                 spec={"node": "alpha/a1", "network": "alpha/n", "phase": "running"})


class Preparer:
    def __init__(self) -> None:
        self.config = config()
        self.started: list[FakeSUnion] = []

    def __call__(self, _: Entry) -> tuple[SUnionConfig, Any]:
        def start() -> FakeSUnion:
            self.started.append(FakeSUnion(self.config))
            return self.started[-1]
        return self.config, start


def test_one_waits_per_fragment_and_is_kept_across_passes() -> None:
    backups, prepare = Backups("alpha/a2"), Preparer()
    backups.keep({"alpha/n/f": entry()}, prepare)
    backups.keep({"alpha/n/f": entry()}, prepare)
    assert len(prepare.started) == 1 and not prepare.started[0].stopped


def test_a_new_configuration_replaces_it_and_a_gone_fragment_stops_it() -> None:
    backups, prepare = Backups("alpha/a2"), Preparer()
    backups.keep({"alpha/n/f": entry()}, prepare)
    prepare.config = config("other-input")  # redeployed
    backups.keep({"alpha/n/f": entry()}, prepare)
    assert [s.stopped for s in prepare.started] == [True, False]
    backups.keep({}, prepare)
    assert prepare.started[1].stopped


def test_a_takeover_gets_it_only_as_prepared() -> None:
    backups, prepare = Backups("alpha/a2"), Preparer()
    backups.keep({"alpha/n/f": entry()}, prepare)
    assert backups.take("alpha/n/f", config()) is prepare.started[0]
    assert backups.take("alpha/n/f", config()) is None  # taken once
    backups.keep({"alpha/n/f": entry()}, prepare)
    assert backups.take("alpha/n/f", config("other-input")) is None
    assert prepare.started[1].stopped


def test_a_fragment_that_cannot_be_prepared_goes_without() -> None:
    def broken(_: Entry) -> tuple[SUnionConfig, Any]:
        raise ValueError("its network cannot be read")
    backups = Backups("alpha/a2")
    backups.keep({"alpha/n/f": entry()}, broken)
    assert backups.take("alpha/n/f", config()) is None
