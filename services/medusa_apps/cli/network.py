"""Query networks on the federation: deploy, withdraw, move and scale their fragments, and
read what the catalog holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from medusa_apps.cli.common import _fail, _spark, console


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
    make_before_break: Annotated[bool, typer.Option(
        "--make-before-break/--restart",
        help="On a redeploy, replace each changed fragment that runs (same inputs; boxes "
             "new to the network may join it) beside itself: the new definition rebuilds "
             "its state from the input while the old one writes, then takes the output "
             "over at a cut, as a scale step does; the deploy says why any other changed "
             "fragment restarts. "
             "--restart: every changed fragment restarts (quicker to deploy, with a gap "
             "in its output).")] = True,
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
                                    given, console.print, make_before_break)
    except (NetworkError, PlacementError) as error:
        raise _fail(f"{network}: {error}", 2) from None
    finally:
        spark.stop()
    nodes = sorted(set(placed.values()))
    console.print(f"deployed {spec.participant}/{spec.name}: {len(placed)} fragment(s) on "
                  f"{len(nodes)} node(s) ({', '.join(nodes)})")


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


def move(
    box: Annotated[str, typer.Argument(
        help="The fragment, as participant/network/fragment, or one of its boxes, as "
             "participant/box (or participant/network/box).")],
    to: Annotated[str, typer.Option("--to", help="Node to move it to, as participant/node.")],
    timeout: Annotated[float, typer.Option(min=1, help="Seconds to wait for the hand-over.")
                       ] = 300.0,
    cold: Annotated[bool, typer.Option(
        "--cold", help="Stop it at a batch boundary and resume it on the target from the "
                       "checkpoint, instead of warming a replica up there first (the pause "
                       "then grows with the state).")] = False,
) -> None:
    """Move a running fragment (named, or by one of its boxes), with its state, to another
    node: warm by default (a replica on the target loads the state and catches up while
    the fragment runs, then takes the output over)."""
    from medusa.catalog.client import CatalogClient
    from medusa.endpoints import resolve
    from medusa_spark.deploy import move as move_box

    if to.count("/") != 1:
        raise _fail(f"--to: expected participant/node, got {to!r}", 2)
    with CatalogClient(resolve().catalog_url) as catalog:
        try:
            result = move_box(catalog, box, to, timeout, console.print, warm=not cold)
        except TimeoutError as error:
            raise _fail(str(error)) from None
    console.print(f"moved {result.fragment} from {result.source} to {result.target} "
                  f"in {result.seconds:.1f}s")


def scale(
    fragment: Annotated[str, typer.Argument(
        help="The fragment, as participant/network/fragment (or one of its instances).")],
    to: Annotated[int, typer.Option("--to", help="How many instances to run it as (1 to 16).")],
    nodes: Annotated[str, typer.Option(
        help="Nodes for the instances, comma-separated participant/node (instance i goes "
             "to the i-th, round robin) \\[default: the participant's running nodes, fewest "
             "fragments first].")] = "",
    timeout: Annotated[float, typer.Option(min=1, help="Seconds to wait for the step.")
                       ] = 300.0,
) -> None:
    """Scale a keyed stateful fragment out or in: N instances, each owning the keys that
    hash to it, with their state rebuilt from the input beside the running instances,
    which write until the new ones take over; no result is lost or doubled."""
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
