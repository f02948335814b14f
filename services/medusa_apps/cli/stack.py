"""The local federation's life: install, up, down, and status with its tables
(``federation_tables`` is public, so that the tables are tested without a federation)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from medusa.settings import StackSettings
from medusa_apps.cli.common import RunDirOpt, _fail, _stack_settings, console

ParticipantsOpt = Annotated[int | None, typer.Option(
    "--participants", min=1, max=8,
    help="Participants (Kafka clusters) \\[default: MEDUSA_STACK_PARTICIPANTS or 2].")]
KafkaPortOpt = Annotated[int | None, typer.Option(
    "--kafka-base-port", min=1024, max=65000,
    help="First participant's broker port; the next ones add 10 "
         "\\[default: MEDUSA_KAFKA_BASE_PORT or 19092].")]
RegistryPortOpt = Annotated[int | None, typer.Option(
    "--registry-port", min=1024, max=65535,
    help="Schema registry port \\[default: MEDUSA_REGISTRY_PORT or 18081].")]


def install() -> None:
    """Fetch Kafka, the registry, Spark's connectors, Jaeger and toxiproxy (pinned, cached)."""
    from medusa.stack.install import install as run_install

    try:
        run_install(StackSettings())
    except RuntimeError as error:
        raise _fail(str(error)) from None


def up(participants: ParticipantsOpt = None, kafka_base_port: KafkaPortOpt = None,
       registry_port: RegistryPortOpt = None, run_dir: RunDirOpt = None,
       skip_install: Annotated[bool, typer.Option(
           "--skip-install", help="Do not check the installation first.")] = False,
       bpm: Annotated[bool, typer.Option(
           "--bpm/--no-bpm", help="Start each participant's BPM agent.")] = True,
       hdfs: Annotated[bool, typer.Option(
           "--hdfs", help="Also start a local HDFS (a NameNode and a DataNode) for the nodes' "
                          "checkpoints.")] = False,
       s3: Annotated[bool, typer.Option(
           "--s3", help="Also start a local S3-compatible object store (s3proxy) for the "
                        "nodes' checkpoints on s3a://.")] = False,
       brokers: Annotated[int | None, typer.Option(
           min=1, max=5, help="Brokers per participant's Kafka cluster, each also a KRaft "
                              "controller; 3 gives every topic 3 replicas, 2 in sync "
                              "\\[default: MEDUSA_KAFKA_BROKERS or 1].")] = None) -> None:
    """Start the local federation: one Kafka cluster per participant, the registry, Jaeger,
    the catalog, the failure detector and each participant's BPM agent."""
    from medusa.stack.install import install as run_install
    from medusa.stack.launcher import up as start_stack
    from medusa.stack.layout import StackLayout
    from medusa_apps.services import SERVICE_COMMANDS

    settings = _stack_settings(participants=participants, kafka_base_port=kafka_base_port,
                               registry_port=registry_port, run_dir=run_dir,
                               stack_bpm_agents=None if bpm else False,
                               stack_hdfs=True if hdfs else None,
                               stack_s3=True if s3 else None, kafka_brokers=brokers)
    layout = StackLayout.from_settings(settings)
    try:
        if not skip_install:
            run_install(settings)
        console.print(f"[bold]Starting the local federation[/] (run folder {layout.run_dir})")
        endpoints = start_stack(layout, SERVICE_COMMANDS, report=console.print)
    except RuntimeError as error:  # the installers' failures, and the stack's own
        raise _fail(str(error)) from None
    table = Table(title="Medusa local federation")
    table.add_column("component")
    table.add_column("endpoint")
    for name, bootstrap in endpoints.kafka.items():
        table.add_row(f"Kafka, participant {name}", bootstrap)
    for link, bootstrap in endpoints.links.items():
        cluster, viewer = link.split("-from-")
        table.add_row(f"  {cluster}'s Kafka from {viewer} (link)", bootstrap)
    if endpoints.toxiproxy_url:
        table.add_row("toxiproxy (medusa fault)", endpoints.toxiproxy_url)
    table.add_row("schema registry (Confluent API)", endpoints.registry_url)
    table.add_row("Jaeger OTLP (gRPC)", endpoints.otlp_endpoint)
    table.add_row("Jaeger query API", endpoints.jaeger_query_url)
    table.add_row("catalog (HTTP API, /docs)", endpoints.catalog_url)
    table.add_row("failure detector (/nodes)", layout.detector_url)
    for participant in layout.bpm_participants:
        table.add_row(f"BPM agent of {participant} (medusa bpm)",
                      str(layout.logs_dir / f"bpm-{participant}.log"))
    if layout.hdfs_uri:
        table.add_row("HDFS for checkpoints (medusa node --checkpoint-root)",
                      f"{layout.hdfs_uri}/medusa/checkpoints")
    if layout.s3_endpoint:
        table.add_row(f"S3 object store, API at {layout.s3_endpoint} "
                      "(medusa node --checkpoint-root)",
                      f"s3a://{settings.s3_bucket}/checkpoints")
    console.print(table)


