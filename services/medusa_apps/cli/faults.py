"""Faults made on purpose and what they did: the ``fault`` group (links cut or slowed
through toxiproxy, processes killed), ``chaos`` (each part of the infrastructure killed
under load) and ``trace`` (Jaeger's timelines of failures, partitions, moves and scaling
steps)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from medusa.errors import MedusaError
from medusa.settings import StackSettings
from medusa_apps.cli.common import RunDirOpt, _fail, _spark, _stack_settings, console


def trace_command(
    last: Annotated[int, typer.Option("--last", min=1, help="How many traces, newest first.")
                    ] = 1,
    kind: Annotated[str, typer.Option(
        "--kind", help="Which traces: failure (a node declared failed, its takeovers and "
                       "their first outputs), partition (a fragment's failed input: "
                       "its SUnion's delay, tentative release, heal and stabilization, "
                       "then the reconciliation and REC_DONE), move (a BPM move: offer, "
                       "answer, hand-over, first output at the partner), or autoscale (a "
                       "decision of medusa autoscale, with its reason and scale step).")
                      ] = "failure",
    lookback: Annotated[int, typer.Option(
        "--lookback", min=1, help="Seconds back to look for them.")] = 3600,
    png: Annotated[Path | None, typer.Option(
        "--png", help="Also draw each trace as a PNG timeline: this path for the newest, "
                      "NAME-2.png, NAME-3.png, ... for the older ones.")] = None,
) -> None:
    """Show recent traces from Jaeger's API as timelines (spans, services, durations, parents)."""
    import httpx

    from medusa import trace_view
    from medusa.endpoints import resolve

    if kind not in trace_view.KINDS:
        raise _fail(f"--kind: expected one of {', '.join(sorted(trace_view.KINDS))}, "
                    f"got {kind!r}", 2)
    query_url = resolve().jaeger_query_url
    try:
        traces = trace_view.recent(query_url, kind, last, lookback)
    except httpx.HTTPError as error:
        raise _fail(f"Jaeger's query API at {query_url} did not answer: {error}") from None
    if not traces:
        raise _fail(f"no {kind} trace in Jaeger ({query_url}) in the last {lookback}s")
    for index, found in enumerate(traces):
        console.print(f"[bold]{escape(trace_view.title(found))}[/bold]")
        console.print("   start  duration", highlight=False)
        for line in trace_view.text_lines(found):
            console.print(escape(line), highlight=False, soft_wrap=True)
        if png is not None:
            path = png if index == 0 else png.with_name(f"{png.stem}-{index + 1}{png.suffix}")
            console.print(f"timeline: {trace_view.write_png(found, path)}")


def _links() -> Any:
    from medusa.endpoints import resolve
    from medusa.faults import Links

    try:
        return Links(resolve().toxiproxy_url)
    except MedusaError as error:
        raise _fail(str(error)) from None


def _print_links(links: Any) -> None:
    table = Table("link", "cluster", "reached by", "through", "state")
    for state in links.states():
        table.add_row(state.name, state.cluster, state.viewer, state.listen, state.condition)
    console.print(table)


def _hold_then_heal(links: Any, first: str, second: str, for_: str | None, what: str) -> None:
    """With ``--for``: waits (showing the time left), then heals the link."""
    import time

    from medusa.faults import duration_ms

    if for_ is None:
        console.print(f"{what}; `medusa fault heal {first} {second}` restores it")
        return
    seconds = duration_ms(for_, "--for") / 1000
    ends = time.monotonic() + seconds
    try:
        with console.status("") as shown:
            while (left := ends - time.monotonic()) > 0:
                shown.update(f"{what}: healing in {left:.0f}s (Ctrl-C heals now)")
                time.sleep(min(left, 0.5))
    finally:
        links.heal(first, second)
        console.print(f"healed the link between {first} and {second} after "
                      f"{seconds - max(ends - time.monotonic(), 0):.1f}s")


def chaos(
    faults: Annotated[str, typer.Option(
        help="Faults to run, comma-separated: broker, controller, registry, catalog, "
             "detector (default: all).")] = "",
    out: Annotated[Path, typer.Option(help="Folder for JSON and the plot.")
                   ] = Path("bench-results"),
) -> None:
    """Kill -9 each part of the infrastructure under load, on a stack of three brokers of its
    own, and tell what each cost: input held, recovery time, results lost and duplicated."""
    import json

    from medusa_apps.bench import chaos as scenarios
    from medusa_apps.bench.report import bar_plot, write_json

    chosen = tuple(f.strip() for f in faults.split(",") if f.strip()) or scenarios.FAULTS
    unknown = [f for f in chosen if f not in scenarios.FAULTS]
    if unknown:
        raise _fail(f"--faults: unknown {', '.join(unknown)} (expected some of "
                    f"{', '.join(scenarios.FAULTS)})", 2)
    spark = _spark("medusa-chaos")
    try:
        outcomes = scenarios.measure(StackSettings(), spark, console.print, chosen)
    except RuntimeError as error:
        raise _fail(str(error)) from None
    table = Table(title="Faults under load (one participant, 3 brokers, steady input)")
    for column in ("fault", "killed", "input delay", "output stall (ordinary gap)", "recovery",
                   "lost", "duplicated"):
        table.add_column(column)
    for o in outcomes:
        table.add_row(o.fault, o.component, f"{o.input_delay_s:g} s",
                      f"{o.stall_s:g} s ({o.stall_before_s:g} s)", f"{o.recovery_s:g} s",
                      f"{o.lost} of {o.expected}", str(o.duplicated))
    console.print(table)
    summary = [o.as_dict() for o in outcomes]
    write_json(out / "chaos.json", {"chaos": summary})
    bench_file = out / "bench.json"
    bench = json.loads(bench_file.read_text()) if bench_file.is_file() else {}
    write_json(bench_file, {**bench, "chaos": summary})
    if outcomes:
        bar_plot(out / "chaos_recovery.png", "Recovery after kill -9, under load",
                 [o.fault for o in outcomes], [o.recovery_s for o in outcomes], "seconds")


