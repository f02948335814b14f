"""The commands that start the stack's own services (schema gateway, catalog, failure
detector, BPM agents).

Those services are programs of the application layer, which sits on top of the core: the
core does not name them. Whoever starts the stack gives their commands (``launcher.up``'s
``services``); the application layer also registers its commands as the default, for the
callers that give none (``medusa_apps`` does when it is imported).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from medusa.errors import MedusaError


class ServiceCommands(Protocol):
    """The command line of each of the stack's own services."""

    def registry_gateway(self, port: int) -> list[str]:
        """The registry's front door, serving on ``port``."""
        ...

    def catalog(self, port: int, home: str) -> list[str]:
        """The catalog service on ``port``, keeping its state under ``home``."""
        ...

    def detector(self, port: int) -> list[str]:
        """The failure detector on ``port``."""
        ...

    def bpm_agent(self, participant: str, interval_s: float, alive_file: Path) -> list[str]:
        """A participant's BPM agent, stepping every ``interval_s`` and touching
        ``alive_file`` each step."""
        ...


class NoServiceCommandsError(MedusaError, RuntimeError):
    """The stack was asked to start its services, but nobody said how."""


_registered: ServiceCommands | None = None


def register_service_commands(commands: ServiceCommands) -> None:
    """Makes ``commands`` the default of the callers that give none."""
    global _registered
    _registered = commands


def service_commands(given: ServiceCommands | None = None) -> ServiceCommands:
    """``given``, else the registered default; NoServiceCommandsError without either."""
    if given is not None:
        return given
    if _registered is None:
        raise NoServiceCommandsError(
            "no commands for the stack's own services: pass them to the launcher "
            "(services=...), or import the application layer that registers them")
    return _registered
