"""The versions the installers' poms pin: the install folders under the cache are named
after them, so the launcher reads them from the same files the installers do."""

from __future__ import annotations

import re
from pathlib import Path


def pinned(pom: Path, prop: str) -> str:
    """The value of the property ``prop`` in ``pom`` (e.g. ``kafka.version``)."""
    match = re.search(rf"<{re.escape(prop)}>([^<]+)</{re.escape(prop)}>", pom.read_text())
    if not match:
        raise RuntimeError(f"{pom} does not pin {prop}")
    return match.group(1).strip()
