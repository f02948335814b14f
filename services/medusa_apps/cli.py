"""Medusa: federated stream processing on Kafka and Spark. Flags fall back to MEDUSA_* settings."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from medusa.errors import MedusaError
from medusa.settings import ProducerSettings, StackSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

app = typer.Typer(help=__doc__, no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False)
produce_app = typer.Typer(help="Publish data into the federation.", no_args_is_help=True)
schemas_app = typer.Typer(help="Schemas in the registry.", no_args_is_help=True)
app.add_typer(produce_app, name="produce")
app.add_typer(schemas_app, name="schemas")
catalog_app = typer.Typer(help="The catalog: participants, nodes, streams, networks, fragments, "
                               "contracts.", no_args_is_help=True)
app.add_typer(catalog_app, name="catalog")
contract_app = typer.Typer(
    help="BPM contracts: the terms under which a participant's load may run on a partner's "
         "nodes (a price range per unit of load and period).", no_args_is_help=True)
app.add_typer(contract_app, name="contract")
fault_app = typer.Typer(
    help="Faults on demand: cut, slow and heal the links between participants (through "
         "toxiproxy), kill a node or an SUnion.", no_args_is_help=True)
app.add_typer(fault_app, name="fault")
linear_road_app = typer.Typer(
    help="Linear Road: a run's outputs checked against the benchmark's rules.",
    no_args_is_help=True)
app.add_typer(linear_road_app, name="linear-road")
credentials_app = typer.Typer(
    help="The federation's secrets (`medusa up` makes its own; a deployment whose parts run "
         "apart makes them with `credentials init`).", no_args_is_help=True)
app.add_typer(credentials_app, name="credentials")

console = Console()


@app.callback()
def _acting_as(
    as_participant: Annotated[str | None, typer.Option(
        "--as", metavar="PARTICIPANT",
        help="Act as this participant: its Kafka login on every cluster and its token for "
             "catalog and registry writes (default: MEDUSA_PARTICIPANT, else the "
             "federation's operator, admin).")] = None,
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Show Spark's own log on the terminal (by default it goes "
                                "to <run dir>/logs/<command>-spark.log).")] = False,
) -> None:
    global _verbose
    _verbose = verbose
    if as_participant is not None:
        from medusa.credentials import act_as

        if not re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", as_participant):
            raise _fail(f"--as: expected a participant's name such as alpha, got "
                        f"{as_participant!r}", 2)
        act_as(as_participant)
errors = Console(stderr=True)
_verbose = False


def _spark(app_name: str, master: str = "local[2]") -> SparkSession:
    """A SparkSession for a command run in a terminal: Spark's log goes to a file of the
    run folder unless ``--verbose``."""
    from medusa_spark.session import spark_session

    log_file = None if _verbose else StackSettings().run_dir / "logs" / f"{app_name}-spark.log"
    return spark_session(app_name, master=master, log_file=log_file)

ParticipantsOpt = Annotated[int | None, typer.Option(
    "--participants", min=1, max=8,
    help="Participants (Kafka clusters) [default: MEDUSA_STACK_PARTICIPANTS or 2].")]
KafkaPortOpt = Annotated[int | None, typer.Option(
    "--kafka-base-port", min=1024, max=65000,
    help="First participant's broker port; the next ones add 10 "
         "[default: MEDUSA_KAFKA_BASE_PORT or 19092].")]
RegistryPortOpt = Annotated[int | None, typer.Option(
    "--registry-port", min=1024, max=65535,
    help="Schema registry port [default: MEDUSA_REGISTRY_PORT or 18081].")]
RunDirOpt = Annotated[Path | None, typer.Option(
    "--run-dir", help="Data and logs [default: MEDUSA_RUN_DIR or <repo>/.run].")]
PartitionsOpt = Annotated[int, typer.Option(min=1, help="Partitions of new topics.")]
JsonSummaryOpt = Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")]
TopicPrefixOpt = Annotated[str, typer.Option(
    help="Prefix of every topic written, to keep runs apart (e.g. 'test1.').")]
ParticipantOpt = Annotated[str | None, typer.Option(
    "--participant", "-p", help="Participant whose Kafka cluster to use [default: the first].")]


def _stack_settings(**overrides: Any) -> StackSettings:
    aliases = {"participants": "stack_participants"}
    given = {aliases.get(k, k): v for k, v in overrides.items() if v is not None}
    return StackSettings(**given)


def _service_logging() -> None:
    """INFO for the project's own loggers; the HTTP and Spark bridge clients only warn."""
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for chatty in ("httpx", "httpx2", "py4j"):
        logging.getLogger(chatty).setLevel(logging.WARNING)


def _fail(message: str, code: int = 1) -> typer.Exit:
    errors.print("[bold red]error:[/]", escape(message))
    return typer.Exit(code)


@app.command()
def install() -> None:
    """Fetch Kafka, the registry, Spark's connectors, Jaeger and toxiproxy (pinned, cached)."""
    from medusa.stack.install import install as run_install

    try:
        run_install(StackSettings())
    except RuntimeError as error:
        raise _fail(str(error)) from None


@app.command()
def up(participants: ParticipantsOpt = None, kafka_base_port: KafkaPortOpt = None,
       registry_port: RegistryPortOpt = None, run_dir: RunDirOpt = None,
       skip_install: Annotated[bool, typer.Option(
           "--skip-install", help="Do not check the installation first.")] = False,
       bpm: Annotated[bool, typer.Option(
           "--bpm/--no-bpm", help="Start each participant's BPM agent.")] = True,
       hdfs: Annotated[bool, typer.Option(
           "--hdfs", help="Also start a local HDFS (a NameNode and a DataNode) for the nodes' "
                          "checkpoints.")] = False,
       brokers: Annotated[int | None, typer.Option(
           min=1, max=5, help="Brokers per participant's Kafka cluster, each also a KRaft "
                              "controller; 3 gives every topic 3 replicas, 2 in sync "
                              "[default: MEDUSA_KAFKA_BROKERS or 1].")] = None) -> None:
    """Start the local federation: one Kafka cluster per participant, the registry, Jaeger,
    the catalog, the failure detector and each participant's BPM agent."""
    from medusa.stack.install import install as run_install
    from medusa.stack.launcher import up as start_stack
    from medusa.stack.layout import StackLayout

    settings = _stack_settings(participants=participants, kafka_base_port=kafka_base_port,
                               registry_port=registry_port, run_dir=run_dir,
                               stack_bpm_agents=None if bpm else False,
                               stack_hdfs=True if hdfs else None, kafka_brokers=brokers)
    layout = StackLayout.from_settings(settings)
    try:
        if not skip_install:
            run_install(settings)
        console.print(f"[bold]Starting the local federation[/] (run folder {layout.run_dir})")
        endpoints = start_stack(layout, report=console.print)
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
    console.print(table)


