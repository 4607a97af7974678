"""DateExpert: the hard truth table, the soft decay, neutral values and where book years come from."""
import math

import numpy as np
import pandas as pd
import pytest

from pyterrier_tot.decomposition.date_expert import DATE_NEUTRAL, DateExpert
from pyterrier_tot.index import BookIndex


def frame(rows):
    return pd.DataFrame(rows, columns=["qid", "docno", "year", "clue_year"]).assign(query="q")


def test_hard_truth_table():
    df = frame([("1", "a", 1990, 2000),   # before: 1
                ("1", "b", 2000, 2000),   # same year: 1
                ("1", "c", 2001, 2000),   # after: 0
                ("1", "d", None, 2000),   # unknown year: neutral
                ("2", "a", 1990, pd.NA),  # no clue: neutral
                ("2", "b", 2020, None)])
    out = DateExpert()(df).set_index(["qid", "docno"])["score"]
    assert out[("1", "a")] == 1.0 and out[("1", "b")] == 1.0 and out[("1", "c")] == 0.0
    assert out[("1", "d")] == DATE_NEUTRAL == 1.0
    assert out[("2", "a")] == out[("2", "b")] == DATE_NEUTRAL


def test_neutral_is_configurable():
    df = frame([("1", "a", None, 2000), ("1", "b", 1999, 2000), ("1", "c", 2005, 2000)])
    out = DateExpert(neutral=0.5)(df).set_index("docno")["score"]
    assert out.tolist() == [0.5, 1.0, 0.0]


def test_soft_decay():
    df = frame([("1", "a", 1999, 2000), ("1", "b", 2005, 2000), ("1", "c", 2010, 2000), ("1", "d", None, 2000)])
    out = DateExpert(soft=True, tau=5)(df).set_index("docno")["score"]
    assert out["a"] == 1.0
    assert math.isclose(out["b"], math.exp(-1)) and math.isclose(out["c"], math.exp(-2))
    assert out["d"] == DATE_NEUTRAL
    assert out["a"] > out["b"] > out["c"]
    with pytest.raises(ValueError):
        DateExpert(soft=True, tau=0)


def test_years_from_index_and_string_clues(tmp_path):
    from tests.helpers.books import TINY_BOOKS
    idx = BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path)
    # b1 1996, b2 2004, b3 1988, b6 unknown
    cands = pd.DataFrame({"qid": "1", "query": "x", "docno": ["b1", "b2", "b3", "b6"],
                          "clue_year": ["around 2000", "around 2000", "2000", 2000.0]})
    out = DateExpert(idx)(cands).set_index("docno")["score"]
    assert out.to_dict() == {"b1": 1.0, "b2": 0.0, "b3": 1.0, "b6": DATE_NEUTRAL}
    ranked = DateExpert(idx)(cands)
    assert ranked.loc[ranked.docno == "b2", "rank"].iloc[0] == 3


def test_errors_and_empty():
    with pytest.raises(ValueError, match="scorer"):
        DateExpert()(pd.DataFrame({"qid": ["1"], "query": ["x"], "clue_year": [2000]}))
    with pytest.raises(KeyError, match="clue_year"):
        DateExpert()(pd.DataFrame({"qid": ["1"], "docno": ["a"], "year": [1999]}))
    with pytest.raises(ValueError, match="BookIndex"):
        DateExpert()(pd.DataFrame({"qid": ["1"], "docno": ["a"], "clue_year": [1999]}))
    empty = DateExpert()(frame([]))
    assert len(empty) == 0 and "score" in empty.columns


def test_score_years_vectorised():
    e = DateExpert()
    got = e.score_years(np.array([1990, 2010, np.nan, 2000]), np.array([2000, 2000, 2000, np.nan]))
    assert got.tolist() == [1.0, 0.0, 1.0, 1.0]


def test_a_corpus_without_dates_is_told_and_warned_once(tmp_path):
    """Issue 30.4: on a corpus with no years (Reddit-TOMT) every score was a silent neutral 1.0."""
    import warnings

    from pyterrier_tot.decomposition.date_expert import NoDatesWarning, corpus_has_dates
    from tests.helpers.books import TINY_BOOKS
    dated = BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path / "dated")
    undated = BookIndex(pd.DataFrame(TINY_BOOKS).drop(columns=["year"]), path=tmp_path / "undated")
    streamed = BookIndex([{k: v for k, v in b.items() if k != "year"} for b in TINY_BOOKS],
                         path=tmp_path / "streamed", stream=True)
    streamed_dated = BookIndex(TINY_BOOKS, path=tmp_path / "streamed_dated", stream=True)
    assert streamed.streamed and streamed_dated.streamed
    assert corpus_has_dates(dated) and corpus_has_dates(streamed_dated)
    assert not corpus_has_dates(undated) and not corpus_has_dates(streamed)
    assert DateExpert.acts(dated) and not DateExpert.acts(undated) and not DateExpert(dated).acts(undated)
    assert DateExpert.acts(None)  # years from the input frame: cannot be judged beforehand
    with pytest.raises(TypeError, match="BookIndex"):
        corpus_has_dates("not an index")
    cands = pd.DataFrame({"qid": "1", "query": "x", "docno": ["b1", "b2"], "clue_year": [2000, 2000]})
    expert = DateExpert(undated)
    with pytest.warns(NoDatesWarning, match="no book .* has a publication year"):
        out = expert(cands)
    assert out["score"].tolist() == [DATE_NEUTRAL, DATE_NEUTRAL]
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoDatesWarning)  # once per expert; a dated corpus never warns
        expert(cands)
        DateExpert(dated)(cands)
        DateExpert()(cands.assign(year=[1990, 2010]))


def test_reddit_tomt_has_no_dates(reddit_index):
    from pyterrier_tot.decomposition.date_expert import corpus_has_dates
    assert not corpus_has_dates(reddit_index) and not DateExpert.acts(reddit_index)
