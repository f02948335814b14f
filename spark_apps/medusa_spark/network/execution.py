"""Which of a network's fragments may run in Spark's Real-time Mode (``medusa_spark.realtime``)
and which stay on micro-batches, from what the network says."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from medusa_spark.network.fragments import Fragment
    from medusa_spark.network.validate import Plan

REAL_TIME = "real-time"
MICRO_BATCH = "micro-batch"


def realtime_refusal(plan: Plan, fragment: Fragment) -> str | None:
    """Why the fragment runs on micro-batches though its network asks for Real-time Mode;
    None when it can run that way. Only what the network says counts here (it is part of
    the fragment's fingerprint); ``execution_of`` adds what the node's Spark says."""
    network = plan.network
    if network.execution != REAL_TIME:
        return f"the network's execution is {network.execution}"
    for box in fragment.boxes:
        if plan.boxes[box].stateful:
            return (f"box {box!r} ({network.boxes[box].type}) keeps state: Real-time Mode "
                    "runs stateless boxes only")
    if network.availability_bound is not None:
        return ("DPC (availability_bound) redoes a failure period on micro-batches, "
                "beside the fragment")
    if any(network.boxes[box].ha == "active" for box in fragment.boxes):
        return "an active standby (ha: active) follows its primary on micro-batches"
    return None
