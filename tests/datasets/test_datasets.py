import gzip
import json
import os
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_tot as ptt
from pyterrier_tot.datasets import (
    BircoWtb,
    DatasetUnavailableError,
    RedditTomtBooks,
    TrecTotLocal,
    WhatsThatBook,
    clean_reddit_title,
)
from pyterrier_tot.datasets.base import read_trec_qrels
from pyterrier_tot.datasets.books import Book, parse_year
from tests.helpers.paths import SHARED


# ------------------------------------------------------------------ book model
@pytest.mark.parametrize("value,year", [
    (1999, 1999), (1999.0, 1999), ("March 3, 1999", 1999), ("2004-05-01", 2004), ("c. 1850", 1850),
    (None, None), ("", None), ("unknown", None), (float("nan"), None), (12, None), ("published 20054", None),
])
def test_parse_year(value, year):
    assert parse_year(value) == year


def test_book_defaults_and_lists():
    b = Book(docno=7, genres=["fantasy", " young adult ", None], year="First published 1987")
    assert (b.docno, b.title, b.text, b.author, b.cover) == ("7", "", "", "", "")
    assert b.genres == "fantasy, young adult" and b.year == 1987
    assert Book(docno="x").year is None
    with pytest.raises(ValueError, match="docno"):
        Book(docno="")


# ------------------------------------------------------------------ Reddit-TOMT (shared data)
def test_reddit_counts(reddit):
    assert reddit.splits == ("train", "validation")
    assert len(reddit.get_topics("train")) == 1853
    topics = reddit.get_topics("validation")
    assert len(topics) == 233 and list(topics.columns) == ["qid", "query"]
    assert topics["query"].str.strip().str.len().min() > 0
    corpus = reddit.get_corpus_df()
    assert len(corpus) == 2679 and corpus["docno"].is_unique
    qrels = reddit.get_qrels("validation")
    assert set(qrels["qid"]) == set(topics["qid"]) and qrels["label"].dtype.kind == "i"
    assert set(qrels["docno"]) <= set(corpus["docno"])


def _reply_texts(replies):
    for r in replies or []:
        yield r.get("body") or ""
        yield from _reply_texts(r.get("replies"))


@pytest.mark.parametrize("split", ["train", "validation"])
def test_reddit_replies_never_reach_queries(reddit, split):
    topics = reddit.get_topics(split).set_index("qid")["query"]
    raw = [json.loads(line) for line in open(SHARED / "reddit-tomt-books" / split / "queries.jsonl")]
    checked = 0
    for d in raw:
        query = topics[d["id"]]
        for body in _reply_texts(d["meta"].get("replies")):
            body = body.strip()
            if len(body) >= 25 and body not in (d.get("description") or "") and body not in d["title"]:
                assert body not in query, f"reply text leaked into query {d['id']}"
                checked += 1
    assert checked > 1000  # the thread really was there to leak


def test_reddit_self_answers_edited_into_posts_are_removed(reddit):
    from pyterrier_tot.datasets.reddit_tomt import RedditTomtBooks, drop_self_answers

    books = reddit.get_corpus_df().set_index("docno")["title"]
    released = RedditTomtBooks(keep_self_answers=True)
    for split, qid in (("validation", "77s9g7"), ("train", "8yhqtl"), ("train", "9bomiy"), ("train", "7oyyev")):
        gold = books[reddit.get_qrels(split).set_index("qid").loc[qid, "docno"]]
        assert gold in released.get_topics(split).set_index("qid").loc[qid, "query"]   # the edit names the book
        assert gold not in reddit.get_topics(split).set_index("qid").loc[qid, "query"]
    assert released.name != reddit.name        # other texts, so never the same caches
    assert drop_self_answers("A dragon.\nEdit: solved thanks again\nA moon.") == "A dragon.\n\nA moon."
    assert drop_self_answers("A moon.\nEDIT: /u/someone guessed it: Twin Sisters") == "A moon."
    for story in ("A MURDER IS SOLVED BY A DOG", "Solved crimes with her gran", "EDIT: the crime gets solved by a cat"):
        assert drop_self_answers(story) == story
    assert drop_self_answers("\\[SOLVED\\] I read this long ago") == "I read this long ago"
    assert drop_self_answers("(Solved, cant change the flair) It had a fox") == "It had a fox"
    story = "a murder mystery solved through newspaper ads; I promise to mark the post as solved."
    assert drop_self_answers(story) == story                      # the verb in a story stays


def test_reddit_titles_cleaned(reddit):
    q = reddit.get_topics("validation").set_index("qid").loc["j31d8x", "query"]
    assert q.startswith("[Late 90s]Book about a litter of kittens")
    assert "[TOMT]" not in q and "[BOOK]" not in q and "It's not Four Little Kittens" in q
    assert clean_reddit_title("[TOMT] [Book] [2000s] Girl and a dragon") == "[2000s] Girl and a dragon"


