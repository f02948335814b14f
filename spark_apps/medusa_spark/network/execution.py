"""Which of a network's fragments may run in Spark's Real-time Mode (``medusa_spark.realtime``)
and which stay on micro-batches, from what the network says."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from medusa_spark.network.fragments import Fragment
    from medusa_spark.network.model import NetworkSpec
    from medusa_spark.network.validate import Plan

_GENERATOR = re.compile(
    r"\b(explode|explode_outer|posexplode|posexplode_outer|inline|inline_outer|stack|"
    r"json_tuple)\s*\(", re.IGNORECASE)
"""Spark SQL's generators, by name, in a map's expression."""
REAL_TIME = "real-time"
MICRO_BATCH = "micro-batch"


def realtime_refusal(plan: Plan, fragment: Fragment) -> str | None:
    """Why the fragment runs on micro-batches though its network asks for Real-time Mode;
    None when it can run that way. Only what the network says counts here (it is part of
    the fragment's fingerprint); ``execution_of`` adds what the node's Spark says."""
    return network_realtime_refusal(plan.network, fragment.boxes)


def network_realtime_refusal(network: NetworkSpec, boxes: Iterable[str]) -> str | None:
    """``realtime_refusal`` from the network's definition alone (no Spark session: a move
    asks it)."""
    from medusa_spark.boxes import BOX_TYPES

    boxes = list(boxes)
    if network.execution != REAL_TIME:
        return f"the network's execution is {network.execution}"
    for box in boxes:
        spec = network.boxes[box]
        if BOX_TYPES[spec.type].stateful:
            return (f"box {box!r} ({spec.type}) keeps state: Real-time Mode runs stateless "
                    "boxes only")
        if spec.type == "map" and any(_GENERATOR.search(str(expression)) for expression in
                                      (spec.params.get("fields") or {}).values()):
            return (f"box {box!r} (map) has a generator: one input may give no tuple, and "
                    "the BOUNDARY records it carries in Real-time Mode would be lost with it")
    if any(network.boxes[box].ha == "active" for box in boxes):
        return "an active standby (ha: active) follows its primary on micro-batches"
    return None
