import json
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
    assert ".bm25(fields=('title', 'author', 'text'))" in repr(bm25)  # the tiny books have authors: read by default
    plain = ptt.BookIndex(tiny_frame_without_authors(tiny_index), path=tiny_index.path.parent / "plain")
    assert ".bm25(fields=('title', 'text'))" in repr(plain.bm25())


def tiny_frame_without_authors(index):
    return index.corpus.assign(author="")


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
    idx.bm25()
    idx.dense()
    manifests = sorted((tmp_path / "i").glob("*/pt_meta.json"))
    assert len(manifests) == 2
    assert {json.loads(m.read_text())["type"] for m in manifests} == {"book_index_part"}
    stamps = [m.stat().st_mtime_ns for m in manifests]
    again = ptt.BookIndex(tiny_frame, path=tmp_path / "i")
    res = again.bm25()(_q(("1", "detective poisoning")))
    again.dense()(_q(("1", "detective poisoning")))
    assert res.iloc[0]["docno"] == "b3"
    assert [m.stat().st_mtime_ns for m in manifests] == stamps  # nothing rebuilt
    # a changed corpus is noticed and rebuilt, never silently reused
    changed = tiny_frame.copy()
    changed.loc[0, "text"] = "completely different text about submarines"
    with pytest.warns(UserWarning, match="rebuilding"):
        ptt.BookIndex(changed, path=tmp_path / "i").bm25()


def test_the_corpus_fingerprint_counts_the_fields_experts_read(tiny_frame, tmp_path):
    """An author or a year fixed by a loader is another corpus (its sub-indexes and fitted weights are not reused);
    a link is not; a corpus of titles and texts alone, and a folder recorded before the other fields counted, keep
    their fingerprint."""
    from pyterrier_tot.index.corpus import frame_fingerprint

    idx = ptt.BookIndex(tiny_frame, path=tmp_path / "i")
    fixed = tiny_frame.copy()
    fixed.loc[fixed["docno"] == "b3", "author"] = "Dora Quillon"
    assert frame_fingerprint(ptt.BookIndex(fixed, path=tmp_path / "j").corpus) != idx.fingerprint
    with pytest.warns(UserWarning, match="rebuilding"):
        again = ptt.BookIndex(fixed, path=tmp_path / "i")
    assert again.books_of(["b3"]).loc[0, "author"] == "Dora Quillon"
    linked = tiny_frame.assign(url="https://example.org/" + tiny_frame["docno"])
    assert ptt.BookIndex(linked, path=tmp_path / "k").fingerprint == idx.fingerprint
    plain = tiny_frame[["docno", "title", "text"]]
    plain_idx = ptt.BookIndex(plain, path=tmp_path / "p")
    assert plain_idx.fingerprint == frame_fingerprint(plain_idx.corpus, legacy=True)
    # a folder built when only titles and texts counted opens by its path, as the corpus it always held
    meta = json.loads((tmp_path / "i" / "pt_meta.json").read_text())
    legacy = frame_fingerprint(again.corpus, legacy=True)
    (tmp_path / "i" / "pt_meta.json").write_text(json.dumps({**meta, "fingerprint": legacy}))
    assert ptt.BookIndex(str(tmp_path / "i")).fingerprint == legacy
    with warnings.catch_warnings():  # and from the books: the same corpus, kept with what it recorded (no rebuild)
        warnings.simplefilter("error")
        assert ptt.BookIndex(fixed, path=tmp_path / "i").fingerprint == legacy
    with pytest.warns(UserWarning, match="rebuilding"):  # another author than the folder holds: built again
        assert ptt.BookIndex(tiny_frame, path=tmp_path / "i").fingerprint == idx.fingerprint