@app.command()
def down(run_dir: RunDirOpt = None, purge: Annotated[bool, typer.Option(
        "--purge", help="Also delete the clusters' data.")] = False) -> None:
    """Stop exactly the processes `medusa up` started."""
    from medusa.stack.launcher import down as stop_stack
    from medusa.stack.layout import StackLayout

    layout = StackLayout.from_settings(_stack_settings(run_dir=run_dir))
    stopped = stop_stack(layout, purge=purge, report=console.print)
    console.print(f"stopped {len(stopped)} process(es)" if stopped else "nothing was running")


@app.command()
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
    for column in ("status", "secondary", "fragments", "load / capacity", "utilisation",
                   "last report", "Spark UI"):
        nodes.add_column(column, justify="right" if column in (
            "fragments", "load / capacity", "utilisation") else "left", overflow="fold")
    for n in federation.nodes:
        nodes.add_row(Text(n.name), Text(n.status, "red" if n.status == "failed" else ""),
                      Text(n.secondary or "-"), str(n.fragments),
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
    return [fragments, *errors, sunions]


def _shortened(error: str) -> str:
    """The first lines of an error, up to ERROR_SHOWN characters."""
    text = error.strip()
    return text if len(text) <= ERROR_SHOWN else text[:ERROR_SHOWN - 1] + "…"


def _clients(participant: str | None) -> tuple[dict[str, Any], Any]:
    from medusa import tracing
    from medusa.endpoints import resolve
    from medusa.registry import registry_client
    from medusa.settings import kafka_config

    endpoints = resolve()
    try:
        bootstrap = endpoints.bootstrap(participant)
    except KeyError as error:
        raise _fail(str(error.args[0]), code=2) from None
    kafka = kafka_config(bootstrap)
    # Sampled tuples start (producers) or end (consumers) their traces here.
    tracing.configure("medusa-client", endpoints.otlp_endpoint)
    return kafka, registry_client(endpoints.registry_url)


@schemas_app.command("register")
def schemas_register(
    topic: Annotated[str | None, typer.Option(
        help="Register for this topic only (with --file, a new version of its schema).")] = None,
    file: Annotated[Path | None, typer.Option(
        exists=True, dir_okay=False, help="An .avsc file to register for --topic.")] = None,
    participant: ParticipantOpt = None,
) -> None:
    """Register the project's schemas under <topic>-value with BACKWARD compatibility."""
    from medusa.registry import register
    from medusa.schemas import DEFAULT_TOPICS, schema_for_topic

    if file is not None and topic is None:
        raise _fail("--file needs --topic to say which subject it is for", code=2)
    _, registry = _clients(participant)
    if topic is not None and file is None and topic not in DEFAULT_TOPICS:
        raise _fail(f"unknown topic {topic!r}; expected one of: {', '.join(DEFAULT_TOPICS)}", 2)
    pairs = ([(topic, file.read_text())] if topic and file else
             [(topic, schema_for_topic(topic))] if topic else
             [(t, schema_for_topic(t)) for t in DEFAULT_TOPICS])
    for name, schema in pairs:
        registration = register(registry, name, schema)
        console.print(f"{registration.subject}: id {registration.schema_id}, "
                      f"version {registration.version}")


def _print_summary(title: str, summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(summary))
        return
    console.print(f"[bold]{title}[/]: sent {summary['sent']:,}, failed {summary['failed']:,}, "
                  f"{summary['rate_per_s']:,.0f} records/s over {summary['elapsed_s']:.1f}s, "
                  f"{summary['boundaries']:,} BOUNDARY records")
    for prefix, where in (("", ""), ("history_", " in the history file")):
        if summary.get(f"{prefix}bad_lines"):
            count = summary[f"{prefix}bad_lines"]
            numbers = ", ".join(map(str, summary[f"{prefix}bad_line_numbers"][:20]))
            console.print(f"[yellow]{count} bad line(s) skipped{where}[/] (lines {numbers}"
                          f"{', ...' if count > 20 else ''})")
    for error in summary.get("errors", []):
        errors.print(f"[red]delivery error:[/] {error}")


@produce_app.command("linear-road")
def produce_linear_road(
    xways: Annotated[int, typer.Option("--xways", "-L", min=1, help="Expressways.")] = 1,
    duration: Annotated[int, typer.Option(
        min=1, help="Simulated seconds (the benchmark runs 10800).")] = 600,
    peak_rate: Annotated[float, typer.Option(
        min=1, help="Reports/s per expressway at the end of the ramp.")] = 1700.0,
    speedup: Annotated[float, typer.Option(
        min=0, help="Simulated seconds per wall second; 0 = as fast as possible.")] = 1.0,
    from_file: Annotated[Path | None, typer.Option(
        "--from-file", exists=True, dir_okay=False,
        help="Replay a file in the benchmark's 15-field CSV format instead.")] = None,
    history: Annotated[Path | None, typer.Option(
        "--history", exists=True, dir_okay=False,
        help="With --from-file: the benchmark's historical toll file (vid,day,xway,toll), "
             "published at second 0 ahead of the traffic.")] = None,
    strict: Annotated[bool, typer.Option(
        help="Stop at the first bad line (of the CSV or the history file).")] = False,
    write_csv: Annotated[Path | None, typer.Option(
        help="Also write the generated input in the benchmark's CSV format.")] = None,
    write_history: Annotated[Path | None, typer.Option(
        help="Also write the generated historical tolls in the benchmark's format "
             "(vid,day,xway,toll).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the simulation.")] = 7,
    partitions: PartitionsOpt = 4,
    topic_prefix: TopicPrefixOpt = "",
    participant: ParticipantOpt = None,
    as_json: JsonSummaryOpt = False,
) -> None:
    """Publish Linear Road traffic and historical tolls: simulated, or replayed from the
    benchmark's files (a CSV file, and its historical toll file with --history)."""
    from medusa.feeding import feed
    from medusa.linear_road import records as lr
    from medusa.linear_road.sources import (
        BadLines,
        StrictCsvError,
        from_csv,
        read_history,
        simulated,
        with_history,
    )
    from medusa.linear_road.traffic import TrafficProfile
    from medusa.progress import RateProgress

    if history is not None and from_file is None:
        raise _fail("--history goes with --from-file (the simulation makes its own)", code=2)
    kafka, registry = _clients(participant)
    settings = ProducerSettings()
    bad_lines, history_bad_lines = BadLines(), BadLines()
    if from_file is not None:
        seconds = from_csv(from_file, bad_lines, strict=strict)
        if history is not None:
            try:
                seconds = with_history(read_history(history, history_bad_lines, strict),
                                       seconds)
            except StrictCsvError as error:
                raise _fail(f"{error} (--strict)") from None
        total = None
        description = f"replaying {from_file.name}"
    else:
        profile = TrafficProfile(xways=xways, duration_s=duration, peak_rate=peak_rate, seed=seed)
        seconds = simulated(profile)
        total = float(duration - 1)
        description = f"Linear Road L={xways}"
    if write_csv is not None or write_history is not None:
        seconds = _tee_csv(seconds, write_csv, write_history)
    try:
        with RateProgress(description, total=total) as progress:
            summary = feed(seconds, kafka_config=kafka, registry=registry, topics=lr.TOPICS,
                           to_dict=lr.to_dict, source_id="linear-road", speedup=speedup,
                           boundary_interval_s=settings.boundary_interval_s, progress=progress,
                           total_seconds=total, partitions=partitions,
                           flush_timeout_s=settings.flush_timeout_s, topic_prefix=topic_prefix,
                           stime_origin_ms=lr.STIME_ORIGIN_MS, trace_every=settings.trace_every)
    except StrictCsvError as error:
        raise _fail(f"{error} (--strict)") from None
    summary.bad_line_count, summary.bad_lines = bad_lines.count, bad_lines.first
    result = summary.as_dict()
    if history is not None:
        result["history_bad_lines"] = history_bad_lines.count
        result["history_bad_line_numbers"] = [number for number, _ in history_bad_lines.first]
    _print_summary("Linear Road", result, as_json)
    if summary.failed:
        raise typer.Exit(1)


def _tee_csv(seconds: Any, csv_path: Path | None, history_path: Path | None) -> Any:
    """Passes the seconds on, writing their records to the benchmark's files as they go:
    the traffic to ``csv_path``, the historical tolls to ``history_path``."""
    import contextlib

    from medusa.linear_road.records import HistoricalTolls, to_csv_line, to_history_lines

    with contextlib.ExitStack() as files:
        csv_out = files.enter_context(csv_path.open("w")) if csv_path else None
        history_out = files.enter_context(history_path.open("w")) if history_path else None
        for t, batch in seconds:
            for keyed in batch:
                record = keyed.value
                if isinstance(record, HistoricalTolls):
                    if history_out is not None:
                        history_out.writelines(line + "\n" for line in to_history_lines(record))
                elif csv_out is not None:
                    csv_out.write(to_csv_line(record) + "\n")
            yield t, batch


@linear_road_app.command("traffic-stats")
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


@linear_road_app.command("validate")
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


@produce_app.command("sensors")
def produce_sensors(
    sensors: Annotated[int, typer.Option(min=1, help="Number of sensors.")] = 100,
    interval_ms: Annotated[int, typer.Option(
        min=1, help="Milliseconds between two readings of a sensor.")] = 1000,
    count: Annotated[int, typer.Option(min=1, help="Readings to send in all.")] = 10_000,
    speedup: Annotated[float, typer.Option(
        min=0, help="Event-time seconds per wall second; 0 = as fast as possible.")] = 1.0,
    seed: Annotated[int, typer.Option(help="Seed of the random walk.")] = 11,
    partitions: PartitionsOpt = 4,
    topic_prefix: TopicPrefixOpt = "",
    participant: ParticipantOpt = None,
    as_json: JsonSummaryOpt = False,
) -> None:
    """Publish generic sensor readings."""
    import time

    from medusa import sensors as sensor_data
    from medusa.feeding import Keyed, feed
    from medusa.progress import RateProgress

    kafka, registry = _clients(participant)
    settings = ProducerSettings()
    start_ms = int(time.time() * 1000)

    def seconds() -> Any:
        batch: list[Keyed] = []
        current = None
        for reading in sensor_data.sensor_readings(sensors, start_ms, interval_ms, count, seed):
            t = (reading.measured_at - start_ms) / 1000.0
            if current is not None and t != current:
                yield current, batch
                batch = []
            current = t
            batch.append(Keyed(sensor_data.SENSOR_READINGS, reading.sensor_id,
                               reading.tuple_id, reading))
        if batch:
            yield current, batch

    # The bar counts event-time seconds, as the feed reports them.
    last_second = ((count - 1) // sensors) * interval_ms / 1000 or None
    with RateProgress("sensor readings", total=last_second) as progress:
        summary = feed(seconds(), kafka_config=kafka, registry=registry,
                       topics=[sensor_data.SENSOR_READINGS], to_dict=sensor_data.to_dict,
                       source_id="sensors", speedup=speedup,
                       boundary_interval_s=settings.boundary_interval_s, progress=progress,
                       total_seconds=last_second, partitions=partitions,
                       flush_timeout_s=settings.flush_timeout_s, topic_prefix=topic_prefix,
                       stime_origin_ms=start_ms, trace_every=settings.trace_every,
                       step_s=interval_ms / 1000)
    _print_summary("sensors", summary.as_dict(), as_json)
    if summary.failed:
        raise typer.Exit(1)


@app.command()
def consume(
    topic: Annotated[str, typer.Argument(help="Topic to read.")],
    count: Annotated[int, typer.Option(min=1, help="Stop after this many tuples.")] = 10,
    timeout: Annotated[float, typer.Option(min=0.1, help="Give up after seconds.")] = 30.0,
    group: Annotated[str | None, typer.Option(help="Consumer group [default: a new one].")] = None,
    participant: ParticipantOpt = None,
) -> None:
    """Print decoded tuples (type, id, stime, value); undecodable records go to <topic>.dlq."""
    import uuid

    from medusa.consuming import TupleConsumer

    kafka, registry = _clients(participant)
    with TupleConsumer(kafka, registry, [topic], group or f"medusa-consume-{uuid.uuid4()}"
                       ) as consumer:
        for consumed in consumer.take(count, timeout_s=timeout):
            record = consumed.record
            print(json.dumps({"type": record.type.value, "id": record.tuple_id,
                              "stime": record.stime, "partition": consumed.partition,
                              "offset": consumed.offset, "value": record.value}, default=str))
        if consumer.dead_lettered:
            errors.print(f"{consumer.dead_lettered} undecodable record(s) sent to {topic}.dlq")


@app.command()
def verify(
    output: Annotated[str, typer.Argument(help="The output topic to check.")],
    against: Annotated[str, typer.Option(
        "--against", help="The reference: a topic, or a file of JSON lines as `medusa "
                          "consume` prints them (e.g. a fault-free run's output).")],
    ignore_field: Annotated[list[str] | None, typer.Option(
        "--ignore-field", help="A value field left out of the comparison (repeatable), "
                               "e.g. emit_time.")] = None,
    idle: Annotated[float, typer.Option(
        min=0.5, help="A topic is read until nothing came for this many seconds.")] = 5.0,
    participant: ParticipantOpt = None,
) -> None:
    """Compare an output's stable view (UNDO/REC_DONE applied) with a reference, tuple for
    tuple; exit 1 and print what differs when they are not equal."""
    from medusa.verify import VerifyInputError, compare, read_side

    kafka, registry = _clients(participant)
    try:
        reference = read_side(against, kafka, registry, idle)
    except VerifyInputError as error:
        raise _fail(str(error), code=2) from None
    difference = compare(read_side(output, kafka, registry, idle), reference,
                         ignore_field or [])
    for line in difference.lines():
        (console if difference.equal else errors).print(line)
    if not difference.equal:
        raise typer.Exit(1)
    console.print(f"[green]equal[/green]: the stable view of {output} is the reference's")


@app.command()
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
    """The main job: the federation, a node, the Linear Road network, traffic, checked answers."""
    from medusa_apps.demo import run_demo

    if not run_demo(duration, speedup, xways, console, keep_running=keep):
        raise typer.Exit(1)


@app.command()
def node(
    name: Annotated[str, typer.Option(help="Node name, unique in its participant.")] = "node-1",
    participant: Annotated[str, typer.Option(help="Participant the node belongs to.")
                           ] = "alpha",
    secondary: Annotated[str | None, typer.Option(
        help="The node that takes over this one's fragments if it fails, as participant/node.")
                         ] = None,
    master: Annotated[str, typer.Option(
        help="Spark master: local[N], or a cluster URL such as spark://host:7077.")
                      ] = "local[2]",
    checkpoint_root: Annotated[str | None, typer.Option(
        help="Checkpoint root: a path here, or a shared store's URI (hdfs://..., s3a://...), "
             "from which another node resumes a fragment in place "
             "[default: <run dir>/checkpoints/<participant>/<name>].")] = None,
    heartbeat_interval: Annotated[float | None, typer.Option(
        min=0.01, help="Seconds between heartbeats [default: MEDUSA_HA_HEARTBEAT_INTERVAL_S, "
                       "else 0.5].")] = None,
    capacity: Annotated[float | None, typer.Option(
        min=0.01, help="Processing slots, in the unit of a fragment's load (BPM prices load "
                       "against it) [default: measured, Spark's cores].")] = None,
) -> None:
    """Run a node: a SparkSession hosting the fragments the catalog places on it, until stopped."""
    import signal

    from medusa import tracing
    from medusa.catalog.client import CatalogClient
    from medusa.credentials import act_as
    from medusa.endpoints import resolve
    from medusa.registry import registry_client
    from medusa.settings import HaSettings
    from medusa_spark.node import Node
    from medusa_spark.session import spark_session

    _service_logging()
    settings = StackSettings()
    endpoints = resolve(settings)
    ha = HaSettings()
    tracing.configure(f"medusa-node {participant}/{name}", endpoints.otlp_endpoint)
    if participant not in endpoints.kafka:
        raise _fail(f"--participant: no participant {participant!r} "
                    f"(known: {', '.join(endpoints.kafka)})", 2)
    if secondary is not None and secondary.count("/") != 1:
        raise _fail(f"--secondary: expected participant/node, got {secondary!r}", 2)
    act_as(participant)  # its Kafka clients, Spark's included, and catalog writes are its
    catalog = CatalogClient(endpoints.catalog_url)
    if not catalog.healthy():
        catalog.close()
        raise _fail(f"the catalog at {endpoints.catalog_url} does not answer; "
                    "start the federation with `medusa up`")
    spark = spark_session(f"medusa-node-{participant}-{name}", master=master,
                          settings=settings, ui_port=settings.node_spark_ui_port)
    spark.sparkContext.setLogLevel("WARN")
    root = checkpoint_root or str(settings.run_dir / "checkpoints" / participant / name)
    running = Node(name, participant, endpoints, registry_client(endpoints.registry_url), spark,
                   root, catalog, secondary,
                   heartbeat_interval_s=heartbeat_interval or ha.heartbeat_interval_s,
                   capacity=capacity)
    signal.signal(signal.SIGTERM, lambda *_: running.stop())
    console.print(f"node {running.global_name} on {master} (capacity {running.capacity:g}), "
                  f"checkpoints in {root}, Spark UI {running.spark_ui or 'off'}")
    try:
        running.run()
    except KeyboardInterrupt:
        running.stop()
    finally:
        spark.stop()
        catalog.close()
        tracing.shutdown()


@app.command()
def detector(
    participant: Annotated[list[str] | None, typer.Option(
        help="Watch this participant's nodes (repeatable) [default: every participant].")
                           ] = None,
    policy: Annotated[str | None, typer.Option(
        help="timeout or phi [default: MEDUSA_HA_POLICY, else phi].")] = None,
    acceptable_pause: Annotated[float | None, typer.Option(
        min=0.0, help="Seconds of silence a slow but live node may show "
                      "[default: MEDUSA_HA_ACCEPTABLE_PAUSE_S, else 3].")] = None,
    suspect_after: Annotated[float | None, typer.Option(
        min=0.01, help="timeout policy: seconds of silence before suspicion "
                       "[default: MEDUSA_HA_SUSPECT_AFTER_S, else 1.5].")] = None,
    phi_failed: Annotated[float | None, typer.Option(
        min=0.1, help="phi policy: phi at which a node is declared failed "
                      "[default: MEDUSA_HA_PHI_FAILED, else 8].")] = None,
    port: Annotated[int | None, typer.Option(
        min=1024, max=65535, help="HTTP port of /health and /nodes "
                                  "[default: MEDUSA_DETECTOR_PORT or 18091].")] = None,
    host: Annotated[str, typer.Option(help="Address the HTTP port binds.")] = "127.0.0.1",
) -> None:
    """Run the failure detector: heartbeats in, failures and takeovers into the catalog."""
    import signal

    from medusa import tracing
    from medusa.catalog.client import CatalogClient, CatalogError
    from medusa.detector.health_server import serve
    from medusa.detector.policy import DetectorConfig
    from medusa.detector.service import FailureDetector
    from medusa.endpoints import resolve
    from medusa.settings import HaSettings

    _service_logging()
    ha = HaSettings()
    chosen = policy or ha.policy
    if chosen not in ("timeout", "phi"):
        raise _fail(f"--policy: expected timeout or phi, got {chosen!r}", 2)
    endpoints = resolve()
    for name in participant or []:
        if name not in endpoints.kafka:
            raise _fail(f"--participant: no participant {name!r} "
                        f"(known: {', '.join(endpoints.kafka)})", 2)
    config = DetectorConfig(
        policy=chosen,  # type: ignore[arg-type]
        interval_s=ha.heartbeat_interval_s,
        acceptable_pause_s=ha.acceptable_pause_s if acceptable_pause is None
        else acceptable_pause,
        suspect_after_s=suspect_after or ha.suspect_after_s,
        phi_suspect=ha.phi_suspect, phi_failed=phi_failed or ha.phi_failed)
    try:
        config.policy_for_node()
    except ValueError as error:
        raise _fail(str(error), 2) from None
    tracer = tracing.configure("medusa-detector", endpoints.otlp_endpoint)
    with CatalogClient(endpoints.catalog_url) as catalog:
        try:  # started beside the catalog by `medusa up`: give it its start-up time
            catalog.wait_healthy(120)
        except CatalogError:
            raise _fail(f"the catalog at {endpoints.catalog_url} does not answer; "
                        "start the federation with `medusa up`") from None
        running = FailureDetector(endpoints, catalog, config, participant or None, tracer)
        serve(running, host, port or StackSettings().detector_port)
        signal.signal(signal.SIGTERM, lambda *_: running.stop())
        try:
            running.run()
        except KeyboardInterrupt:
            running.stop()
        finally:
            tracing.shutdown()


@app.command()
def deploy(
    network: Annotated[Path, typer.Argument(exists=True, dir_okay=False,
                                            help="Query network YAML file.")],
    placement: Annotated[Path | None, typer.Option(
        exists=True, dir_okay=False,
        help="YAML mapping of box (or fragment) to node (participant/node); the boxes it "
             "puts on one node run there as one fragment; fragments it leaves out, and all "
             "when it is not given, are placed automatically.")] = None,
    check: Annotated[bool, typer.Option(
        "--check", help="Only validate the network; deploy nothing.")] = False,
    name: Annotated[str | None, typer.Option(
        "--name", help="Deploy it under this name instead of the file's: its own fragments "
                       "and output topics, reading the same inputs from their start (e.g. "
                       "a fault-free run to verify another against).")] = None,
) -> None:
    """Validate a query network and place its fragments on the federation's nodes."""
    from medusa.catalog.client import CatalogClient
    from medusa.endpoints import resolve
    from medusa.placement import PlacementError, parse_placement
    from medusa.registry import registry_client
    from medusa_spark.deploy import deploy as deploy_network
    from medusa_spark.network.model import NetworkError, parse_network, renamed_network
    from medusa_spark.network.validate import validate

    text = network.read_text()
    try:
        if name is not None:
            text = renamed_network(text, name, str(network))
        spec = parse_network(text, str(network))
        given = parse_placement(placement.read_text(), str(placement)) if placement else None
    except (NetworkError, PlacementError) as error:
        raise _fail(str(error), 2) from None
    spark = _spark("medusa-deploy", master="local[1]")
    try:
        if check:
            plan = validate(spec, spark)
            console.print(f"network {spec.name}: {len(plan.boxes)} boxes, valid")
            return
        endpoints = resolve()
        with CatalogClient(endpoints.catalog_url) as catalog:
            placed = deploy_network(text, str(network), endpoints,
                                    registry_client(endpoints.registry_url), spark, catalog,
                                    given, console.print)
    except (NetworkError, PlacementError) as error:
        raise _fail(f"{network}: {error}", 2) from None
    finally:
        spark.stop()
    nodes = sorted(set(placed.values()))
    console.print(f"deployed {spec.participant}/{spec.name}: {len(placed)} fragment(s) on "
                  f"{len(nodes)} node(s) ({', '.join(nodes)})")


@app.command()
def undeploy(
    name: Annotated[str, typer.Argument(help="Network, as participant/network "
                                             "(or a bare name of the first participant).")],
) -> None:
    """Stop a network: its nodes stop its fragments, and the catalog forgets it."""
    from medusa.catalog.client import CatalogClient
    from medusa.endpoints import resolve
    from medusa_spark.deploy import undeploy as undeploy_network

    endpoints = resolve()
    if "/" not in name:
        name = f"{next(iter(endpoints.kafka))}/{name}"
    with CatalogClient(endpoints.catalog_url) as catalog:
        count = undeploy_network(catalog, name, console.print)
    console.print(f"withdrew {name} ({count} fragment(s))")


@app.command()
def move(
    box: Annotated[str, typer.Argument(
        help="The fragment, as participant/network/fragment, or one of its boxes, as "
             "participant/box (or participant/network/box).")],
    to: Annotated[str, typer.Option("--to", help="Node to move it to, as participant/node.")],
    timeout: Annotated[float, typer.Option(min=1, help="Seconds to wait for the hand-over.")
                       ] = 300.0,
) -> None:
    """Move a running fragment (named, or by one of its boxes), with its state, to another
    node."""
    from medusa.catalog.client import CatalogClient
    from medusa.endpoints import resolve
    from medusa_spark.deploy import move as move_box

    if to.count("/") != 1:
        raise _fail(f"--to: expected participant/node, got {to!r}", 2)
    with CatalogClient(resolve().catalog_url) as catalog:
        try:
            result = move_box(catalog, box, to, timeout, console.print)
        except TimeoutError as error:
            raise _fail(str(error)) from None
    console.print(f"moved {result.fragment} from {result.source} to {result.target} "
                  f"in {result.seconds:.1f}s")


@app.command()
def scale(
    fragment: Annotated[str, typer.Argument(
        help="The fragment, as participant/network/fragment (or one of its instances).")],
    to: Annotated[int, typer.Option("--to", help="How many instances to run it as (1 to 16).")],
    nodes: Annotated[str, typer.Option(
        help="Nodes for the instances, comma-separated participant/node (instance i goes "
             "to the i-th, round robin) [default: the participant's running nodes, fewest "
             "fragments first].")] = "",
    timeout: Annotated[float, typer.Option(min=1, help="Seconds to wait for the step.")
                       ] = 300.0,
) -> None:
    """Scale a keyed stateful fragment out or in: N instances, each owning the keys that
    hash to it, with their state rebuilt from the input; no result is lost or doubled."""
    from medusa.catalog.client import CatalogClient, CatalogError
    from medusa.endpoints import resolve
    from medusa_spark.scaling import MAX_INSTANCES
    from medusa_spark.scaling import scale as scale_fragment

    if not 1 <= to <= MAX_INSTANCES:
        raise _fail(f"--to: expected 1 to {MAX_INSTANCES} instances, got {to}", 2)
    chosen = [n.strip() for n in nodes.split(",") if n.strip()]
    bad = [n for n in chosen if n.count("/") != 1]
    if bad:
        raise _fail(f"--nodes: expected participant/node, got {bad[0]!r}", 2)
    endpoints = resolve()
    with CatalogClient(endpoints.catalog_url) as catalog:
        try:
            result = scale_fragment(catalog, endpoints, fragment, to, chosen or None, timeout,
                                    console.print)
        except (TimeoutError, CatalogError) as error:
            raise _fail(str(error)) from None
    console.print(f"{result.fragment}: {len(result.after)} instance(s) in "
                  f"{result.seconds:.1f}s: {'; '.join(result.after)}")


@app.command("trace")
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


def _contract_action(action: Any) -> Any:
    """Runs a contract action against the catalog; refusals exit 2 with the reason."""
    from medusa.catalog.client import CatalogClient, CatalogError
    from medusa.endpoints import resolve

    with CatalogClient(resolve().catalog_url) as catalog:
        try:
            return action(catalog)
        except (MedusaError, ValueError) as error:
            message = str(error)
            if not isinstance(error, CatalogError):
                message = " ".join(message.split())
            raise _fail(message, 2) from None


@app.command("bpm")
def bpm(
    participant: Annotated[str, typer.Option(help="The participant this agent acts for.")],
    interval: Annotated[float, typer.Option(min=0.5, help="Seconds between steps.")] = 5.0,
    offer_timeout: Annotated[float, typer.Option(
        min=1, help="Seconds an offer waits for an answer before it is withdrawn.")] = 60.0,
    alive_file: Annotated[Path | None, typer.Option(
        help="A file touched every step, so that a supervisor sees the agent alive.")] = None,
) -> None:
    """Run a participant's BPM agent until stopped: it offers load to partners under active
    contracts, answers their offers, moves accepted load and brings it home."""
    import contextlib
    import signal
    import threading

    from medusa import tracing
    from medusa.bpm.ledger import Ledger, read_entries
    from medusa.catalog.client import CatalogClient
    from medusa.credentials import act_as
    from medusa.endpoints import resolve
    from medusa.federation_status import latest_load_reports
    from medusa.registry import registry_client
    from medusa.settings import kafka_config
    from medusa_apps.bpm_agent import BpmAgent

    _service_logging()
    endpoints = resolve(StackSettings())
    if participant not in endpoints.kafka:
        raise _fail(f"--participant: no participant {participant!r} "
                    f"(known: {', '.join(endpoints.kafka)})", 2)
    act_as(participant)
    tracing.configure("medusa-bpm", endpoints.otlp_endpoint)
    registry = registry_client(endpoints.registry_url)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    own = kafka_config(endpoints.bootstrap(participant))
    # What it paid before a restart, so that no stretch of hosting is paid twice.
    paid = read_entries([own], registry)
    ledger = Ledger(own, registry, participant)
    with CatalogClient(endpoints.catalog_url) as catalog:
        agent = BpmAgent(participant, catalog, lambda: latest_load_reports(endpoints, registry),
                         offer_timeout_s=offer_timeout, ledger=ledger, paid=paid)
        console.print(f"BPM agent of {participant}: a step every {interval:g}s, "
                      f"{len(paid)} ledger entries read")
        try:
            with contextlib.suppress(KeyboardInterrupt):
                agent.run(interval, stopped.is_set, alive_file)
        finally:
            ledger.close()
            tracing.shutdown()


@app.command("chaos")
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


@app.command("autoscale")
def autoscale(
    interval: Annotated[float, typer.Option(min=1, help="Seconds between steps.")] = 10.0,
    once: Annotated[bool, typer.Option("--once", help="One step, then exit.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Decide and trace, but scale nothing.")] = False,
    out_after: Annotated[float, typer.Option(
        min=1, help="Seconds an instance must be a bottleneck before a scale-out.")] = 30.0,
    in_below: Annotated[float, typer.Option(
        min=0, help="Scale in when every instance needs less than this share of a slot...")
                        ] = 0.25,
    in_after: Annotated[float, typer.Option(min=0, help="...for this many seconds.")] = 120.0,
    cooldown: Annotated[float, typer.Option(
        min=0, help="Seconds a fragment is left alone after a step.")] = 90.0,
    max_instances: Annotated[int, typer.Option(min=1, max=16)] = 4,
) -> None:
    """Scale keyed stateful fragments out when they are a bottleneck and in when they idle
    (off unless run); each decision is one trace in Jaeger (`medusa trace --kind autoscale`)."""
    import contextlib
    import signal
    import threading

    from medusa import tracing
    from medusa.autoscale import AutoscalePolicy
    from medusa.catalog.client import CatalogClient
    from medusa.endpoints import resolve
    from medusa.registry import registry_client
    from medusa_apps.autoscaler import Autoscaler

    _service_logging()
    endpoints = resolve(StackSettings())
    tracing.configure("medusa-autoscale", endpoints.otlp_endpoint)
    policy = AutoscalePolicy(out_after_s=out_after, in_below_load=in_below, in_after_s=in_after,
                             cooldown_s=cooldown, max_instances=max_instances)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    with CatalogClient(endpoints.catalog_url) as catalog:
        scaler = Autoscaler(endpoints, registry_client(endpoints.registry_url), catalog, policy,
                            dry_run, console.print)
        try:
            if once:
                decisions = scaler.step()
                if not decisions:
                    console.print("nothing to scale")
                return
            console.print(f"autoscale: a step every {interval:g}s ({policy})")
            with contextlib.suppress(KeyboardInterrupt):
                scaler.run(interval, stopped.is_set)
        finally:
            tracing.shutdown()


@app.command("ledger")
def ledger_command(
    entries: Annotated[int, typer.Option(min=0, help="How many of the newest entries to list.")
                       ] = 20,
) -> None:
    """BPM's ledger: balances per participant and per contract, and the newest payments."""
    from medusa.bpm.ledger import balances, read_entries
    from medusa.endpoints import resolve
    from medusa.registry import registry_client
    from medusa.settings import kafka_config

    endpoints = resolve(StackSettings())
    found = read_entries([kafka_config(b) for b in endpoints.kafka.values()],
                         registry_client(endpoints.registry_url))
    totals = balances(found)
    participants = Table(title="balances (received minus paid)")
    participants.add_column("participant")
    participants.add_column("balance", justify="right")
    for name in sorted(set(endpoints.kafka) | set(totals.participants)):
        participants.add_row(name, f"{totals.participants.get(name, 0.0):,.4f}")
    contracts = Table(title="paid per contract")
    contracts.add_column("contract")
    contracts.add_column("paid", justify="right")
    for name, amount in sorted(totals.contracts.items()):
        contracts.add_row(name, f"{amount:,.4f}")
    newest = Table(title=f"newest payments ({min(entries, len(found))} of {len(found)})")
    for column in ("at", "kind", "contract", "origin -> host", "fragment", "unit price",
                   "load", "amount"):
        newest.add_column(column, justify="right" if column in (
            "unit price", "load", "amount") else "left")
    for item in found[-entries:] if entries else []:
        newest.add_row(_clock(item["to_ms"]), item["kind"], item["contract"],
                       f"{item['origin']} -> {item['host']}", item["fragment"],
                       f"{item['unit_price']:g}", f"{item['load']:.3f}",
                       f"{item['amount']:,.4f}")
    for table in (participants, contracts, newest):
        console.print(table)


@contract_app.command("propose")
def contract_propose(
    origin: Annotated[str, typer.Argument(help="Whose load may move (and who pays), e.g. alpha.")],
    host: Annotated[str, typer.Argument(help="Who may run it (and is paid), e.g. beta.")],
    price: Annotated[float, typer.Option(help="The price p per unit of load and period.")],
    movable: Annotated[list[str], typer.Option(
        help="A network (alpha/linear-road) or fragment (alpha/linear-road/f1) of ORIGIN that "
             "may move; repeat for more.")],
    delta: Annotated[float, typer.Option(
        help="The range is [p - delta, p]: offers within it are accepted.")] = 0.0,
    period: Annotated[str, typer.Option(
        help="How long a period is (30s, 10m, 1h): load is paid per period, and a revoked "
             "contract ends with its period.")] = "1h",
    by: Annotated[str | None, typer.Option(
        help="The proposing party (ORIGIN or HOST) [default: ORIGIN].")] = None,
    name: Annotated[str | None, typer.Option(
        help="The contract's name under the proposer [default: ORIGIN-HOST-N].")] = None,
) -> None:
    """Propose a contract; it is active once the other party accepts it."""
    from medusa import contracts
    from medusa.catalog.model import Kind
    from medusa.faults import duration_ms

    proposer = by or origin

    def action(catalog: Any) -> Any:
        period_s = duration_ms(period, "--period") / 1000
        chosen = name
        if chosen is None:
            taken = {e.name for e in catalog.list(Kind.CONTRACTS)}
            chosen = next(f"{origin}-{host}-{n}" for n in range(1, len(taken) + 2)
                          if f"{proposer}/{origin}-{host}-{n}" not in taken)
        return contracts.propose(catalog, chosen, origin=origin, host=host, price=price,
                                 delta=delta, movable=movable, period_s=period_s, by=proposer)

    made = _contract_action(action)
    other = host if proposer == origin else origin
    console.print(f"proposed {made.name}: {origin}'s {', '.join(movable)} may run on {host} "
                  f"at {made.low:g} to {made.spec.price:g} per unit of load and "
                  f"{made.spec.period_s:g}s; `medusa contract accept {made.name} --by {other}` "
                  "makes it active")


@contract_app.command("accept")
def contract_accept(
    name: Annotated[str, typer.Argument(help="The contract, as proposer/name.")],
    by: Annotated[str, typer.Option(help="The accepting party (not the proposer).")],
) -> None:
    """Accept a proposed contract: it is active from now on."""
    from medusa import contracts

    made = _contract_action(lambda catalog: contracts.accept(catalog, name, by=by))
    console.print(f"{made.name} is active: {made.spec.origin}'s load may run on "
                  f"{made.spec.host}")


@contract_app.command("revoke")
def contract_revoke(
    name: Annotated[str, typer.Argument(help="The contract, as proposer/name.")],
    by: Annotated[str, typer.Option(help="The revoking party (either one).")],
) -> None:
    """Revoke a contract: a proposal ends now, an active contract at the end of its period
    (and the load under it returns to its origin)."""
    from medusa import contracts

    made = _contract_action(lambda catalog: contracts.revoke(catalog, name, by=by))
    ends = _clock(made.spec.ends_at)
    console.print(f"{made.name} is revoked; it ends at {ends}")


def _clock(ms: int | None) -> str:
    import datetime

    if ms is None:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


@contract_app.command("list")
def contract_list(
    participant: Annotated[str | None, typer.Option(
        help="Only the contracts this participant is a party to.")] = None,
) -> None:
    """Every contract with its terms and state."""
    from medusa import contracts

    found = _contract_action(lambda catalog: contracts.contracts(catalog, participant))
    now = contracts.now_ms()
    table = Table(title="Contracts")
    for column in ("contract", "origin -> host", "price range", "period", "movable", "state",
                   "since", "ends"):
        table.add_column(column)
    for contract in sorted(found, key=lambda c: c.name):
        spec = contract.spec
        table.add_row(contract.name, f"{spec.origin} -> {spec.host}",
                      f"{contract.low:g} .. {spec.price:g}", f"{spec.period_s:g}s",
                      ", ".join(spec.movable), contract.state(now), _clock(spec.accepted_at),
                      _clock(spec.ends_at))
    console.print(table)


@fault_app.command("partition")
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


@fault_app.command("slow")
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


@fault_app.command("heal")
def fault_heal(
    first: Annotated[str | None, typer.Argument(help="A participant [default: every link].")
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


@fault_app.command("status")
def fault_status() -> None:
    """The links between participants and their state (up, cut, slow)."""
    with _links() as links:
        try:
            _print_links(links)
        except MedusaError as error:
            raise _fail(str(error)) from None


@fault_app.command("kill")
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


@schemas_app.command("gateway")
def schemas_gateway(
    port: Annotated[int | None, typer.Option(
        min=1024, max=65535, help="HTTP port [default: MEDUSA_REGISTRY_PORT or 18081].")] = None,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    upstream: Annotated[str | None, typer.Option(
        help="The registry it guards [default: http://127.0.0.1:MEDUSA_REGISTRY_INTERNAL_PORT]."
    )] = None,
) -> None:
    """Serve the registry's front door: reads open, writes only with a participant's token."""
    from medusa import credentials
    from medusa.registry_gateway import serve

    _service_logging()
    settings = StackSettings()
    stack = credentials.process_credentials()
    if stack is None:
        raise _fail(f"no credentials in {credentials.process_credentials_file()}: "
                    "`medusa up` makes them")
    serve(upstream or f"http://127.0.0.1:{settings.registry_internal_port}", stack.tokens(),
          host, port or settings.registry_port)


@credentials_app.command("init")
def credentials_init(
    participants: Annotated[str, typer.Option(
        help="The participants, comma-separated, e.g. alpha,beta.")],
    directory: Annotated[Path, typer.Option(
        "--dir", help="Where to write: a folder per holder (federation, each participant, "
                      "each participant's brokers, the registry).")],
    owner: Annotated[str | None, typer.Option(
        help="UID:GID to own the files (the containers' user), readable by it and its "
             "group only [default: the caller, readable by it only].")] = None,
) -> None:
    """Make the federation's secrets, or keep the ones made before, split by who holds
    them: each participant's parts get only that participant's."""
    from medusa.credential_files import write_all

    names = [name.strip() for name in participants.split(",") if name.strip()]
    bad = [name for name in names if not re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", name)]
    if not names or bad:
        raise _fail(f"--participants: expected names such as alpha,beta, got {participants!r}",
                    2)
    owned_by = None
    if owner is not None:
        match = re.fullmatch(r"(\d+):(\d+)", owner)
        if match is None:
            raise _fail(f"--owner: expected UID:GID such as 1000:0, got {owner!r}", 2)
        owned_by = (int(match.group(1)), int(match.group(2)))
    written = write_all(directory, names, owned_by)
    for holder, files in written.items():
        console.print(f"{holder:<16} {', '.join(path.name for path in files)}")


@credentials_app.command("token")
def credentials_token() -> None:
    """Print the acting participant's token (`medusa --as P credentials token`), to sign in
    to the console or call the catalog's write API. Printed only when asked for, to stdout."""
    from medusa import credentials

    own = credentials.own_token()
    if own is None:
        raise _fail(f"no credentials in {credentials.process_credentials_file()}: "
                    "`medusa up` makes them")
    print(own[1])


@app.command("console")
def console_command(
    open_browser: Annotated[bool, typer.Option(
        "--open", help="Open it in the browser, signed in as the acting participant "
                       "(`medusa --as P console --open`).")] = False,
) -> None:
    """Where the federation console is: a live page of participants, nodes, networks,
    fragments, contracts, failures and moves, served by the catalog."""
    from medusa import credentials
    from medusa.endpoints import resolve

    url = f"{resolve().catalog_url.rstrip('/')}/console"
    console.print(url)
    own = credentials.own_token()
    if own is not None:
        console.print(f"actions need a participant's token: sign in with the output of "
                      f"`medusa --as {own[0]} credentials token`")
    if open_browser:
        import webbrowser

        # The token goes after the #, which the browser never sends to a server.
        webbrowser.open(f"{url}#token={own[1]}" if own is not None else url)


@catalog_app.command("serve")
def catalog_serve(
    port: Annotated[int | None, typer.Option(
        min=1024, max=65535, help="HTTP port [default: MEDUSA_CATALOG_PORT or 18090].")] = None,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    home: Annotated[str | None, typer.Option(
        help="Participant whose Kafka keeps the catalog topic [default: the first].")] = None,
    topic: Annotated[str, typer.Option(help="The compacted topic that holds the state.")
                     ] = "medusa.catalog",
    access: Annotated[bool, typer.Option(
        help="Keep the clusters' ACLs in line with this catalog's contracts and placements "
             "(the federation's one catalog does; a second catalog on the same clusters "
             "must not).")] = True,
    with_console: Annotated[bool, typer.Option(
        "--console/--no-console",
        help="Serve the federation console at /console, with its feeds of load reports, "
             "ledger and traces.")] = True,
) -> None:
    """Serve the catalog's HTTP API (OpenAPI at /openapi.json, docs at /docs) and the
    federation console (/console)."""

    from medusa import credentials, tracing
    from medusa.catalog.service import serve
    from medusa.endpoints import resolve

    _service_logging()
    settings = StackSettings()
    endpoints = resolve(settings)
    home = home or settings.catalog_participant or next(iter(endpoints.kafka))
    if home not in endpoints.kafka:
        raise _fail(f"--home: no participant {home!r} (known: {', '.join(endpoints.kafka)})", 2)
    tracing.configure("medusa-catalog", endpoints.otlp_endpoint)
    stack = credentials.process_credentials()
    tokens = stack.tokens() if stack is not None else None
    port = port or settings.catalog_port
    extend = None
    if with_console:
        from medusa_apps.console_service import console_extension

        extend = console_extension(endpoints, tokens, port, settings.jaeger_ui_url)
    serve(endpoints, home, host, port, topic, check_network=check_network_structure,
          tokens=tokens, access=access, extend=extend)


def check_network_structure(definition: str) -> None:
    """The catalog's check of a network definition: it parses, and its boxes and arrows fit
    together (types need Spark: `medusa deploy` checks them). Raises NetworkError (a
    ValueError) naming the box or field."""
    from medusa_spark.network.model import parse_network
    from medusa_spark.network.validate import check_structure

    check_structure(parse_network(definition, origin="YAML"))


@catalog_app.command("show")
def catalog_show(
    kind: Annotated[str, typer.Argument(
        help="participants, nodes, streams, networks, fragments, contracts or offers.")],
    name: Annotated[str | None, typer.Argument(help="One entity, e.g. alpha/node-1.")] = None,
) -> None:
    """Print catalog entries as JSON."""
    from medusa.catalog.client import CatalogClient
    from medusa.catalog.model import Kind
    from medusa.endpoints import resolve

    try:
        chosen = Kind(kind)
    except ValueError:
        raise _fail(f"kind: expected one of {', '.join(k.value for k in Kind)}, got {kind!r}",
                    2) from None
    with CatalogClient(resolve().catalog_url) as catalog:
        if name is None:
            found: Any = [e.model_dump(mode="json") for e in catalog.list(chosen)]
        else:
            entry = catalog.get(chosen, name)
            if entry is None:
                raise _fail(f"no {chosen.singular} {name}")
            found = entry.model_dump(mode="json")
    print(json.dumps(found, indent=2))


@app.command()
def bench(
    records: Annotated[int, typer.Option(min=1000, help="Records per throughput run.")
                       ] = 200_000,
    hold: Annotated[int, typer.Option(min=10, help="Seconds each Linear Road step holds "
                                                   "the peak rate (the benchmark: 120 or "
                                                   "more; less for a quick run).")] = 120,
    max_xways: Annotated[int, typer.Option(min=1, help="Largest L to try.")] = 16,
    only: Annotated[str, typer.Option(
        help="Run only these parts, comma-separated: producers, spark, sunion, "
             "linear-road, move, failover, dpc, dpc-matrix, bpm (default: all).")] = "",
    linear_road: Annotated[bool, typer.Option(help="Run the Linear Road steps.")] = True,
    out: Annotated[Path, typer.Option(help="Folder for JSON and plots.")] = Path("bench-results"),
    state_mb: Annotated[str, typer.Option(
        help="State sizes in MB for the migration benchmark, comma-separated: each is "
             "moved warm, the smallest and the largest also cold; empty to skip it.")
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
    run_all(out, records, hold, max_xways, linear_road, console.print, sizes, failover,
            only=parts or None)
    console.print(f"results in {out}/")


def main() -> None:
    """The ``medusa`` command. A MedusaError (a refusal Medusa can name: a bad network, a
    catalog conflict, a port in use...) ends it with its message, no traceback, and exit 1."""
    try:
        app()
    except KeyboardInterrupt:
        errors.print("interrupted")
        sys.exit(130)
    except MedusaError as error:
        errors.print("[bold red]error:[/]", escape(str(error)))
        sys.exit(1)
