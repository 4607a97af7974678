"""Multi-process document encoding (issue #18): two CPU processes give the single-process vectors, the same
index folder and the same rankings."""
import json
import random

import numpy as np
import pandas as pd
import pytest

import pyterrier_tot as ptt
from pyterrier_tot.index.encoding import PooledDocEncoder, pool_devices

WORDS = ("dragon moon kitten detective lighthouse ghost horse ranch spaceship jupiter village blacksmith poison "
         "storm manor summer winter river island pirate treasure map school teacher robot garden").split()


def _books(n=40, seed=7):
    rng = random.Random(seed)
    return pd.DataFrame([{"docno": f"d{i}", "title": " ".join(rng.sample(WORDS, 3)).title(),
                          "text": " ".join(rng.choices(WORDS, k=rng.randint(8, 40)))} for i in range(n)])


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    try:
        ptt.resolve_model()
    except ptt.ModelUnavailableError as e:
        pytest.skip(str(e))
    books = _books()
    single = ptt.BookIndex(books, path=tmp_path_factory.mktemp("single") / "index")
    multi = ptt.BookIndex(books, path=tmp_path_factory.mktemp("multi") / "index")
    started = []
    real_start = PooledDocEncoder.start

    def spy(self):  # proves the multi-process path ran, with the processes asked for
        started.append(list(self.devices))
        real_start(self)

    PooledDocEncoder.start = spy
    try:
        flex2 = multi.flex_index(workers=2)
    finally:
        PooledDocEncoder.start = real_start
    assert started and started[0] == ["cpu", "cpu"]
    return single, single.flex_index(), multi, flex2


def _part_meta(flex):
    meta = json.loads((flex.index_path.parent / "pt_meta.json").read_text())
    return {k: v for k, v in meta.items() if k != "created"}


def test_vectors_equal_single_process(indexes):
    _, flex1, _, flex2 = indexes
    docnos1, v1, _ = flex1.payload()
    docnos2, v2, _ = flex2.payload()
    assert list(docnos1) == list(docnos2)
    assert v1.shape == v2.shape == (40, 384)
    np.testing.assert_allclose(np.asarray(v1), np.asarray(v2), atol=1e-5)


def test_same_manifest_and_retrieval(indexes):
    single, flex1, multi, flex2 = indexes
    assert _part_meta(flex1) == _part_meta(flex2)
    assert not {"workers", "devices"} & set(_part_meta(flex2))
    queries = pd.DataFrame({"qid": ["q1", "q2"], "query": ["a ghost in a lighthouse", "pirate treasure map"]})
    # already built: workers= changes nothing, the retriever is the plain one
    r1 = single.dense(num_results=10)(queries)
    r2 = multi.dense(num_results=10, workers=2)(queries)
    assert r1[["qid", "docno"]].values.tolist() == r2[["qid", "docno"]].values.tolist()
    np.testing.assert_allclose(r1["score"].to_numpy(), r2["score"].to_numpy(), atol=1e-5)


def test_empty_frame_and_repr(indexes):
    from pyterrier_tot.models import load_biencoder
    enc = PooledDocEncoder(load_biencoder(), ["cpu", "cpu"])
    out = enc(pd.DataFrame({"docno": [], "text": []}))
    assert "doc_vec" in out.columns and len(out) == 0 and enc._pool is None  # no pool started for nothing
    assert "devices=['cpu', 'cpu']" in repr(enc)


def test_pool_devices_and_errors():
    assert pool_devices() is None
    assert pool_devices(workers=3) == ["cpu"] * 3
    assert pool_devices(workers=2, base_device="cuda:0") == ["cuda:0", "cuda:1"]
    assert pool_devices(workers=5, devices=("cuda:0", "cuda:1")) == ["cuda:0", "cuda:1"]
    with pytest.raises(ValueError, match="workers"):
        pool_devices(workers=0)
    with pytest.raises(ValueError, match="devices"):
        pool_devices(devices=[])
    with pytest.raises(TypeError, match="SBertBiEncoder"):
        PooledDocEncoder(object(), ["cpu"])
