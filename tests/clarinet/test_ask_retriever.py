"""``pyterrier-tot ask`` searches with the best retriever it has: the recipe when its models and fitted weights are
cached, else the fine-tuned base, else zero-shot dense; it says which in one line, takes ``--retriever``, and never
trains or fits anything itself. It used to search with BM25 unless told otherwise."""

import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_tot as ptt
from pyterrier_tot import recipe
from pyterrier_tot.clarinet import ask_retriever as choice  # where ask's retriever is chosen
from pyterrier_tot.clarinet.ask_retriever import ask_retriever
from pyterrier_tot.datasets.base import BookDataset
from pyterrier_tot.datasets.books import Book
from pyterrier_tot.recipe import DEFAULT_BASE, bases, weights
from pyterrier_tot.submission.cli import main
from tests.helpers.books import TINY_BOOKS

REQUEST = "a ghost in an old lighthouse"


class Tiny(BookDataset):
    """The six tiny books, with a train split for the recipe's look-ups."""
    name = "tiny-ask"
    splits = ("train",)

    def _load_books(self):
        return [Book(**b) for b in TINY_BOOKS]

    def _load_topics(self, split):
        return pd.DataFrame({"qid": ["t1", "t2", "t3"], "query": ["kittens nap", "a dragon", "a poisoning"]})

    def _load_qrels(self, split):
        return pd.DataFrame({"qid": ["t1", "t2", "t3"], "docno": ["b1", "b2", "b3"], "label": [1, 1, 1]})


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return ptt.BookIndex(Tiny(), path=tmp_path_factory.mktemp("ask") / "index")


@pytest.fixture
def no_training(monkeypatch):
    """Training a base or fitting the fuser fails the test."""
    from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser
    from pyterrier_tot.recipe import expert_training

    def refuse(*args, **kwargs):
        raise AssertionError("ask started a training run")

    monkeypatch.setattr(expert_training, "train_base_retriever", refuse)
    monkeypatch.setattr(WeightedFuser, "fit", refuse)


def test_nothing_cached_searches_with_dense_and_says_why(index, no_training):
    retriever, line = ask_retriever(index, Tiny())
    assert ".dense(" in repr(retriever) and "bm25" not in repr(retriever)
    assert line.startswith("Searching with dense retrieval (MiniLM, not fine-tuned): no fine-tuned model of "
                           "tiny-ask is cached") and "\n" not in line
    _, line = ask_retriever(index)  # an index whose name is no dataset: nothing to look up
    assert "the index names no dataset ('tiny-ask')" in line
    for kind in ("recipe", "base"):
        with pytest.raises(ptt.ModelUnavailableError, match="ask never trains"):
            ask_retriever(index, Tiny(), kind)
    retriever, line = ask_retriever(index, Tiny(), "bm25")
    assert line == "Searching with BM25 (--retriever bm25)." and ".bm25(" in repr(retriever)
    with pytest.raises(ptt.BadInputError, match="--model goes with --retriever dense"):
        ask_retriever(index, Tiny(), "base", model="minilm")


def test_a_cached_fine_tuned_base_is_used_before_dense(index, no_training, monkeypatch):
    from pyterrier_tot.models import resolve_model

    folder = resolve_model(None)  # MiniLM stands in for a fine-tuned base
    monkeypatch.setattr(bases, "fine_tuned_base", lambda dataset, model="minilm", **kw: folder
                        if model == "minilm" else None)
    retriever, line = ask_retriever(index, Tiny())
    assert line.startswith("Searching with the fine-tuned minilm base of tiny-ask: the recipe's models for "
                           "tiny-ask are not cached")
    # the folder MiniLM's package ships is MiniLM, by name
    assert ".dense('sentence-transformers/all-MiniLM-L6-v2'" in repr(retriever)
    res = retriever(pd.DataFrame({"qid": ["q"], "query": [REQUEST]}))
    assert res.sort_values("rank")["docno"].iloc[0] == "b5"
    assert ask_retriever(index, Tiny(), "base")[1] == "Searching with the fine-tuned minilm base of tiny-ask."


