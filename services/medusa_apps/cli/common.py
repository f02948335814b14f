"""What the command modules share: the consoles, the global options (``--as``,
``--verbose``), the options several commands take, and the helpers every command calls the
same way (a refusal and its exit code, a Spark session, the Kafka and registry clients)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from medusa.settings import StackSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

console = Console()
errors = Console(stderr=True)
_verbose = False
"""``--verbose``, as the callback saw it; read by ``_spark``."""


# The root callback (no docstring: it would become the root command's help).
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


def _spark(app_name: str, master: str = "local[2]") -> SparkSession:
    """A SparkSession for a command run in a terminal: Spark's log goes to a file of the
    run folder unless ``--verbose``."""
    from medusa_spark.session import spark_session

    log_file = None if _verbose else StackSettings().run_dir / "logs" / f"{app_name}-spark.log"
    return spark_session(app_name, master=master, log_file=log_file)


RunDirOpt = Annotated[Path | None, typer.Option(
    "--run-dir", help="Data and logs \\[default: MEDUSA_RUN_DIR or <repo>/.run].")]
JsonSummaryOpt = Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")]
ParticipantOpt = Annotated[str | None, typer.Option(
    "--participant", "-p", help="Participant whose Kafka cluster to use \\[default: the first].")]


def _stack_settings(**overrides: Any) -> StackSettings:
    """The stack's settings, with the options given on the command line over the
    environment's (an option left out falls back to its MEDUSA_* variable)."""
    aliases = {"participants": "stack_participants"}
    given = {aliases.get(k, k): v for k, v in overrides.items() if v is not None}
    return StackSettings(**given)


def _fail(message: str, code: int = 1) -> typer.Exit:
    """Prints the refusal to stderr; the caller raises the Exit (2 for a bad argument)."""
    errors.print("[bold red]error:[/]", escape(message))
    return typer.Exit(code)


def _clients(participant: str | None) -> tuple[dict[str, Any], Any]:
    """The Kafka config of a participant's cluster and the registry client, for the
    commands that write or read topics; an unknown participant exits 2."""
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
