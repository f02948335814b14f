"""The Linear Road network on Spark against the independent reference, record for record."""

import json
import uuid
from collections import Counter
from pathlib import Path

import pytest

from medusa.consuming import TupleConsumer
from medusa.envelope import TupleType
from medusa.linear_road.reference import compute
from medusa.linear_road.sources import publish_traffic
from medusa.linear_road.traffic import TrafficProfile, TrafficSimulation
from medusa.progress import RateProgress
from medusa_spark.local_run import LocalNetworkRun
from medusa_spark.network.model import load_network

pytestmark = pytest.mark.e2e

NETWORK = Path(__file__).parents[2] / "spark_apps/medusa_spark/networks/linear_road.yaml"
OUTPUTS = ("segment_statistics", "toll_notifications", "accident_alerts",
           "tow_truck_dispatches")
# Five simulated minutes, with breakdowns and accidents forced so that every rule fires.
PROFILE = TrafficProfile(xways=1, duration_s=300, peak_rate=150, breakdown_probability=0.004,
                         accident_probability=0.6, seed=5)


def _read(kafka_config, registry, topic: str) -> list[str]:
    with TupleConsumer(kafka_config, registry, [topic], f"check-{uuid.uuid4()}") as consumer:
        tuples = consumer.drain()
    rows = []
    for consumed in tuples:
        if consumed.record.type is TupleType.STABLE:
            value = dict(consumed.record.value)
            value.pop("emit_time", None)
            rows.append(json.dumps(value, sort_keys=True))
    return rows


def test_linear_road_matches_the_reference(spark, federation, kafka_config, registry,
                                           tmp_path) -> None:
    prefix = f"lr{uuid.uuid4().hex[:6]}."
    expected = compute(r for _, rs in TrafficSimulation(PROFILE).run() for r in rs)
    assert all(getattr(expected, name) for name in OUTPUTS), "every rule fires on this input"

    # Replayed ten times faster than real time: the SUnion's buckets keep it in order.
    network = load_network(NETWORK)
    run = LocalNetworkRun(spark, network, federation, registry, tmp_path / "checkpoints",
                          topic_prefix=prefix)
    with run:
        with RateProgress("linear road", total=PROFILE.duration_s - 1.0) as progress:
            # End of input follows: nothing comes with a smaller stime, every window closes.
            summary = publish_traffic(PROFILE, kafka_config=kafka_config, registry=registry,
                                      speedup=10, progress=progress, topic_prefix=prefix,
                                      end_of_stream=True)
        assert summary.failed == 0
        run.wait_until_quiet()
        for name in OUTPUTS:
            got = Counter(_read(kafka_config, registry, run.topic(name)))
            want = Counter(json.dumps(row, sort_keys=True) for row in getattr(expected, name))
            missing, extra = want - got, got - want
            assert not missing and not extra, (
                f"{name}: {sum(missing.values())} missing, e.g. {list(missing)[:3]}; "
                f"{sum(extra.values())} extra, e.g. {list(extra)[:3]}")