def test_pt_get_dataset_entry_point(reddit):
    ds = pt.get_dataset("tot:reddit-tomt-books")
    assert isinstance(ds, RedditTomtBooks) and len(ds.get_topics("validation")) == 233


def _write_reddit(folder, with_test=True):
    folder.mkdir(parents=True)
    docs = [{"id": "d1", "title": "Book One", "text": "a boy and a whale", "meta": {"url": "u1", "work_id": "d1"}},
            {"id": "d2", "title": "Book Two", "text": "a girl and a kite", "meta": {"url": "u2", "work_id": "d2"}}]
    (folder / "documents.jsonl").write_text("\n".join(json.dumps(d) for d in docs))
    (folder / "negative_documents.jsonl").write_text(json.dumps({"id": "n1", "title": "Neg", "text": "x", "meta": {}}))
    for split in (["train", "test"] if with_test else ["train"]):
        (folder / split).mkdir()
        q = {"id": f"q_{split}", "title": "[TOMT][BOOK] whale book", "description": "A boy befriends a whale.",
             "raw_description": "A boy befriends a whale.",
             "meta": {"author": "someone",
                      "replies": [{"id": "r", "body": "SECRET ANSWER: Book One", "replies": None}]}}
        (folder / split / "queries.jsonl").write_text(json.dumps(q) + "\n")
        (folder / split / "qrels.txt").write_text(f"q_{split} 0 d1 1\n")


def test_reddit_local_folder_with_test_split(tmp_path):
    _write_reddit(tmp_path / "r")
    ds = RedditTomtBooks(path=str(tmp_path / "r"))
    assert ds.splits == ("train", "test")
    t = ds.get_topics("test")
    assert t.loc[0, "query"] == "whale book\nA boy befriends a whale."
    assert "SECRET" not in t.to_string()
    assert len(ds.get_corpus_df()) == 3  # hard negatives file absent: fine
    assert len(RedditTomtBooks(path=str(tmp_path / "r"), corpus="gold").get_corpus_df()) == 2
    assert ds.get_qrels("test").to_dict("records") == [{"qid": "q_test", "docno": "d1", "label": 1}]
    with pytest.raises(KeyError, match="validation"):
        ds.get_topics("validation")


def test_reddit_missing_folder_fails_fast(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTERRIER_TOT_DATA", str(tmp_path / "nothing"))
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path / "cache"))
    t0 = time.time()
    with pytest.raises(DatasetUnavailableError, match="Reddit-TOMT"):
        RedditTomtBooks()
    with pytest.raises(DatasetUnavailableError):
        RedditTomtBooks(path=str(tmp_path / "nowhere"))
    assert time.time() - t0 < 10


# ------------------------------------------------------------------ WhatsThatBook (files written here)
def _write_wtb(folder, with_books=True):
    folder.mkdir(parents=True)
    (folder / "covers").mkdir()
    (folder / "covers" / "w1.jpg").write_bytes(b"not really a jpeg")
    books = [
        {"book_id": "w1", "title": "The Glass Owl", "author": "Mira Holt", "description": "An owl made of glass.",
         "genres": ["Fantasy", "Middle Grade"], "date": "First published October 3, 1997",
         "image_url": "covers/w1.jpg"},
        {"book_id": "w2", "title": "Night Train", "author": ["A. B", "C. D"], "description": "A mystery on a train.",
         "genres": "Mystery", "date": None, "image_url": "https://example.org/w2.jpg"},
        {"book_id": "w3", "title": "Quiet Fields"},
    ]
    queries = {
        "train": [{"post_id": "p1", "post_title": "owl book", "question": "Read it in 2000, owl of glass",
                   "book_id": "w1"}],
        "validation": [{"post_id": "p2", "query": "a mystery on a night train", "book_id": "w2"}],
    }
    if with_books:
        (folder / "books.jsonl").write_text("\n".join(json.dumps(b) for b in books))
    else:  # pair format: book fields on the query rows
        for rows in queries.values():
            for r in rows:
                b = next(b for b in books if b["book_id"] == r["book_id"])
                r.update({("book_title" if k == "title" else k): v for k, v in b.items()})
    for split, rows in queries.items():
        (folder / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in rows))


