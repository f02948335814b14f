"""The long-running services that `medusa up` or a deployment starts through the CLI (node,
failure detector, BPM agent, autoscaler, registry gateway, catalog), which log rather than
print tables, and ``console``, which says where the catalog serves the console."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from medusa.settings import HaSettings, StackSettings
from medusa_apps.cli.common import _fail, console


def _ha_default(field: str) -> str:
    """An HA setting's default as its help shows it: read from the settings, never stale."""
    return f"{HaSettings.model_fields[field].default:g}"


def _service_logging() -> None:
    """INFO for the project's own loggers; the HTTP and Spark bridge clients only warn."""
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for chatty in ("httpx", "httpx2", "py4j"):
        logging.getLogger(chatty).setLevel(logging.WARNING)


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
             "\\[default: <run dir>/checkpoints/<participant>/<name>].")] = None,
    heartbeat_interval: Annotated[float | None, typer.Option(
        min=0.01, help="Seconds between heartbeats \\[default: MEDUSA_HA_HEARTBEAT_INTERVAL_S, "
                       f"else {_ha_default('heartbeat_interval_s')}].")] = None,
    realtime_slots: Annotated[int, typer.Option(
        min=0, help="Spark task slots on top of a local[N] master for fragments in Real-time "
                    "Mode, each of which holds one per reader of its input for good "
                    "(a one-input filter: 2, a union of two inputs: 3); a fragment with no "
                    "free slots runs on micro-batches.")] = 2,
    capacity: Annotated[float | None, typer.Option(
        min=0.01, help="Processing slots, in the unit of a fragment's load (BPM prices load "
                       "against it) \\[default: measured, Spark's cores].")] = None,
) -> None:
    """Run a node: a SparkSession hosting the fragments the catalog places on it, until stopped."""
    import signal

    from medusa import tracing
    from medusa.catalog.client import CatalogClient
    from medusa.credentials import act_as
    from medusa.endpoints import resolve
    from medusa.object_store import ObjectStoreSettingsError, s3_access, uses_object_store
    from medusa.registry import registry_client
    from medusa.settings import HaSettings
    from medusa_spark.local_dirs import node_local_dir
    from medusa_spark.node import Node
    from medusa_spark.session import object_store_jars, spark_session

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
    root = checkpoint_root or str(settings.run_dir / "checkpoints" / participant / name)
    if uses_object_store(root):
        try:  # the store's key and Spark's S3A client, before Spark starts
            s3_access(settings)
            object_store_jars(settings)
        except (ObjectStoreSettingsError, RuntimeError) as error:
            catalog.close()
            raise _fail(f"--checkpoint-root {root}: {error}") from None
    spark = spark_session(f"medusa-node-{participant}-{name}", master=master,
                          settings=settings, ui_port=settings.node_spark_ui_port,
                          object_store=uses_object_store(root), realtime_slots=realtime_slots,
                          local_dir=node_local_dir(settings.run_dir / "spark-local" /
                                                   participant / name))
    spark.sparkContext.setLogLevel("WARN")
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


def detector(
    participant: Annotated[list[str] | None, typer.Option(
        help="Watch this participant's nodes (repeatable) \\[default: every participant].")
                           ] = None,
    policy: Annotated[str | None, typer.Option(
        help="timeout or phi \\[default: MEDUSA_HA_POLICY, else phi].")] = None,
    acceptable_pause: Annotated[float | None, typer.Option(
        min=0.0, help="Seconds of silence a slow but live node may show "
                      "\\[default: MEDUSA_HA_ACCEPTABLE_PAUSE_S, else "
                      f"{_ha_default('acceptable_pause_s')}].")] = None,
    suspect_after: Annotated[float | None, typer.Option(
        min=0.01, help="timeout policy: seconds of silence before suspicion "
                       "\\[default: MEDUSA_HA_SUSPECT_AFTER_S, else "
                       f"{_ha_default('suspect_after_s')}].")] = None,
    phi_failed: Annotated[float | None, typer.Option(
        min=0.1, help="phi policy: phi at which a node is declared failed "
                      "\\[default: MEDUSA_HA_PHI_FAILED, else "
                      f"{_ha_default('phi_failed')}].")] = None,
    port: Annotated[int | None, typer.Option(
        min=1024, max=65535, help="HTTP port of /health and /nodes "
                                  "\\[default: MEDUSA_DETECTOR_PORT or 18091].")] = None,
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


def schemas_gateway(
    port: Annotated[int | None, typer.Option(
        min=1024, max=65535, help="HTTP port \\[default: MEDUSA_REGISTRY_PORT or 18081].")] = None,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    upstream: Annotated[str | None, typer.Option(
        help="The registry it guards \\[default: http://127.0.0.1:MEDUSA_REGISTRY_INTERNAL_PORT]."
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


def catalog_serve(
    port: Annotated[int | None, typer.Option(
        min=1024, max=65535, help="HTTP port \\[default: MEDUSA_CATALOG_PORT or 18090].")] = None,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    home: Annotated[str | None, typer.Option(
        help="Participant whose Kafka keeps the catalog topic \\[default: the first].")] = None,
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
