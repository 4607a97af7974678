"""The decomposition recipe: the tuning slice, the model-completeness check, get-or-fit of the fuser weights."""
import pandas as pd
import pytest

from pyterrier_tot import recipe
from pyterrier_tot.decomposition.pipeline import DecompositionPipeline
from pyterrier_tot.index import BookIndex
from tests.helpers.tiny_datasets import FourQueries


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from tests.helpers.books import TINY_BOOKS
    return BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path_factory.mktemp("recipe_index"))


def test_tuning_split_is_the_benchmark_sample():
    train = pd.DataFrame({"qid": [f"q{i}" for i in range(500)], "query": ["x"] * 500})
    pd.testing.assert_frame_equal(recipe.tuning_split(train), train.sample(300, random_state=0))
    rest = recipe.training_rest(train)
    assert len(rest) == 200 and not set(rest["qid"]) & set(recipe.tuning_split(train)["qid"])


def test_incomplete_model_folder_counts_as_absent(tmp_path):
    assert not recipe.complete_model(tmp_path / "missing")
    (tmp_path / "pt_meta.json").write_text("{}")
    assert not recipe.complete_model(tmp_path)        # metadata but no weights: an interrupted save
    (tmp_path / "model.safetensors").write_bytes(b"")
    assert recipe.complete_model(tmp_path)
    assert recipe.fine_tuned_base(FourQueries(), path=tmp_path, train=False) == str(tmp_path)
    assert recipe.fine_tuned_base(FourQueries(), path=tmp_path / "none", train=False) is None


def test_weights_fitted_once_then_reused(index, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    ds = FourQueries()
    dp = recipe.tuned_pipeline(ds, index, fine_tuned=False, k=3, expert_k=2, verbose=False)
    assert isinstance(dp, DecompositionPipeline)
    # the tiny books have years and authors: the date and author experts act
    assert list(dp.experts) == ["dense", "bm25", "title", "title_bm25", "plot", "date", "author"]
    saved = recipe.fitted_weights(ds, index, None, k=3, expert_k=2)
    assert (saved / "pt_meta.json").is_file() and saved.parent == tmp_path / "models"
    mtime = (saved / "pt_meta.json").stat().st_mtime_ns
    again = recipe.tuned_pipeline(ds, index, fine_tuned=False, k=3, expert_k=2, verbose=False)
    assert (saved / "pt_meta.json").stat().st_mtime_ns == mtime
    assert again.fuser.weights.tolist() == dp.fuser.weights.tolist()
    out = dp(ds.get_topics("validation"))
    assert set(out["qid"]) == {"t1", "t2", "t3", "t4"} and out.groupby("qid")["rank"].min().eq(0).all()
