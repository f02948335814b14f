"""A process box's state between batches: kept in the Python worker for the version Spark
hands back next, unpickled otherwise (an older version, a plain pickle, another worker)."""

import pickle

import pytest

from medusa_spark.boxes import process
from medusa_spark.boxes.process import restored_state, saved_state

pytestmark = pytest.mark.unit

LARGE = {vid: (vid, 1, 2, 3) for vid in range(20_000)}


def test_the_version_just_saved_comes_back_as_the_same_object() -> None:
    state = dict(LARGE)
    value = saved_state(state)
    assert restored_state(value) is state


def test_a_version_comes_back_as_its_object_once_then_unpickled() -> None:
    """The first call changed the object in place: a retry of its batch must not see it."""
    state = dict(LARGE)
    value = saved_state(state)
    first = restored_state(value)
    first[-1] = "changed by a batch Spark did not commit"
    again = restored_state(value)
    assert again is not first and -1 not in again and again == LARGE


def test_an_older_version_is_unpickled_not_the_newest_object() -> None:
    state = dict(LARGE)
    older = saved_state(state)
    state[-1] = "the next batch's change"
    newer = saved_state(state)
    assert -1 not in restored_state(older)
    assert restored_state(newer) is state


def test_a_small_state_is_not_kept() -> None:
    value = saved_state({"small": 1})
    assert restored_state(value) == {"small": 1}
    assert len(process._kept) <= process._KEPT_STATES


def test_a_state_pickled_before_versions_is_read() -> None:
    assert restored_state(pickle.dumps({"old": [1, 2]}, protocol=5)) == {"old": [1, 2]}


def test_the_worker_keeps_a_bounded_number_of_versions() -> None:
    for _ in range(process._KEPT_STATES + 5):
        saved_state(dict(LARGE))
    assert len(process._kept) == process._KEPT_STATES
