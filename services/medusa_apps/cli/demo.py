"""``medusa demo``: the whole path in one command; the work is in ``medusa_apps.demo``."""

from __future__ import annotations

from typing import Annotated

import typer

from medusa_apps.cli.common import console


def demo(
    duration: Annotated[int, typer.Option(min=120, help="Simulated seconds of traffic.")] = 300,
    speedup: Annotated[float, typer.Option(
        min=1, max=10, help="Simulated seconds per wall second (1: the benchmark's rate, "
                            "1,700 reports/s per expressway, in real time).")] = 1.0,
    xways: Annotated[int, typer.Option("--xways", "-L", min=1, help="Expressways.")] = 1,
    keep: Annotated[bool, typer.Option(
        "--keep/--stop", help="Leave the node and the network running afterwards (to look "
                              "at them in the console), or stop both.")] = True,
) -> None:
    """The main job: the federation, a node, the Linear Road network, traffic, checked answers.
    Exits 0 on PASS, 1 when an output is missing, wrong or duplicated, 2 when every output is
    right but some came later than the 5 s rule allows."""
    from medusa_apps.demo import Outcome, run_demo

    outcome = run_demo(duration, speedup, xways, console, keep_running=keep)
    if outcome is not Outcome.PASSED:
        raise typer.Exit(int(outcome))
