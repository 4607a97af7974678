"""A fusion keeps each row's query. PyTerrier's ``+`` outer-merges two rankings and keeps the left side's columns
only, so a book only the right side returned has no ``query`` / ``query_0`` / clue columns, and a DenseReranker after
it fails with "empty 'query'". The library's own fusion stages (``LinearFusion`` / ``linear_fusion``, ``Fusion``) do
the merge themselves and keep every query column; ``+`` itself is PyTerrier's, untouched; a query that is really
missing is named as such."""
import pandas as pd
import pytest

import pyterrier_tot as ptt
from pyterrier_tot.checks import check_result_frame, fill_query_columns
from pyterrier_tot.submission.fusion import Fusion

TOPICS = pd.DataFrame({"qid": ["q1", "q2"],
                       "query": ["I think it was a dragon and a blacksmith, maybe the red moon?",
                                 "honestly a ghost keeper in a lighthouse I guess"]})


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from tests.helpers.books import TINY_BOOKS
    return ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path_factory.mktemp("fusion_query_index"))


def _query_per_qid(res, column):
    assert res[column].notna().all(), f"{int(res[column].isna().sum())} rows lost {column!r}"
    assert res.groupby("qid")[column].nunique().eq(1).all()
    return res.drop_duplicates("qid").set_index("qid")[column]


def test_linear_fusion_keeps_the_query_that_pyterrier_plus_loses(index):
    bm25, dense, norm = index.bm25(), index.dense(), ptt.Normalise()
    hedged = ptt.HedgeRemover()(TOPICS)
    plain = (ptt.HedgeRemover() >> (0.6 * (bm25 % 6 >> norm) + 0.4 * (dense % 6 >> norm)))(TOPICS)
    res = (ptt.HedgeRemover() >> ptt.linear_fusion(bm25 % 6, dense % 6, weights=[.6, .4]))(TOPICS)
    # BM25 matches few of the six books, dense returns all six: most rows come from the right side only, where
    # PyTerrier's + leaves the query NaN (what docs/robustness.rst describes)
    left = set(zip(*(bm25 % 6)(hedged)[["qid", "docno"]].T.values))
    assert len(res) > len(left) and len(res) == len(plain) == 12
    assert plain["query"].isna().sum() == len(plain) - len(left)
    assert _query_per_qid(res, "query").to_dict() == hedged.set_index("qid")["query"].to_dict()
    assert _query_per_qid(res, "query_0").to_dict() == TOPICS.set_index("qid")["query"].to_dict()
    # the same rows, ranks and scores as PyTerrier's sum
    key = ["qid", "docno"]
    assert res.set_index(key)["score"].to_dict() == pytest.approx(plain.set_index(key)["score"].to_dict())
    assert res.set_index(key)["rank"].to_dict() == plain.set_index(key)["rank"].to_dict()
    b = (bm25 % 6 >> norm)(hedged).set_index(key)["score"]
    d = (dense % 6 >> norm)(hedged).set_index(key)["score"]
    for q, doc, s in zip(res.qid, res.docno, res.score):
        assert s == pytest.approx(0.6 * b.get((q, doc), 0.0) + 0.4 * d.get((q, doc), 0.0))


def test_linear_fusion_keeps_query_and_clue_columns(index):
    fused = ptt.RuleClueExtractor() >> ptt.linear_fusion(index.bm25() % 6, index.dense() % 6, weights=[.6, .4])
    clues = ptt.RuleClueExtractor()(TOPICS)
    res = fused(TOPICS)
    assert len(res) == 12
    _query_per_qid(res, "query")
    for col in ["clue_plot", "clue_genre"]:
        want = clues.set_index("qid")[col].to_dict()
        assert res.groupby("qid")[col].agg(lambda s: set(s)).to_dict() == {q: {v} for q, v in want.items()}
    assert res["clue_year"].isna().all() and str(res["clue_year"].dtype) == "Int64"
    # N/A clues stay N/A (None): nothing is filled where no row of the qid holds a value
    assert all(v is None for v in res["clue_title"])


def test_dense_reranker_after_a_fusion(index):
    fused = ptt.HedgeRemover() >> ptt.linear_fusion(index.bm25() % 6, index.dense() % 6)
    res = (fused >> ptt.DenseReranker(index, k=4))(TOPICS)
    assert len(res) == 12 and res["query"].notna().all() and res["score"].notna().all()


def test_fusion_stage_keeps_the_input_query_columns(index):
    inp = ptt.HedgeRemover()(TOPICS)
    res = Fusion([index.bm25() % 6, index.dense() % 6], method="combsum")(inp)
    assert _query_per_qid(res, "query").to_dict() == inp.set_index("qid")["query"].to_dict()
    assert _query_per_qid(res, "query_0").to_dict() == TOPICS.set_index("qid")["query"].to_dict()


def test_a_missing_query_names_the_column_and_the_qids():
    res = pd.DataFrame({"qid": ["q1", "q1", "q2"], "docno": ["a", "b", "a"], "score": [2.0, 1.0, 1.0],
                        "query": ["dragon", None, float("nan")]})
    lost = r"column 'query' is missing .*\['q1'\] while other rows of the same qid"
    with pytest.raises(ptt.BadInputError, match=lost):
        check_result_frame(res, "Stage", "query")
    with pytest.raises(ptt.BadInputError, match=r"column 'query' is missing \(None/NaN\) for qid\(s\) \['q2'\]"):
        check_result_frame(res[res.qid == "q2"], "Stage", "query")
    # a row after the first of its qid is checked too (it used to pass and fail later inside the scorer)
    with pytest.raises(ptt.BadInputError, match="q1"):
        ptt.DenseReranker(model="minilm")(res[res.qid == "q1"].assign(text="t"))
    with pytest.raises(ptt.BadInputError, match="empty 'query'"):
        check_result_frame(res.assign(query="  "), "Stage", "query")


def test_fill_query_columns_fills_per_qid_only_what_is_missing():
    df = pd.DataFrame({"qid": ["1", "1", "2", "3"], "docno": list("abcd"), "text": ["x", None, "y", None],
                       "query": ["dragon", None, None, None], "clue_year": pd.array([2001, None, None, None],
                                                                                   dtype="Int64")})
    src = pd.DataFrame({"qid": ["2"], "query": ["ghost"]})
    out = fill_query_columns(df, source=src)
    assert out["query"].tolist()[:3] == ["dragon", "dragon", "ghost"] and pd.isna(out["query"].iloc[3])
    assert out["clue_year"].tolist()[:2] == [2001, 2001] and str(out["clue_year"].dtype) == "Int64"
    assert out["text"].isna().sum() == 2  # a document column is not a query column
    assert df["query"].isna().sum() == 3  # the input is not changed
    assert fill_query_columns(df.head(1)) is not None and len(fill_query_columns(df.head(0))) == 0


def test_mix_scores_interpolates_min_max_per_query():
    from pyterrier_tot.normalise import mix_scores

    df = pd.DataFrame({"qid": ["1", "1", "1", "2", "2"], "score": [30.0, 20.0, 10.0, 0.9, 0.1]})
    new = [0.0, 5.0, 10.0, 3.0, 3.0]                  # query 2: constant, so min-max gives 1.0 to both
    got = mix_scores(df, new, 0.25)
    want = [0.75 * 1.0, 0.25 * 0.5 + 0.75 * 0.5, 0.25 * 1.0, 0.25 + 0.75, 0.25 + 0.0]
    assert got == pytest.approx(want)
    assert mix_scores(df, new, 0.0) == pytest.approx([1.0, 0.5, 0.0, 1.0, 0.0])   # the incoming order alone
