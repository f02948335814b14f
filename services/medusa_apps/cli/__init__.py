"""Medusa: federated stream processing on Kafka and Spark. Flags fall back to MEDUSA_* settings."""

# The command tree is built here, in one place, so that ``medusa --help`` lists the commands
# in this order; each command is defined in the module of its concern.

from __future__ import annotations

import sys

import typer
from rich.markup import escape

from medusa.errors import MedusaError
from medusa_apps.cli import (
    bench,
    common,
    contracts,
    credentials,
    data,
    demo,
    faults,
    linear_road,
    network,
    services,
    stack,
)
from medusa_apps.cli.common import errors
from medusa_apps.cli.services import check_network_structure
from medusa_apps.cli.stack import federation_tables

__all__ = ["app", "check_network_structure", "federation_tables", "main"]

app = typer.Typer(help=__doc__, no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False)
app.callback()(common._acting_as)

produce_app = typer.Typer(help="Publish data into the federation.", no_args_is_help=True)
produce_app.command("linear-road")(data.produce_linear_road)
produce_app.command("sensors")(data.produce_sensors)
app.add_typer(produce_app, name="produce")

schemas_app = typer.Typer(help="Schemas in the registry.", no_args_is_help=True)
schemas_app.command("register")(data.schemas_register)
schemas_app.command("gateway")(services.schemas_gateway)
app.add_typer(schemas_app, name="schemas")

catalog_app = typer.Typer(help="The catalog: participants, nodes, streams, networks, fragments, "
                               "contracts.", no_args_is_help=True)
catalog_app.command("serve")(services.catalog_serve)
catalog_app.command("show")(network.catalog_show)
app.add_typer(catalog_app, name="catalog")

contract_app = typer.Typer(
    help="BPM contracts: the terms under which a participant's load may run on a partner's "
         "nodes (a price range per unit of load and period).", no_args_is_help=True)
contract_app.command("propose")(contracts.contract_propose)
contract_app.command("accept")(contracts.contract_accept)
contract_app.command("revoke")(contracts.contract_revoke)
contract_app.command("list")(contracts.contract_list)
app.add_typer(contract_app, name="contract")

fault_app = typer.Typer(
    help="Faults on demand: cut, slow and heal the links between participants (through "
         "toxiproxy), kill a node or an SUnion.", no_args_is_help=True)
fault_app.command("partition")(faults.fault_partition)
fault_app.command("slow")(faults.fault_slow)
fault_app.command("heal")(faults.fault_heal)
fault_app.command("status")(faults.fault_status)
fault_app.command("kill")(faults.fault_kill)
app.add_typer(fault_app, name="fault")

linear_road_app = typer.Typer(
    help="Linear Road: a run's outputs checked against the benchmark's rules.",
    no_args_is_help=True)
linear_road_app.command("traffic-stats")(linear_road.linear_road_traffic_stats)
linear_road_app.command("validate")(linear_road.linear_road_validate)
app.add_typer(linear_road_app, name="linear-road")

credentials_app = typer.Typer(
    help="The federation's secrets (`medusa up` makes its own; a deployment whose parts run "
         "apart makes them with `credentials init`).", no_args_is_help=True)
credentials_app.command("init")(credentials.credentials_init)
credentials_app.command("token")(credentials.credentials_token)
app.add_typer(credentials_app, name="credentials")

# Typer lists the commands before the groups, each in the order registered.
app.command("install")(stack.install)
app.command("up")(stack.up)
app.command("down")(stack.down)
app.command("status")(stack.status)
app.command("consume")(data.consume)
app.command("verify")(data.verify)
app.command("demo")(demo.demo)
app.command("node")(services.node)
app.command("detector")(services.detector)
app.command("deploy")(network.deploy)
app.command("undeploy")(network.undeploy)
app.command("move")(network.move)
app.command("scale")(network.scale)
app.command("trace")(faults.trace_command)
app.command("bpm")(services.bpm)
app.command("chaos")(faults.chaos)
app.command("autoscale")(services.autoscale)
app.command("ledger")(contracts.ledger_command)
app.command("console")(services.console_command)
app.command("bench")(bench.bench)


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
