"""DensityPrior: each book's mean cosine to its k nearest books, computed once from the stored vectors and cached
in the index folder; scorer mode only; unknown docnos and query frames fail clearly."""
import numpy as np
import pandas as pd
import pytest

from pyterrier_tot._plumbing.cache_key import cache_key
from pyterrier_tot.decomposition.density_prior import DENSITY_K, DensityPrior, book_density, densities
from pyterrier_tot.errors import UnknownDocnoError
from pyterrier_tot.index import BookIndex
from tests.helpers.books import TINY_BOOKS


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path_factory.mktemp("density_index"))


def test_densities_by_hand():
    # four unit vectors: a and b nearly the same, c between them and d, d alone
    v = np.array([[1, 0], [0.99, 0.141], [0.6, 0.8], [0, 1]], dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    sims = v @ v.T
    np.fill_diagonal(sims, -np.inf)
    want = np.sort(sims, axis=1)[:, -2:].mean(axis=1)
    assert np.allclose(densities(v, k=2), want, atol=1e-6)
    assert np.allclose(densities(v, k=2, block=1), want, atol=1e-6)  # blocks change nothing
    # the crowded pair is denser than the lone book
    got = densities(v, k=1)
    assert got[0] > got[3] and got[1] > got[3]
    # against a reference sample: rows in it skip themselves, the others are compared with all of it
    ref = np.array([0, 2])
    part = densities(v, k=1, reference=ref)
    assert np.isclose(part[0], v[0] @ v[2]) and np.isclose(part[1], max(v[1] @ v[0], v[1] @ v[2]))
    with pytest.raises(ValueError, match="at least 2 books"):
        densities(v[:1], k=1)


def test_book_density_matches_the_stored_vectors_and_is_cached(index):
    dens = book_density(index, k=2)
    assert sorted(dens.index) == sorted(b["docno"] for b in TINY_BOOKS)
    lookup, vecs, _ = index.flex_index().payload()
    docnos = [lookup.fwd[i] for i in range(len(vecs))]
    want = densities(np.asarray(vecs), k=2)
    assert np.allclose(dens.reindex(docnos).to_numpy(), want, atol=1e-6)
    folders = [p.name for p in index.path.iterdir() if p.name.endswith("-density-k2")]
    assert len(folders) == 1
    stamp = (index.path / folders[0] / "density" / "density.csv.gz").stat().st_mtime_ns
    assert book_density(index, k=2).equals(dens)  # read back, not computed again
    assert (index.path / folders[0] / "density" / "density.csv.gz").stat().st_mtime_ns == stamp
    assert not np.allclose(book_density(index, k=1).reindex(docnos), dens.reindex(docnos))  # k is a setting


def test_prior_scores_minus_the_density(index):
    prior = DensityPrior(index, k=2)
    assert repr(prior) == f"DensityPrior({index!r}, k=2)"
    cands = pd.DataFrame({"qid": ["q1"] * 3 + ["q2"], "query": ["a"] * 3 + ["b"],
                          "docno": ["b1", "b2", "b3", "b1"], "score": [3.0, 2.0, 1.0, 5.0]})
    out = prior(cands)
    dens = book_density(index, k=2)
    assert np.allclose(out["score"], -dens.reindex(out["docno"]).to_numpy())
    assert set(out.columns) >= {"qid", "docno", "query", "score", "rank"}
    # query-independent: the same book scores the same for every query
    by = out.set_index(["qid", "docno"])["score"]
    assert by[("q1", "b1")] == by[("q2", "b1")]
    # ranks follow the scores within each query
    q1 = out[out["qid"] == "q1"].sort_values("rank")
    assert q1["score"].is_monotonic_decreasing
    assert len(prior(cands.iloc[:0])) == 0


def test_prior_refuses_unknown_books_and_query_frames(index):
    bad = pd.DataFrame({"qid": ["q1", "q1"], "docno": ["b1", "nope"], "query": ["a", "a"]})
    with pytest.raises(UnknownDocnoError, match="nope"):
        DensityPrior(index)(bad)
    out = DensityPrior(index, unknown_docnos="nan")(bad)
    assert np.isnan(out.set_index("docno").loc["nope", "score"])
    with pytest.raises(ValueError, match="result frame"):
        DensityPrior(index)(pd.DataFrame({"qid": ["q1"], "query": ["a dragon"]}))
    with pytest.raises(ValueError, match="k"):
        DensityPrior(index, k=0)


def test_the_recipe_weighs_the_prior_of_its_base_and_density_false_leaves_it_out(tmp_path, monkeypatch):
    """``tuned_pipeline`` adds the density prior of a base named in ``RECIPE_PRIORS`` (mpnet's and nomic's, in the
    library) as a scorer the fuser weighs: no new candidates, its own fitted weights; ``density=False`` is the
    recipe without it; several bases, a base not listed or no fine-tuned model get none."""
    from pyterrier_tot import recipe
    from tests.helpers.tiny_datasets import TinyDataset

    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    index = BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path / "index")
    ds, small = TinyDataset(), {"max_steps": 2, "batch_size": 4, "max_seq_length": 32, "verbose": False}
    assert recipe.RECIPE_PRIORS == {"mpnet": DENSITY_K, "nomic": DENSITY_K}  # nomic: the default, encoder swapped
    fts = {"dense_ft": recipe.fine_tuned_base(ds, 4, model="minilm", index=index, **small)}
    assert recipe.recipe_priors(index, "minilm", fts) == {}  # MiniLM was not tried with it
    monkeypatch.setitem(recipe.RECIPE_PRIORS, "minilm", 2)
    got = recipe.recipe_priors(index, "minilm", fts)
    assert list(got) == ["density"] and got["density"].k == 2 and got["density"].model == fts["dense_ft"]
    assert recipe.recipe_priors(index, ["minilm", "mpnet"], fts) == {}  # a set of bases measured as their sum
    # the default's two bases weigh mpnet's prior (bases.ENSEMBLES), in either order; nomic's model is not it
    two = {"dense_ft_mpnet": fts["dense_ft"], "dense_ft_nomic": str(tmp_path / "nomic")}
    for order in (recipe.DEFAULT_BASE, ["nomic", "mpnet"]):
        got = recipe.recipe_priors(index, order, two)
        assert list(got) == ["density"] and got["density"].model == two["dense_ft_mpnet"]
    assert recipe.recipe_priors(index, recipe.DEFAULT_BASE, {"dense_ft_nomic": two["dense_ft_nomic"]}) == {}
    assert recipe.recipe_priors(index, "minilm", None) == {}
    kw = dict(fine_tuned=fts, base="minilm", helpers=(), n=4, k=3, expert_k=2, verbose=False, depth=None)
    with_prior = recipe.tuned_pipeline(ds, index, **kw)
    without = recipe.tuned_pipeline(ds, index, density=False, **kw)
    assert "density" in with_prior.fuser.names and "density" not in without.fuser.names
    assert with_prior.weights_path != without.weights_path
    topics = ds.get_topics("train").head(4)
    got, want = ((p.decomposer >> p.candidates)(topics) for p in (with_prior, without))
    assert set(zip(got.qid, got.docno)) == set(zip(want.qid, want.docno))  # it adds no candidates
    out = with_prior(topics)
    assert set(out["qid"]) == set(topics["qid"]) and out.groupby("qid")["rank"].min().eq(0).all()
    # a user's own extra experts are kept beside it
    mine = recipe.tuned_pipeline(ds, index, extra_experts={"mine": DensityPrior(index, k=1)}, **kw)
    assert {"density", "mine"} <= set(mine.fuser.names)