def test_whatsthatbook_local_books_file(tmp_path):
    _write_wtb(tmp_path / "wtb")
    ds = ptt.get_dataset("whatsthatbook", path=str(tmp_path / "wtb"))
    assert ds.splits == ("train", "validation")
    corpus = ds.get_corpus_df().set_index("docno")
    assert list(corpus.index) == ["w1", "w2", "w3"]
    assert corpus.loc["w1", "year"] == 1997 and pd.isna(corpus.loc["w2", "year"])
    assert corpus.loc["w1", "genres"] == "Fantasy, Middle Grade" and corpus.loc["w2", "author"] == "A. B, C. D"
    assert corpus.loc["w1", "cover"] == str(tmp_path / "wtb" / "covers" / "w1.jpg")
    assert corpus.loc["w2", "cover"] == "https://example.org/w2.jpg"
    assert (corpus.loc["w3", "text"], corpus.loc["w3", "cover"]) == ("", "")
    assert ds.get_topics("train").to_dict("records") == [
        {"qid": "p1", "query": "owl book\nRead it in 2000, owl of glass"}]
    assert ds.get_qrels("validation").to_dict("records") == [{"qid": "p2", "docno": "w2", "label": 1}]


def test_whatsthatbook_pair_format(tmp_path):
    _write_wtb(tmp_path / "wtb", with_books=False)
    ds = WhatsThatBook(path=str(tmp_path / "wtb"))
    corpus = ds.get_corpus_df().set_index("docno")
    assert sorted(corpus.index) == ["w1", "w2"]
    assert corpus.loc["w1", "title"] == "The Glass Owl" and corpus.loc["w1", "year"] == 1997


