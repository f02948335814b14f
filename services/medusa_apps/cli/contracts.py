"""BPM's contracts (the ``contract`` group) and the ledger of what was paid under them."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from medusa.errors import MedusaError
from medusa.settings import StackSettings
from medusa_apps.cli.common import _fail, console


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
        help="The proposing party (ORIGIN or HOST) \\[default: ORIGIN].")] = None,
    name: Annotated[str | None, typer.Option(
        help="The contract's name under the proposer \\[default: ORIGIN-HOST-N].")] = None,
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


def contract_accept(
    name: Annotated[str, typer.Argument(help="The contract, as proposer/name.")],
    by: Annotated[str, typer.Option(help="The accepting party (not the proposer).")],
) -> None:
    """Accept a proposed contract: it is active from now on."""
    from medusa import contracts

    made = _contract_action(lambda catalog: contracts.accept(catalog, name, by=by))
    console.print(f"{made.name} is active: {made.spec.origin}'s load may run on "
                  f"{made.spec.host}")


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
