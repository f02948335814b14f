"""The SUnion in the query (``sunion: in-query``) as the node and ``medusa status`` see it:
its state comes from the source's metrics in the query's progress, as a SUnion process's
comes from its state file (``SUnionProcess.state``), under the same keys."""

from __future__ import annotations

from typing import Any

SUNION_SOURCE = "medusa.spark.sunion.SUnionSource"
"""The Spark source (``spark_apps/jvm/medusa/spark/sunion``)."""


def _number(text: str | None) -> int | None:
    if text is None or text == "null":
        return None
    return int(text)


def in_query_state(progress: dict[str, Any], fragment: str) -> dict[str, Any]:
    """The SUnion's state from a batch's progress ({} before the first batch)."""
    metrics = next((source.get("metrics") or {} for source in progress.get("sources", [])
                    if "dpcState" in (source.get("metrics") or {})), None)
    if not metrics:
        return {}
    released = _number(metrics.get("releasedThrough"))
    stable = _number(metrics.get("stableThrough"))
    return {
        "fragment": fragment, "in_query": True,
        "held_buckets": _number(metrics.get("heldBuckets")) or 0,
        "held_tuples": _number(metrics.get("heldTuples")) or 0,
        "released_through": stable,
        "tentative_through": released if released != stable else None,
        "dpc_state": metrics.get("dpcState", "STABLE"),
        "epoch": _number(metrics.get("epoch")) or 0,
        "tentative_releases": _number(metrics.get("tentativeReleases")) or 0,
        "redos": _number(metrics.get("redos")) or 0,
        "records_in": _number(metrics.get("recordsIn")) or 0,
        "dead_lettered": _number(metrics.get("deadLettered")) or 0,
        "transactions": _number(metrics.get("releases")) or 0,
        "lag": _number(metrics.get("maxOffsetsBehindLatest")) or 0,
        "failed_inputs": _names(metrics.get("failedInputs")),
        "waiting_for_inputs": _names(metrics.get("waitingForInputs")),
    }


def _names(text: str | None) -> list[str]:
    return [name for name in (text or "").split(",") if name]