def test_whatsthatbook_offline_fails_fast(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PYTERRIER_TOT_DATA", str(tmp_path / "none"))
    monkeypatch.delenv("PYTERRIER_TOT_WHATSTHATBOOK", raising=False)
    t0 = time.time()
    with pytest.raises(DatasetUnavailableError, match="nlpkevinl/whatsthatbook"):
        WhatsThatBook()
    assert time.time() - t0 < 10


# ------------------------------------------------------------------ BIRCO
def test_birco():
    if not (SHARED / "birco-wtb" / "dev.json").exists():
        pytest.skip("shared BIRCO data not found")
    ds = BircoWtb()
    topics, qrels, pool = ds.get_topics("dev"), ds.get_qrels("dev"), ds.get_results()
    assert len(topics) == 57 and len(ds.get_corpus_df()) == 2404
    assert qrels.groupby("qid")["label"].sum().min() >= 1
    assert set(pool.columns) >= {"qid", "query", "docno", "text", "score", "rank"}
    assert len(pool) == len(qrels) and set(pool["qid"]) == set(topics["qid"])


# ------------------------------------------------------------------ TREC ToT
def test_trec_tot_local_shared():
    if not (SHARED / "trec-tot" / "2023-train").is_dir():
        pytest.skip("shared TREC ToT folders not found")
    ds = ptt.get_dataset("trec-tot-local/2023-train")
    t, q = ds.get_topics(), ds.get_qrels()
    assert len(t) == 150 and t["query"].str.len().min() > 0 and set(q["qid"]) <= set(t["qid"])
    with pytest.raises(NotImplementedError, match="no corpus"):
        ds.get_corpus_df()


def test_trec_tot_irds_layout(tmp_path):
    """ir_datasets ids with IR_DATASETS_HOME holding small files in the official layout (no download)."""
    home = tmp_path / "irds"
    d23 = home / "trec-tot" / "2023"
    (d23 / "train").mkdir(parents=True)
    (d23 / "corpus.jsonl").write_text("\n".join(json.dumps(
        {"doc_id": f"{i}", "page_title": f"Movie {i}", "wikidata_id": "Q1", "wikidata_classes": [],
         "text": f"plot of movie {i}", "sections": {}, "infoboxes": []}) for i in range(3)))
    (d23 / "train" / "queries.jsonl").write_text(json.dumps(
        {"id": "q1", "url": "u", "domain": "movie", "title": "Alien film", "text": "blue alien movie",
         "sentence_annotations": []}))
    (d23 / "train" / "qrel.txt").write_text("q1 0 2 1\n")
    d25 = home / "trec-tot" / "2025"
    d25.mkdir(parents=True)
    (d25 / "dev3-2025-queries.jsonl").write_text(json.dumps({"query_id": "301", "query": "an old lighthouse"}))
    (d25 / "dev3-2025-qrel.txt").write_text("301 0 77 1\n")
    with gzip.open(d25 / "trec-tot-2025-corpus.jsonl.gz", "wt") as f:
        f.write(json.dumps({"id": "77", "title": "Lighthouse", "url": "u", "text": "a lighthouse"}) + "\n")
    script = textwrap.dedent("""
        import json, pyterrier_tot as ptt
        out = {}
        for name in ["trec-tot/2023/train", "trec-tot/2025/dev3"]:
            ds = ptt.get_dataset(name)
            out[name] = [ds.get_topics().to_dict("records"), ds.get_qrels().to_dict("records"),
                         ds.get_corpus_df()[["docno", "title", "text"]].to_dict("records")]
        print(json.dumps(out))
    """)
    env = {**os.environ, "IR_DATASETS_HOME": str(home)}
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    topics, qrels, corpus = out["trec-tot/2023/train"]
    assert topics == [{"qid": "q1", "query": "Alien film\nblue alien movie"}]
    assert qrels == [{"qid": "q1", "docno": "2", "label": 1}]
    assert corpus[1] == {"docno": "1", "title": "Movie 1", "text": "plot of movie 1"}
    topics, qrels, corpus = out["trec-tot/2025/dev3"]
    assert topics == [{"qid": "301", "query": "an old lighthouse"}] and corpus[0]["title"] == "Lighthouse"


def test_trec_tot_local_folder(tmp_path):
    folder = tmp_path / "2024-dev"
    folder.mkdir()
    (folder / "queries.jsonl").write_text(json.dumps({"query_id": "7", "title": "Spy movie", "text": "a red car"})
                                          + "\n\n" + json.dumps({"id": "8", "query": "a lighthouse keeper"}))
    (folder / "qrels.txt").write_text("7 0 d7 1\n8  Q0  d8  2\n")
    ds = TrecTotLocal(str(folder))
    assert ds.name == "trec-tot-local/2024-dev" and ds.splits == ("2024-dev",)
    assert ds.get_topics().to_dict("records") == [{"qid": "7", "query": "Spy movie\na red car"},
                                                 {"qid": "8", "query": "a lighthouse keeper"}]
    qrels = read_trec_qrels(folder / "qrels.txt")
    assert qrels.equals(ds.get_qrels("2024-dev")) and qrels["label"].tolist() == [1, 2]
    with pytest.raises(KeyError, match="2024-dev"):
        ds.get_topics("train")


def test_package_layout_keeps_old_names():
    """One module per collection, each small; the names the single module had still import from the package."""
    import importlib
    from pathlib import Path

    import pyterrier_tot.datasets as dsmod
    folder = Path(dsmod.__file__).parent
    for py in folder.glob("*.py"):
        assert len(py.read_text().splitlines()) < 400, py.name
    for name in ["BookDataset", "RedditTomtBooks", "WhatsThatBook", "BircoWtb", "TrecTot", "TrecTotLocal",
                 "get_dataset", "list_datasets", "ToTDatasetProvider", "DatasetUnavailableError", "Book",
                 "book_iter", "books_to_frame", "parse_year", "read_trec_qrels", "book_from_record",
                 "clean_reddit_title", "_read_jsonl", "_REGISTRY", "_first"]:
        assert hasattr(dsmod, name), name
    module, _, attr = "pyterrier_tot.datasets:ToTDatasetProvider".partition(":")  # setup.cfg's entry point
    assert issubclass(getattr(importlib.import_module(module), attr), pt.datasets.DatasetProvider)
    assert set(dsmod.ToTDatasetProvider().list_dataset_names()) == {"reddit-tomt-books", "whatsthatbook",
                                                                    "birco-wtb"}


def test_unknown_dataset():
    with pytest.raises(KeyError, match="unknown dataset"):
        ptt.get_dataset("no-such-books")
    with pytest.raises(KeyError, match="trec-tot"):
        ptt.get_dataset("trec-tot/1999/train")


def test_trec_tot_local_is_found_in_the_current_directory_then_in_the_shared_data(tmp_path, monkeypatch):
    shared = tmp_path / "shared" / "trec-tot"
    for base, qid in ((tmp_path / "work", "here"), (shared, "shared")):
        (base / "2024-dev").mkdir(parents=True)
        (base / "2024-dev" / "queries.jsonl").write_text(json.dumps({"query_id": qid, "query": "a book"}) + "\n")
    (shared / "only-shared").mkdir()
    (shared / "only-shared" / "queries.jsonl").write_text(json.dumps({"query_id": "s", "query": "a book"}) + "\n")
    (tmp_path / "work" / "only-shared").mkdir()  # a folder of that name without queries.jsonl does not hide it
    monkeypatch.setenv("PYTERRIER_TOT_DATA", str(tmp_path / "shared"))
    monkeypatch.chdir(tmp_path / "work")
    assert TrecTotLocal("2024-dev").get_topics()["qid"].tolist() == ["here"]  # the current directory first
    assert TrecTotLocal("only-shared").get_topics()["qid"].tolist() == ["s"]
    assert TrecTotLocal(str(shared / "2024-dev")).get_topics()["qid"].tolist() == ["shared"]
    with pytest.raises(DatasetUnavailableError) as err:
        TrecTotLocal("2023")
    assert str(tmp_path / "work" / "2023") in str(err.value) and str(shared / "2023") in str(err.value)
    assert "the shared folders are 2024-dev, only-shared" in str(err.value)
    with pytest.raises(DatasetUnavailableError, match=f"no queries.jsonl in {tmp_path / 'nowhere'}$"):
        TrecTotLocal(str(tmp_path / "nowhere"))