def down(run_dir: RunDirOpt = None, purge: Annotated[bool, typer.Option(
        "--purge", help="Also delete the clusters' data.")] = False) -> None:
    """Stop exactly the processes `medusa up` started."""
    from medusa.stack.launcher import down as stop_stack
    from medusa.stack.layout import StackLayout

    layout = StackLayout.from_settings(_stack_settings(run_dir=run_dir))
    stopped = stop_stack(layout, purge=purge, report=console.print)
    console.print(f"stopped {len(stopped)} process(es)" if stopped else "nothing was running")


def status(run_dir: RunDirOpt = None, as_json: Annotated[bool, typer.Option(
        "--json", help="Machine-readable output.")] = False) -> None:
    """Say what runs, where, and whether it answers."""
    from medusa.endpoints import resolve
    from medusa.federation_status import federation_status
    from medusa.registry import registry_client
    from medusa.stack.launcher import status as stack_status
    from medusa.stack.layout import StackLayout

    settings = _stack_settings(run_dir=run_dir)
    layout = StackLayout.from_settings(settings)
    # Against external endpoints (compose, a cluster) the local launcher started nothing.
    rows = [] if settings.external_kafka else stack_status(layout)
    endpoints = resolve(settings)
    federation = federation_status(endpoints, registry_client(endpoints.registry_url))
    if as_json:
        print(json.dumps({"components": [row.as_dict() for row in rows],
                          **federation.as_dict()}, indent=2))
        return
    if not rows:
        _print_federation(federation)
        return
    table = Table(title=f"Medusa local federation ({layout.run_dir})")
    for column in ("component", "pid", "state", "endpoint", "log"):
        table.add_column(column)
    for row in rows:
        state = ("[green]answering" if row.answering else
                 "[yellow]running, not answering" if row.running else "[red]stopped")
        table.add_row(row.name, str(row.pid or "-"), state, row.endpoint, row.log or "")
    console.print(table)
    _print_federation(federation)


def _print_federation(federation: Any) -> None:
    for renderable in federation_tables(federation):
        console.print(renderable)


PHASE_STYLES = {"running": "green", "failed": "bold red", "moving": "yellow",
                "released": "yellow", "placed": "yellow"}
DPC_STYLES = {"STABLE": "green", "UP_FAILURE": "bold red", "STABILIZATION": "yellow"}
ERROR_SHOWN = 300
"""Characters of a fragment's error shown in the table (``--json`` has all of it)."""