def test_a_sampled_reference_has_its_own_cache_and_leaves_the_exact_one(index):
    lookup, vecs, _ = index.flex_index().payload()
    docnos = [lookup.fwd[i] for i in range(len(vecs))]
    n = len(vecs)
    assert n > 3
    exact = book_density(index, k=2)
    exact_folder = index.path / next(p.name for p in index.path.iterdir() if p.name.endswith("-density-k2"))
    stamp = (exact_folder / "density" / "density.csv.gz").stat().st_mtime_ns
    sampled = book_density(index, k=2, reference=3, seed=7)
    ref = np.sort(np.random.default_rng(7).choice(n, size=3, replace=False))
    want = densities(np.asarray(vecs), k=2, reference=ref)
    assert np.allclose(sampled.reindex(docnos).to_numpy(), want, atol=1e-6)
    assert not np.allclose(sampled.reindex(docnos), exact.reindex(docnos))
    assert (index.path / next(p.name for p in index.path.iterdir() if p.name.endswith("-density-k2-ref3-seed7"))
            ).is_dir()
    # the exact densities were neither replaced nor rebuilt; a reference above the corpus is the exact one
    assert (exact_folder / "density" / "density.csv.gz").stat().st_mtime_ns == stamp
    assert book_density(index, k=2, reference=n + 10, seed=3).equals(exact)
    assert (exact_folder / "density" / "density.csv.gz").stat().st_mtime_ns == stamp


def test_the_prior_takes_the_sample_and_names_it_only_where_it_is_drawn(index, monkeypatch):
    from pyterrier_tot.decomposition import density_prior

    n = len(index)
    sampled = DensityPrior(index, k=2, reference=3, seed=7)
    assert sampled.density().equals(book_density(index, k=2, reference=3, seed=7))
    assert repr(sampled).endswith(", reference=3, seed=7)")
    # below the corpus size the sample is the whole corpus: the settings (the recipe's weights key) are unchanged
    assert cache_key(DensityPrior(index, k=2, reference=n + 1, seed=9)) == cache_key(DensityPrior(index, k=2))
    assert "reference" not in repr(DensityPrior(index, k=2))
    with pytest.raises(ValueError, match="seed"):
        DensityPrior(index, seed=-1)
    # the old repr-based key did not name the default sample of a large corpus (weights fitted with it migrate)
    monkeypatch.setattr(density_prior, "REFERENCE_BOOKS", 3)
    assert "reference" not in DensityPrior(index, k=2, reference=3, seed=0)._legacy_repr()
    assert DensityPrior(index, k=2, reference=3, seed=1)._legacy_repr().endswith(", reference=3, seed=1)")
    assert cache_key(DensityPrior(index, k=2, reference=3, seed=1)) != cache_key(DensityPrior(index, k=2, reference=3))
