"""Ray on a local cluster (two CPUs, loopback only, started once for the module and shut down at its end): the sample
corpus's MiniLM index built by Ray actors is the local build (same vectors, manifest and rankings), an actor that
dies is restarted (on a streamed corpus) and a build that fails leaves nothing behind,
``tuned_pipeline(ds).parallel(2, backend="ray")`` returns the serial run, and an LLM stage's answers cached by one
Ray worker are the others' too."""
import json
import os
import sys

import numpy as np
import pandas as pd
import pytest

import pyterrier_tot as ptt
from pyterrier_tot.index import ray_encoding
from tests.helpers.openai_stub import OpenAIStub, stub_llm
from tests.helpers.paths import SHARED

# the cluster starts in a few seconds; the builds and the parallel run take about a minute on two busy cores
pytestmark = pytest.mark.timeout(600)
BLOCK = 64  # books per Ray Data block: several blocks for each of the two actors


@pytest.fixture(scope="module")
def ray():
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'pyterrier-tot[ray]')")
    try:
        # address="local": a cluster of this test's own, never one that a `ray start` left running
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
    except Exception as e:  # noqa: BLE001 - a machine where Ray cannot start skips, saying why
        pytest.skip(f"a local Ray cluster cannot start here: {type(e).__name__}: {e}")
    # the test module travels by value, so the failing encoders below run on the workers
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def sample():
    if not (SHARED / "reddit-tomt-books").is_dir():
        pytest.skip("shared Reddit-TOMT data not found beside the checkout")
    try:
        ptt.resolve_model("minilm")
    except ptt.ModelUnavailableError as e:
        pytest.skip(str(e))
    return ptt.get_dataset("reddit-tomt-books", sample=30)


@pytest.fixture(scope="module")
def built(ray, sample, tmp_path_factory):
    local = ptt.BookIndex(sample)  # the cached sample index: the docs pages have built its MiniLM part by then
    on_ray = ptt.BookIndex(sample, path=tmp_path_factory.mktemp("ray") / "index")
    flex = on_ray.flex_index("minilm", workers=ptt.RayWorkers(2, block=BLOCK))
    return local, local.flex_index("minilm"), on_ray, flex


def _manifest(flex):
    meta = json.loads((flex.index_path.parent / "pt_meta.json").read_text())
    return {k: v for k, v in meta.items() if k != "created"}


def test_the_ray_build_is_the_local_build(built, sample):
    local, flex1, on_ray, flex2 = built
    assert flex1.index_path.relative_to(local.path) == flex2.index_path.relative_to(on_ray.path)  # same folder
    assert _manifest(flex1) == _manifest(flex2)
    docnos1, v1, _ = flex1.payload()
    docnos2, v2, _ = flex2.payload()
    assert list(docnos1) == list(docnos2) == list(local.docnos)  # corpus order
    assert v1.shape == v2.shape == (len(local), 384)
    np.testing.assert_allclose(np.asarray(v1), np.asarray(v2), atol=1e-5)
    topics = sample.get_topics("validation")
    r1 = (local.dense("minilm") % 10)(topics)
    r2 = (on_ray.dense("minilm", workers=ptt.RayWorkers(2)) % 10)(topics)  # built: nothing is encoded again
    assert r1[["qid", "docno", "rank"]].values.tolist() == r2[["qid", "docno", "rank"]].values.tolist()


class _DiesOnce(ray_encoding.RayDocEncoder):
    """Kills its own process at its first block, once (a marker file says it did): Ray restarts the actor."""

    marker = None

    def __call__(self, batch):
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)
        return super().__call__(batch)


class _Fails(ray_encoding.RayDocEncoder):
    def __call__(self, batch):
        if int(batch["start"][0]) >= 2 * BLOCK:
            raise RuntimeError("encoder broke at the third block")
        return super().__call__(batch)


