"""A node's heartbeats, sent by a small process of their own.

The node's own Python process runs its fragments' writers, its SUnions' hand-offs and
Spark's callbacks, all sharing one interpreter lock: a heartbeat thread there sent beats
1.2 to 1.3 s apart during a scale step of Linear Road's road, and the detector declared the
live node failed, then the node that took its fragments over. The sender here shares its
lock with nothing busy.

It beats while its node ticks. The node writes a line to the sender's standard input on
each beat of its own (its incarnation and the boxes it hosts); the sender stops at once
when that input closes (the node's process died: a kill -9 is detected as soon as before)
and beats no more after ``hang_s`` without a tick (the node's process lives but makes no
progress). It runs in the node's process group, so a signal to the group (a stop, a kill)
reaches it too."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import IO, Any

log = logging.getLogger("medusa.heartbeats")

HANG_S = 10.0
"""How long a node may go without a tick before its heartbeats stop: far beyond the
seconds a loaded process waits for its interpreter lock, well within what a hung node
may be left to hold its fragments."""


@dataclass(frozen=True)
class SenderConfig:
    bootstrap: str
    registry_url: str
    node: str
    participant: str
    interval_s: float
    hang_s: float = HANG_S


@dataclass
class Tick:
    """What the node says on each beat: who it is now and what it hosts."""

    incarnation: str
    boxes: list[str] = field(default_factory=list)


class HeartbeatSender:
    """The node's side: starts the sender and ticks it. Not thread-safe: one thread ticks."""

    def __init__(self, config: SenderConfig) -> None:
        self._process = subprocess.Popen([sys.executable, "-m", "medusa.heartbeats"],
                                         stdin=subprocess.PIPE)
        self._send(asdict(config))

    def tick(self, tick: Tick) -> None:
        """Raises RuntimeError when the sender has exited (it is started again by whoever
        ticks)."""
        self._send(asdict(tick))

    def _send(self, message: dict[str, Any]) -> None:
        stdin = self._process.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(message).encode() + b"\n")
            stdin.flush()
        except (BrokenPipeError, ValueError):
            raise RuntimeError(f"the heartbeat sender exited with code "
                               f"{self._process.poll()}") from None

    def close(self) -> None:
        stdin = self._process.stdin
        if stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                stdin.close()  # its end of input: it stops at once
        try:
            self._process.wait(2)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def __enter__(self) -> HeartbeatSender:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class _Lines:
    """Complete lines from a file descriptor, read as far as is there (never blocking on
    more, so ``select`` tells when the next ones come)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.ready: list[bytes] = []
        self._partial = b""

    def read(self) -> bool:
        """Reads what is there; False at the end of input."""
        chunk = os.read(self.fd, 65536)
        if not chunk:
            return False
        *complete, self._partial = (self._partial + chunk).split(b"\n")
        self.ready.extend(line for line in complete if line.strip())
        return True

    def take(self) -> list[bytes]:
        taken, self.ready = self.ready, []
        return taken


def run(source: IO[bytes]) -> None:
    """Beats until ``source`` (the node's ticks, after its ``SenderConfig``) closes."""
    from medusa.producing import TupleProducer
    from medusa.registry import registry_client
    from medusa.schemas import HEARTBEAT_TOPIC, schema_for_topic
    from medusa.settings import kafka_config

    lines = _Lines(source.fileno())
    while not lines.ready:
        if not lines.read():
            return  # the node went before it said who it is
    config = SenderConfig(**json.loads(lines.ready.pop(0)))
    producer = TupleProducer(kafka_config(config.bootstrap, linger_ms=0),
                             registry_client(config.registry_url), HEARTBEAT_TOPIC,
                             schema_for_topic(HEARTBEAT_TOPIC), config.node,
                             boundary_interval_s=60.0)
    tick: Tick | None = None
    ticked_at = time.monotonic()
    hung = False
    seq = 0
    next_beat = time.monotonic()
    try:
        while True:
            for line in lines.take():
                tick, ticked_at = Tick(**json.loads(line)), time.monotonic()
                if hung:
                    hung = False
                    log.info("%s ticks again: beating again", config.node)
            if select.select([lines.fd], [], [], max(0.0, next_beat - time.monotonic()))[0]:
                if not lines.read():
                    return  # the node's process is gone: not one beat more
                continue
            now = time.monotonic()
            next_beat = max(next_beat + config.interval_s, now)
            if tick is None:
                continue  # nothing to say yet
            if now - ticked_at > config.hang_s:
                if not hung:
                    hung = True
                    log.warning("%s has not ticked for %.1fs: no heartbeats until it does",
                                config.node, now - ticked_at)
                continue
            sent_at = int(time.time() * 1000)
            seq += 1
            producer.produce({"node": config.node, "participant": config.participant,
                              "seq": seq, "incarnation": tick.incarnation, "sent_at": sent_at,
                              "boxes": tick.boxes},
                             f"{config.node}/heartbeat/{tick.incarnation}/{seq}", sent_at,
                             key=config.node)
            producer.poll()
    finally:
        producer.close(timeout_s=2.0)


def main() -> None:
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    run(sys.stdin.buffer)


if __name__ == "__main__":
    main()
