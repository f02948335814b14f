"""``medusa bench``: every benchmark in one run, with progress, ratios, JSON and plots."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from medusa.bench import producers
from medusa.bench.report import bar_plot, write_json
from medusa.registry import registry_client
from medusa.settings import StackSettings
from medusa.stack.endpoints import resolve
from medusa.stack.launcher import recorded_layout
from medusa.stack.layout import StackLayout


def run_producer_benchmark(out: Path, records: int, say: Callable[[str], None]) -> dict:
    settings = StackSettings()
    layout = recorded_layout(StackLayout.from_settings(settings))
    endpoints = resolve(settings)
    bootstrap = endpoints.bootstrap()
    registry = registry_client(endpoints.registry_url)

    say(f"preparing {records:,} Linear Road position reports")
    reports = producers.position_reports(records)
    say("medusa producer (Avro through the registry, envelope headers, BOUNDARY records)")
    medusa, value_size = producers.medusa_producer(bootstrap, registry, reports)
    say(f"  {medusa.per_second:,.0f} records/s; value size {value_size} bytes")
    say("bare confluent-kafka producer, same value size")
    bare = producers.bare_producer(bootstrap, records, value_size)
    say(f"  {bare.per_second:,.0f} records/s")
    say("Kafka's ProducerPerformance, same value size")
    perf = producers.kafka_perf_tool(layout, bootstrap, records, value_size)
    say(f"  {perf.per_second:,.0f} records/s")

    ratios = {
        "medusa_over_bare_producer": round(medusa.per_second / bare.per_second, 3),
        "bare_producer_over_kafka_perf_tool": round(bare.per_second / perf.per_second, 3),
        "medusa_over_kafka_perf_tool": round(medusa.per_second / perf.per_second, 3),
    }
    result = {"benchmark": "producer throughput", "records": records, "value_size": value_size,
              "runs": [r.as_dict() for r in (perf, bare, medusa)], "ratios": ratios}
    write_json(out / "producers.json", result)
    bar_plot(out / "producers.png", f"Producer throughput ({records:,} records, one run)",
             [perf.name, bare.name, medusa.name],
             [perf.per_second, bare.per_second, medusa.per_second], "records per second")
    for name, value in ratios.items():
        say(f"{name.replace('_', ' ')}: {value:.2f}")
    return result
