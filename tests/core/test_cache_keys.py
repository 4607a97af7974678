"""Cached artifacts are keyed by the explicit settings of the stages they depend on (``settings()``, digested by
``_cache_key.cache_key``), never by reprs: a repr changed still finds the cache, a setting changed misses it, and
weights fitted under the old repr-based key are copied to the new key with a warning, never silently mixed."""
import json

import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_tot as ptt
from pyterrier_tot import recipe
from pyterrier_tot._plumbing.cache_key import cache_key, settings_of
from pyterrier_tot.decomposition.field_expert import FieldExpert
from pyterrier_tot.recipe import DensityPrior
from tests.helpers.books import TINY_BOOKS


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path_factory.mktemp("cache_keys_index"))


@pytest.fixture
def key_of(index, tmp_path, monkeypatch):
    """The folder the recipe's fitted weights are looked up in, for these extra experts (data and models fixed)."""
    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    return lambda extra, **kw: recipe.weights_path("tiny", index, None, 4, 0, 3, 2, extra, **kw)


def test_a_repr_changed_still_hits_a_setting_changed_misses(index, key_of, monkeypatch):
    title = FieldExpert(index, "title", "bm25")
    prior = DensityPrior(index, k=3)
    before = key_of({"title2": title, "density": prior})
    monkeypatch.setattr(FieldExpert, "__repr__", lambda self: "FieldExpert(printed another way)")
    monkeypatch.setattr(DensityPrior, "__repr__", lambda self: "DensityPrior(...)")
    assert key_of({"title2": title, "density": prior}) == before
    # two experts that now print alike but differ in a setting never share a fit
    for other in (FieldExpert(index, "title", "bm25", clue="clue_plot"), FieldExpert(index, "title", "dense"),
                  FieldExpert(index, "title", "bm25", scorer_depth=10)):
        assert repr(other) == repr(title) and key_of({"title2": other, "density": prior}) != before
    assert key_of({"title2": title, "density": DensityPrior(index, k=4)}) != before
    assert key_of({"title2": FieldExpert(index, "title", "bm25"), "density": DensityPrior(index, k=3)}) == before


def test_settings_are_explicit_versioned_and_plain(index):
    s = settings_of(FieldExpert(index, "plot", "dense"))
    assert s["class"].endswith("FieldExpert") and s["version"] == 1 and s["clue"] == "clue_plot"
    json.dumps(s)  # plain values only
    # PyTerrier's operators are keyed by their parts and their k / scalar
    a, b = index.bm25() % 3, index.bm25() % 4
    assert cache_key(a) == cache_key(index.bm25() % 3) != cache_key(b)
    assert cache_key(0.5 * ptt.Normalise()) != cache_key(0.4 * ptt.Normalise())
    # a transformer from elsewhere without settings() is keyed by its class and repr
    assert settings_of(pt.Transformer.identity())["repr"] == repr(pt.Transformer.identity())


def test_weights_fitted_under_the_old_repr_key_are_copied_with_a_warning(index, tmp_path, monkeypatch):
    """A look-up of the recipe's weights (``fitted_weights(fit=False)``) finds a fit made when extra experts were
    keyed by their reprs, copies it to the settings-based key with a warning, and reads it from there."""
    from tests.helpers.tiny_datasets import TinyDataset

    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    ds = TinyDataset()
    text = recipe.text_fingerprint(recipe.tuning_data(ds, 4)[0])

    def key(extra, **kw):
        return recipe.weights_path(ds.name, index, None, 4, recipe.TUNING_SEED, 3, 2, extra, tuning_text=text, **kw)

    def look_up(extra):
        return recipe.fitted_weights(ds, index, None, n=4, k=3, expert_k=2, extra_experts=extra, fit=False)

    extra = {"density": DensityPrior(index, k=3)}
    old, new = key(extra, legacy=True), key(extra)
    assert old != new and old.parent == new.parent
    old.mkdir(parents=True)
    (old / "pt_meta.json").write_text(json.dumps({"type": "fuser_weights", "format": "json"}))
    (old / "weights.json").write_text(json.dumps({"names": ["density"], "weights": [0.5]}))
    with pytest.warns(UserWarning, match=f"{old.name} were keyed by the extra experts' reprs; copied to {new.name}"):
        assert look_up(extra) == new
    assert json.loads((new / "weights.json").read_text())["weights"] == [0.5] and old.is_dir()
    other = {"density": DensityPrior(index, k=4)}
    assert look_up(other) is None and not key(other).exists()  # no old fit for these settings: nothing copied


def test_a_generative_expert_is_keyed_by_its_settings():
    """A generative retriever (an extra expert of the recipe in the generative study) is keyed by its backbone,
    identifiers and decoding, not by its repr."""
    from pyterrier_tot import generative as gen

    books = pd.DataFrame(TINY_BOOKS)
    ids = gen.book_ids(books)
    backbone = gen.tiny_t5(gen.word_tokenizer(list(books["text"]) + list(ids.values())), d_model=32, layers=1)
    three, five = gen.GenerativeRetriever(backbone, ids, num_results=3), gen.GenerativeRetriever(backbone, ids,
                                                                                                  num_results=5)
    json.dumps(settings_of(three))
    assert cache_key(three) == cache_key(gen.GenerativeRetriever(backbone, ids, num_results=3)) != cache_key(five)
    assert cache_key(three) != cache_key(gen.GenerativeRetriever(backbone, dict(list(ids.items())[:3]),
                                                                 num_results=3))


def test_the_density_prior_keeps_the_key_it_had_in_the_recipe(index):
    """DensityPrior moved from recipe/ to decomposition/ (beside the other experts): weights fitted over it are keyed
    by its class's old name, so they are found again."""
    prior = DensityPrior(index, k=3)
    assert type(prior).__module__ == "pyterrier_tot.decomposition.density_prior"
    assert settings_of(prior)["class"] == "pyterrier_tot.recipe.density_prior.DensityPrior"
