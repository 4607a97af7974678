"""A model retrained into the same folder is a new model everywhere a cache could hold the old one: the book vectors
of a dense index are encoded again, the loaded encoder is loaded again, and fuser weights fitted for the old model
are not found under its folder name (two runs' folders of the same name never share weights either)."""
import json
import shutil
import warnings

import numpy as np
import pandas as pd
import pytest

import pyterrier_tot as ptt
from pyterrier_tot import recipe
from pyterrier_tot.models import load_biencoder
from pyterrier_tot.models.fingerprint import (
    CONFIGS_FILE,
    configs,
    configs_agree,
    model_config_digest,
    model_fingerprint,
    record_configs,
)
from pyterrier_tot.recipe import (
    train_field_expert,
    weights,  # the fitted weights' key and fit live here
)
from tests.helpers.books import TINY_BOOKS

CLUES = pd.DataFrame({"qid": ["1", "2", "3", "4"], "query": ["kittens", "dragon", "spaceship", "lighthouse"],
                      "clue_title": ["a sleepy cat", "dragons and a moon", "spaceship with a number",
                                     "a haunted tower by the sea"]})
QRELS = pd.DataFrame({"qid": ["1", "2", "3", "4"], "docno": ["b1", "b2", "b4", "b5"], "label": 1})
QUERIES = pd.DataFrame({"qid": ["1", "2"], "query": ["a ghost keeper in an old lighthouse", "a dragon and the moon"]})


def _train(folder, lr):
    return train_field_expert("title", CLUES, QRELS, pd.DataFrame(TINY_BOOKS), output_dir=folder, batch_size=2,
                              max_steps=2, max_seq_length=32, lr=lr, show_progress_bar=False)


def _stored(index, model):
    flex = index.flex_index(model)
    docnos, vecs, _ = flex.payload()
    return np.array(vecs)


def test_a_model_retrained_in_its_folder_is_encoded_and_loaded_again(tmp_path):
    index = ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path / "index", name="tiny")
    folder = tmp_path / "model"
    _train(folder, lr=1e-3)
    before, first = model_fingerprint(folder), _stored(index, str(folder))
    enc = load_biencoder(str(folder))
    assert load_biencoder(str(folder)) is enc                        # loaded once while the weights stay
    _train(folder, lr=5e-2)                                          # the same folder, other weights
    assert model_fingerprint(folder) != before
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = _stored(index, str(folder))
    assert any("rebuilding" in str(w.message) for w in caught)
    assert not np.allclose(again, first, atol=1e-4)
    new = load_biencoder(str(folder))
    assert new is not enc
    texts = ["\n".join([b["title"], b["text"]]) for b in TINY_BOOKS]
    fresh = new.model.encode(texts[:1], convert_to_numpy=True)
    # the index now holds the retrained model's vectors (the first book in docno order is b1)
    assert np.allclose(again[0], fresh[0], atol=1e-4) and not np.allclose(first[0], fresh[0], atol=1e-4)
    # retrieval with the folder ranks by the new vectors: scores are query-new x book-new
    res = index.dense(str(folder))(QUERIES)
    q = new.model.encode(QUERIES["query"].tolist()[:1], convert_to_numpy=True)[0]
    top = res[res.qid == "1"].sort_values("rank").iloc[0]
    assert top["score"] == pytest.approx(float(np.max(again @ q)), abs=1e-4)


def test_fuser_weights_are_keyed_by_the_bases_weights_not_their_folder_names(tmp_path):
    a, b = tmp_path / "runA" / "checkpoint", tmp_path / "runB" / "checkpoint"
    _train(a, lr=1e-3)
    _train(b, lr=5e-2)
    key = lambda path: recipe.weights_path("ds", None, str(path), 300, 0, 100, 50)  # noqa: E731
    assert key(a) != key(b)                                          # same folder name, other weights
    shutil.copytree(a, tmp_path / "copy" / "checkpoint")
    assert key(tmp_path / "copy" / "checkpoint") == key(a)           # the same model elsewhere: the same weights
    # helpers with no weights to hash (hub names) are keyed by their names, never both by None
    hub = lambda name: recipe.weights_path("ds", None, str(a), 300, 0, 100, 50, helpers={"h": name})  # noqa: E731
    assert hub("org/model-a") != hub("org/model-b") and hub("org/model-a") != key(a)


