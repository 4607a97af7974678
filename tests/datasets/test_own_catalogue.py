"""One's own books and requests as a data set: from a DataFrame, a CSV or a JSONL file, requests with and without
judgements, and the errors that name what is wrong."""
import json
from pathlib import Path

import pandas as pd
import pytest

import pyterrier_tot as ptt
from pyterrier_tot.errors import BadInputError

CSV = ptt.example_catalogue()   # shipped with the package
REQUESTS = pd.DataFrame({"qid": ["r1", "r2"], "query": ["cousins find smugglers in island caves",
                                                        "the book by Celia Bright"]})
JUDGED = pd.DataFrame({"qid": ["r1", "r2"], "docno": ["bk11", "bk01"], "label": 1})


def test_the_example_catalogue_from_a_csv_file_and_a_frame_are_one_corpus(tmp_path):
    from_file = ptt.own_catalogue(CSV, name="ours")
    frame = pd.read_csv(CSV, dtype={"docno": str}).assign(isbn="ignored")
    from_frame = ptt.own_catalogue(frame, name="ours")
    a, b = from_file.get_corpus_df(), from_frame.get_corpus_df()
    assert len(a) == 40 and a.equals(b) and "isbn" not in a.columns
    assert a.loc[a["docno"] == "bk01", ["author", "year"]].values.tolist() == [["Celia Bright", 2009]]
    jsonl = tmp_path / "books.jsonl"
    jsonl.write_text("".join(json.dumps({"doc_id": r["docno"], "title": r["title"], "text": r["text"]}) + "\n"
                             for r in a.head(3).to_dict("records")))
    assert ptt.own_catalogue(jsonl).get_corpus_df()["docno"].tolist() == ["bk01", "bk02", "bk03"]


def test_requests_with_and_without_judgements():
    ds = ptt.own_catalogue(CSV, topics=REQUESTS, qrels=JUDGED)          # one frame: the split "test"
    assert ds.get_topics().equals(REQUESTS) and ds.get_qrels("test")["docno"].tolist() == ["bk11", "bk01"]
    index = ptt.BookIndex(ds)
    res = (index.bm25() % 1 >> index.text_loader(["title", "author"]))(ds.get_topics("test"))
    assert res.set_index("qid").loc["r2", "author"] == "Celia Bright"
    unjudged = ptt.own_catalogue(CSV, topics={"new": REQUESTS})
    with pytest.raises(BadInputError, match="no judgements"):
        unjudged.get_qrels("new")


def test_bad_input_names_what_is_wrong(tmp_path):
    with pytest.raises(BadInputError, match="not in the catalogue: \\['bk99'\\]"):
        ptt.own_catalogue(CSV, topics=REQUESTS, qrels=JUDGED.assign(docno=["bk11", "bk99"]))
    with pytest.raises(BadInputError, match="judgements for split\\(s\\) \\['train'\\]"):
        ptt.own_catalogue(CSV, topics={"test": REQUESTS}, qrels={"train": JUDGED})
    with pytest.raises(KeyError, match="docno"):
        ptt.own_catalogue(pd.DataFrame({"title": ["a book without an identifier"]}))
    with pytest.raises(FileNotFoundError, match="no catalogue file"):
        ptt.own_catalogue(tmp_path / "missing.csv")


def test_the_training_free_pipeline_ranks_an_unjudged_catalogue():
    """``ptt.training_free_pipeline``: the recipe's pipeline with a zero-shot base and every expert weighted 1 (MiniLM
    here, the model the test machine ships, so the zero-shot ``dense`` expert, the same model, is left out); nothing
    is trained or fitted, the author and date experts act where the catalogue has authors and years."""
    ds = ptt.own_catalogue(CSV, topics=REQUESTS, qrels=JUDGED)
    index = ptt.BookIndex(ds)
    free = ptt.training_free_pipeline(index, base="minilm")
    assert {"author", "date", "bm25", "title"} <= set(free.experts) and "dense" not in free.experts
    assert set(free.fuser.weights.tolist()) == {1.0}
    res = free(ds.get_topics("test"))
    assert {"qid", "docno", "score", "rank"} <= set(res.columns)
    ranked = res.sort_values(["qid", "rank"]).groupby("qid")["docno"].apply(list).to_dict()
    assert ranked["r1"][0] == "bk11" and "bk01" in ranked["r2"][:3]
    assert res.groupby("qid").size().min() == len(index.docnos)   # the base's ranking below, to the whole catalogue


def test_one_model_is_one_index_folder_and_the_stages_say_what_they_are(tmp_path):
    """The training-free pipeline (MiniLM by its package folder) and ``index.dense()`` encoded the same model twice,
    under ``dense-model-...`` and ``dense-all-MiniLM-L6-v2-...``; its repr said ``dense_ft`` with nothing
    fine-tuned and ``Dense(model, ...)``."""
    index = ptt.BookIndex(pd.read_csv(CSV, dtype={"docno": str}), path=tmp_path / "index", name="our-library")
    free = ptt.training_free_pipeline(index, base="minilm", depth=None)
    topics = pd.DataFrame({"qid": ["q1"], "query": ["a girl alone in a lighthouse"]})
    free(topics)
    index.dense()(topics)
    index.dense("minilm")(topics)
    assert [p.name for p in Path(index.path).glob("dense-*-title+text-all")] == \
        [next(p.name for p in Path(index.path).glob("dense-all-MiniLM-L6-v2-*-title+text-all"))]
    shown = repr(free)
    assert "dense_ft" not in shown and "dense_minilm" in shown
    assert ".dense('sentence-transformers/all-MiniLM-L6-v2', num" in shown