def test_a_dead_actor_is_restarted_and_a_failed_build_leaves_nothing(ray, built, monkeypatch, tmp_path):
    local, flex1, _, _ = built
    books = local.corpus.head(3 * BLOCK)
    _DiesOnce.marker = str(tmp_path / "died")
    monkeypatch.setattr(ray_encoding, "RayDocEncoder", _DiesOnce)
    survived = ptt.BookIndex(books, path=tmp_path / "survived", stream=True)  # actors read corpus.jsonl by offsets
    vectors = np.asarray(survived.flex_index("minilm", workers=ptt.RayWorkers(1, block=BLOCK)).payload()[1])
    assert os.path.exists(_DiesOnce.marker)
    np.testing.assert_allclose(vectors, np.asarray(flex1.payload()[1])[:3 * BLOCK], atol=1e-5)

    monkeypatch.setattr(ray_encoding, "RayDocEncoder", _Fails)
    broken = ptt.BookIndex(books, path=tmp_path / "broken")
    with pytest.raises(Exception, match="third block"):
        broken.flex_index("minilm", workers=ptt.RayWorkers(1, block=BLOCK))
    # nothing of the part is left: no folder, no temporary one (only the corpus and the part's lock file)
    assert [p.name for p in (tmp_path / "broken").iterdir() if "dense" in p.name and not p.name.endswith(".lock")] == []
    assert not broken.has_dense("minilm")


def test_workers_and_devices_are_checked_before_anything_runs(built):
    local = built[0]
    with pytest.raises(ValueError, match="RayWorkers"):
        local.flex_index("minilm", fields=("title",), workers=ptt.RayWorkers(2), devices=["cuda:0"])
    with pytest.raises(ptt.BadInputTypeError, match="n must be an integer"):
        ptt.RayWorkers("2")
    assert repr(ptt.RayWorkers(4, gpus=1)) == "RayWorkers(4, gpus=1)"


def test_without_ray_the_build_says_how_to_install_it(monkeypatch, tiny_frame, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    index = ptt.BookIndex(tiny_frame, path=tmp_path / "index")
    with pytest.raises(ImportError, match=r"pip install 'pyterrier-tot\[ray\]'"):
        index.flex_index("minilm", workers=ptt.RayWorkers(2))
    assert not index.has_dense("minilm")


def test_the_parallel_ray_run_is_the_serial_run(ray, sample):
    dp = ptt.tuned_pipeline(sample, base="minilm", verbose=False)   # the docs' sample recipe: cached by then
    topics = sample.get_topics("validation")
    serial = dp(topics)
    with pytest.warns(UserWarning, match="experimental"):            # PyTerrier says so of .parallel()
        parallel = dp.parallel(2, backend="ray")(topics)
    cols = ["qid", "docno", "rank"]
    key = lambda f: f[cols + ["score"]].sort_values(["qid", "rank"]).reset_index(drop=True)  # noqa: E731
    assert set(parallel["qid"]) == set(topics["qid"]) and len(parallel) == len(serial)
    pd.testing.assert_frame_equal(key(parallel)[cols], key(serial)[cols])
    assert (key(parallel)["score"] - key(serial)["score"]).abs().max() < 1e-5


def test_ray_workers_share_the_llm_answer_cache(ray, tmp_path):
    topics = pd.DataFrame({"qid": [f"q{i}" for i in range(6)],
                           "query": [f"a book about a dragon number {i}" for i in range(6)]})
    with OpenAIStub(lambda messages: f"a dragon story {messages[-1]['content'][-1]}") as stub:
        rewriter = ptt.LLMQueryRewriter(stub_llm(stub, tmp_path / "answers.sqlite3"))
        first = rewriter(topics.head(3))                              # this process asks half
        assert stub.answered == 3
        parallel = rewriter.parallel(2, backend="ray")(topics)        # the workers ask only the other half
        assert stub.answered == 6
        again = rewriter(topics)                                      # and this process finds their answers
        assert stub.answered == 6
    by_qid = lambda f: f.sort_values("qid")["query"].tolist()  # noqa: E731
    assert by_qid(parallel) == by_qid(again) and by_qid(first) == by_qid(again)[:3]
