import time

import pandas as pd
import pytest

from pyterrier_tot.errors import TerrierUnavailableError
from pyterrier_tot.query.rm3 import rm3_pipeline, terrier_available, terrier_status


def test_availability_check_is_fast_and_explains_itself():
    terrier_status.cache_clear()
    t0 = time.perf_counter()
    ok, reason = terrier_status(timeout=60)
    assert time.perf_counter() - t0 < 65
    assert isinstance(ok, bool) and reason
    assert terrier_available() == ok


def test_unavailable_raises_with_reason():
    ok, reason = terrier_status()
    if ok:
        pytest.skip("Terrier is available here; the unavailable path is not reachable")
    with pytest.raises(TerrierUnavailableError, match="RM3 needs Terrier"):
        rm3_pipeline(pd.DataFrame({"docno": ["d1"], "title": ["x"], "text": ["y"]}))


def test_missing_jars_are_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTERRIER_HOME", str(tmp_path))
    terrier_status.cache_clear()
    try:
        ok, reason = terrier_status(timeout=5)
        assert not ok
        assert "java" in reason or "jars" in reason
    finally:
        terrier_status.cache_clear()


def test_rm3_runs_on_tiny_corpus(tmp_path):
    ok, reason = terrier_status()
    if not ok:
        pytest.skip(f"RM3 unavailable here: {reason}")
    import pyterrier as pt

    books = pd.DataFrame({"docno": ["d1", "d2", "d3"], "title": ["Dragon Soup", "Moon Kitten", "Sea Glass"],
                          "text": ["a dragon cooks soup", "a kitten flies to the moon", "a girl collects glass"]})
    bm25, rm3 = rm3_pipeline(books, path=str(tmp_path / "terrier"), return_bm25=True)
    topics = pd.DataFrame({"qid": ["1"], "query": ["kitten moon rocket"]})
    qrels = pd.DataFrame({"qid": ["1"], "docno": ["d2"], "label": [1]})
    res = pt.Experiment([bm25, rm3], topics, qrels, eval_metrics=["recip_rank"])
    assert res["recip_rank"].tolist() == [1.0, 1.0]


def test_broken_jars_fail_in_a_subprocess_not_here(tmp_path, monkeypatch):
    """Jar files that do not hold Terrier make the probe subprocess fail; this process never starts Java."""
    (tmp_path / "terrier-assemblies-5.11-jar-with-dependencies.jar").write_bytes(b"not a jar")
    (tmp_path / "terrier-python-helper-0.0.8.jar").write_bytes(b"not a jar")
    monkeypatch.setenv("PYTERRIER_HOME", str(tmp_path))
    terrier_status.cache_clear()
    try:
        t0 = time.perf_counter()
        ok, reason = terrier_status(timeout=30)
        assert time.perf_counter() - t0 < 35
        assert not ok and ("failed" in reason or "took more than" in reason)
    finally:
        terrier_status.cache_clear()
    import pyterrier as pt
    assert not pt.java.started()
