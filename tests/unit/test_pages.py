"""A processor's state in pages: a page is pickled again only once it was asked for to be
changed, and what is pickled is what the pages hold."""

import pickle

import pytest

from medusa_spark.processors.pages import Pages

pytestmark = pytest.mark.unit


def _pages() -> Pages:
    pages = Pages()
    for page in range(3):
        pages.write(page).update({page * 10 + i: (i, "x") for i in range(5)})
    return pages


def test_pages_pickle_to_what_they_hold() -> None:
    restored = pickle.loads(pickle.dumps(_pages(), protocol=5))
    assert dict(restored.read(1)) == {10 + i: (i, "x") for i in range(5)}
    assert len(restored) == 15 and sorted(restored.ids()) == [0, 1, 2]


def test_only_a_page_written_is_pickled_again() -> None:
    pages = _pages()
    before = pages.__getstate__()
    pages.read(0)
    pages.write(2)[99] = "new"
    after = pages.__getstate__()
    assert after[0] is before[0] and after[1] is before[1]
    assert after[2] is not before[2] and pickle.loads(after[2])[99] == "new"


def test_a_restored_page_keeps_its_pickled_form_until_written() -> None:
    state = pickle.dumps(_pages(), protocol=5)
    restored = pickle.loads(state)
    kept = restored.__getstate__()
    restored.write(0).pop(0)
    again = pickle.loads(pickle.dumps(restored, protocol=5))
    assert 0 not in again.read(0) and restored.__getstate__()[1] is kept[1]


def test_a_page_not_there_reads_empty_and_cannot_be_changed_by_reading() -> None:
    pages = Pages()
    assert dict(pages.read(7)) == {}
    with pytest.raises(TypeError):
        pages.read(7)[1] = 2  # type: ignore[index]
    pages.write(7)[1] = 2
    pages.write(7).pop(1)
    pages.drop_empty(7)
    assert pages.ids() == []