def test_no_fine_tuned_base_hashes_nothing_and_what_cannot_be_hashed_has_no_fingerprint(tmp_path, monkeypatch):
    monkeypatch.setattr(weights, "model_fingerprint", lambda *a: pytest.fail("hashed a model"))
    recipe.weights_path("ds", None, None, 300, 0, 100, 50)          # the zero-shot recipe's key: as before
    assert model_fingerprint("sentence-transformers/all-MiniLM-L6-v2") is None      # a hub name
    (tmp_path / "empty").mkdir()
    assert model_fingerprint(tmp_path / "empty") is None and model_fingerprint(None) is None


def test_helpers_are_refused_under_the_recipe_experts_names(tmp_path):
    index = ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path / "index", name="tiny")
    with pytest.raises(ValueError, match="recipe's own experts"):
        recipe.recipe_experts(index, None, helpers={"bm25": str(tmp_path)})


def test_a_folder_with_other_frameworks_weights_only_is_fingerprinted_and_they_do_not_change_others(tmp_path):
    tf_only = tmp_path / "tf"
    tf_only.mkdir()
    (tf_only / "tf_model.h5").write_bytes(b"weights one")
    first = model_fingerprint(tf_only)
    assert first is not None
    (tf_only / "tf_model.h5").write_bytes(b"weights two")
    assert model_fingerprint(tf_only) not in (None, first)
    both = tmp_path / "both"
    both.mkdir()
    (both / "model.safetensors").write_bytes(b"torch weights")
    before = model_fingerprint(both)
    (both / "flax_model.msgpack").write_bytes(b"flax weights")
    assert model_fingerprint(both) == before  # what an earlier version keyed stays keyed the same


def test_a_base_folder_without_its_training_queries_is_reused_with_a_warning_once(tmp_path):
    from pyterrier_tot.recipe.protocol import check_trained_on

    (tmp_path / "pyterrier_tot_training.json").write_text('{"kind": "base", "epochs": 1}')
    topics = pd.DataFrame({"qid": ["1", "2"], "query": ["a", "b"]})
    with pytest.warns(UserWarning, match="did not record its training queries"):
        check_trained_on(tmp_path, topics)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_trained_on(tmp_path, topics)                      # once per folder
        check_trained_on(tmp_path / "untrained-by-us", topics)  # no record at all: nothing to say



def test_a_base_trained_on_other_texts_of_its_queries_is_refused(tmp_path):
    import json

    from pyterrier_tot.recipe.protocol import check_trained_on, qid_fingerprint, text_fingerprint

    topics = pd.DataFrame({"qid": ["1", "2"], "query": ["a ghost", "a dragon"]})
    edited = topics.assign(query=["a ghost\nSolved! It was Ghost Light", "a dragon"])
    record = {"kind": "base", "train_qids": qid_fingerprint(topics), "train_text": text_fingerprint(edited)}
    (tmp_path / "pyterrier_tot_training.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match="other texts"):
        check_trained_on(tmp_path, topics)
    check_trained_on(tmp_path, edited)                           # the texts it was trained on: reused
    no_text = tmp_path / "no-text"
    no_text.mkdir()
    (no_text / "pyterrier_tot_training.json").write_text(json.dumps({**record, "train_text": None}))
    with pytest.warns(UserWarning, match="did not record its training queries' text"):
        check_trained_on(no_text, topics)


def _set_max_seq_length(folder, n):
    import json

    cfg = folder / "sentence_bert_config.json"
    (cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "max_seq_length": n})))


