"""A query whose stop times out (Spark's ``stopTimeout``) does not hold the node: it is
logged and left to end on its own, and not stopped again."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from medusa_spark.fragment_run import FragmentRun

pytestmark = pytest.mark.unit


class _Query:
    def __init__(self, error: Exception | None) -> None:
        self.error, self.stops = error, 0

    def stop(self) -> None:
        self.stops += 1
        if self.error is not None:
            raise self.error


def _run(query: _Query) -> FragmentRun:
    wiring: Any = SimpleNamespace(global_name="alpha/n/f")
    return FragmentRun(wiring, query, writer=None, checkpoint="/tmp/none")  # type: ignore[arg-type]


def test_a_stop_that_times_out_is_logged_and_not_tried_again(caplog) -> None:
    query = _Query(RuntimeError("java.util.concurrent.TimeoutException: Stream Execution "
                                "thread for stream [id = x] failed to stop within 60000 "
                                "milliseconds (specified by spark.sql.streaming.stopTimeout)"))
    run = _run(query)
    run.stop_query()
    run.stop_query()
    assert query.stops == 1
    assert "did not stop within 60 s" in caplog.text


def test_any_other_error_of_a_stop_is_raised() -> None:
    run = _run(_Query(RuntimeError("the JVM is gone")))
    with pytest.raises(RuntimeError, match="the JVM is gone"):
        run.stop_query()
