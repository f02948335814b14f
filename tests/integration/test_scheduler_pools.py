"""A node's queries run in two fair scheduler pools: the one users read first, the ones
preparing to take over (scale instances warming, moves, redos, active standbys) after."""

from __future__ import annotations

import pytest

from medusa_spark.fragment_writer import FragmentWriter
from medusa_spark.scheduler_pools import POOL_PROPERTY, PREPARING, SERVING
from medusa_spark.testing import boundary, run_network
from tests.integration.test_fragment_semantics import COUNT_PER_MINUTE, report

pytestmark = pytest.mark.integration


def test_the_session_defines_both_pools(spark) -> None:
    context = spark.sparkContext._jsc.sc()
    serving = context.getPoolForName(SERVING).get()
    preparing = context.getPoolForName(PREPARING).get()
    assert (serving.minShare(), serving.weight()) == (1, 4)
    assert (preparing.minShare(), preparing.weight()) == (0, 1)
    assert str(serving.schedulingMode()) == str(preparing.schedulingMode()) == "FAIR"


def test_a_writer_runs_each_batch_in_the_pool_of_its_role(spark) -> None:
    """A standby's batches go to the preparing pool; once promoted, its next batch to the
    serving one (the pool is set in the thread that starts the batch's jobs)."""
    pools: list[str | None] = []

    def standby_then_promoted(writer: FragmentWriter) -> None:
        writer.outputs[0].standby = True  # type: ignore[misc]

        def record(_fragment: str, batch_id: int) -> None:
            pools.append(spark.sparkContext.getLocalProperty(POOL_PROPERTY))
            if batch_id == 0:
                writer.outputs[0].standby = False  # type: ignore[misc]
        writer.on_batch = record
    run_network(spark, COUNT_PER_MINUTE, [[report(10, 1)], [boundary(130)]],
                prepare=standby_then_promoted)
    assert pools[0] == PREPARING and pools[1:] and set(pools[1:]) == {SERVING}
