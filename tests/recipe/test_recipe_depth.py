"""Issue 31: the fuser fitted for the whole ranking with the base as a floor, the recipe ranked to depth 1000
(the fused candidates, then the rest of the base's ranking), and the weights reachable from the pipeline."""
import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

from pyterrier_tot import recipe
from pyterrier_tot.decomposition._fast_eval import FastEvaluator
from pyterrier_tot.decomposition.pipeline import fill_to_depth
from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser
from tests.helpers.fusers import TableExpert, synthetic


def test_fill_to_depth_keeps_the_top_and_appends_the_tail():
    ranked = pt.model.add_ranks(pd.DataFrame({"qid": ["1", "1", "2"], "query": ["q one", "q one", "q two"],
                                              "docno": ["a", "b", "c"], "score": [3.0, 2.0, 0.5]}))
    tail = pd.DataFrame({"qid": ["1"] * 4 + ["2"] * 2 + ["3"], "query": ["x"] * 7,
                         "docno": ["b", "c", "d", "e", "c", "z", "q"], "score": [9, 8, 7, 6, 5, 4, 3.0]})
    out = fill_to_depth(ranked, tail, depth=4)
    one = out[out.qid == "1"].sort_values("rank")
    assert one["docno"].tolist() == ["a", "b", "c", "d"]          # the fused two first, then the tail's unseen
    assert (one["query"] == "q one").all()                        # query columns from the fused rows
    assert one["score"].is_monotonic_decreasing and one["score"].iloc[2] < 2.0
    assert out[out.qid == "2"]["docno"].tolist() == ["c", "z"]
    assert "3" not in set(out["qid"])                             # a query the fused part lacks is not invented
    assert out.groupby("qid")["rank"].apply(lambda r: r.tolist() == list(range(len(r)))).all()
    pd.testing.assert_frame_equal(fill_to_depth(ranked, tail.iloc[:0], 10), ranked)
    two = fill_to_depth(ranked, tail, depth=2)                    # q1 is full at 2; q2 gets one tail book
    assert two.groupby("qid")["docno"].apply(list).to_dict() == {"1": ["a", "b"], "2": ["c", "z"]}
    # keep=1: the fused ranking is cut after its first book, then the tail (the base) goes on in its own order
    cut = fill_to_depth(ranked, tail, depth=4, keep=1)
    assert cut.groupby("qid")["docno"].apply(list).to_dict() == {"1": ["a", "b", "c", "d"], "2": ["c", "z"]}
    assert cut[cut.qid == "1"].sort_values("rank")["score"].iloc[0] == 3.0


def test_fit_with_a_floor_never_goes_below_the_floor_on_the_fitted_queries():
    c, qrels, experts = synthetic(n_q=120, true_w=(1.0, 0.0, 0.0), seed=3)
    # a noisy "base" (e0 is the truth) and a second expert that helps some queries and hurts others
    metric = ["R@1", "R@5", "R@10", "RR"]
    f = WeightedFuser(experts, names=["base", "other", "noise"])
    f.fit(c, qrels, metric=metric, floor="base", init=[1.0, 1.0, 1.0])
    ev = FastEvaluator(f.features(c), qrels, f.names)
    parts = [recipe_measure(m) for m in metric]
    floor = ev.measures(np.array([1.0, 0, 0]), parts)
    assert (ev.measures(f.weights, parts) >= floor - 1e-12).all()
    assert f.fit_metric == "R@1,R@5,R@10,RR" and f.fit_floor == "base"
    with pytest.raises(ValueError, match="floor names unknown"):
        WeightedFuser(experts, names=["base", "other", "noise"]).fit(c, qrels, floor="nope")


def recipe_measure(name):
    from pyterrier_tot.evaluation import parse_measure
    return parse_measure(name)


def test_floor_rejects_a_step_that_trades_recall_for_the_top():
    # two queries: expert "top" puts q1's gold first but pushes q2's gold out of the top 2
    c = pd.DataFrame({"qid": ["q1"] * 3 + ["q2"] * 3, "query": ["x"] * 6, "docno": ["a", "b", "c"] * 2})
    base = c[["qid", "docno"]].assign(score=[3, 2, 1, 2, 3, 1.0])      # q1 gold b at 2nd, q2 gold a at 2nd
    top = c[["qid", "docno"]].assign(score=[0, 9, 0, 0, 0, 9.0])       # q1: b first; q2: c first
    qrels = pd.DataFrame({"qid": ["q1", "q2"], "docno": ["b", "a"], "label": [1, 1]})
    experts = [TableExpert(base, "base"), TableExpert(top, "top")]
    free = WeightedFuser(experts, names=["base", "top"], weights=[1, 0]).fit(c, qrels, metric=["R@1", "RR"])
    assert free.weights[1] > 0                                   # without a floor the fit buys q1's top
    floored = WeightedFuser(experts, names=["base", "top"], weights=[1, 0]).fit(
        c, qrels, metric=["R@1", "R@2", "RR"], floor="base")
    out = floored(c)
    assert (out[out.qid == "q2"].set_index("docno").loc["a", "rank"] <= 1)   # q2 keeps its gold in the top 2


