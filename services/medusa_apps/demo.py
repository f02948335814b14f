"""``medusa demo``: the local federation running the Linear Road network, checked live.

Starts the stack and a node, deploys the network on topics of this run, publishes
simulated traffic at the benchmark's rate (1,700 position reports per second per
expressway, reached within the first 30 s; in real time unless ``speedup`` says
otherwise) from a process of its own, shows the outputs, the boxes' rates and the
live p50/p99 latency of toll notifications (from a report's due sending time to
its notification's arrival here) as they arrive, and ends by comparing every
output with the independent reference computation.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import yaml
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from medusa.consuming import TupleConsumer
from medusa.envelope import TupleType
from medusa.latency_stats import percentile, shown
from medusa.linear_road import records as lr
from medusa.linear_road.reference import compute
from medusa.linear_road.run_records import read_run
from medusa.linear_road.traffic import (
    PEAK_REPORTS_PER_S_PER_XWAY,
    TrafficProfile,
    TrafficSimulation,
)
from medusa.linear_road.validation import validate
from medusa.registry import registry_client
from medusa.schemas import NODE_LOAD_TOPIC
from medusa.settings import REPO_ROOT, StackSettings, kafka_config
from medusa.stack import launcher
from medusa.stack.endpoints import Endpoints, resolve
from medusa.stack.install import install
from medusa.stack.layout import StackLayout
from medusa_apps.bench.linear_road_latency import LATENCY_BOUND_S, Publisher

NETWORK = REPO_ROOT / "spark_apps" / "medusa_spark" / "networks" / "linear_road.yaml"
OUTPUTS = {
    "toll_notifications": lr.TOLL_NOTIFICATIONS,
    "accident_alerts": lr.ACCIDENT_ALERTS,
    "account_balances": lr.ACCOUNT_BALANCES,
    "daily_expenditures": lr.DAILY_EXPENDITURES,
}
NODE = "node-1"


@dataclass
class OutputWatch:
    counts: Counter[str] = field(default_factory=Counter)
    rows: dict[str, list[str]] = field(default_factory=dict)
    last_toll: dict[str, Any] | None = None
    box_rates: dict[str, float] = field(default_factory=dict)
    toll_arrivals: list[tuple[float, int]] = field(default_factory=list)
    """(arrival here in epoch seconds, the report's second) per toll notification."""
    toll_latencies: list[float] = field(default_factory=list)
    """Seconds from a report's due sending to its toll notification's arrival."""
    sent: int = 0
    publishing: bool = True


def _deploy(endpoints: Endpoints, prefix: str, console: Console) -> str:
    from medusa.catalog.client import CatalogClient
    from medusa_spark.deploy import deploy, wait_for_node
    from medusa_spark.network.model import parse_network
    from medusa_spark.session import spark_session

    raw = yaml.safe_load(NETWORK.read_text())
    raw["topic_prefix"] = prefix
    text = yaml.safe_dump(raw, sort_keys=False)
    network = parse_network(text, str(NETWORK))
    spark = spark_session("medusa-demo-deploy", master="local[1]",
                          log_file=StackSettings().run_dir / "logs" / "demo-deploy-spark.log")
    try:
        with CatalogClient(endpoints.catalog_url) as catalog, \
                console.status(f"waiting for alpha/{NODE} to register in the catalog"):
            wait_for_node(catalog, f"alpha/{NODE}")
            deploy(text, str(NETWORK), endpoints, registry_client(endpoints.registry_url),
                   spark, catalog, {box: f"alpha/{NODE}" for box in network.boxes},
                   report=lambda _: None)
    finally:
        spark.stop()
    console.print(f"deployed [bold]{network.name}[/] ({len(network.boxes)} boxes) to "
                  f"alpha/{NODE}, topics prefixed {prefix!r}")
    return network.name


def _wait_for_fragments(endpoints: Endpoints, network: str, console: Console,
                        timeout_s: float = 300.0) -> None:
    """Until the catalog shows every fragment of the network running on the node."""
    from medusa.catalog.client import CatalogClient
    from medusa_apps.failover import wait_placed

    with CatalogClient(endpoints.catalog_url) as catalog, \
            console.status("waiting for the node to start the network's fragments"):
        try:
            wait_placed(catalog, f"alpha/{network}", f"alpha/{NODE}", None, timeout_s)
        except TimeoutError as error:
            raise TimeoutError(f"{error}; see .run/logs/node-alpha-1.log") from None


def _latency_view(watch: OutputWatch) -> Table:
    table = Table(title="toll notifications: latency from report to notification")
    for column in ("input sent", "notifications", "p50", "p99", "bound"):
        table.add_column(column, justify="right")
    p99 = percentile(watch.toll_latencies, 0.99)
    within = p99 is not None and p99 <= LATENCY_BOUND_S
    table.add_row(f"{watch.sent:,}" + (" ..." if watch.publishing else ""),
                  f"{len(watch.toll_latencies):,}",
                  shown(percentile(watch.toll_latencies, 0.5)),
                  ("[green]" if within else "[red]") + shown(p99),
                  f"{LATENCY_BOUND_S:g}s")
    return table


def _view(watch: OutputWatch, expected: dict[str, int]) -> Group:
    table = Table(title="Linear Road outputs")
    for column in ("stream", "records", "reference"):
        table.add_column(column, justify="right" if column != "stream" else "left")
    for name in OUTPUTS:
        table.add_row(name, f"{watch.counts[name]:,}", f"{expected[name]:,}")
    rates = Table(title="boxes (records/s processed)")
    rates.add_column("box")
    rates.add_column("rate", justify="right")
    for box, rate in sorted(watch.box_rates.items()):
        rates.add_row(box.rsplit("/", 1)[-1], f"{rate:,.0f}")
    last = Table(title="latest toll notification")
    last.add_column("field")
    last.add_column("value")
    for key, value in (watch.last_toll or {}).items():
        last.add_row(key, str(value))
    return Group(_latency_view(watch), table, rates, last)


def _watch(endpoints: Endpoints, prefix: str, expected: dict[str, int], console: Console,
           publisher: Publisher, idle_s: float = 300.0,
           timeout_s: float = 900.0) -> OutputWatch:
    """Outputs as they arrive, while the traffic is published and after it: until every
    output has as many records as the reference, or no output came for ``idle_s`` (a
    Linear Road batch can take minutes on a small machine, and the node's load reports do
    not say whether a batch is running), or ``timeout_s`` after the traffic's end."""
    registry = registry_client(endpoints.registry_url)
    config = kafka_config(endpoints.bootstrap("alpha"))
    topics = {prefix + topic: name for name, topic in OUTPUTS.items()}
    watch = OutputWatch(rows={name: [] for name in OUTPUTS})
    last_change = time.monotonic()
    deadline: float | None = None
    since_ms = int(time.time() * 1000)
    next_view = 0.0
    with TupleConsumer(config, registry, [*topics, NODE_LOAD_TOPIC],
                       f"demo-{uuid.uuid4()}", from_beginning=True) as consumer, \
            Live(_view(watch, expected), console=console, refresh_per_second=2) as live:
        while True:
            watch.sent = publisher.sent
            if watch.publishing and not publisher.alive():
                watch.publishing = False
                deadline = time.monotonic() + timeout_s
                last_change = time.monotonic()
            quiet = time.monotonic() - last_change
            complete = all(watch.counts[name] >= expected[name] for name in OUTPUTS)
            if not watch.publishing and ((complete and quiet >= 5.0)
                                         or quiet >= idle_s
                                         or (deadline and time.monotonic() > deadline)):
                break
            consumed = consumer.poll(0.5)
            consumed_at = time.time()
            if consumed is not None and consumed.record.type is TupleType.STABLE:
                value = dict(consumed.record.value)
                if consumed.topic == NODE_LOAD_TOPIC:
                    if consumed.record.stime < since_ms:
                        continue
                    for box in value["boxes"]:
                        watch.box_rates[box["box"]] = box["processing_rate"]
                else:
                    name = topics[consumed.topic]
                    value.pop("emit_time", None)
                    watch.counts[name] += 1
                    watch.rows[name].append(json.dumps(value, sort_keys=True))
                    if name == "toll_notifications":
                        watch.last_toll = value
                        watch.toll_arrivals.append((consumed_at, value["time"]))
                    last_change = time.monotonic()
            if time.monotonic() >= next_view:
                watch.toll_latencies = [arrived - publisher.due(second)
                                        for arrived, second in watch.toll_arrivals]
                live.update(_view(watch, expected))
                next_view = time.monotonic() + 0.5
    return watch


def run_demo(duration_s: int, speedup: float, xways: int, console: Console) -> bool:
    settings = StackSettings()
    layout = StackLayout.from_settings(settings)
    install(settings)
    console.print("[bold]1. The local federation[/]")
    launcher.up(layout, report=console.print)
    layout = launcher.recorded_layout(layout)
    endpoints = resolve(settings)
    console.print("[bold]2. A node of participant alpha[/]")
    launcher.start_service(layout, f"node-alpha-{NODE.rsplit('-', 1)[-1]}",
                           [sys.executable, "-m", "medusa_apps", "node", "--name", NODE,
                            "--participant", "alpha"], report=console.print)
    prefix = f"demo-{time.strftime('%Y%m%d-%H%M%S')}."
    console.print("[bold]3. The Linear Road network[/]")
    network = _deploy(endpoints, prefix, console)
    config = kafka_config(endpoints.bootstrap("alpha"))
    _wait_for_fragments(endpoints, network, console)

    # The benchmark's rate from the start (the cars take 30 s to enter).
    profile = TrafficProfile(xways=xways, duration_s=duration_s,
                             peak_rate=PEAK_REPORTS_PER_S_PER_XWAY,
                             start_rate=PEAK_REPORTS_PER_S_PER_XWAY)
    with console.status("computing the reference outputs"):
        reference = compute(r for _, rs in TrafficSimulation(profile).run() for r in rs)
    expected = {name: len(getattr(reference, name)) for name in OUTPUTS}
    console.print(f"[bold]4. Traffic and outputs as they arrive[/]: {duration_s} simulated "
                  f"seconds on {xways} expressway(s), "
                  f"{xways * PEAK_REPORTS_PER_S_PER_XWAY:,} position reports/s, "
                  f"{speedup:g}x real time; then until the outputs are complete or idle")
    publisher = Publisher(profile, config, endpoints.registry_url, prefix, speedup).start()
    try:
        watch = _watch(endpoints, prefix, expected, console, publisher)
        summary = publisher.summary()
    finally:
        publisher.stop()
    watch.toll_latencies = [arrived - publisher.due(second, summary["wall_start"])
                            for arrived, second in watch.toll_arrivals]
    console.print(f"sent {summary['sent']:,} records at {summary['rate_per_s']:,.0f}/s; "
                  f"toll notification latency p50 "
                  f"{shown(percentile(watch.toll_latencies, 0.5))}, p99 "
                  f"{shown(percentile(watch.toll_latencies, 0.99))} "
                  f"(bound {LATENCY_BOUND_S:g}s)")

    console.print("[bold]5. Validated: against the reference and the 5 s response rule[/]")
    with console.status("reading the run's inputs and outputs"):
        run = read_run(config, registry_client(endpoints.registry_url), prefix)
    result = validate(run.inputs, run.outputs, compute(run.reference_input()))
    console.print(result.table())
    all_match = result.passed
    console.print("[bold green]PASS: every output equals the reference, within 5 s."
                  if all_match else "[bold red]FAIL: see the table above.")
    console.print(f"The node keeps running (logs in {layout.logs_dir}); `make down` stops all.")
    return all_match
