"""The commands that start the stack's own services (schema gateway, catalog, failure
detector, BPM agents).

Those services are programs of the application layer, which sits on top of the core: the
core does not name them. Whoever starts the stack gives their commands (``launcher.up``'s
``services``; ``medusa_apps.services.SERVICE_COMMANDS`` runs them with this Python).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol


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