def test_a_streamed_corpus_fingerprint_counts_the_same_fields(tiny_frame, tmp_path):
    from pyterrier_tot.index.corpus_stream import write_stream

    rows = tiny_frame.to_dict("records")
    fixed = [{**r, "author": "Someone Else"} if r["docno"] == "b3" else r for r in rows]
    linked = [{**r, "url": "https://example.org/" + r["docno"]} for r in rows]
    for i in range(3):
        (tmp_path / str(i)).mkdir()
    prints = [write_stream(docs, tmp_path / str(i))["fingerprint"] for i, docs in enumerate((rows, fixed, linked))]
    assert prints[0] != prints[1] and prints[0] == prints[2]


def test_text_loader_and_books_of(tiny_index):
    res = pd.DataFrame({"qid": ["1", "1"], "query": ["x", "x"], "docno": ["b2", "b6"], "score": [2.0, 1.0],
                        "rank": [0, 1]})
    out = tiny_index.text_loader(max_chars=20)(res)
    assert out["text"].tolist() == ["Dragons of the Red M", "Summer of Horses\nA g"]
    assert tiny_index.books_of(["b3"]).loc[0, "author"] == "Dora Quill"
    with pytest.raises(KeyError, match="nope"):
        tiny_index.text_loader()(res.assign(docno=["b2", "nope"]))
    loader = tiny_index.text_loader()
    assert pt.inspect.transformer_inputs(loader) == [["qid", "docno"]]
    assert pt.inspect.transformer_outputs(loader, list(res.columns)) == list(loader(res).columns)


@pytest.mark.parametrize("kind", ["bm25", "dense", "faiss"])
def test_rank_cutoff_fuses_into_the_retriever(tiny_index, kind):
    retr = {"bm25": tiny_index.bm25, "dense": tiny_index.dense,
            "faiss": lambda: tiny_index.dense(backend="faiss")}[kind]()
    q = _q(("1", "a dragon and a blacksmith"), ("2", "kids on a spaceship to jupiter"))
    compiled = (retr % 3).compile()
    assert "RankCutoff" not in repr(compiled) and isinstance(compiled, type(retr))
    assert compiled.num_results == 3 and "num_results=3" in repr(compiled)
    full = retr(q)
    cut = compiled(q)
    expected = full[full["rank"] < 3].reset_index(drop=True)
    pd.testing.assert_frame_equal(cut.reset_index(drop=True), expected, check_dtype=False)
    assert "RankCutoff" in repr((retr % 5000).compile())  # nothing to fuse: the cutoff stays
    assert retr.fuse_rank_cutoff(5000) is None


def test_inputs_and_outputs_agree_with_real_calls(tiny_index):
    q = _q(("1", "a dragon"))
    for retr in (tiny_index.bm25(), tiny_index.dense()):
        assert pt.inspect.transformer_inputs(retr) == [["qid", "query"]]
        assert pt.inspect.transformer_outputs(retr, ["qid", "query"]) == list(retr(q).columns)
    scorer = tiny_index.dense_scorer()
    res = tiny_index.bm25()(q)
    assert pt.inspect.transformer_inputs(scorer) == [["qid", "docno", "query"]]
    assert pt.inspect.transformer_outputs(scorer, list(res.columns)) == list(scorer(res).columns)


def test_scorer_rejects_unknown_docno(tiny_index):
    frame = pd.DataFrame({"qid": ["1", "1"], "query": ["dragon", "dragon"], "docno": ["b2", "b99"]})
    with pytest.raises(ptt.BadInputError, match="b99"):
        tiny_index.dense_scorer()(frame)
    with pytest.raises(KeyError, match="b99"):  # still a KeyError, as the text loader raised before
        tiny_index.text_loader()(frame)


