"""TREC ToT 2025 through ir_datasets, offline: a few pages, queries and qrels written in the official layout into a
temporary ``IR_DATASETS_HOME``, then a BookIndex that streams the corpus to disk and BM25 over it."""
import gzip
import json

import pandas as pd
import pyterrier as pt
import pytest
from conftest import TINY_BOOKS

import pyterrier_tot as ptt
from pyterrier_tot.corpus_store import StreamedCorpusError
from pyterrier_tot.datasets import registry as ptt_registry
from pyterrier_tot.errors import UnknownDocnoError

SPLITS = ["train", "dev1", "dev2", "dev3", "test"]
PAGES = [
    ("1001", "The Haunted Lighthouse", "A 1998 film: teenagers spend a night in an abandoned lighthouse with a ghost."),
    ("1002", "Dragons of the Red Moon", "A video game in which a blacksmith rides a dragon to the red moon."),
    ("1003", "Murder at Lakeside Manor", "A novel: a detective investigates a poisoning at a lakeside mansion."),
    ("1004", "Spaceship Nine", "An animated series about children who stow away on a ship bound for Jupiter."),
    ("1005", "Summer of Horses", "A film about a girl training a wild horse on her grandmother's ranch."),
    ("1006", "Eiffel Tower", "A wrought-iron lattice tower in Paris, France."),
]
QUERIES = {"dev1": [("d1-1", "movie with kids and a ghost in an old lighthouse", "1001"),
                    ("d1-2", "game where you fly a dragon to the moon", "1002")],
           "dev2": [("d2-1", "cartoon where kids hide on a spaceship to jupiter", "1004")]}


def _write_2025(home):
    """The files ir_datasets 0.6 expects for trec-tot/2025 (``ir_datasets/etc/downloads.json``): the corpus as
    one gzip member per page plus the byte offsets of each member, and per split ``<split>-2025-queries.jsonl``
    (``query_id``, ``query``) and ``<split>-2025-qrel.txt`` (none for ``test``)."""
    folder = home / "trec-tot" / "2025"
    folder.mkdir(parents=True)
    offsets, data = [], b""
    for doc_id, title, text in PAGES:
        member = gzip.compress((json.dumps({"id": doc_id, "title": title, "url": f"https://en.wikipedia.org/wiki/"
                                            f"{title.replace(' ', '_')}", "text": text}) + "\n").encode())
        offsets.append({"id": doc_id, "offset_start": len(data), "offset_end": len(data) + len(member)})
        data += member
    (folder / "trec-tot-2025-corpus.jsonl.gz").write_bytes(data)
    with gzip.open(folder / "trec-tot-2025-offsets.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(o) + "\n" for o in offsets)
    for split in SPLITS:
        queries = QUERIES.get(split, [(f"{split}-1", "a tower in paris", "1006")])
        (folder / f"{split}-2025-queries.jsonl").write_text(
            "".join(json.dumps({"query_id": q, "query": text}) + "\n" for q, text, _ in queries))
        if split != "test":
            (folder / f"{split}-2025-qrel.txt").write_text("".join(f"{q} 0 {d} 1\n" for q, _, d in queries))


@pytest.fixture
def irds_2025(tmp_path, monkeypatch):
    """ir_datasets fixes a dataset's file paths when it registers it (at import), so the trec-tot/2025 entries
    are registered again under the temporary home for this test and put back afterwards."""
    import ir_datasets
    from ir_datasets.datasets import trec_tot_2025

    home = tmp_path / "irds"
    _write_2025(home)
    monkeypatch.setenv("IR_DATASETS_HOME", str(home))
    reg = ir_datasets.registry._registered
    saved = {k: reg.pop(k) for k in list(reg) if k.startswith("trec-tot/2025")}
    ptt_registry.forget_datasets()
    trec_tot_2025.register_dataset()
    yield home
    for k in [k for k in reg if k.startswith("trec-tot/2025")]:
        del reg[k]
    reg.update(saved)
    ptt_registry.forget_datasets()


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
