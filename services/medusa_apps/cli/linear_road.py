"""The ``linear-road`` group: an input or a finished run looked at through the benchmark's
rules."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from medusa_apps.cli.common import (
    JsonSummaryOpt,
    ParticipantOpt,
    _clients,
    _fail,
    console,
    errors,
)


def linear_road_traffic_stats(
    from_file: Annotated[Path | None, typer.Option(
        "--from-file", exists=True, dir_okay=False,
        help="A file of the benchmark's generator (15-field CSV, in time order); without "
             "it, the project's traffic simulation.")] = None,
    minutes: Annotated[str, typer.Option(
        help="The minutes to count, FIRST-LAST (from 1, as the benchmark's); the five "
             "before FIRST are read too, for the toll rule's averages.")] = "6-20",
    duration: Annotated[int, typer.Option(
        min=60, help="Simulated seconds (the simulation's ramp spans them).")] = 1200,
    peak_rate: Annotated[float, typer.Option(
        min=1, help="The simulation's reports/s per expressway at the end of its ramp.")
                         ] = 1700.0,
    seed: Annotated[int, typer.Option(help="The simulation's seed.")] = 7,
    as_json: JsonSummaryOpt = False,
) -> None:
    """What an input looks like through the benchmark's rules: rate, cars per
    segment-minute, tolls, accidents and queries (to compare the simulation with the
    benchmark's generator)."""
    import itertools

    from medusa.linear_road.sources import BadLines, from_csv, simulated
    from medusa.linear_road.traffic import TrafficProfile
    from medusa.linear_road.traffic_stats import traffic_stats

    match = re.fullmatch(r"(\d+)-(\d+)", minutes)
    if match is None or not 1 <= int(match[1]) <= int(match[2]):
        raise _fail(f"--minutes: expected FIRST-LAST such as 6-20, got {minutes!r}", 2)
    first, last = int(match[1]), int(match[2])
    warm_up = max(1, first - 5)

    def figures(seconds: Any) -> dict[str, Any]:
        window = itertools.takewhile(lambda second: second[0] < last * 60, seconds)
        records = (keyed.value for t, batch in window if t >= (warm_up - 1) * 60
                   for keyed in batch)
        return traffic_stats(records, first_minute=first).as_dict()

    columns = {}
    with console.status("applying the benchmark's rules"):
        columns["simulation"] = figures(simulated(TrafficProfile(
            duration_s=duration, peak_rate=peak_rate, seed=seed)))
        if from_file is not None:
            columns[from_file.name] = figures(from_csv(from_file, BadLines()))
    if as_json:
        print(json.dumps(columns))
        return
    table = Table(title=f"Linear Road traffic, minutes {first}-{last}, through the "
                        "benchmark's rules")
    table.add_column("figure")
    for name in columns:
        table.add_column(name, justify="right", no_wrap=True)
    for label, path in TRAFFIC_FIGURES:
        cells = []
        for found in columns.values():
            value = found
            for key in path:
                value = value[key]
            cells.append("-" if value is None else
                         f"{value:.2%}" if "share" in path[-1] else f"{value:,.1f}"
                         if isinstance(value, float) and value < 100 else f"{value:,.0f}")
        table.add_row(label, *cells)
    console.print(table)


TRAFFIC_FIGURES = (
    ("reports/s, first minute", ("rate_per_s", "first_minute")),
    ("reports/s, busiest minute", ("rate_per_s", "peak_minute")),
    ("cars per segment-minute, p50", ("cars_per_segment_minute", "p50")),
    ("cars per segment-minute, p90", ("cars_per_segment_minute", "p90")),
    ("cars per segment-minute, max", ("cars_per_segment_minute", "max")),
    ("segment-minutes with LAV < 40", ("lav_below_40_share",)),
    ("segment-minutes tolled", ("tolled_share",)),
    ("toll when charged, p50", ("toll", "p50")),
    ("toll when charged, p90", ("toll", "p90")),
    ("toll when charged, max", ("toll", "max")),
    ("tolled within 15 segments of the ends", ("tolled_near_the_ends_share",)),
    ("accidents per hour", ("accidents_per_hour",)),
    ("balance queries per report", ("balance_query_share",)),
    ("expenditure queries per report", ("expenditure_query_share",)),
)
"""The rows of ``linear-road traffic-stats``: a label and the figure's keys."""


def linear_road_validate(
    prefix: Annotated[str, typer.Option(
        "--prefix", help="The run's topic prefix (as given to `produce linear-road "
                         "--topic-prefix`).")] = "",
    participant: ParticipantOpt = None,
    json_file: Annotated[Path | None, typer.Option(
        "--json", dir_okay=False, help="Also write the result as JSON to this file.")] = None,
    outputs_file: Annotated[Path | None, typer.Option(
        "--write-outputs", dir_okay=False,
        help="Also write every output as the benchmark does (type, then its fields in the "
             "paper's order, Emit in simulation seconds), one per line.")] = None,
    idle: Annotated[float, typer.Option(
        min=0.5, help="The topics are read until nothing came for this many seconds.")
                    ] = 5.0,
) -> None:
    """Check a finished run: read its input and output topics, compute the reference from
    the inputs and compare, per output type (0 toll notifications, 1 accident alerts,
    2 account balances, 3 daily expenditures): missing, wrong, duplicated and late
    (> 5 s) outputs, and response times. Exit 0 on PASS, 1 on FAIL, 2 when the run cannot
    be read (a topic missing, no input)."""
    from medusa.linear_road.records import PositionReport
    from medusa.linear_road.reference import compute
    from medusa.linear_road.run_records import MissingTopicsError, read_run
    from medusa.linear_road.validation import Triggers, benchmark_lines, validate

    kafka, registry = _clients(participant)
    try:
        with console.status(f"reading the run's topics ({prefix or 'no prefix'}) until "
                            f"nothing comes for {idle:g}s"):
            run = read_run(kafka, registry, prefix, idle_s=idle)
    except MissingTopicsError as error:
        raise _fail(str(error), code=2) from None
    reports = run.count(PositionReport)
    if not reports:
        raise _fail(f"no position reports in {prefix}linear-road.position-reports", code=2)
    console.print(f"read {len(run.inputs):,} input records ({reports:,} position reports) "
                  f"and {sum(map(len, run.outputs.values())):,} outputs")
    if not run.complete:
        errors.print("[yellow]warning:[/] reading stopped at its time limit, not at the "
                     "topics' end")
    with console.status("computing the reference"):
        reference = compute(run.reference_input())
    result = validate(run.inputs, run.outputs, reference)
    console.print(result.table())
    if json_file is not None:
        json_file.write_text(json.dumps(result.as_dict(), indent=2) + "\n")
    if outputs_file is not None:
        lines = benchmark_lines(run.outputs, Triggers.of(run.inputs))
        outputs_file.write_text("".join(line + "\n" for line in lines))
    if not result.passed:
        for type_result in result.types:
            for label, rows in (("missing", type_result.comparison.missing_examples),
                                ("unexpected", type_result.comparison.unexpected_examples)):
                for row in rows:
                    errors.print(f"{type_result.kind.name}, {label}: {json.dumps(row)}")
        console.print("[bold red]FAIL[/]")
        raise typer.Exit(1)
    console.print("[bold green]PASS[/]")
