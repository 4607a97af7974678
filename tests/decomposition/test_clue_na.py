"""Issue 30.8: an N/A clue is one value, ``None`` (``pandas.NA`` in the Int64 ``clue_year``), as
:mod:`pyterrier_tot.decomposition.clues` documents: from the rule extractor, from the LLM decomposer, and after
the pandas operations a pipeline runs (PyTerrier's ``+`` used to write NaN on the rows it merged in)."""
import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_tot as ptt
from pyterrier_tot.decomposition.clue_decomposer import ClueDecomposer
from pyterrier_tot.decomposition.clues import CLUE_COLUMNS, YEAR_COLUMN, clues_na_as_none
from tests.helpers.openai_stub import OpenAIStub, stub_llm

TOPICS = pd.DataFrame({"qid": ["q1", "q2", "q3"],
                       "query": ["a blacksmith and a dragon fly to the red moon, I read it in the late 90s",
                                 "a ghost keeper climbs the stairs of a lighthouse",
                                 "kittens play all day, it was called \"Sleepy\" by Ann Marsh"]})


def assert_one_na(df, columns=CLUE_COLUMNS):
    for col in columns:
        assert df[col].dtype == object, (col, df[col].dtype)
        na = [v for v in df[col] if not isinstance(v, str)]
        assert all(v is None for v in na), (col, {type(v).__name__ for v in na})
    if YEAR_COLUMN in df.columns:
        assert str(df[YEAR_COLUMN].dtype) == "Int64"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from tests.helpers.books import TINY_BOOKS
    return ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path_factory.mktemp("clue_na_index"))


def test_rule_extractor_na_is_none():
    # pandas 3 reads text as its string dtype, whose missing value is NaN: the clues must not inherit it
    inp = TOPICS.assign(query=TOPICS["query"].astype("str"), clue_title=pd.Series(["x", None, None], dtype="str"))
    out = ptt.RuleClueExtractor()(inp)
    assert_one_na(out)
    assert out["clue_author"].tolist()[:2] == [None, None] and out["clue_title"].iloc[0] is None
    assert out[YEAR_COLUMN].iloc[0] == 1999 and out[YEAR_COLUMN].iloc[1] is pd.NA


def _responder(messages):
    query = messages[-1]["content"]
    if "lighthouse" in query:
        return '{"title": "N/A", "author": null, "date": "", "cover": "none", "genre": "N/A", "plot": "N/A"}'
    return '{"title": "N/A", "plot": "a dragon and a blacksmith", "date": "late 90s"}'


def test_llm_decomposer_na_is_none(tmp_path):
    with OpenAIStub(_responder) as stub:
        dec = ClueDecomposer(stub_llm(stub, tmp_path / "c.sqlite3"), strategy="joint", mode="predictive",
                             verbose=False, max_repeat_share=None)
        out = dec(TOPICS.head(2))
    assert_one_na(out)
    assert out["clue_plot"].tolist() == ["a dragon and a blacksmith", None]
    assert out[YEAR_COLUMN].iloc[0] == 1999 and out[YEAR_COLUMN].iloc[1] is pd.NA


def test_na_stays_none_through_a_fusion_and_pt_apply(index):
    # BM25 matches a book or two, dense returns all six: most rows are merged in from the right
    fused = ptt.RuleClueExtractor() >> ptt.LinearFusion(index.bm25() % 6, index.dense() % 6, normalise="none")
    res = (fused >> pt.apply.query(lambda r: r["query"] + " again"))(TOPICS)
    left = (ptt.RuleClueExtractor() >> index.bm25() % 6)(TOPICS)
    assert len(res) > len(left)
    assert_one_na(res)


def test_na_stays_none_through_dense_retrieval(index):
    assert_one_na((ptt.RuleClueExtractor() >> index.dense())(TOPICS))


def test_clues_na_as_none_after_a_merge():
    df = pd.DataFrame({"qid": ["1", "2", "3", "4"], "docno": list("abcd"),
                       "clue_title": pd.Series(["Red Moon", None, "", "  "], dtype="str"),
                       "clue_plot": pd.Series(["dragons", float("nan"), pd.NA, None], dtype=object),
                       YEAR_COLUMN: pd.Series([2004.0, float("nan"), None, 1990.0], dtype=object)})
    merged = df.merge(pd.DataFrame({"qid": ["1", "5"], "docno": ["z", "y"]}), on=["qid", "docno"], how="outer")
    out = clues_na_as_none(merged)
    assert_one_na(out, ["clue_title", "clue_plot"])
    assert out.set_index("docno")["clue_title"].to_dict() == {"a": "Red Moon", "b": None, "c": None, "d": None,
                                                               "y": None, "z": None}
    assert out.set_index("docno")[YEAR_COLUMN].to_dict()["a"] == 2004 and out[YEAR_COLUMN].isna().sum() == 4
    assert merged["clue_title"].isna().sum() == 3  # the input is not changed
    text_years = clues_na_as_none(pd.DataFrame({"qid": ["1", "2"], YEAR_COLUMN: ["around 2000", float("nan")]}))
    assert text_years[YEAR_COLUMN].tolist() == ["around 2000", None]  # DateExpert parses date text itself
    ok = ptt.RuleClueExtractor()(TOPICS)
    assert clues_na_as_none(ok) is ok  # nothing to change: the same frame back


def test_na_is_none_from_clue_lookup_and_the_clue_cache(tmp_path):
    from pyterrier_tot.decomposition.pipeline import ClueLookup
    from pyterrier_tot.recipe.expert_training import load_clue_cache

    (tmp_path / "clues.jsonl").write_text('{"qid": "1", "clue_title": "Red Moon", "clue_plot": ""}\n'
                                          '{"qid": "2", "clue_title": null, "clue_plot": "dragons"}\n')
    cached = load_clue_cache(tmp_path / "clues.jsonl")
    assert cached["clue_plot"].tolist()[0] is None and cached["clue_title"].tolist()[1] is None
    topics = pd.DataFrame({"qid": ["1", "2", "3"], "query": ["a", "b", "c"]})
    with pytest.warns(UserWarning, match="no clues for 1 query"):
        out = ClueLookup(cached)(topics)
    assert out["clue_title"].tolist() == ["Red Moon", None, None]
    assert out["clue_plot"].tolist() == [None, "dragons", None]