def fault_partition(
    first: Annotated[str, typer.Argument(help="A participant, e.g. alpha.")],
    second: Annotated[str, typer.Argument(help="Another participant, e.g. beta.")],
    for_: Annotated[str | None, typer.Option(
        "--for", help="Heal after this long (30s, 2m); without it the link stays cut.")] = None,
    one_way: Annotated[bool, typer.Option(
        "--one-way", help="Cut only SECOND's way to FIRST: SECOND loses FIRST's Kafka, FIRST "
                          "still reaches SECOND's.")] = False,
) -> None:
    """Cut the link between two participants, both ways: neither reaches the other's Kafka."""
    with _links() as links:
        try:
            links.partition(first, second, one_way)
            cut = (f"{second} cannot reach {first}" if one_way
                   else f"{first} and {second} are cut off")
            _hold_then_heal(links, first, second, for_, cut)
        except MedusaError as error:
            raise _fail(str(error), 2) from None


def fault_slow(
    first: Annotated[str, typer.Argument(help="A participant, e.g. alpha.")],
    second: Annotated[str, typer.Argument(help="Another participant, e.g. beta.")],
    latency: Annotated[str, typer.Option(
        "--latency", help="Added each way, e.g. 2s or 300ms.")] = "1s",
    for_: Annotated[str | None, typer.Option(
        "--for", help="Heal after this long (30s, 2m); without it the link stays slow.")
                    ] = None,
) -> None:
    """Slow the link between two participants down (latency each way, both directions)."""
    from medusa.faults import duration_ms

    with _links() as links:
        try:
            links.slow(first, second, duration_ms(latency, "--latency"))
            _hold_then_heal(links, first, second, for_,
                            f"the link between {first} and {second} is slow (+{latency})")
        except MedusaError as error:
            raise _fail(str(error), 2) from None


def fault_heal(
    first: Annotated[str | None, typer.Argument(help="A participant \\[default: every link].")
                     ] = None,
    second: Annotated[str | None, typer.Argument(help="The other participant.")] = None,
) -> None:
    """Restore the link between two participants, or every link."""
    with _links() as links:
        try:
            healed = links.heal(first, second)
        except MedusaError as error:
            raise _fail(str(error), 2) from None
        console.print(f"healed: {', '.join(healed)}" if healed else "every link was up")
        _print_links(links)


def fault_status() -> None:
    """The links between participants and their state (up, cut, slow)."""
    with _links() as links:
        try:
            _print_links(links)
        except MedusaError as error:
            raise _fail(str(error)) from None


def fault_kill(
    target: Annotated[str, typer.Argument(
        help="A process `medusa up`/`demo` started (e.g. node-alpha-1, kafka-alpha-2, "
             "registry, catalog, detector), sunion:FRAGMENT (e.g. sunion:alpha/sensors/f0), "
             "or controller:PARTICIPANT (the broker that leads its cluster's KRaft quorum).")],
    run_dir: RunDirOpt = None,
) -> None:
    """kill -9 a process, as a crash (its node starts a killed SUnion again; `medusa up`
    starts a killed part of the stack again)."""
    from medusa.faults import kill, sunion_pids
    from medusa.stack.launcher import recorded_layout, running_processes
    from medusa.stack.layout import StackLayout

    if target.startswith("sunion:"):
        fragment = target.removeprefix("sunion:")
        pids = sunion_pids()
        if fragment not in pids:
            raise _fail(f"no SUnion of fragment {fragment!r} runs here "
                        f"(running: {', '.join(sorted(pids)) or 'none'})", 2)
        pid = pids[fragment]
    else:
        layout = recorded_layout(StackLayout.from_settings(_stack_settings(run_dir=run_dir)))
        running = running_processes(layout)
        if target.startswith("controller:"):
            from medusa.stack.quorum import active_controller

            try:
                participant = layout.participant(target.removeprefix("controller:"))
                target = active_controller(layout, participant).component
            except (KeyError, RuntimeError) as error:
                raise _fail(f"{target}: {error}", 2) from None
        if target not in running:
            raise _fail(f"no process {target!r} of the local federation runs "
                        f"(running: {', '.join(sorted(running)) or 'none'})", 2)
        pid = running[target].pid
    kill(pid)
    console.print(f"killed {target} (pid {pid}) with SIGKILL")
