import time
import warnings

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_tot as ptt
from pyterrier_tot.index import tokenise_query


def _q(*pairs):
    return pd.DataFrame([{"qid": q, "query": t} for q, t in pairs])


@pytest.fixture
def tiny_index(tiny_frame, tmp_path):
    return ptt.BookIndex(tiny_frame, path=tmp_path / "idx", name="tiny")


def test_tokenise_query():
    assert tokenise_query('Kitten "sleepy" (1990s)?? :) 🐱 it\'s #tag\n\tNEW') == "kitten sleepy 1990s it s tag new"
    assert tokenise_query("a " * 5000, max_terms=10) == " ".join(["a"] * 10)
    assert tokenise_query("x" * 100 + " ok") == "ok"


def test_bm25_finds_the_book(tiny_index):
    bm25 = tiny_index.bm25()
    res = bm25(_q(("1", "I think there were kittens, and one brother napped all day?"),
                  ("2", "a DRAGON flying to the red moon!!! (2004?)")))
    top = res.sort_values("rank").groupby("qid").head(1).set_index("qid")["docno"]
    assert top.to_dict() == {"1": "b1", "2": "b2"}
    assert set(res.columns) >= {"qid", "query", "docno", "score", "rank"}
    assert res.loc[res.qid == "2", "query"].iloc[0].startswith("a DRAGON")  # user text kept, not the tokens
    assert res.groupby("qid")["rank"].min().eq(0).all()
    assert "BM25(title+text" in repr(bm25)


def test_bm25_single_field(tiny_index):
    res = tiny_index.bm25(fields="genres")(_q(("1", "mystery")))
    assert res["docno"].tolist() == ["b3"]
    with pytest.raises(ValueError, match="cannot index"):
        tiny_index.bm25(fields="year")


def test_dense_finds_the_book(tiny_index):
    dense = tiny_index.dense()
    res = dense(_q(("1", "a ghost in an old lighthouse at night"), ("2", "kids hiding on a rocket to jupiter")))
    top = res.sort_values("rank").groupby("qid").head(1).set_index("qid")["docno"]
    assert top.to_dict() == {"1": "b5", "2": "b4"}
    assert len(res) == 12  # every book for every query
    # the scorer (stored vectors) agrees with the retriever's scores
    rescored = tiny_index.dense_scorer()(res[["qid", "query", "docno"]])
    merged = res.merge(rescored, on=["qid", "docno"], suffixes=("", "_s"))
    assert np.allclose(merged["score"], merged["score_s"], atol=1e-5)


def test_dense_faiss_backend_matches_numpy(tiny_index):
    q = _q(("1", "a girl training a wild horse"))
    a = tiny_index.dense(backend="numpy")(q).sort_values("rank")
    b = tiny_index.dense(backend="faiss")(q).sort_values("rank")
    assert a["docno"].tolist()[:3] == b["docno"].tolist()[:3]
    assert np.allclose(a["score"].values[:3], b["score"].values[:3], atol=1e-4)


def test_index_reopened_not_rebuilt(tiny_frame, tmp_path):
    idx = ptt.BookIndex(tiny_frame, path=tmp_path / "i")
    idx.bm25(); idx.dense()
    manifests = sorted((tmp_path / "i").glob("*/pyterrier_tot.json"))
    assert len(manifests) == 2
    stamps = [m.stat().st_mtime_ns for m in manifests]
    again = ptt.BookIndex(tiny_frame, path=tmp_path / "i")
    t0 = time.time()
    res = again.bm25()(_q(("1", "detective poisoning")))
    again.dense()(_q(("1", "detective poisoning")))
    assert res.iloc[0]["docno"] == "b3"
    assert [m.stat().st_mtime_ns for m in manifests] == stamps  # nothing rebuilt
    # a changed corpus is noticed and rebuilt, never silently reused
    changed = tiny_frame.copy()
    changed.loc[0, "text"] = "completely different text about submarines"
    with pytest.warns(UserWarning, match="rebuilding"):
        ptt.BookIndex(changed, path=tmp_path / "i").bm25()


def test_text_loader_and_books_of(tiny_index):
    res = pd.DataFrame({"qid": ["1", "1"], "query": ["x", "x"], "docno": ["b2", "b6"], "score": [2.0, 1.0], "rank": [0, 1]})
    out = tiny_index.text_loader(max_chars=20)(res)
    assert out["text"].tolist() == ["Dragons of the Red M", "Summer of Horses\nA g"]
    assert tiny_index.books_of(["b3"]).loc[0, "author"] == "Dora Quill"
    with pytest.raises(KeyError, match="nope"):
        tiny_index.text_loader()(res.assign(docno=["b2", "nope"]))


def test_bad_input(tiny_index):
    bm25 = tiny_index.bm25()
    with pytest.raises(ValueError, match="empty 'query' for qid"):
        bm25(_q(("1", "dragon"), ("2", "   ")))
    with pytest.raises(ValueError, match="no searchable words"):
        bm25(_q(("9", "?!? :) ...")))
    with pytest.raises(pt.validate.InputValidationError):
        bm25(pd.DataFrame({"qid": ["1"], "text": ["dragon"]}))
    with pytest.raises(ValueError, match="empty"):
        tiny_index.dense()(_q(("3", "")))
    with pytest.warns(UserWarning, match="no results"):
        out = bm25(_q(("1", "zzzqqq unmatched")))
    assert len(out) == 0
    # empty frames pass through with the right columns (pt.Experiment inspects pipelines this way)
    assert list(bm25(pd.DataFrame(columns=["qid", "query"])).columns) == ["qid", "query", "docno", "score", "rank"]
    assert pt.inspect.transformer_outputs(bm25 % 3 >> tiny_index.dense_scorer(), ["qid", "query"]) == \
        ["qid", "query", "docno", "score", "rank"]


def test_bad_corpus(tmp_path, tiny_frame):
    with pytest.raises(ValueError, match="empty"):
        ptt.BookIndex(pd.DataFrame(columns=["docno", "title", "text"]), path=tmp_path / "e")
    with pytest.raises(ValueError, match="duplicate docnos"):
        ptt.BookIndex(pd.concat([tiny_frame, tiny_frame.head(1)]), path=tmp_path / "d")
    with pytest.raises(KeyError, match="docno"):
        ptt.BookIndex(pd.DataFrame({"title": ["x"]}), path=tmp_path / "n")
    blank = pd.DataFrame({"docno": ["a", "b"], "title": ["", ""], "text": ["", ""]})
    with pytest.raises(ValueError, match="nothing to index"):
        ptt.BookIndex(blank, path=tmp_path / "b").bm25()


def test_experiment_on_reddit(reddit, reddit_index):
    topics, qrels = reddit.get_topics("validation").head(40), reddit.get_qrels("validation")
    table = ptt.tot_experiment([reddit_index.bm25(), reddit_index.dense()], topics, qrels,
                               names=["bm25", "dense"], measures=ptt.SHORT_MEASURES)
    assert list(table["name"]) == ["bm25", "dense"]
    assert (table["R@100"] > 0.4).all() and (table["R@5"] > 0.15).all()
