"""The index enters the recipe once: ``tuned_pipeline`` checks it, and reads its corpus for years, where it enters
and passes on what it learnt (a ``CheckedIndex``); no expert, fuser key or plan checks it again."""
from types import SimpleNamespace

import pandas as pd
import pytest

from pyterrier_tot import checks, recipe
from pyterrier_tot.decomposition import date_expert
from pyterrier_tot.decomposition.field_expert import FieldExpert
from pyterrier_tot.errors import BadInputTypeError
from pyterrier_tot.index import BookIndex
from tests.helpers.books import TINY_BOOKS
from tests.helpers.tiny_datasets import FourQueries


@pytest.fixture
def counted(monkeypatch):
    """How often the index is checked and its corpus read for years, from here on."""
    counts = {"index": 0, "corpus": 0}
    check_index, has_dates = checks.check_index, date_expert._has_dates

    def counted_index(index, who):
        counts["index"] += 1
        return check_index(index, who)

    def counted_corpus(index):
        counts["corpus"] += 1
        return has_dates(index)

    monkeypatch.setattr(checks, "check_index", counted_index)
    monkeypatch.setattr(date_expert, "_has_dates", counted_corpus)
    return counts


def test_tuned_pipeline_checks_the_index_and_its_corpus_once(tmp_path, monkeypatch, counted):
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    index = BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path / "index")
    ds = FourQueries()
    dp = recipe.tuned_pipeline(ds, index, fine_tuned=False, k=3, expert_k=2, verbose=False)
    assert "date" in dp.experts and "author" in dp.experts  # what the entry learnt decided these
    assert counted == {"index": 1, "corpus": 1}
    assert all(getattr(e, "index", index) is index for e in dp.experts.values())  # the index itself, never the wrapper
    dp(ds.get_topics("validation"))  # running it checks nothing again (the date expert knows the books have years)
    assert counted == {"index": 1, "corpus": 1}


def test_a_stage_built_by_hand_still_checks_its_index(counted):
    with pytest.raises(BadInputTypeError, match="FieldExpert: index must be a ptt.BookIndex"):
        FieldExpert("not an index", "title")
    assert counted["index"] == 1
    checked = checks.CheckedIndex.of(SimpleNamespace(docnos=[], bm25=None, dense=None), "an entry")
    assert checks.CheckedIndex.of(checked, "a later entry") is checked and counted["index"] == 2
