"""The heartbeat sender beats while its node ticks, stops at once when the node's process is
gone, and beats no more while the node makes no progress."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict
from typing import Any, ClassVar

import pytest

from medusa import heartbeats, producing, registry
from medusa.heartbeats import SenderConfig, Tick
from tests.waiting import wait_for

pytestmark = pytest.mark.unit


class _Producer:
    made: ClassVar[list[_Producer]] = []

    def __init__(self, *_: Any, **__: Any) -> None:
        self.beats: list[dict[str, Any]] = []
        self.closed = False
        _Producer.made.append(self)

    def produce(self, value: dict[str, Any], *_: Any, **__: Any) -> None:
        self.beats.append(value)

    def poll(self) -> None:
        pass

    def close(self, timeout_s: float = 30.0) -> None:
        self.closed = True


@pytest.fixture
def sender(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A sender running on a pipe, fed as a node would feed it."""
    _Producer.made = []
    monkeypatch.setattr(producing, "TupleProducer", _Producer)
    monkeypatch.setattr(registry, "registry_client", lambda url: None)
    read_end, write_end = os.pipe()
    source = os.fdopen(read_end, "rb", buffering=0)
    feed = os.fdopen(write_end, "wb", buffering=0)
    runner = threading.Thread(target=heartbeats.run, args=(source,), daemon=True)

    def say(message: Any) -> None:
        feed.write(json.dumps(asdict(message)).encode() + b"\n")

    say(SenderConfig("127.0.0.1:1", "http://127.0.0.1:2", "alpha/n1", "alpha",
                     interval_s=0.02, hang_s=0.3))
    runner.start()
    yield say, feed, runner
    if not feed.closed:
        feed.close()
    runner.join(5)
    source.close()


def _beats() -> list[dict[str, Any]]:
    wait_for("a producer", lambda: bool(_Producer.made), 5, 0.01)
    return _Producer.made[0].beats


def test_it_beats_as_the_latest_tick_says_and_stops_when_the_node_is_gone(sender) -> None:
    say, feed, runner = sender
    say(Tick("inc-1", ["a"]))
    wait_for("three beats", lambda: len(_beats()) >= 3, 5, 0.01)
    say(Tick("inc-2", ["a", "b"]))
    wait_for("a beat of inc-2", lambda: _beats()[-1]["incarnation"] == "inc-2", 5, 0.01)
    assert _beats()[-1]["boxes"] == ["a", "b"] and _beats()[-1]["node"] == "alpha/n1"
    feed.close()  # the node's process died
    runner.join(2)
    assert not runner.is_alive() and _Producer.made[0].closed
    assert [b["seq"] for b in _beats()] == list(range(1, len(_beats()) + 1))


def test_a_node_that_stops_ticking_gets_no_heartbeats_until_it_ticks_again(sender) -> None:
    say, _, _ = sender
    say(Tick("inc-1"))
    wait_for("two beats", lambda: len(_beats()) >= 2, 5, 0.01)
    time.sleep(0.6)  # beyond hang_s without a tick
    silent_from = len(_beats())
    time.sleep(0.3)
    assert len(_beats()) == silent_from
    say(Tick("inc-1"))
    wait_for("a beat again", lambda: len(_beats()) > silent_from, 5, 0.01)
