"""Training the recipe's base on TREC ToT without loading its corpus: TREC ToT 2023 / 2024-style training queries
(``query_id`` + ``query`` lines, ``qid 0 docno rel`` qrels) against a 2025 corpus written in the official layout
and streamed into a BookIndex. Every way to read the whole corpus (the frame, field_text, docs_iter, the page
iterator) raises, and the pages read back by docno are counted: only gold and mined books may be read."""
import json
from pathlib import Path

import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_tot as ptt
from pyterrier_tot.datasets.base import BookDataset
from pyterrier_tot.index import book_index
from pyterrier_tot.models import BiEncoderModel
from pyterrier_tot.recipe import bases, hard_negatives
from pyterrier_tot.recipe.expert_training import training_metadata
from tests.helpers.trec_tot_2025 import PAGES

# (qid, query, gold page): written like the shared 2023-train / 2024-train folders
YEAR_2023 = [("152", "Film about kids in an old lighthouse .\n A ghost haunts them, not the horse one", "1001"),
             ("153", "Game with a dragon .\n You fly with a blacksmith to the red moon, like a spaceship", "1002"),
             ("154", "Mystery novel .\n A detective and a poisoning at a manor by a lake, maybe in Paris", "1003"),
             ("155", "Cartoon about a ship .\n Children stow away on a spaceship to Jupiter, a ghost story", "1004")]
YEAR_2024 = [("152", "Horse movie .\n A girl trains a wild horse at her grandmother's ranch, a film", "1005"),
             ("761", "Tall tower .\n A lattice tower made of wrought iron in a French city, seen in a film", "1006"),
             ("762", "Haunted place .\n Teenagers stuck overnight with a ghost in a lighthouse, red moon", "1001"),
             ("763", "Dragon game .\n A dragon, a blacksmith and the moon, red, and a detective", "1002")]


def _write_train(folder, rows):
    folder.mkdir(parents=True)
    (folder / "queries.jsonl").write_text("".join(json.dumps({"query_id": q, "query": t}) + "\n" for q, t, _ in rows))
    (folder / "qrel.txt").write_text("".join(f"{q} 0 {d} 1\n" for q, _, d in rows))
    return ptt.get_dataset(f"trec-tot-local/{folder}")


@pytest.fixture
def guarded(irds_2025, tmp_path, monkeypatch):
    """(training set, streamed index, pages read): the index is built, then every whole-corpus read raises."""
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path / "cache"))
    train = bases.TrainingSet([_write_train(tmp_path / "2023-train", YEAR_2023),
                               _write_train(tmp_path / "2024-train", YEAR_2024)])
    ds = ptt.get_dataset("trec-tot/2025/train")
    index = ptt.BookIndex(ds, path=tmp_path / "index")
    index.bm25()  # built from the stream once, before the guards go up
    index.flex_index("minilm")  # the catalogue a request encoder is trained against, encoded once
    assert index.streamed

    def refuse(*args, **kwargs):
        raise AssertionError("the whole corpus was read")

    monkeypatch.setattr(book_index.BookCorpus, "corpus", property(refuse))
    for name in ("field_text", "docs_iter"):
        monkeypatch.setattr(book_index.BookCorpus, name, refuse)
    monkeypatch.setattr(book_index.CorpusStore, "iter_rows", refuse)
    monkeypatch.setattr(book_index.CorpusStore, "docnos", property(refuse))
    monkeypatch.setattr(BookDataset, "get_corpus_df", refuse)
    monkeypatch.setattr(type(ds), "get_corpus_iter", refuse)
    read = []
    rows = book_index.CorpusStore.rows

    def counted(self, positions):
        positions = list(positions)
        read.extend(positions)
        return rows(self, positions)

    monkeypatch.setattr(book_index.CorpusStore, "rows", counted)
    return train, index, read