def test_the_recipe_comes_first_when_cached(index, no_training, monkeypatch):
    stub = pt.Transformer.from_df(pd.DataFrame({"qid": ["q"], "docno": ["b5"], "score": [1.0], "rank": [0]}))
    tried = []
    monkeypatch.setattr(choice, "_cached_recipe",
                        lambda ds, ix, base: tried.append(base) or (stub if base == DEFAULT_BASE else None))
    for kind in (None, "recipe"):
        retriever, line = ask_retriever(index, Tiny(), kind)
        assert retriever is stub and tried[-1] == DEFAULT_BASE == ("mpnet", "nomic")
        assert line == "Searching with the recipe of tiny-ask (fine-tuned mpnet + nomic bases, fitted weights)."
    # without the default's models cached, mpnet's recipe (the default before) comes next
    monkeypatch.setattr(choice, "_cached_recipe", lambda ds, ix, base: stub if base == "mpnet" else None)
    assert ask_retriever(index, Tiny())[1] == \
        "Searching with the recipe of tiny-ask (fine-tuned mpnet base, fitted weights)."


@pytest.mark.parametrize("base", [DEFAULT_BASE, "minilm"])
def test_the_weights_looked_up_are_those_tuned_pipeline_uses(index, tmp_path, monkeypatch, base):
    """The look-up asks for the fitted weights without fitting (fitted_weights(fit=False)); the key it looks under
    must be tuned_pipeline's."""
    monkeypatch.setattr(bases, "fine_tuned_base", lambda dataset, model="minilm", **kw: str(tmp_path / model))
    keys = []
    real = weights.weights_path

    def spy(*a, **k):  # the keys looked under (not the old repr-based ones checked for a fit to migrate)
        path = real(*a, **k)
        if not k.get("legacy"):
            keys.append(path)
        return path

    monkeypatch.setattr(weights, "weights_path", spy)
    assert choice._cached_recipe(Tiny(), index, base) is None  # no weights there: not the recipe
    with pytest.raises(ptt.ModelUnavailableError, match="not fitted and train=False fits nothing"):
        ptt.tuned_pipeline(Tiny(), index, base=base, train=False, verbose=False)
    assert len(keys) == 2 and keys[0] == keys[1]


def test_the_command_says_which_retriever_it_uses(index, no_training, monkeypatch, capsys):
    monkeypatch.setattr("builtins.input", lambda prompt="": "q")
    assert main(["ask", "--index", str(index.path), "--request", REQUEST, "--turns", "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Searching with dense retrieval (MiniLM, not fine-tuned): ")
    assert main(["ask", "--index", str(index.path), "--request", REQUEST, "--retriever", "bm25"]) == 0
    assert capsys.readouterr().out.startswith("Searching with BM25 (--retriever bm25).")
    assert main(["ask", "--index", str(index.path), "--request", REQUEST, "--retriever", "recipe"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "ask never trains" in err


def test_a_cached_recipe_is_built_from_its_weights_and_searches(index, no_training, tmp_path, monkeypatch):
    """MiniLM stands in for the fine-tuned base, and weights are saved where the recipe keeps them: ask builds the
    recipe from them (fitting nothing) and it ranks the lighthouse first."""
    from pyterrier_tot.models import resolve_model
    from pyterrier_tot.models.fingerprint import configs, record_configs

    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path / "cache"))
    folder = resolve_model(None)
    monkeypatch.setattr(bases, "fine_tuned_base", lambda dataset, model="minilm", **kw: folder
                        if model == "minilm" else None)
    fine, helpers = choice._recipe_models(Tiny(), index, "minilm")
    extra = recipe.recipe_priors(index, "minilm", fine) or None
    path = recipe.weights_path(Tiny.name, index, fine, recipe.TUNING_QUERIES, recipe.TUNING_SEED, recipe.BASE_K,
                                recipe.EXPERT_K, extra, recipe.FIT_BAGS, helpers or None,
                                recipe.text_fingerprint(recipe.tuning_data(Tiny())[0]), "minmax")
    dp = recipe.build_pipeline(index, fine, extra_experts=extra, depth=None, helpers=helpers or None)
    record_configs(dp.fuser.save(path), configs({**fine, **helpers}))
    retriever, line = ask_retriever(index, Tiny())
    assert line == "Searching with the recipe of tiny-ask (fine-tuned minilm base, fitted weights)."
    assert type(retriever).__name__ == "DecompositionPipeline"
    res = retriever(pd.DataFrame({"qid": ["q"], "query": [REQUEST]}))
    assert res.sort_values("rank")["docno"].iloc[0] == "b5"
