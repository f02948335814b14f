"""The stack's own services as programs of this Python environment: what the launcher
(``medusa.stack``) starts for the schema gateway, the catalog, the failure detector and
the BPM agents."""

from __future__ import annotations

import sys
from pathlib import Path


def _medusa(*arguments: str) -> list[str]:
    """``medusa ARGUMENTS`` run by this interpreter (whatever is on PATH)."""
    return [sys.executable, "-m", "medusa_apps", *arguments]


class PythonServices:
    """``medusa schemas gateway``, ``medusa catalog serve``, ``medusa detector`` and
    ``medusa bpm``, each a process of its own (``medusa.stack.services.ServiceCommands``)."""

    def registry_gateway(self, port: int) -> list[str]:
        return _medusa("schemas", "gateway", "--port", str(port))

    def catalog(self, port: int, home: str) -> list[str]:
        return _medusa("catalog", "serve", "--port", str(port), "--home", home)

    def detector(self, port: int) -> list[str]:
        return _medusa("detector", "--port", str(port))

    def bpm_agent(self, participant: str, interval_s: float, alive_file: Path) -> list[str]:
        return _medusa("bpm", "--participant", participant, "--interval", f"{interval_s:g}",
                       "--alive-file", str(alive_file))


SERVICE_COMMANDS = PythonServices()