def federation_tables(federation: Any) -> list[Any]:
    """``medusa status``'s tables of a FederationStatus: participants, nodes, fragments
    (each followed by its boxes), and the fragments' SUnions. Names are never cut."""
    from rich.text import Text

    if federation.error:
        return [Text.assemble(("catalog: ", "yellow"), federation.error)]

    def name_column(table: Table, header: str, names: list[str]) -> None:
        # Folded over lines when the terminal is narrow, never cut short.
        table.add_column(header, no_wrap=False, overflow="fold",
                         min_width=min(32, max([len(header), *map(len, names)])))

    def number(value: float | None, pattern: str = "{:,.0f}") -> str:
        return "-" if value is None else pattern.format(value)

    participants = Table(title="participants (load in processing slots; cost D(u) = u/(1-u))")
    for column in ("participant", "Kafka", "registry", "load / capacity", "utilisation",
                   "cost"):
        participants.add_column(column, overflow="fold", justify="right" if column in (
            "load / capacity", "utilisation", "cost") else "left")
    for p in federation.participants:
        participants.add_row(
            Text(p["name"]), Text(p["kafka_bootstrap"]), Text(p.get("registry_url") or "-"),
            "-" if p.get("capacity") is None else f"{p['load']:.2f} / {p['capacity']:g}",
            number(p.get("utilisation"), "{:.0%}"), number(p.get("cost"), "{:.2f}"))

    nodes = Table(title="nodes")
    name_column(nodes, "node", [n.name for n in federation.nodes])
    for column in ("status", "secondary", "fragments", "rehearsed", "load / capacity",
                   "utilisation", "last report", "Spark UI"):
        nodes.add_column(column, justify="right" if column in (
            "fragments", "rehearsed", "load / capacity", "utilisation") else "left",
            overflow="fold")
    for n in federation.nodes:
        nodes.add_row(Text(n.name), Text(n.status, "red" if n.status == "failed" else ""),
                      Text(n.secondary or "-"), str(n.fragments),
                      str(len(n.rehearsed)) if n.rehearsed else "-",
                      "-" if n.capacity is None else f"{n.load or 0:.2f} / {n.capacity:g}",
                      "-" if n.utilisation is None else f"{n.utilisation:.0%}",
                      "-" if n.report_age_s is None else f"{n.report_age_s:.0f}s ago",
                      Text(n.spark_ui or "-"))

    tables: list[Any] = [participants, nodes]
    networks: dict[str, list[Any]] = {}
    for f in federation.fragments:
        networks.setdefault(f.network, []).append(f)
    for network, members in networks.items():
        tables += _network_tables(network, members, name_column, number)
    return tables