def test_floor_metric_holds_the_floor_on_measures_outside_the_objective(tmp_path):
    # the same two queries: an objective of R@1 and MRR alone buys q1's top and loses q2's R@2; a floor held on
    # R@2 (floor_metric) refuses that step although R@2 is not part of the objective
    c = pd.DataFrame({"qid": ["q1"] * 3 + ["q2"] * 3, "query": ["x"] * 6, "docno": ["a", "b", "c"] * 2})
    base = c[["qid", "docno"]].assign(score=[3, 2, 1, 2, 3, 1.0])
    top = c[["qid", "docno"]].assign(score=[0, 9, 0, 0, 0, 9.0])
    qrels = pd.DataFrame({"qid": ["q1", "q2"], "docno": ["b", "a"], "label": [1, 1]})
    experts = [TableExpert(base, "base"), TableExpert(top, "top")]
    loose = WeightedFuser(experts, names=["base", "top"], weights=[1, 0]).fit(
        c, qrels, metric=["R@1", "RR"], floor="base")
    held = WeightedFuser(experts, names=["base", "top"], weights=[1, 0]).fit(
        c, qrels, metric=["R@1", "RR"], floor="base", floor_metric="R@1,R@2,RR")
    assert loose.weights[1] > 0 and held.weights[1] == 0
    assert held.fit_metric == "R@1,RR" and held.fit_floor_metric == "R@1,R@2,RR"
    again = WeightedFuser.load(held.save(tmp_path / "w"), experts)           # what the floor held on is saved
    assert again.fit_floor_metric == "R@1,R@2,RR"
    with pytest.raises(ValueError, match="floor_metric needs a floor"):
        WeightedFuser(experts, names=["base", "top"]).fit(c, qrels, metric="R@1", floor_metric="R@2")
    assert "R@50" in recipe.FLOOR_METRIC and set(recipe.FIT_METRIC.split(",")) <= set(recipe.FLOOR_METRIC.split(","))


def test_weights_path_and_without_keep_the_depth(tmp_path):
    c, qrels, experts = synthetic(n_q=20)
    path = WeightedFuser(experts, names=["e0", "e1", "e2"]).save(tmp_path / "fuser")
    loaded = WeightedFuser.load(path, experts)
    assert loaded.path == path and pt.Artifact.load(str(loaded.path)).weights() == {"e0": 1.0, "e1": 1.0, "e2": 1.0}


def test_recipe_pipeline_ranks_to_depth(tmp_path, monkeypatch):
    from pyterrier_tot.index import BookIndex
    from tests.helpers.books import TINY_BOOKS
    from tests.helpers.tiny_datasets import FourQueries

    monkeypatch.setenv("PYTERRIER_TOT_CACHE", str(tmp_path))
    index = BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path / "index")
    ds = FourQueries()
    topics = ds.get_topics("validation")
    shallow = recipe.tuned_pipeline(ds, index, fine_tuned=False, k=2, expert_k=1, verbose=False, depth=None)
    deep = recipe.tuned_pipeline(ds, index, fine_tuned=False, k=2, expert_k=1, verbose=False, depth=5)
    assert deep.depth == 5 and deep.tail is not None and "depth=5" in repr(deep)
    a, b = shallow(topics), deep(topics)
    assert (a.groupby("qid").size() < 5).all() and (b.groupby("qid").size() == 5).all()
    # the fused top k is unchanged: the first k rows of the deep ranking are the shallow ranking's
    for qid, part in a.groupby("qid"):
        top = b[b.qid == qid].sort_values("rank").head(2)
        assert top["docno"].tolist() == part.sort_values("rank")["docno"].head(2).tolist()
    assert deep.weights_path is not None and deep.weights_path.is_dir()
    assert pt.Artifact.load(str(deep.weights_path)).weights().keys() == set(deep.fuser.names)
    # the date expert does not act on a corpus whose books all lack a year; here they have years
    assert "date" in deep.experts
    ablated = deep.without("bm25")
    assert ablated.depth == 5 and ablated.tail is deep.tail
    assert ablated.fuser.weights.tolist() == [w for n, w in zip(deep.fuser.names, deep.fuser.weights) if n != "bm25"]
    tuning, qrels = ds.get_topics("train"), ds.get_qrels("train")
    refit = ablated.fit(tuning, qrels, metric=["R@1", "RR"], floor="dense")
    assert refit is ablated and refit.fuser.path is None and refit.fuser.fit_metric == "R@1,RR"


def test_recipe_leaves_out_the_date_expert_without_years(tmp_path):
    from pyterrier_tot.index import BookIndex
    from tests.helpers.books import TINY_BOOKS

    books = pd.DataFrame(TINY_BOOKS).assign(year=None)
    index = BookIndex(books, path=tmp_path / "noyears")
    experts, _, _ = recipe.recipe_experts(index, None)
    assert "date" not in experts