def test_saved_index_reopens_without_the_dataset(tiny_index, tiny_frame, tmp_path):
    q = _q(("1", "ghost in a lighthouse"), ("2", "wild horse ranch"))
    bm25, dense = tiny_index.bm25()(q), tiny_index.dense()(q)
    for again in (ptt.BookIndex.load(tiny_index.path), ptt.BookIndex(str(tiny_index.path)),
                  pt.Artifact.load(str(tiny_index.path))):
        assert isinstance(again, ptt.BookIndex) and again.name == "tiny" and len(again) == 6
        assert again.fingerprint == tiny_index.fingerprint
        pd.testing.assert_frame_equal(again.bm25()(q), bm25)
        pd.testing.assert_frame_equal(again.dense()(q), dense)
        assert again.books_of(["b3"]).loc[0, "author"] == "Dora Quill"
    meta = json.loads((tiny_index.path / "pt_meta.json").read_text())
    assert (meta["type"], meta["format"], meta["n_docs"]) == ("book_index", "pyterrier_tot", 6)
    assert not list(tiny_index.path.glob("*.pkl")) and not list(tiny_index.path.glob(".*building*"))
    with pytest.raises(FileNotFoundError, match="not a saved"):
        ptt.BookIndex(str(tmp_path / "nothing-here"))
    (tiny_index.path / "corpus.jsonl").write_text(
        (tiny_index.path / "corpus.jsonl").read_text().replace("Dragons", "Lizards"))
    with pytest.raises(ValueError, match="fingerprint"):
        ptt.BookIndex.load(tiny_index.path)


def test_index_folder_from_version_0_1_is_upgraded_in_place(tiny_frame, tmp_path):
    """0.1 kept sub-indexes with a ``pyterrier_tot.json`` manifest and no corpus: they are reused (by the default
    BM25 of a corpus without authors, whose default fields are the title + text of every folder built before)."""
    tiny_frame = tiny_frame.assign(author="")
    idx = ptt.BookIndex(tiny_frame, path=tmp_path / "old")
    pisa = idx.pisa_index()
    sub = pisa.path.parent
    # turn the folder into its 0.1 layout: PISA in the sub-folder itself, manifest beside it
    import shutil
    shutil.rmtree(tmp_path / "legacy", ignore_errors=True)
    (tmp_path / "legacy").mkdir()
    shutil.copytree(pisa.path, tmp_path / "legacy" / sub.name)
    (tmp_path / "legacy" / sub.name / "pyterrier_tot.json").write_text(json.dumps(
        {"backend": "pisa", "fields": ["title", "text"], "stemmer": "porter2", "fingerprint": idx.fingerprint,
         "n_docs": 6}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is rebuilt
        old = ptt.BookIndex(tiny_frame, path=tmp_path / "legacy")
        assert str(old.pisa_index().path) == str(tmp_path / "legacy" / sub.name)
    assert old.bm25()(_q(("1", "detective poisoning"))).iloc[0]["docno"] == "b3"
    assert isinstance(pt.Artifact.load(str(tmp_path / "legacy")), ptt.BookIndex)


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
    assert list(tiny_index.dense_scorer()(pd.DataFrame(columns=["qid", "query", "docno"])).columns) == \
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


def test_experiment_on_reddit(reddit):
    """BM25 and dense MiniLM in one experiment on real queries and books: the docs pages' sample (30 validation
    queries, their gold books among 400), whose indexes the suite builds once; the full data's dense index would
    encode 2,679 books for this test alone. On it BM25 has R@5 0.47 and R@100 0.80, dense 0.40 and 0.77; a random
    ranking has R@5 0.0125 and R@100 0.25."""
    from tests.helpers.docs_runner import SAMPLE

    sample = ptt.get_dataset("reddit-tomt-books", sample=SAMPLE)
    index = ptt.BookIndex(sample)
    topics, qrels = sample.get_topics("validation"), sample.get_qrels("validation")
    table = ptt.tot_experiment([index.bm25(), index.dense()], topics, qrels,
                               names=["bm25", "dense"], measures=ptt.SHORT_MEASURES)
    assert list(table["name"]) == ["bm25", "dense"] and len(topics) == SAMPLE
    assert (table["R@100"] > 0.6).all() and (table["R@5"] > 0.3).all()
