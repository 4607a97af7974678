"""Expert training: pairs from clues / queries, a tiny fine-tuning run that changes the model, save and load."""
import json

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

from pyterrier_tot.decomposition.field_expert import FieldExpert
from pyterrier_tot.index import BookIndex
from pyterrier_tot.models import BiEncoderModel
from pyterrier_tot.recipe.expert_training import (
    build_field_pairs,
    build_pairs,
    load_clue_cache,
    train_biencoder,
    train_field_expert,
    training_metadata,
)


@pytest.fixture
def corpus():
    from tests.helpers.books import TINY_BOOKS
    return pd.DataFrame(TINY_BOOKS)


@pytest.fixture
def train():
    clues = pd.DataFrame({
        "qid": ["1", "2", "3", "4", "5"],
        "query": ["kittens napping book", "dragon blacksmith moon", "mansion poisoning", "kids on a spaceship", "x"],
        "clue_title": ["something about a sleepy cat", "dragons and a moon", None, "spaceship with a number", "N/A"],
        "clue_genre": [None, "fantasy", "mystery", "sci-fi", None],
    })
    qrels = pd.DataFrame({"qid": ["1", "2", "3", "4", "5"], "docno": ["b1", "b2", "b3", "b4", "b5"], "label": 1})
    return clues, qrels


def test_pairs(corpus, train):
    clues, qrels = train
    pairs = build_field_pairs("title", clues, qrels, corpus)
    assert pairs == [("something about a sleepy cat", "The Sleepy Kitten"),
                     ("dragons and a moon", "Dragons of the Red Moon"),
                     ("spaceship with a number", "Spaceship Nine")]  # N/A clues skipped
    assert [p[1] for p in build_field_pairs("genre", clues, qrels, corpus)] == ["fantasy", "mystery", "science fiction"]
    base = build_pairs(clues, qrels, corpus)
    assert len(base) == 5 and base[0][1].startswith("The Sleepy Kitten\nFour kittens")
    with pytest.raises(ValueError, match="not text"):
        build_field_pairs("date", clues, qrels, corpus)


def test_clue_cache(tmp_path):
    p = tmp_path / "clues.jsonl"
    p.write_text('{"qid": 1, "clue_title": "a", "clue_year": 2001}\n\n{"qid": "2", "clue_title": null}\n')
    df = load_clue_cache(p)
    assert df["qid"].tolist() == ["1", "2"] and df.loc[0, "clue_year"] == 2001


def test_tiny_training_changes_model_and_loads(corpus, train, tmp_path):
    from pyterrier_tot.models import load_sentence_transformer

    clues, qrels = train
    out = train_field_expert("title", clues, qrels, corpus, output_dir=tmp_path / "title-model", batch_size=3,
                             max_steps=2, epochs=2, max_seq_length=32, lr=5e-4, show_progress_bar=False)
    meta = training_metadata(out)
    assert meta["field"] == "title" and meta["n_pairs"] == 3 and meta["steps"] == 2
    assert meta["loss"] == "MultipleNegativesRankingLoss" and meta["max_seq_length"] == 32
    # the folder is an artifact: pt_meta.json, safetensors weights, nothing pickled, no leftovers of the build
    pt_meta = json.loads((out / "pt_meta.json").read_text())
    assert (pt_meta["type"], pt_meta["format"], pt_meta["field"]) == ("biencoder", "sentence_transformers", "title")
    assert list(out.rglob("*.safetensors")) and not list(out.rglob("*.bin")) and not list(out.rglob("*.pkl"))
    assert [p.name for p in tmp_path.iterdir() if "building" in p.name] == []
    model = pt.Artifact.load(str(out))
    assert isinstance(model, BiEncoderModel) and model.metadata() == meta and training_metadata(model) == meta
    base = load_sentence_transformer(None)
    tuned = load_sentence_transformer(str(out))
    texts = ["dragons and a moon", "Spaceship Nine"]
    diff = np.abs(base.encode(texts) - tuned.encode(texts)).max()
    assert diff > 1e-3  # the weights moved
    # the cached base model was not trained in place
    assert np.abs(base.encode(texts) - load_sentence_transformer(None).encode(texts)).max() == 0
    # FieldExpert loads the fine-tuned directory
    idx = BookIndex(corpus, path=tmp_path / "idx")
    res = FieldExpert(idx, "title", model=str(out))(clues)
    assert set(res["qid"]) == {"1", "2", "4"}
    top = res[res["rank"] == 0].set_index("qid")["docno"]
    assert top["2"] == "b2" and top["4"] == "b4"
    # the artifact object works wherever the folder does
    pd.testing.assert_frame_equal(FieldExpert(idx, "title", model=model)(clues), res)


def test_training_never_replaces_a_foreign_folder(corpus, train, tmp_path):
    clues, qrels = train
    keep = tmp_path / "mine"
    keep.mkdir()
    (keep / "notes.txt").write_text("precious")
    with pytest.raises(FileExistsError, match="not a model folder"):
        train_field_expert("title", clues, qrels, corpus, output_dir=keep, max_steps=1, show_progress_bar=False)
    assert (keep / "notes.txt").read_text() == "precious"


def test_failed_training_leaves_no_folder(corpus, train, tmp_path, monkeypatch):
    from sentence_transformers import SentenceTransformer

    def boom(self, *args, **kwargs):
        raise RuntimeError("disk full")

    clues, qrels = train
    monkeypatch.setattr(SentenceTransformer, "save", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        train_field_expert("title", clues, qrels, corpus, output_dir=tmp_path / "m", batch_size=3, max_steps=1,
                           show_progress_bar=False)
    assert [p.name for p in tmp_path.iterdir()] == [".m.lock"]  # no model folder; only the build lock file


def test_too_few_pairs():
    with pytest.raises(ValueError, match="at least 2"):
        train_biencoder([("a", "b")], output_dir="/nonexistent")
