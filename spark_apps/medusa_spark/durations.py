"""Spark interval strings ('10 seconds', '5 minutes', '1 millisecond') in milliseconds."""

from __future__ import annotations

import re

_UNITS_MS = {"millisecond": 1, "second": 1000, "minute": 60_000, "hour": 3_600_000,
             "day": 86_400_000}
# ASCII: case-insensitive matching would otherwise take 'ſ' for 's' and 'ı' for 'i'.
_PART = re.compile(r"\s*(-?\d+)\s*(millisecond|second|minute|hour|day)s?\s*",
                   re.IGNORECASE | re.ASCII)


def duration_ms(text: str) -> int:
    """Milliseconds of a duration such as '1 minute 30 seconds'."""
    position, total = 0, 0
    for match in _PART.finditer(text):
        if match.start() != position:
            break
        total += int(match.group(1)) * _UNITS_MS[match.group(2).lower()]
        position = match.end()
    if position != len(text) or not text.strip():
        raise ValueError(f"not a duration: {text!r} (expected e.g. '10 seconds', '5 minutes')")
    return total
