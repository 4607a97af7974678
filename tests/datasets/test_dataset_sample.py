"""ptt.get_dataset(name, sample=n) and $PYTERRIER_TOT_SAMPLE: a small, self-consistent slice whose indexes,
models and fitted weights are never cached under the full data's names."""
import pandas as pd
import pytest

import pyterrier_tot as ptt
from pyterrier_tot.datasets.base import BookDataset
from pyterrier_tot.datasets.books import Book
from pyterrier_tot.datasets.sample import SAMPLE_ENV, TRAIN_EXTRA, SampledDataset


class _Toy(BookDataset):
    name = "toy"
    splits = ("train", "validation")

    def _load_books(self):
        return [Book(docno=f"d{i}", title=f"Book {i}", text=f"text of book {i}") for i in range(40)]

    def _load_topics(self, split):
        n = 12 if split == "train" else 6
        return pd.DataFrame({"qid": [f"{split}{i}" for i in range(n)], "query": [f"q {i}" for i in range(n)]})

    def _load_qrels(self, split):
        t = self._load_topics(split)
        off = 0 if split == "train" else 20
        return pd.DataFrame({"qid": t["qid"], "docno": [f"d{off + i}" for i in range(len(t))], "label": 1})


def test_sample_keeps_queries_their_gold_books_and_some_others():
    full = _Toy()
    s = SampledDataset(full, 3, books=4)
    assert s.name == "toy-sample3-b4" and s.splits == full.splits
    val, qrels = s.get_topics("validation"), s.get_qrels("validation")
    assert len(val) == 3 and set(qrels["qid"]) == set(val["qid"])
    assert len(s.get_topics("train")) == 12  # train keeps n + the recipe's 300 (here: all 12)
    docnos = set(s.get_corpus_df()["docno"])
    gold = set(qrels["docno"]) | set(s.get_qrels("train")["docno"])
    assert gold <= docnos and len(docnos) == len(gold) + 4
    again = SampledDataset(_Toy(), 3, books=4)  # seeded: the same slice every time
    assert list(again.get_topics("validation")["qid"]) == list(val["qid"])
    assert list(again.get_corpus_df()["docno"]) == list(s.get_corpus_df()["docno"])
    other_seed = SampledDataset(_Toy(), 3, books=4, seed=1)
    assert other_seed.name == "toy-sample3-b4-s1"


def test_bad_sample_arguments_raise():
    for bad in (0, -1, 2.5, True, "3"):
        with pytest.raises(ValueError, match="n must be"):
            SampledDataset(_Toy(), bad)
    streamed = _Toy()
    streamed.streaming = True
    with pytest.raises(ValueError, match="streams"):
        SampledDataset(streamed, 3)
    with pytest.raises(TypeError):
        SampledDataset(object(), 3)


def test_train_extra_is_the_recipe_tuning_slice():
    from pyterrier_tot.recipe import TUNING_QUERIES

    assert TRAIN_EXTRA == TUNING_QUERIES


def test_env_variable_samples_get_dataset(reddit, monkeypatch):
    import pyterrier as pt

    monkeypatch.setenv(SAMPLE_ENV, "5")
    ds = ptt.get_dataset("reddit-tomt-books")
    assert ds.name == "reddit-tomt-books-sample5" and len(ds.get_topics("validation")) == 5
    assert pt.get_dataset("tot:reddit-tomt-books") is ds          # the PyTerrier provider sees it too
    assert ptt.get_dataset("reddit-tomt-books", sample=5) is ds
    monkeypatch.setenv(SAMPLE_ENV, "")
    assert ptt.get_dataset("reddit-tomt-books") is reddit
    monkeypatch.setenv(SAMPLE_ENV, "lots")
    with pytest.raises(ValueError, match=SAMPLE_ENV):
        ptt.get_dataset("reddit-tomt-books")


def test_nothing_built_on_a_sample_takes_the_full_data_name(reddit, reddit_index):
    """The index folder, the recipe's fine-tuned base and its fitted weights are keyed by the data set's name
    and corpus: a sample can never be found where the full data's are looked up."""
    from pyterrier_tot.recipe import base_dir, weights_path

    small = ptt.get_dataset("reddit-tomt-books", sample=5)
    assert len(small.get_topics("validation")) == 5 and len(small.get_topics("train")) == 305
    small_index = ptt.BookIndex(small)
    assert small_index.fingerprint != reddit_index.fingerprint and small_index.path != reddit_index.path
    assert len(small_index) < len(reddit_index)
    for model in ("minilm", "mpnet"):
        assert base_dir(small, model, 300) != base_dir(reddit, model, 300)
    full_w = weights_path(reddit.name, reddit_index, None, 300, 0, 100, 50)
    assert weights_path(small.name, small_index, None, 300, 0, 100, 50) != full_w
    # even a sample whose name were the full one would get other weights: the corpus fingerprint is in the key
    assert weights_path(reddit.name, small_index, None, 300, 0, 100, 50) != full_w
