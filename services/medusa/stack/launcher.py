"""``medusa up`` / ``down`` / ``status``: the local federation as local processes.

The state file (``<run_dir>/stack.json``) records exactly the processes ``up``
started, with their kernel start times, so ``down`` stops those and nothing else
and a second ``up`` starts only what is not already running.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from medusa.endpoints import Endpoints, local_endpoints
from medusa.errors import MedusaError
from medusa.settings import StackSettings
from medusa.stack import processes
from medusa.stack.components import (
    Component,
    StartupError,
    agent_components,
    health_checks,
    kafka_components,
    link_components,
    service_components,
    storage_components,
)
from medusa.stack.layout import StackLayout
from medusa.stack.processes import RunningProcess
from medusa.stack.services import ServiceCommands

Report = Callable[[str], None]


class PortInUseError(MedusaError, RuntimeError):
    def __init__(self, port: int, owner: str) -> None:
        super().__init__(
            f"port {port} ({owner}) is already in use by another program; stop it, or move the "
            "stack with --kafka-base-port/--registry-port/... (or the MEDUSA_* variables)")
        self.port = port


@dataclass(frozen=True)
class ComponentStatus:
    name: str
    endpoint: str
    pid: int | None
    running: bool
    answering: bool
    log: str | None

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def _load_state(layout: StackLayout) -> dict[str, RunningProcess]:
    if not layout.state_file.is_file():
        return {}
    raw = json.loads(layout.state_file.read_text())
    return {p["name"]: RunningProcess.from_dict(p) for p in raw.get("processes", [])}


def running_processes(layout: StackLayout) -> dict[str, RunningProcess]:
    """The processes ``up`` (and ``start_service``) started that still run, by name."""
    return {name: p for name, p in _load_state(layout).items() if p.alive()}


def _save_state(layout: StackLayout, running: dict[str, RunningProcess],
                endpoints: Endpoints) -> None:
    layout.run_dir.mkdir(parents=True, exist_ok=True)
    state = {"processes": [p.as_dict() for p in running.values()],
             "endpoints": endpoints.as_dict(),
             "settings": layout.settings.model_dump(mode="json")}
    temporary = layout.state_file.with_suffix(".tmp")
    temporary.write_text(json.dumps(state, indent=2))
    temporary.replace(layout.state_file)


def _component_ports(layout: StackLayout, component: Component) -> list[int]:
    owners = layout.all_ports()
    if component.name.startswith("kafka-"):
        for participant in layout.participants:
            for broker in participant.broker_layouts:
                if broker.component == component.name:
                    return [broker.broker_port, broker.controller_port,
                            *(broker.peer_listener_port(link.viewer)
                              for link in layout.links_to(participant))]
    if component.name.startswith("bpm-"):
        return []  # an agent binds no port
    if component.name.startswith("hdfs-"):
        return [port for port, owner in owners.items() if owner == "local HDFS"]
    prefix = {"registry": "schema registry", "registry-gateway": "registry gateway",
              "jaeger": "Jaeger", "catalog": "catalog",
              "detector": "failure detector", "toxiproxy": "toxiproxy",
              "s3": "local S3 object store"}[
        component.name]
    return [port for port, owner in owners.items() if owner.startswith(prefix)]


def _wait_ready(layout: StackLayout, started: list[tuple[Component, RunningProcess]],
                report: Report) -> None:
    deadline = time.monotonic() + layout.settings.startup_timeout_s
    pending = list(started)
    while pending:
        for component, process in list(pending):
            if not process.alive():
                raise StartupError(f"{component.name} exited during start-up; see {process.log}")
            if component.ready():
                report(f"  {component.name:<14} ready at {component.endpoint}")
                pending.remove((component, process))
        if pending and time.monotonic() > deadline:
            names = ", ".join(c.name for c, _ in pending)
            logs = ", ".join(p.log for _, p in pending)
            raise StartupError(f"{names} did not answer within "
                               f"{layout.settings.startup_timeout_s:.0f}s; see {logs}")
        if pending:
            time.sleep(0.5)


def up(layout: StackLayout, services: ServiceCommands, report: Report = print) -> Endpoints:
    """Start what is not running yet and wait until everything answers.

    ``services``: the commands of the project's own services (catalog, detector, schema
    gateway, BPM agents), given by the application layer, which the core does not name.
    """
    running = {name: p for name, p in _load_state(layout).items() if p.alive()}
    endpoints = local_endpoints(layout)
    stages: tuple[Callable[[StackLayout], list[Component]], ...] = (
        kafka_components, storage_components, link_components,
        partial(service_components, services=services),
        partial(agent_components, services=services))
    for stage in stages:
        components = stage(layout)
        to_start = [c for c in components if c.name not in running]
        for component in to_start:
            for port in _component_ports(layout, component):
                if processes.port_in_use(port):
                    raise PortInUseError(port, layout.all_ports()[port])
        started: list[tuple[Component, RunningProcess]] = []
        for component in to_start:
            report(f"  {component.name:<14} starting")
            if component.prepare is not None:
                component.prepare()
            process = processes.start(component.name, component.command,
                                      layout.logs_dir / f"{component.name}.log", component.env)
            running[component.name] = process
            started.append((component, process))
            _save_state(layout, running, endpoints)  # recorded at once: down can always stop it
        started_names = {component.name for component, _ in started}
        for component in components:
            if component.name not in started_names:
                pid = running[component.name].pid
                report(f"  {component.name:<14} already running (pid {pid})")
        _wait_ready(layout, started, report)
    _save_state(layout, running, endpoints)
    return endpoints


def _recorded_endpoints(layout: StackLayout) -> Endpoints:
    raw = json.loads(layout.state_file.read_text()) if layout.state_file.is_file() else {}
    return Endpoints(**raw["endpoints"]) if raw.get("endpoints") else local_endpoints(layout)


def start_service(layout: StackLayout, name: str, command: list[str],
                  report: Report = print, own_session: bool = True) -> RunningProcess:
    """Starts one of the project's own processes (e.g. a node) so that ``down`` stops it too
    (``own_session``: see ``processes.start``).

    A process of that name that still runs is kept.
    """
    recorded = {n: p for n, p in _load_state(layout).items() if p.alive()}
    if name in recorded:
        report(f"  {name:<14} already running (pid {recorded[name].pid})")
        return recorded[name]
    process = processes.start(name, command, layout.logs_dir / f"{name}.log",
                              own_session=own_session)
    recorded[name] = process
    _save_state(layout, recorded, _recorded_endpoints(layout))
    report(f"  {name:<14} started (pid {process.pid}, log {process.log})")
    return process


def stop_service(layout: StackLayout, name: str, report: Report = print) -> bool:
    """Stops one process ``start_service`` started (e.g. a node); False when none ran."""
    recorded = _load_state(layout)
    process = recorded.pop(name, None)
    if process is None or not process.alive():
        return False
    report(f"  {name:<14} stopping (pid {process.pid})")
    processes.stop(process)
    _save_state(layout, recorded, _recorded_endpoints(layout))
    return True


def down(layout: StackLayout, purge: bool = False, report: Report = print) -> list[str]:
    """Stop exactly the processes ``up`` started; with ``purge`` also delete their data."""
    recorded = _load_state(layout)
    stopped: list[str] = []
    # Nodes and services first: they still write to Kafka while they shut down; then the
    # registry (Kafka holds its schemas), then the brokers. Each tier stops side by side.
    tiers: dict[int, list[str]] = {}
    for name in recorded:
        tiers.setdefault(2 if name.startswith("kafka-") else int(name == "registry"),
                         []).append(name)
    for tier in sorted(tiers):
        alive = [name for name in sorted(tiers[tier]) if recorded[name].alive()]
        for name in alive:
            report(f"  {name:<14} stopping (pid {recorded[name].pid})")
        processes.stop_all([recorded[name] for name in alive])
        stopped += alive
    layout.state_file.unlink(missing_ok=True)
    if purge:
        for folder in (layout.run_dir / "kafka",):
            shutil.rmtree(folder, ignore_errors=True)
        if layout.settings.credentials_file is None:  # the stack's own, not one it was lent
            layout.credentials_file.unlink(missing_ok=True)
    return stopped


def recorded_layout(layout: StackLayout) -> StackLayout:
    """The layout the running stack was started with (its ports may differ from today's flags)."""
    if not layout.state_file.is_file():
        return layout
    settings = json.loads(layout.state_file.read_text()).get("settings")
    return StackLayout.from_settings(StackSettings(**settings)) if settings else layout


def status(layout: StackLayout) -> list[ComponentStatus]:
    layout = recorded_layout(layout)
    recorded = _load_state(layout)
    checks = health_checks(layout)
    result = []
    for name in dict.fromkeys([*checks, *recorded]):
        process = recorded.get(name)
        running = bool(process and process.alive())
        # The project's own processes (nodes) have no endpoint: running is answering.
        endpoint, ready = checks.get(name, ("", lambda: True))
        result.append(ComponentStatus(name, endpoint, process.pid if process else None, running,
                                      running and ready(), process.log if process else None))
    return result
