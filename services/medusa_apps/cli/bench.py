"""``medusa bench``: the options checked here; the benchmarks are ``medusa_apps.bench``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from medusa_apps.cli.common import _fail, console


def bench(
    records: Annotated[int, typer.Option(min=1000, help="Records per throughput run.")
                       ] = 200_000,
    hold: Annotated[int, typer.Option(min=10, help="Seconds each Linear Road step holds "
                                                   "the peak rate (the benchmark: 120 or "
                                                   "more; less for a quick run).")] = 120,
    max_xways: Annotated[int, typer.Option(min=1, help="Largest L to try.")] = 16,
    only: Annotated[str, typer.Option(
        help="Run only these parts, comma-separated: producers, spark, sunion, "
             "low-rate, latency, linear-road, move, scale, failover, dpc, dpc-matrix, bpm "
             "(default: all).")
                       ] = "",
    linear_road: Annotated[bool, typer.Option(help="Run the Linear Road steps.")] = True,
    linear_road_network: Annotated[str, typer.Option(
        help="The shipped Linear Road network the steps run: linear_road.yaml (the road one "
             "group, as the demo runs it) or linear_road_partitioned.yaml.")
                                   ] = "linear_road.yaml",
    linear_road_sunion: Annotated[str, typer.Option(
        help="Where the Linear Road network's SUnions run: process (as shipped) or "
             "in-query (its fragments' Spark sources).")] = "process",
    out: Annotated[Path, typer.Option(help="Folder for JSON and plots.")] = Path("bench-results"),
    state_mb: Annotated[str, typer.Option(
        help="State sizes in MB for the migration benchmark, comma-separated (the "
             "fragment's checkpointed state, every version it retains): each is moved "
             "warm, the smallest and the largest also cold; empty to skip it.")
                        ] = "10,100,300,1000",
    failover: Annotated[bool, typer.Option(
        help="Run the failover benchmark (kill -9 of a node, false suspicions under load).")
                        ] = True,
) -> None:
    """Benchmarks against the running federation, side by side in one run."""
    from medusa_apps.bench.run import PARTS, run_all

    try:
        sizes = [int(size) for size in state_mb.split(",") if size.strip()]
    except ValueError:
        raise _fail(f"--state-mb: expected whole numbers of MB separated by commas, got "
                    f"{state_mb!r}", 2) from None
    parts = [part.strip() for part in only.split(",") if part.strip()]
    unknown = [part for part in parts if part not in PARTS]
    if unknown:
        raise _fail(f"--only: unknown part(s) {', '.join(unknown)}; known: {', '.join(PARTS)}",
                    2)
    from medusa_spark.networks import LINEAR_ROAD, LINEAR_ROAD_PARTITIONED

    if linear_road_network not in (LINEAR_ROAD, LINEAR_ROAD_PARTITIONED):
        raise _fail(f"--linear-road-network: expected {LINEAR_ROAD} or "
                    f"{LINEAR_ROAD_PARTITIONED}, got {linear_road_network!r}", 2)
    if linear_road_sunion not in ("process", "in-query"):
        raise _fail(f"--linear-road-sunion: expected process or in-query, got "
                    f"{linear_road_sunion!r}", 2)
    try:
        run_all(out, records, hold, max_xways, linear_road, console.print, sizes, failover,
                only=parts or None, linear_road_network=linear_road_network,
                linear_road_sunion=linear_road_sunion)
    except KeyboardInterrupt:
        # bench.json holds an earlier run's interruptions too: this run's is this one.
        console.print(f"stopped; what was measured is in {out}/")
        raise typer.Exit(130) from None
    console.print(f"results in {out}/")