def test_a_model_reconfigured_in_its_folder_is_encoded_and_loaded_again(tmp_path):
    """Editing a folder's max_seq_length changes no weight file, but changes every book vector of a long text."""
    books = pd.DataFrame(TINY_BOOKS).assign(text=lambda d: d["text"] + " and then" * 40)
    index = ptt.BookIndex(books, path=tmp_path / "index", name="tiny-long")
    folder = _train(tmp_path / "model", lr=1e-3)
    weights, config = model_fingerprint(folder), model_config_digest(folder)
    first, enc = _stored(index, str(folder)), load_biencoder(str(folder))
    _set_max_seq_length(folder, 8)
    assert model_fingerprint(folder) == weights and model_config_digest(folder) != config
    with pytest.warns(UserWarning, match="rebuilding"):
        again = _stored(index, str(folder))
    assert not np.allclose(again, first, atol=1e-4)
    new = load_biencoder(str(folder))
    assert new is not enc and new.model.max_seq_length == 8
    with warnings.catch_warnings():
        warnings.simplefilter("error")                               # the same configuration again: kept
        assert np.allclose(_stored(index, str(folder)), again)


def test_fitted_weights_record_their_models_configuration(tmp_path):
    folder = _train(tmp_path / "model", lr=1e-3)
    weights = tmp_path / "fuser"
    weights.mkdir()
    (weights / "weights.json").write_text("{}")                    # fitted after the model was configured
    models = {"dense_ft": str(folder), "hub": "org/model"}          # a hub name has no folder, no configuration
    assert configs_agree(weights, models)                            # no record yet (an older fit): kept, recorded
    assert json.loads((weights / CONFIGS_FILE).read_text()) == {"dense_ft": model_config_digest(folder)}
    _set_max_seq_length(folder, 8)
    assert not configs_agree(weights, models)                        # fitted with the model configured otherwise
    record_configs(weights, configs(models))                         # what a refit writes
    assert configs_agree(weights, models)
    (weights / CONFIGS_FILE).write_text("{not json")
    assert not configs_agree(weights, models)                        # an unreadable record stands for nothing


def test_an_older_fit_is_not_kept_when_its_models_configuration_changed_after_it(tmp_path):
    import os

    folder = _train(tmp_path / "model", lr=1e-3)
    weights = tmp_path / "fuser"
    weights.mkdir()
    (weights / "weights.json").write_text("{}")
    cfg = folder / "sentence_bert_config.json"
    later = (weights / "weights.json").stat().st_mtime + 10
    os.utime(cfg, (later, later))                                    # edited after the fit, before any record
    assert not configs_agree(weights, {"dense_ft": str(folder)})


def test_what_does_not_change_a_model_does_not_change_its_configuration_digest(tmp_path):
    folder = _train(tmp_path / "model", lr=1e-3)
    before = model_config_digest(folder)
    for name in ("pyterrier_tot_training.json", "pt_meta.json"):     # the library's own records, rewritten
        (folder / name).write_text(json.dumps({"rewritten": True}))
    (folder / "notes.txt").write_text("mine")                       # a user's file
    (folder / ".ipynb_checkpoints").mkdir()
    (folder / ".ipynb_checkpoints" / "config-checkpoint.json").write_text("{}")
    st = folder / "config_sentence_transformers.json"                # saved again by another library version
    st.write_text(json.dumps({**json.loads(st.read_text()), "__version__": {"sentence_transformers": "99.0"}}))
    hf = folder / "config.json"
    hf.write_text(json.dumps({**json.loads(hf.read_text()), "transformers_version": "99.0", "_name_or_path": "/x"}))
    assert model_config_digest(folder) == before
    pooling = next(p for p in folder.iterdir() if p.name.endswith("_Pooling")) / "config.json"
    pooling.write_text(json.dumps({**json.loads(pooling.read_text()), "pooling_mode_mean_tokens": False,
                                   "pooling_mode_cls_token": True}))
    assert model_config_digest(folder) != before                     # a module's configuration does count


