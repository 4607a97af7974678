"""A request encoder trained against a catalogue encoded once: it searches that catalogue's vectors (nothing is
encoded after training), learns (its training loss falls, its requests move towards their books), and refuses a
book index that is not the one it was trained against."""
from pathlib import Path

import pandas as pd
import pytest

import pyterrier_tot as ptt
from pyterrier_tot.errors import FrozenCatalogueError
from pyterrier_tot.index.dense import FROZEN_BOOKS
from pyterrier_tot.recipe.expert_training import training_metadata
from pyterrier_tot.recipe.frozen_catalogue import train_request_encoder
from tests.helpers.books import TINY_BOOKS

# requests that name no title: the zero-shot model has to learn which book each describes
REQUESTS = [("r1", "cats that nap", "b1"), ("r2", "a boy and a flying beast", "b2"),
            ("r3", "who poisoned the guest", "b3"), ("r4", "kids hiding on a rocket", "b4"),
            ("r5", "spooky tower by the sea", "b5"), ("r6", "taming a pony at grandma's", "b6"),
            ("r7", "a kitten copies its siblings", "b1"), ("r8", "a storm and a detective", "b3")]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("frozen")
    index = ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=folder / "index")
    topics = pd.DataFrame({"qid": [q for q, _, _ in REQUESTS], "query": [t for _, t, _ in REQUESTS]})
    qrels = pd.DataFrame({"qid": [q for q, _, _ in REQUESTS], "docno": [d for _, _, d in REQUESTS], "label": 1})
    index.flex_index("minilm")
    parts = sorted(p.name for p in Path(index.path).iterdir())
    path = train_request_encoder(topics, qrels, index, "minilm", epochs=4, batch_size=4, lr=1e-4,
                                 max_seq_length=32, output_dir=folder / "request", show_progress_bar=False)
    return index, topics, qrels, path, parts


def _gold_scores(ranking, qrels):
    return ranking.merge(qrels, on=["qid", "docno"])["score"].mean()


def test_request_encoder_learns_and_searches_the_frozen_catalogue(trained):
    index, topics, qrels, path, parts = trained
    meta = training_metadata(path)
    assert meta["kind"] == "request-encoder" and meta["n_pairs"] == 8 and meta["steps"] == 8
    assert meta[FROZEN_BOOKS]["n_docs"] == 6 and meta[FROZEN_BOOKS]["fields"] == ["title", "text"]
    assert meta["epoch_losses"][-1] < meta["epoch_losses"][0]          # it learns
    before = _gold_scores(index.dense("minilm").transform(topics), qrels)
    after = _gold_scores(index.dense(path).transform(topics), qrels)
    assert after > before                                              # requests moved towards their books
    assert sorted(p.name for p in Path(index.path).iterdir()) == parts  # the books were not encoded again
    assert index.has_dense(path)
    # the book side of a request encoder is the frozen catalogue, wherever the books are read (the density prior)
    assert index.flex_index(path).index_path == index.flex_index("minilm").index_path
    from pyterrier_tot.decomposition.density_prior import book_density
    assert book_density(index, path).equals(book_density(index, "minilm"))
    assert not [p.name for p in Path(index.path).iterdir() if p.name.startswith(f"dense-{path.name}-")]
    scored = index.dense_scorer(path).transform(index.dense("minilm").transform(topics))
    assert not scored["score"].isna().any()


def test_a_request_encoder_refuses_another_book_index(trained, tmp_path):
    _, _, _, path, _ = trained
    other = ptt.BookIndex(pd.DataFrame(TINY_BOOKS[:5]), path=tmp_path / "other")
    with pytest.raises(FrozenCatalogueError, match="another corpus"):
        other.dense(path)
    index = trained[0]
    with pytest.raises(FrozenCatalogueError, match="fields=title"):
        index.dense(path, fields=("title",))


