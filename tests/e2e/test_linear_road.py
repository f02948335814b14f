"""The Linear Road network on Spark and Kafka, checked by `medusa linear-road validate`'s code
against the independent reference: every output of the four query types, record for record."""

import math
import uuid
from pathlib import Path

import pytest

from medusa.linear_road.reference import compute
from medusa.linear_road.run_records import read_run
from medusa.linear_road.sources import publish_traffic
from medusa.linear_road.traffic import TrafficProfile, TrafficSimulation
from medusa.linear_road.validation import validate
from medusa.progress import RateProgress
from medusa_spark.local_run import LocalNetworkRun
from medusa_spark.network.model import load_network

# A stress run (the network replayed 15 times faster, 6,000 reports/s): `make test` checks
# the same network against the same reference through the CLI (the demo's test) and the
# partitioned one under a scale step (test_scale).
pytestmark = [pytest.mark.e2e, pytest.mark.scenario]

NETWORK = Path(__file__).parents[2] / "spark_apps/medusa_spark/networks/linear_road.yaml"
# Seven simulated minutes built up to 400 reports/s in 30 s, with a breakdown now and then
# and every one an accident: tolls, alerts, charged balances and expenditures all occur.
PROFILE = TrafficProfile(xways=1, duration_s=420, peak_rate=400, ramp_s=30,
                         breakdown_probability=0.0001, accident_probability=1.0, seed=5)


def test_linear_road_outputs_equal_the_reference(spark, federation, kafka_config, registry,
                                                 tmp_path) -> None:
    prefix = f"lr{uuid.uuid4().hex[:6]}."
    expected = compute(r for _, rs in TrafficSimulation(PROFILE).run() for r in rs)
    assert any(row["toll"] > 0 for row in expected.toll_notifications)
    assert expected.accident_alerts and expected.daily_expenditures
    assert any(row["balance"] > 0 for row in expected.account_balances)

    # Replayed fifteen times faster than real time: the SUnion's buckets keep it in order.
    run = LocalNetworkRun(spark, load_network(NETWORK), federation, registry,
                          tmp_path / "checkpoints", topic_prefix=prefix)
    with run:
        with RateProgress("linear road", total=PROFILE.duration_s - 1.0) as progress:
            summary = publish_traffic(PROFILE, kafka_config=kafka_config, registry=registry,
                                      speedup=15, progress=progress, topic_prefix=prefix,
                                      end_of_stream=True)
        assert summary.failed == 0
        run.wait_until_quiet()
        records = read_run(kafka_config, registry, prefix)
    assert records.complete
    # Replayed faster than real time, so response times say nothing here (see `make bench`).
    result = validate(records.inputs, records.outputs, compute(records.reference_input()),
                      late_after_s=math.inf)
    for kind in result.types:
        assert kind.expected > 0, kind.kind.name
        assert (kind.missing, kind.wrong, kind.duplicated) == (0, 0, 0), result.text()
    assert [k.expected for k in result.types] == [
        len(expected.toll_notifications), len(expected.accident_alerts),
        len(expected.account_balances), len(expected.daily_expenditures)]