def test_training_set_puts_both_years_under_train(tmp_path):
    a = _write_train(tmp_path / "2023-train", YEAR_2023)
    b = _write_train(tmp_path / "2024-train", YEAR_2024)
    train = bases.TrainingSet([a, b])
    topics = train.get_topics("train")
    assert len(topics) == 8 and topics["qid"].is_unique          # qid 152 is in both years
    assert topics["qid"].iloc[0] == "2023-train/152" and topics["query"].iloc[0].startswith("Film about kids")
    assert set(train.get_qrels()["qid"]) == set(topics["qid"])
    with pytest.raises(KeyError, match="validation"):
        train.get_topics("validation")
    with pytest.raises(ValueError, match="index="):
        bases.fine_tuned_base(train, n=2)


def test_base_trains_on_a_streamed_corpus_by_docno(guarded):
    train, index, read = guarded
    # one epoch of one schedule (the default MiniLM settings train two, and max_steps caps each epoch)
    path = bases.fine_tuned_base(train, n=2, index=index, max_steps=2, batch_size=3, max_seq_length=32,
                                 verbose=False, epoch=1, schedule=1)
    meta = training_metadata(path)
    assert meta["n_pairs"] == 6 and meta["steps"] == 2                # the 6 queries outside the tuning slice
    assert isinstance(pt.Artifact.load(path), BiEncoderModel)
    rest, qrels = bases.train_data(train, "rest", 2)
    gold = set(index._store.positions(sorted(set(qrels["docno"]))))
    assert read and set(read) <= gold and len(read) == len(gold)    # each gold page once, nothing else


def test_hard_negatives_mined_and_read_by_docno(guarded):
    train, index, read = guarded
    models = hard_negatives.fine_tuned_hard(train, index, epochs=1, n_negatives=1, n=2, miners=("bm25",),
                                            clue_forms=False, verbose=False, max_steps=1, batch_size=3,
                                            max_seq_length=32)
    assert sorted(models) == [0, 1]
    meta = training_metadata(models[1])
    assert meta["n_negatives"] == 1 and meta["mined_from"] == ["bm25"]
    examples = hard_negatives.hard_negative_examples(train, index, n_negatives=1, n=2, clue_forms=False,
                                                     miners=("bm25",))
    titles = {title: docno for docno, title, _ in PAGES}
    rest, qrels = bases.train_data(train, "rest", 2)
    gold_of = rest.merge(qrels, on="qid").set_index("query")["docno"].to_dict()
    assert len(examples) == 6
    for query, gold, negative in examples:
        assert titles[gold.split("\n")[0]] == gold_of[query]           # the gold page's own text
        assert titles[negative.split("\n")[0]] != gold_of[query]       # a mined page that is not the answer
    with pytest.raises(ValueError, match="miners"):
        hard_negatives.hard_negative_examples(train, index, miners=("splade",))


def test_reading_by_docno_skips_unknown_pages(guarded):
    _, index, _ = guarded
    books = index.books_of(["1003", "nope", "1001"], missing="skip")
    assert books["docno"].tolist() == ["1003", "1001"]
    with pytest.raises(KeyError):
        index.books_of(["nope"])
    assert isinstance(books, pd.DataFrame)


def test_request_encoder_trains_against_a_frozen_streamed_catalogue(guarded):
    """Training the request side reads no page at all: gold and mined books are rows of the encoded catalogue."""
    from pyterrier_tot.index.dense import FROZEN_BOOKS
    from pyterrier_tot.recipe.frozen_catalogue import train_request_encoder

    train, index, read = guarded
    topics, qrels = train.get_topics("train"), train.get_qrels()
    parts = sorted(p.name for p in Path(index.path).iterdir())
    path = train_request_encoder(topics, qrels, index, "minilm", negatives="mined", n_mined=1, max_steps=2,
                                 batch_size=4, max_seq_length=32, show_progress_bar=False)
    meta = training_metadata(path)
    assert meta["n_pairs"] == 8 and meta["steps"] == 2 and meta[FROZEN_BOOKS]["n_docs"] == len(index)
    assert read == []                                                  # not one page's text was read
    ranked = index.dense(path).search("a ghost in an old lighthouse")
    assert len(ranked) == len(index) and set(ranked["docno"]) <= {d for d, _, _ in PAGES}
    assert sorted(p.name for p in Path(index.path).iterdir()) == parts  # nothing encoded after training
