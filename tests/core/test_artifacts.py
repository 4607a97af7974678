"""Everything the library saves opens again with ``pt.Artifact.load(path)``, as the right class, and works the same:
a book index, a fine-tuned bi-encoder and fitted fuser weights."""
import json

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_tot as ptt
from pyterrier_tot.decomposition.field_expert import FieldExpert, base_expert
from pyterrier_tot.decomposition.weighted_fuser import FuserWeights, WeightedFuser
from pyterrier_tot.models import BiEncoderModel
from pyterrier_tot.recipe.expert_training import train_field_expert


def _q(*pairs):
    return pd.DataFrame([{"qid": q, "query": t} for q, t in pairs])


QUERIES = _q(("1", "a ghost keeper in an old lighthouse"), ("2", "blacksmith befriends a dragon"),
             ("3", "children hide on a spaceship")).assign(clue_title=["haunted lighthouse", "dragon moon", None])


def _meta(path):
    return json.loads((path / "pt_meta.json").read_text())


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A book index, a title expert trained for two steps and a fuser fitted over both, all on disk."""
    from tests.helpers.books import TINY_BOOKS

    root = tmp_path_factory.mktemp("artifacts")
    corpus = pd.DataFrame(TINY_BOOKS)
    index = ptt.BookIndex(corpus, path=root / "index", name="tiny")
    clues = pd.DataFrame({"qid": ["1", "2", "3", "4"], "query": ["kittens", "dragon", "spaceship", "lighthouse"],
                          "clue_title": ["a sleepy cat", "dragons and a moon", "spaceship with a number",
                                         "a haunted tower by the sea"]})
    qrels = pd.DataFrame({"qid": ["1", "2", "3", "4"], "docno": ["b1", "b2", "b4", "b5"], "label": 1})
    model_dir = train_field_expert("title", clues, qrels, corpus, output_dir=root / "title-expert", batch_size=2,
                                   max_steps=2, max_seq_length=32, show_progress_bar=False)
    experts = [base_expert(index, "bm25"), FieldExpert(index, "title", model=model_dir), index.dense_scorer()]
    fuser = WeightedFuser(experts, weights=[1.0, 0.5, 2.0], names=["bm25", "title", "dense"])
    weights_dir = fuser.save(root / "fuser")
    return {"index": index, "model": model_dir, "experts": experts, "fuser": fuser, "weights": weights_dir}


def test_book_index(saved):
    index = saved["index"]
    assert _meta(index.path)["type"] == "book_index"
    loaded = pt.Artifact.load(str(index.path))
    assert isinstance(loaded, ptt.BookIndex) and loaded.fingerprint == index.fingerprint
    pd.testing.assert_frame_equal(loaded.corpus[["docno", "title", "text"]], index.corpus[["docno", "title", "text"]])
    for make in (lambda i: i.bm25(), lambda i: i.dense(), lambda i: i.bm25(fields="genres") % 2):
        pd.testing.assert_frame_equal(make(loaded)(QUERIES), make(index)(QUERIES))


def test_trained_biencoder(saved):
    path = saved["model"]
    assert _meta(path)["type"] == "biencoder"
    model = pt.Artifact.load(str(path))
    assert isinstance(model, BiEncoderModel) and model.metadata()["steps"] == 2
    index = saved["index"]
    by_path = index.dense(str(path))(QUERIES)
    pd.testing.assert_frame_equal(index.dense(model)(QUERIES), by_path)
    # the encoder the artifact hands out gives the vectors of the saved model
    vec = model.biencoder().encode_queries(["dragons and a moon"])
    assert np.allclose(vec, model.sentence_transformer().encode(["dragons and a moon"]), atol=1e-5)


def test_fuser_weights(saved):
    path, fuser, experts = saved["weights"], saved["fuser"], saved["experts"]
    assert _meta(path)["type"] == "fuser_weights"
    art = pt.Artifact.load(str(path))
    assert isinstance(art, FuserWeights)
    assert art.weights() == {"bm25": 1.0, "title": 0.5, "dense": 2.0} and art.to_dict() == fuser.to_dict()
    candidates = saved["index"].bm25()(QUERIES)
    pd.testing.assert_frame_equal(art.fuser(experts)(candidates), fuser(candidates))
    pd.testing.assert_frame_equal(WeightedFuser.load(art, experts)(candidates), fuser(candidates))
    assert art.fuser().experts is None and art.fuser().names == ["bm25", "title", "dense"]


def test_unknown_folder_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError):
        pt.Artifact.load(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="holds a 'fuser_weights' artifact"):
        ptt.BookIndex.load(str(_fake(tmp_path)))


def _fake(tmp_path):
    from pyterrier_tot._plumbing.artifact import write_meta

    folder = tmp_path / "fake"
    folder.mkdir()
    write_meta(folder, "fuser_weights", "json")
    return folder


def test_a_damaged_folder_names_itself_and_the_fix(tiny_frame, tmp_path, monkeypatch):
    """Issue 22.8: a half-written pt_meta.json or corpus raised a bare JSONDecodeError naming no path."""
    ptt.BookIndex(tiny_frame, path=tmp_path / "idx")
    (tmp_path / "idx" / "pt_meta.json").write_text('{"type": "book_ind')  # cut short mid-write
    with pytest.raises(ptt.CorruptArtifactError, match=r"idx: pt_meta.json is damaged .*rm -r") as e:
        ptt.BookIndex(tmp_path / "idx")
    assert isinstance(e.value, ValueError)
    # building over it: a folder the user named is never overwritten unasked
    with pytest.raises(ptt.CorruptArtifactError, match="idx"):
        ptt.BookIndex(tiny_frame, path=tmp_path / "idx")
    ptt.BookIndex(tiny_frame, path=tmp_path / "idx2")
    corpus = tmp_path / "idx2" / "corpus.jsonl"
    corpus.write_text(corpus.read_text()[:-40])
    with pytest.raises(ptt.CorruptArtifactError, match=r"idx2: corpus.jsonl is damaged"):
        ptt.BookIndex(tmp_path / "idx2")
    weights = WeightedFuser(weights=[1.0, 2.0], names=["a", "b"]).save(tmp_path / "w")
    (weights / "weights.json").write_text("{\"names\": [")
    with pytest.raises(ptt.CorruptArtifactError, match=r"w: weights.json is damaged"):
        WeightedFuser.load(weights)
    # the library's own cache: rebuilt, with a warning
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path / "cache"))
    cached = ptt.BookIndex(tiny_frame)
    (cached.path / "pt_meta.json").write_text("")
    with pytest.warns(UserWarning, match="damaged; rebuilding"):
        again = ptt.BookIndex(tiny_frame)
    assert len(again.bm25()(_q(("1", "dragon")))) > 0
    assert ptt.BookIndex(cached.path).fingerprint == again.fingerprint


def test_a_rebuild_warning_names_what_differs_and_never_fails_on_a_strange_record():
    from pyterrier_tot._plumbing.util import differing

    want = {"backend": "flex", "precision": "bf16", "max_chars": None}
    assert differing({"backend": "flex", "precision": "fp32", "max_chars": None}, want) == "differing: precision"
    # a key present on one side only differs, even when the other side holds None
    assert differing({"backend": "flex", "precision": "bf16"}, want) == "differing: max_chars"
    for strange in (None, [], ["a", "list"], "text", {}):
        assert differing(strange, want) == "no readable record of what it holds"
    assert differing(dict(want), want) == "its settings differ"