def test_a_request_encoder_transfers_to_another_corpus_of_the_same_book_model_when_allowed(trained, tmp_path):
    import json
    import shutil

    from pyterrier_tot.models.loading import TRAINING_FILE

    index, topics, _, path, _ = trained
    other = ptt.BookIndex(pd.DataFrame(TINY_BOOKS[:5]), path=tmp_path / "other")
    with pytest.raises(FrozenCatalogueError, match="allow_transfer"):
        other.dense(path)
    assert other.allow_transfer(path) is other
    ranked = other.dense(path).transform(topics)
    assert set(ranked["qid"]) == set(topics["qid"]) and not ranked["score"].isna().any()
    assert set(ranked["docno"]) <= {b["docno"] for b in TINY_BOOKS[:5]}
    # its requests searched the other corpus's vectors of the book model, encoded there once; none of its own
    assert other.flex_index(path).index_path == other.flex_index("minilm").index_path
    assert not [p.name for p in Path(other.path).iterdir() if p.name.startswith(f"dense-{path.name}-")]
    # what it learnt carries over: its requests are nearer their books there than the zero-shot model's are
    qrels = trained[2][trained[2]["docno"].isin([b["docno"] for b in TINY_BOOKS[:5]])]
    assert _gold_scores(ranked, qrels) > _gold_scores(other.dense("minilm").transform(topics), qrels)
    # allowed on that index object only, and only for a request encoder whose book model is unchanged
    with pytest.raises(FrozenCatalogueError, match="another corpus"):
        ptt.BookIndex(pd.DataFrame(TINY_BOOKS[:5]), path=tmp_path / "other").dense(path)
    with pytest.raises(ValueError, match="not a request encoder"):
        other.allow_transfer("minilm")
    changed = Path(shutil.copytree(path, tmp_path / "changed"))
    record = json.loads((changed / TRAINING_FILE).read_text())
    record[FROZEN_BOOKS]["digest"] = "0" * 16  # as if its book model's weights had changed since
    (changed / TRAINING_FILE).write_text(json.dumps(record))
    with pytest.raises(FrozenCatalogueError, match="weights or configuration"):
        other.allow_transfer(changed)
    assert index.has_dense(path)  # its own index needs no allowing


def test_mined_and_batch_negatives_train_and_record_their_settings(trained, tmp_path):
    index, topics, qrels, _, _ = trained
    for negatives in ("mined", "batch"):
        path = train_request_encoder(topics, qrels, index, "minilm", negatives=negatives, n_mined=2, max_steps=1,
                                     batch_size=4, max_seq_length=16, trainable_layers=1,
                                     output_dir=tmp_path / negatives, show_progress_bar=False)
        meta = training_metadata(path)
        assert meta["negatives"] == negatives and meta["trainable_layers"] == 1 and meta["steps"] == 1
    with pytest.raises(ValueError, match="negatives"):
        train_request_encoder(topics, qrels, index, "minilm", negatives="all")


def test_a_recipe_on_a_request_encoder_saves_and_loads_like_the_others(trained, tmp_path):
    from pyterrier_tot.recipe import RecipeArtifact
    from tests.helpers.train_once_worker import TinyDataset

    index, topics, _, path, _ = trained
    dp = ptt.tuned_pipeline(TinyDataset(), index, fine_tuned={"dense_ft": str(path)}, n=4, k=3, expert_k=2,
                            density=False, verbose=False)
    saved = dp.save(tmp_path / "recipe")
    copied = Path(saved.models()["dense_ft"])
    assert training_metadata(copied)[FROZEN_BOOKS] == training_metadata(path)[FROZEN_BOOKS]
    loaded = RecipeArtifact(saved.path).pipeline(index)
    before, after = (p(topics).sort_values(["qid", "rank"])[["qid", "docno"]].values.tolist() for p in (dp, loaded))
    assert after == before
    # neither the trained nor the saved copy encoded a book: both searched the frozen catalogue's vectors
    assert not [p.name for p in Path(index.path).iterdir() if p.name.startswith(f"dense-{copied.name}-")]
    # transferred to another catalogue, its request encoder searches that catalogue's vectors of the book model
    other = ptt.BookIndex(pd.DataFrame(TINY_BOOKS[:5]), path=tmp_path / "other")
    with pytest.warns(UserWarning, match="nothing fitted"):
        moved = RecipeArtifact(saved.path).transfer(other)
    ranked = moved(topics)
    assert set(ranked["qid"]) == set(topics["qid"]) and set(ranked["docno"]) <= {b["docno"] for b in TINY_BOOKS[:5]}
    assert not [p.name for p in Path(other.path).iterdir() if p.name.startswith(f"dense-{copied.name}-")]
