"""Latency figures as the benchmarks and the Linear Road validator report them."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def percentile(values: Sequence[float], share: float) -> float | None:
    """The nearest-rank percentile of ``values`` (0 < share <= 1); None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def with_missing(latencies: Iterable[float], expected: int | None) -> list[float]:
    """The latencies, padded with ``inf`` for each expected result that did not arrive."""
    values = list(latencies)
    if expected is not None and expected > len(values):
        values.extend([math.inf] * (expected - len(values)))
    return values


def rounded(value: float | None, digits: int = 3) -> float | str | None:
    """For JSON: a finite value rounded, ``inf`` as the string "inf"."""
    if value is None:
        return None
    return "inf" if math.isinf(value) else round(value, digits)


def shown(value: float | None) -> str:
    if value is None:
        return "-"
    return "never" if math.isinf(value) else f"{value:.2f}s"
