"""The LambdaMART fuser: learns an interaction a weighted sum cannot express, saves lightgbm's text model as an
artifact and loads it back to the same scores; composes after a ** feature union or runs its experts."""
import json

import numpy as np
import pandas as pd
import pytest

from pyterrier_tot.decomposition.learned_fuser import LearnedFuser, LearnedFuserModel
from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser
from pyterrier_tot.errors import BadInputError


def synthetic(n_queries, seed):
    """Feature ``a`` finds the book when the query has a title clue, feature ``b`` when it has none."""
    rng = np.random.default_rng(seed)
    rows, qrels = [], []
    for q in range(n_queries):
        qid, titled = f"q{seed}-{q}", q % 2 == 0
        gold = int(rng.integers(10))
        for d in range(10):
            a, b = rng.random(), rng.random()
            if d == gold:
                a, b = (1.5, rng.random()) if titled else (rng.random(), 1.5)
            rows.append({"qid": qid, "query": "some book", "docno": f"d{d}", "features": np.array([a, b]),
                         "score": 0.0, "clue_title": "a title" if titled else None})
        qrels.append({"qid": qid, "docno": f"d{gold}", "label": 1})
    return pd.DataFrame(rows), pd.DataFrame(qrels)


def r_at_1(ranked, qrels):
    top = ranked[ranked["rank"] == 0][["qid", "docno"]]
    return len(top.merge(qrels, on=["qid", "docno"])) / qrels["qid"].nunique()


@pytest.fixture(scope="module")
def fitted():
    train, tqrels = synthetic(60, 0)
    return LearnedFuser(names=["a", "b"], params={"min_child_samples": 5}).fit(train, tqrels)


def test_learns_the_interaction(fitted):
    test, qrels = synthetic(30, 1)
    assert "has_title_clue" in fitted.feature_names and fitted.fit_info["n_queries"] == 60
    assert r_at_1(fitted(test), qrels) >= 0.9
    # one weight per feature cannot follow the clue: the best equal-weight sum is far behind
    assert r_at_1(WeightedFuser(weights=[1.0, 1.0], names=["a", "b"])(test), qrels) < 0.8


def test_save_load_same_scores(fitted, tmp_path):
    test, _ = synthetic(5, 2)
    path = fitted.save(tmp_path / "lf")
    meta = json.loads((path / "pt_meta.json").read_text())
    assert meta["type"] == "learned_fuser" and meta["format"] == "lightgbm"
    assert (path / "lightgbm.txt").read_text().startswith("tree")           # lightgbm's text format, no pickle
    again = LearnedFuserModel(path).fuser()
    np.testing.assert_allclose(again(test).sort_values(["qid", "docno"])["score"],
                               fitted(test).sort_values(["qid", "docno"])["score"])
    assert repr(again) == f"LearnedFuser.load({str(path)!r})"  # a saved fuser prints as the call that loads it
    assert repr(fitted).startswith("LearnedFuser(names=[") and repr(fitted).endswith(" features>)")


def test_untrained_and_empty():
    fuser = LearnedFuser(names=["a", "b"])
    test, _ = synthetic(2, 3)
    assert len(fuser(test.head(0))) == 0
    with pytest.raises(BadInputError, match="not trained"):
        fuser(test)
    with pytest.raises(ValueError, match="names"):
        LearnedFuser()


def test_with_experts_on_a_tiny_index(tmp_path):
    import pyterrier_tot as ptt
    from pyterrier_tot.decomposition.field_expert import base_expert
    from tests.helpers.books import TINY_BOOKS

    index = ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path / "idx")
    books = pd.DataFrame(TINY_BOOKS)
    words = books["text"].str.split().str[:6].str.join(" ")
    topics = pd.DataFrame({"qid": [f"t{i}" for i in range(6)], "query": words})
    qrels = pd.DataFrame({"qid": topics["qid"], "docno": books["docno"], "label": 1})
    cands = index.bm25(num_results=6)(topics)
    fuser = LearnedFuser([base_expert(index, "bm25")], names=["bm25"], negation=ptt.NegationPenalty(index),
                         params={"min_child_samples": 1, "n_estimators": 20}).fit(cands, qrels)
    assert {"bm25", "bm25:rank", "bm25:present", "negation_hit", "candidate_rank"} <= set(fuser.feature_names)
    out = fuser(cands)
    assert len(out) == len(cands) and out.groupby("qid")["rank"].min().eq(0).all()


def test_cross_validation_picks_from_the_grid():
    cands, qrels = synthetic(40, 4)
    fuser = LearnedFuser(names=["a", "b"], params={"min_child_samples": 5})
    feats = fuser.features(cands)
    grid = [{"n_estimators": 2, "num_leaves": 2}, {"n_estimators": 60}]
    best, table = fuser.cross_validate(feats, qrels, grid, folds=4)
    assert len(table) == 2 and best in grid and table["R@5"].between(0, 1).all()
    assert best == {"n_estimators": 60}          # two stumps cannot learn the clue interaction
