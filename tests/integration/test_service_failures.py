"""The project's own services fail too: the schema registry and the failure detector are
killed -9 under load and started again. Producers go on or wait for them, nothing
acknowledged is lost, and each service rebuilds its state on restart (the registry from its
Kafka journal, the detector from the catalog and the heartbeats). The catalog's own kill -9
under writes is in test_catalog."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from medusa.catalog.client import CatalogClient
from medusa.catalog.model import Kind
from medusa.endpoints import Endpoints
from medusa.faults import kill
from medusa.producing import TupleProducer
from medusa.registry import Registration, register, registry_client
from medusa.schemas import HEARTBEAT_TOPIC, load_schema, schema_for_topic
from medusa.sensor_windows import OutputWatch, SteadyInput
from medusa.settings import StackSettings, kafka_config
from medusa.stack.launcher import recorded_layout, running_processes, up
from medusa.stack.layout import StackLayout
from medusa.topics import ensure_topics
from medusa_apps.services import SERVICE_COMMANDS
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def stack_layout(local_federation) -> StackLayout:
    """The running stack's layout: the session's, or the developer's own `medusa up`."""
    if local_federation is not None:
        return local_federation.layout
    layout = recorded_layout(StackLayout.from_settings(StackSettings()))
    if not layout.state_file.is_file():
        pytest.skip("the federation was not started by this project's launcher")
    return layout


def _kill(layout: StackLayout, component: str) -> None:
    kill(running_processes(layout)[component].pid)


def test_the_registry_killed_under_load_loses_nothing_and_comes_back_with_its_schemas(
        federation: Endpoints, stack_layout: StackLayout, topic: str) -> None:
    registry = registry_client(federation.registry_url)
    alpha = kafka_config(federation.bootstrap("alpha"))
    known = register(registry, topic, load_schema("sensor_reading"))
    ensure_topics(alpha, [topic], partitions=2)  # before the watch subscribes to it
    watch = OutputWatch(alpha, registry, [topic]).start()
    steady = SteadyInput(alpha, registry, topic, sensors=4, seconds=40, speedup=2.0)
    steady.start()
    wait_until("the input flows", lambda: len(steady.sent) > 8, 60)
    _kill(stack_layout, "registry")
    # A new schema waits for the registry (saying so in the log) instead of failing.
    late: list[Registration | BaseException] = []

    def register_late() -> None:
        try:
            late.append(register(registry_client(federation.registry_url), f"{topic}.late",
                                 load_schema("sensor_reading"), wait_s=240))
        except BaseException as error:  # reported by the assertion below
            late.append(error)
    waiting = threading.Thread(target=register_late, daemon=True)
    waiting.start()
    time.sleep(5)
    assert not late, late  # still waiting: the registry is down
    up(stack_layout, SERVICE_COMMANDS, report=lambda _: None)  # starts the killed registry
    assert steady.finished.wait(120), "the input did not finish"
    assert steady.error is None, steady.error
    waiting.join(240)
    assert late and isinstance(late[0], Registration), late
    again = register(registry_client(federation.registry_url), topic,
                     load_schema("sensor_reading"))
    assert again.schema_id == known.schema_id  # rebuilt from its journal, ids and all
    wait_until("every reading sent is read back",
               lambda: len(watch.ids(topic)) >= len(steady.sent), 60)
    watch.stop()
    ids = watch.ids(topic)
    assert len(ids) == len(set(ids)) == len(steady.sent)


@pytest.fixture
def beating_node(federation: Endpoints) -> Iterator[tuple[str, threading.Event]]:
    """A node of alpha's that only beats (no Spark): set the event to silence it."""
    name = f"alpha/svc-{uuid.uuid4().hex[:6]}"
    incarnation = uuid.uuid4().hex[:8]
    silenced, stopped = threading.Event(), threading.Event()
    registry = registry_client(federation.registry_url)

    def beat() -> None:
        config = kafka_config(federation.bootstrap("alpha"), **{"linger.ms": 0})
        with TupleProducer(config, registry, HEARTBEAT_TOPIC, schema_for_topic(HEARTBEAT_TOPIC),
                           name, boundary_interval_s=60.0) as producer:
            seq = 0
            while not stopped.is_set():
                if not silenced.is_set():
                    now = int(time.time() * 1000)
                    seq += 1
                    producer.produce({"node": name, "participant": "alpha", "seq": seq,
                                      "incarnation": incarnation, "sent_at": now, "boxes": []},
                                     f"{name}/heartbeat/{incarnation}/{seq}", now, key=name)
                    producer.poll()
                stopped.wait(0.5)

    with CatalogClient(federation.catalog_url) as catalog:
        catalog.put(Kind.NODES, name, {"status": "up", "incarnation": incarnation})
        beats = threading.Thread(target=beat, daemon=True)
        beats.start()
        try:
            yield name, silenced
        finally:
            stopped.set()
            beats.join(10)
            catalog.delete(Kind.NODES, name)


def _watched(layout: StackLayout, node: str) -> str | None:
    """The detector's judgement of the node (alive, suspect, failed), None if not watched."""
    try:
        view = httpx.get(f"{layout.detector_url}/nodes", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return None
    watched = view.get("watched", {}).get(node)
    return watched["health"] if watched else None


def test_the_detector_killed_rebuilds_its_watch_and_still_declares_a_failure(
        federation: Endpoints, stack_layout: StackLayout,
        beating_node: tuple[str, threading.Event]) -> None:
    node, silenced = beating_node
    wait_until("the detector watches the node",
               lambda: _watched(stack_layout, node) == "alive", 120)
    _kill(stack_layout, "detector")
    up(stack_layout, SERVICE_COMMANDS, report=lambda _: None)
    wait_until("the restarted detector watches the node again",
               lambda: _watched(stack_layout, node) == "alive", 120)
    silenced.set()
    with CatalogClient(federation.catalog_url) as catalog:
        def declared() -> bool:
            entry = catalog.get(Kind.NODES, node)
            return entry is not None and entry.spec.get("status") == "failed"
        wait_until("the silent node is declared failed", declared, 60)
