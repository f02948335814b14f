"""Faults on demand on the links between participants, through toxiproxy's API.

Each participant's services reach another participant's Kafka cluster through one proxy
per direction (``beta-from-alpha``: beta's cluster as alpha's services reach it). A
partition between two participants disables both directions' proxies: open connections
close and new ones are refused, as behind a firewall that rejects, so clients notice at
once and reconnect as soon as the link heals. A slow link adds latency to both streams of
both proxies.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from medusa.errors import MedusaError
from medusa.stack.processes import process_start_ticks

LATENCY_TOXIC = "medusa-latency"


class FaultError(MedusaError, RuntimeError):
    """The proxies cannot be reached, or the link named does not exist."""


@dataclass(frozen=True)
class LinkState:
    name: str
    listen: str
    upstream: str
    enabled: bool
    latency_ms: int
    """Added latency each way (0: none)."""

    @property
    def link(self) -> str:
        """The link the proxy is on: a cluster of several brokers has a proxy per broker,
        named ``<link>#<broker's node id>`` after the first."""
        return self.name.split("#", 1)[0]

    @property
    def cluster(self) -> str:
        return self.link.split("-from-")[0]

    @property
    def viewer(self) -> str:
        return self.link.split("-from-")[1]

    @property
    def condition(self) -> str:
        if not self.enabled:
            return "cut"
        return f"slow (+{self.latency_ms} ms)" if self.latency_ms else "up"


class Links:
    """The proxies on the links, at toxiproxy's API ``url``."""

    def __init__(self, url: str, timeout_s: float = 15.0) -> None:
        if not url:
            raise FaultError("no proxies on the links between participants: the federation "
                             "was started without toxiproxy (set MEDUSA_EXTERNAL_TOXIPROXY_URL "
                             "for a federation started elsewhere)")
        self.url = url.rstrip("/")
        self._client = httpx.Client(base_url=self.url, timeout=timeout_s)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Links:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        try:
            response = self._client.request(method, path, json=body)
        except httpx.HTTPError as failure:
            raise FaultError(f"toxiproxy at {self.url} does not answer: {failure}") from None
        if response.status_code >= 400:
            raise FaultError(f"toxiproxy {method} {path}: {response.status_code} "
                             f"{response.text.strip()}")
        return response.json() if response.content else None

    def states(self) -> list[LinkState]:
        proxies = self._call("GET", "/proxies")
        states = []
        for name, proxy in sorted(proxies.items()):
            if "-from-" not in name:
                continue
            latency = max((int(t["attributes"].get("latency", 0))
                           for t in proxy.get("toxics", []) if t["type"] == "latency"),
                          default=0)
            states.append(LinkState(name, proxy["listen"], proxy["upstream"],
                                    bool(proxy["enabled"]), latency))
        return states

    def between(self, first: str, second: str) -> list[str]:
        """Both directions' proxies between two participants."""
        if first == second:
            raise FaultError(f"a link joins two participants: got {first!r} twice")
        states = self.states()
        links = {state.link for state in states}
        wanted = [f"{first}-from-{second}", f"{second}-from-{first}"]
        missing = [name for name in wanted if name not in links]
        if missing:
            known = sorted({p for name in links for p in name.split("-from-")})
            raise FaultError(f"no link between {first!r} and {second!r} "
                             f"(participants with links: {', '.join(known) or 'none'})")
        return [state.name for link in wanted for state in states if state.link == link]

    def partition(self, first: str, second: str, one_way: bool = False) -> list[str]:
        """Cuts the link both ways, or (``one_way``) only ``second``'s way to ``first``:
        ``second``'s services lose ``first``'s Kafka while ``first``'s still reach
        ``second``'s. Returns the proxies cut."""
        names = self.between(first, second)
        if one_way:
            names = [name for name in names
                     if name.split("#", 1)[0] == f"{first}-from-{second}"]
        for name in names:
            self._call("POST", f"/proxies/{name}", {"enabled": False})
        return names

    def slow(self, first: str, second: str, latency_ms: int) -> list[str]:
        """Adds ``latency_ms`` each way on both directions (replacing an earlier slowing)."""
        if latency_ms <= 0:
            raise FaultError(f"--latency: expected a positive duration, got {latency_ms} ms")
        names = self.between(first, second)
        for name in names:
            self._drop_toxics(name)
            for stream in ("upstream", "downstream"):
                self._call("POST", f"/proxies/{name}/toxics",
                           {"name": f"{LATENCY_TOXIC}-{stream}", "type": "latency",
                            "stream": stream, "toxicity": 1.0,
                            "attributes": {"latency": latency_ms, "jitter": 0}})
        return names

    def heal(self, first: str | None = None, second: str | None = None) -> list[str]:
        """Restores the link between two participants, or every link; returns the proxies
        that were cut or slowed."""
        if (first is None) != (second is None):
            raise FaultError("heal takes two participants, or none for every link")
        names = (self.between(first, second) if first is not None and second is not None
                 else [state.name for state in self.states()])
        healed = []
        for state in self.states():
            if state.name not in names:
                continue
            if state.latency_ms or not state.enabled:
                healed.append(state.name)
            self._drop_toxics(state.name)
            if not state.enabled:
                self._call("POST", f"/proxies/{state.name}", {"enabled": True})
        return healed

    def _drop_toxics(self, name: str) -> None:
        for toxic in self._call("GET", f"/proxies/{name}/toxics"):
            self._call("DELETE", f"/proxies/{name}/toxics/{toxic['name']}")


_COMPACT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*$")
_COMPACT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def duration_ms(text: str, option: str) -> int:
    """``30s``, ``500ms``, ``2m``, ``1h`` in milliseconds; says what was expected."""
    match = _COMPACT.match(text)
    if match is None:
        raise FaultError(f"{option}: expected a duration such as 30s, 500ms or 2m, got {text!r}")
    return round(float(match.group(1)) * _COMPACT_MS[match.group(2)])


# -- processes ---------------------------------------------------------------------------


def sunion_pids() -> dict[str, int]:
    """Fragment -> pid of every SUnion process on this machine (from their command lines
    and configurations)."""
    found: dict[str, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            arguments = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"medusa.sunion" not in arguments or b"--config" not in arguments:
            continue
        config_path = arguments[arguments.index(b"--config") + 1].decode()
        try:
            fragment = json.loads(Path(config_path).read_text())["fragment"]
        except (OSError, ValueError, KeyError):
            continue
        found[str(fragment)] = int(entry.name)
    return found


def kill(pid: int, gone_within_s: float = 10.0) -> None:
    """kill -9: no clean-up, as a crash. Returns once the process is gone (or a zombie), so
    that what restarts it next does not find it still running."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + gone_within_s
    while process_start_ticks(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