def _network_tables(network: str, members: list[Any], name_column: Any, number: Any
                    ) -> list[Any]:
    """One network's fragments (each followed by its boxes), their errors in red, and their
    SUnions. Rows name fragments and boxes within the network, which titles the table, so
    the names stay short enough to be shown whole."""
    from rich.text import Text

    def local(name: str) -> str:
        return name.removeprefix(f"{network}/")

    fragments = Table(title=f"{network}: fragments and their boxes (rows in/out per second)")
    name_column(fragments, "fragment / box", [local(f.name) for f in members] + [
        f"  {local(b.name)}" for f in members for b in f.boxes])
    name_column(fragments, "node", [f.node for f in members])
    fragments.add_column("phase", overflow="fold")
    fragments.add_column("HA", overflow="fold")
    fragments.add_column("DPC", overflow="fold")
    for column in ("in/s", "out/s", "batch ms", "lag", "restarts", "load", "marginal cost"):
        fragments.add_column(column, justify="right", overflow="fold")
    for f in members:
        phase = Text(f.phase, PHASE_STYLES.get(f.phase, ""))
        if f.state is not None and f.state != f.phase:
            phase.append(f" ({f.state})", "red" if f.state in ("failed", "restarting")
                         else "")
        if f.warm_target:
            phase.append(f", moving warm to {f.warm_target} " +
                         ("(replica caught up)" if f.warm_ready else "(replica loading)"),
                         "yellow")
        if f.ha == "passive":
            ha = "passive"
        elif f.replica is None:
            ha = "active, no replica"
        else:
            ha = f"active, replica on {f.replica}" + ("" if f.replica_ready else " (starting)")
        if f.reader_replica:
            ha += f"; reader-side replica on {f.reader_replica}"
        served = Text(f"\nserved by the replica on {f.serving}", "bold yellow") \
            if f.serving else Text("")
        dpc = Text(f.dpc_state, DPC_STYLES.get(f.dpc_state, ""))
        if f.tentative_results or f.corrections:
            dpc.append(f" ({f.tentative_results} tentative, {f.corrections} corrected)", "dim")
        fragments.add_row(Text(local(f.name), "bold"), Text(f.node), phase,
                          Text.assemble(ha, served), dpc,
                          number(f.input_rate), number(f.processing_rate),
                          number(f.batch_duration_ms), number(f.lag), str(f.restarts),
                          number(f.load, "{:.2f}"), number(f.marginal_cost, "{:.2f}"))
        for index, box in enumerate(f.boxes):
            fragments.add_row(Text(f"  {local(box.name)}", "dim"), "", "", "", "",
                              number(box.input_rate), number(box.processing_rate), "", "", "",
                              "", "", end_section=index == len(f.boxes) - 1)
    # Errors go under the table, whole lines in red: a column would squeeze the names.
    errors = [Text.assemble((f"{f.name}: ", "bold red"), (_shortened(f.error), "red"))
              for f in members if f.error]
    sunions = Table(title=f"{network}: SUnion of each fragment")
    name_column(sunions, "fragment", [local(f.name) for f in members])
    for column in ("held buckets", "held tuples", "released through", "tentative through",
                   "failed inputs", "lag", "dead letters"):
        sunions.add_column(column, justify="right", overflow="fold")
    for f in members:
        s = f.sunion
        if s is None:
            sunions.add_row(Text(local(f.name)), "-", "-", "-", "-", "-", "-", "-")
        else:
            sunions.add_row(Text(local(f.name)), number(s.held_buckets), number(s.held_tuples),
                            "-" if s.released_through is None else str(s.released_through),
                            "-" if s.tentative_through is None else str(s.tentative_through),
                            Text(", ".join(s.failed_inputs) or "-",
                                 "red" if s.failed_inputs else ""),
                            number(s.lag), number(s.dead_lettered))
    return [fragments, *errors, sunions, *_execution_table(network, members, local, name_column),
            *_phase_tables(network, members, local, number)]


def _execution_table(network: str, members: list[Any], local: Any, name_column: Any
                     ) -> list[Any]:
    """How each fragment's query runs, and why: shown once the network asks for Real-time
    Mode (``execution: real-time``), where some fragments may not run that way."""
    from rich.text import Text

    from medusa_spark.network.execution import MICRO_BATCH, REAL_TIME

    asked = [f for f in members if f.execution is not None and
             f.execution_asked != MICRO_BATCH]
    if not asked:
        return []
    table = Table(title=f"{network}: how each fragment's query runs")
    name_column(table, "fragment", [local(f.name) for f in asked])
    table.add_column("execution")
    table.add_column("why", overflow="fold")
    for f in asked:
        table.add_row(Text(local(f.name)), Text(f.execution or "-", "green" if
                                                f.execution == REAL_TIME else "yellow"),
                      f.execution_why or "")
    return [table]


def _phase_tables(network: str, members: list[Any], local: Any, number: Any) -> list[Any]:
    """Where each fragment's batches spend their time (``medusa.batch_phases``), a row per
    phase and a column per fragment (phases outnumber a network's fragments, and their
    names are longer); none before a batch with input."""
    from medusa.batch_phases import LABELS, PHASES

    shown = [f for f in members if f.batch_phases_ms]
    if not shown:
        return []
    table = Table(title=f"{network}: where a batch's time goes (ms, median of the recent "
                        "batches with input)")
    table.add_column("phase")
    for f in shown:
        table.add_column(local(f.name), justify="right", overflow="fold")
    for phase in PHASES:
        label = f"  {LABELS[phase]}" if phase in ("state_update", "state_commit") else \
            LABELS[phase]
        table.add_row(label, *(number(f.batch_phases_ms.get(phase)) for f in shown),
                      end_section=phase == "other")
    return [table]


def _shortened(error: str) -> str:
    """The first lines of an error, up to ERROR_SHOWN characters."""
    text = error.strip()
    return text if len(text) <= ERROR_SHOWN else text[:ERROR_SHOWN - 1] + "…"