def test_fitted_weights_fit_again_when_a_models_configuration_changed(tmp_path, monkeypatch):
    base, helper = _train(tmp_path / "base", lr=1e-3), _train(tmp_path / "helper", lr=5e-2)
    path = tmp_path / "fuser"
    topics = pd.DataFrame({"qid": ["1"], "query": ["a sleepy cat"]})
    monkeypatch.setattr(weights, "train_data", lambda *a, **k: (topics, QRELS))
    monkeypatch.setattr(weights, "check_not_trained_on_slice", lambda *a, **k: None)
    monkeypatch.setattr(weights, "weights_path", lambda *a, **k: path)
    fits = []

    class Stage:
        def __rshift__(self, other):
            return self

    class Fuser:
        names = []

        def fit(self, *a, **k):
            fits.append(1)

        def save(self, where):
            where.mkdir(exist_ok=True)
            (where / "weights.json").write_text("{}")
            return where

    monkeypatch.setattr(weights, "build_pipeline", lambda *a, **k: type("Dp", (), {
        "decomposer": Stage(), "candidates": Stage(), "fuser": Fuser()})())
    ds, fit = type("Ds", (), {"name": "ds"})(), lambda: recipe.fitted_weights(ds, None, fine_tuned=str(base),
                                                                              helpers={"helper": str(helper)})
    assert fit() == path and len(fits) == 1
    assert set(json.loads((path / CONFIGS_FILE).read_text())) == {*recipe.fine_tuned_models(str(base)), "helper"}
    assert fit() == path and len(fits) == 1                          # reused
    _set_max_seq_length(helper, 8)                                   # the helper reconfigured
    with pytest.warns(UserWarning, match="configured otherwise"):
        fit()
    assert len(fits) == 2
    assert fit() == path and len(fits) == 2                          # the refit recorded what it was fitted with


@pytest.mark.parametrize("older, changed", [(("model_fingerprint", "model_config"), "model.safetensors"),
                                            (("model_config",), "sentence_bert_config.json")])
def test_an_index_recorded_by_an_older_version_is_kept_until_its_model_changes(tmp_path, older, changed):
    """A record without the fields an older version did not write is kept (no re-encoding on upgrade) until the
    model's weights (or configuration) change after it was written."""
    import os

    index = ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path / "index", name="tiny")
    folder = _train(tmp_path / "model", lr=1e-3)
    first = _stored(index, str(folder))
    part = next(p for p in (tmp_path / "index").iterdir() if p.name.startswith("dense-model"))
    meta = json.loads((part / "pt_meta.json").read_text())
    now = {"model_fingerprint": model_fingerprint(folder), "model_config": model_config_digest(folder)}
    assert all(meta.pop(field) == now[field] for field in older)
    (part / "pt_meta.json").write_text(json.dumps(meta))             # as an older version wrote it
    with warnings.catch_warnings():
        warnings.simplefilter("error")                               # kept: no rebuild, no warning
        assert np.allclose(_stored(index, str(folder)), first)
    later = (part / "pt_meta.json").stat().st_mtime + 10
    os.utime(next(folder.rglob(changed)), (later, later))           # the model changed after the record
    with pytest.warns(UserWarning, match="rebuilding"):
        _stored(index, str(folder))


def test_bumping_the_features_version_finds_no_weights_fitted_before(monkeypatch):
    key = lambda: recipe.weights_path("ds", None, None, 300, 0, 100, 50)  # noqa: E731
    before = key()
    assert weights.FEATURES_VERSION == 1
    monkeypatch.setattr(weights, "FEATURES_VERSION", 2)                # the rule clues changed, say
    assert key() != before
    monkeypatch.setattr(weights, "FEATURES_VERSION", 1)
    assert key() == before                                           # version 1 keeps the keys made before the tag
