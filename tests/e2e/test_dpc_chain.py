"""DPC through two fragments on two participants, on the real stack: beta's fragment merges
both participants' sensor streams and sums them per 10-second window; alpha's fragment,
downstream, sums beta's results per 20-second window. Beta loses alpha's Kafka (a one-way
cut: alpha still reaches beta's), so beta's results turn tentative; alpha's results computed
from them are tentative too, as they come. Once the link heals, beta corrects (UNDO, the
corrected results, REC_DONE), alpha reconciles from that UNDO the same way, and the stable
view of alpha's output equals the fault-free run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from medusa.catalog.client import CatalogClient
from medusa.envelope import TupleType
from medusa.sensor_windows import chain_reference
from medusa_apps.bench.dpc_partition import Fault, ScenarioRun, deployed, run_scenario
from medusa_spark.networks import chain_network_yaml

pytestmark = pytest.mark.e2e

SECONDS = 30
"""At least; the input goes on until the cut has ended."""
BOUND = "8 seconds"
"""Two fragments on the longest path: D = (8 s - 2 x 1 s trigger) / 2 = 3 s each."""
CUT = (22.0, 45.0)
"""(after, for) seconds: beta cannot reach alpha's Kafka. Alpha's first tentative result
needs beta's D, a 10 s window, alpha's D and a 20 s window: about 36 s at most. The cut
ends once alpha has written tentative results."""


@pytest.fixture(scope="module")
def chain_run(federation, alpha_beta_nodes, links, spark, registry_module
              ) -> Iterator[ScenarioRun]:
    upstream = alpha_beta_nodes["beta"].global_name
    downstream = alpha_beta_nodes["alpha"].global_name
    placement = {"merged": upstream, "per_sensor": upstream, "per_sensor_20s": downstream}
    cut = Fault("beta loses alpha", *CUT,
                lambda: links.partition("alpha", "beta", one_way=True),
                lambda: links.heal("alpha", "beta"),
                until=lambda log: len(log.of(TupleType.TENTATIVE)) >= 3)
    with CatalogClient(federation.catalog_url) as catalog, deployed(
            federation, registry_module, spark, catalog, chain_network_yaml, BOUND, placement,
            "per_sensor_20s") as (network, topic):
        yield run_scenario(federation, registry_module, federation.catalog_url, network, topic,
                           SECONDS, [cut], output_participant="alpha",
                           reference=chain_reference, settle_timeout_s=300.0)


def test_alpha_marks_results_from_beta_s_tentative_ones_tentative(chain_run: ScenarioRun) -> None:
    cut = chain_run.faults[0]
    first_undo = min((c.timestamp_ms for c in chain_run.of(TupleType.UNDO)), default=None)
    tentative = [c for c in chain_run.of(TupleType.TENTATIVE) if cut.began_ms <= c.timestamp_ms
                 and (first_undo is None or c.timestamp_ms < first_undo)]
    assert tentative, "alpha wrote no tentative result from beta's tentative ones"
    print(f"{len(tentative)} tentative result(s) of alpha, the first "
          f"{(min(c.timestamp_ms for c in tentative) - cut.began_ms) / 1000:.1f}s into the cut")
    # A tentative result sums what beta had while cut off: never more than the truth.
    for consumed in tentative:
        value = consumed.record.value
        expected = chain_run.expected.get(consumed.record.tuple_id)
        assert expected is None or value["readings"] <= expected["readings"], value


def test_alpha_reconciles_from_beta_s_undo(chain_run: ScenarioRun) -> None:
    healed = chain_run.faults[0].ended_ms
    types = [c.record.type for c in chain_run.records if c.record.type is not TupleType.BOUNDARY]
    assert TupleType.UNDO in types and TupleType.REC_DONE in types, types
    undo = types.index(TupleType.UNDO)
    assert TupleType.REC_DONE in types[undo:]
    assert all(c.timestamp_ms >= healed for c in chain_run.of(TupleType.UNDO))
    states = [state for _, state in chain_run.dpc_states]
    assert "STABILIZATION" in states and states[-1] == "STABLE", states


def test_the_stable_view_downstream_equals_the_fault_free_run(chain_run: ScenarioRun) -> None:
    assert chain_run.unlike_fault_free() is None, chain_run.unlike_fault_free()
