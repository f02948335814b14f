"""Data in and out of the federation's topics: the schemas they are written with, the
producers, and the commands that read them back (consume, verify)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from medusa.settings import ProducerSettings
from medusa_apps.cli.common import (
    JsonSummaryOpt,
    ParticipantOpt,
    _clients,
    _fail,
    console,
    errors,
)

PartitionsOpt = Annotated[int, typer.Option(min=1, help="Partitions of new topics.")]
TopicPrefixOpt = Annotated[str, typer.Option(
    help="Prefix of every topic written, to keep runs apart (e.g. 'test1.').")]


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


def consume(
    topic: Annotated[str, typer.Argument(help="Topic to read.")],
    count: Annotated[int, typer.Option(min=1, help="Stop after this many tuples.")] = 10,
    timeout: Annotated[float, typer.Option(min=0.1, help="Give up after seconds.")] = 30.0,
    group: Annotated[str | None, typer.Option(
        help="Consumer group \\[default: a new one].")] = None,
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
