"""TREC ToT 2025 through ir_datasets, offline: a few pages, queries and qrels written in the official layout into a
temporary ``IR_DATASETS_HOME``, then a BookIndex that streams the corpus to disk and BM25 over it."""

import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_tot as ptt
from pyterrier_tot.errors import StreamedCorpusError, UnknownDocnoError
from tests.helpers.books import TINY_BOOKS
from tests.helpers.trec_tot_2025 import PAGES, QUERIES, SPLITS


def test_installed_ir_datasets_knows_the_2025_ids():
    import ir_datasets

    known = set(ir_datasets.registry)
    assert {f"trec-tot/2025/{s}" for s in SPLITS} <= known


def test_topics_and_qrels(irds_2025):
    ds = ptt.get_dataset("trec-tot/2025/dev1")
    assert ds.streaming and ds.corpus_id == "trec-tot/2025"
    assert ds.get_topics().to_dict("records") == [{"qid": q, "query": t} for q, t, _ in QUERIES["dev1"]]
    assert ds.get_qrels().to_dict("records") == [{"qid": q, "docno": d, "label": 1} for q, _, d in QUERIES["dev1"]]
    assert pt.get_dataset("tot:trec-tot/2025/dev2").get_qrels()["docno"].tolist() == ["1004"]
    test = ptt.get_dataset("trec-tot/2025/test")
    assert test.get_topics()["qid"].tolist() == ["test-1"]
    with pytest.raises(NotImplementedError, match="no qrels"):
        test.get_qrels()
    pages = list(ds.get_corpus_iter(fields=["title"]))
    assert pages[0] == {"docno": "1001", "title": "The Haunted Lighthouse"} and len(pages) == len(PAGES)


def test_streamed_index_retrieves_with_bm25(irds_2025, tmp_path, capfd):
    ds = ptt.get_dataset("trec-tot/2025/dev1")
    index = ptt.BookIndex(ds, path=tmp_path / "index")
    assert index.streamed and len(index) == len(PAGES) and index.name == "trec-tot/2025/dev1"
    bm25 = index.bm25()
    err = capfd.readouterr().err
    assert "trec-tot/2025/dev1: corpus" in err and "trec-tot/2025/dev1: PISA title+text" in err  # progress shown

    res = bm25(ds.get_topics())
    assert res[res["rank"] == 0].set_index("qid")["docno"].to_dict() == {"d1-1": "1001", "d1-2": "1002"}
    table = pt.Experiment([bm25], ds.get_topics(), ds.get_qrels(), ["recip_rank"])
    assert table["recip_rank"].iloc[0] == 1.0

    # the corpus is read back by docno, never as a whole
    books = index.books_of(["1003", "1001"])
    assert books["title"].tolist() == ["Murder at Lakeside Manor", "The Haunted Lighthouse"]
    assert books["url"].iloc[1].endswith("The_Haunted_Lighthouse") and books["year"].isna().all()
    assert list(index.docnos) == [p[0] for p in PAGES]
    with pytest.raises(UnknownDocnoError, match="nope"):
        index.books_of(["1001", "nope"])
    with pytest.raises(StreamedCorpusError, match="books_of"):
        _ = index.corpus
    with pytest.raises(StreamedCorpusError, match="text_loader"):
        index.field_text()
    loaded = (bm25 % 2 >> index.text_loader(max_chars=30))(ds.get_topics().iloc[:1])
    assert loaded["text"].iloc[0] == "The Haunted Lighthouse\nA 1998 "

    # another split of the same year, and the saved folder, reuse the index without reading the pages again
    dev2 = ptt.get_dataset("trec-tot/2025/dev2")
    dev2.get_corpus_iter = lambda *a, **kw: pytest.fail("the corpus was streamed twice")
    again = ptt.BookIndex(dev2, path=tmp_path / "index")
    assert again.streamed and again.fingerprint == index.fingerprint
    assert again.bm25()(dev2.get_topics())["docno"].iloc[0] == "1004"
    opened = pt.Artifact.load(str(tmp_path / "index"))
    assert opened.streamed and opened.name == "trec-tot/2025/dev1"
    pd.testing.assert_frame_equal(opened.bm25()(ds.get_topics()), res)


def test_streamed_matches_in_memory(tiny_frame, tmp_path):
    """Streaming changes where the corpus lives, not what the retrievers and loaders return."""
    mem = ptt.BookIndex(tiny_frame, path=tmp_path / "mem")
    disk = ptt.BookIndex(tiny_frame, path=tmp_path / "disk", stream=True)
    assert not mem.streamed and disk.streamed and len(disk) == len(mem)
    q = pd.DataFrame({"qid": ["1", "2"], "query": ["ghost in a lighthouse, horror", "detective poisoning, mystery"]})
    for a, b in [(mem.bm25(), disk.bm25()), (mem.bm25(fields="genres"), disk.bm25(fields="genres")),
                 (mem.dense(), disk.dense())]:
        pd.testing.assert_frame_equal(a(q), b(q))
    res = mem.bm25()(q)
    pd.testing.assert_frame_equal(mem.dense_scorer()(res), disk.dense_scorer()(res))
    pd.testing.assert_frame_equal(mem.text_loader(("title", "author"), 12)(res),
                                  disk.text_loader(("title", "author"), 12)(res))
    reopened = ptt.BookIndex(tmp_path / "mem")  # (a frame passed in keeps its own year dtype until saved)
    pd.testing.assert_frame_equal(reopened.books_of(["b3", "b6", "b3"]), disk.books_of(["b3", "b6", "b3"]))
    assert list(mem.docs_iter(("title", "genres"))) == list(disk.docs_iter(("title", "genres")))
    empty = pd.DataFrame(columns=["qid", "query", "docno", "score", "rank"])
    assert list(disk.text_loader()(empty).columns) == list(mem.text_loader()(empty).columns)


def test_any_corpus_iterator_streams(tmp_path):
    class IterOnly:
        """A PyTerrier-style dataset that only offers a corpus iterator (ir_datasets-style records)."""
        name = "iter-only"

        def get_corpus_iter(self):
            return iter([{"doc_id": b["docno"], "page_title": b["title"], "text": b["text"]} for b in TINY_BOOKS])

    index = ptt.BookIndex(IterOnly(), path=tmp_path / "it")
    assert index.streamed and index.books_of(["b2"])["title"].iloc[0] == "Dragons of the Red Moon"
    assert index.bm25()(pd.DataFrame({"qid": ["1"], "query": ["dragon red moon"]}))["docno"].iloc[0] == "b2"


def test_streamed_build_errors(tmp_path):
    dup = [{"docno": "x", "title": "A"}, {"docno": "y", "title": "B"}, {"docno": "x", "title": "C"}]
    with pytest.raises(ValueError, match=r"duplicate docnos.*\['x'\]"):
        ptt.BookIndex(dup, path=tmp_path / "dup", stream=True)
    assert not (tmp_path / "dup").exists()  # nothing half-built is left in place
    with pytest.raises(ValueError, match="empty"):
        ptt.BookIndex([], path=tmp_path / "empty", stream=True)
    with pytest.raises(ValueError, match="path="):  # a bare iterable cannot name its own folder
        ptt.BookIndex(iter(TINY_BOOKS), stream=True)

    index = ptt.BookIndex(TINY_BOOKS, path=tmp_path / "ok", stream=True)
    with open(index.path / "corpus.jsonl", "ab") as f:
        f.write(b'{"docno": "extra"}\n')
    with pytest.raises(ValueError, match="damaged"):
        ptt.BookIndex(tmp_path / "ok")
