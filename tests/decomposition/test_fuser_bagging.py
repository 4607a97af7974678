"""The fuser's weight search: the evaluator ranks only the relevant books (equal to ir_measures, ties and several
relevant books included), weighs queries for bootstrap resamples, and the bagged fit (the mean of the weights
found on resamples of the slice, kept only if it holds the floor there) is reproducible and saved."""
import ir_measures
import numpy as np
import pandas as pd
import pytest

from pyterrier_tot import recipe
from pyterrier_tot.decomposition import weighted_fuser
from pyterrier_tot.decomposition._fast_eval import FastEvaluator, bagged_weights, floor_check
from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser
from pyterrier_tot.evaluation import strict_ties
from tests.helpers.fusers import synthetic

MEASURES = [ir_measures.R @ 1, ir_measures.R @ 3, ir_measures.R @ 10, ir_measures.Success @ 2, ir_measures.RR,
            ir_measures.RR @ 3]


def tied_frame(seed=0, n_q=25, n_d=12):
    rng = np.random.default_rng(seed)
    rows = [(f"q{i}", f"d{j:02d}") for i in range(n_q) for j in range(n_d)]
    feats = pd.DataFrame(rows, columns=["qid", "docno"])
    feats["a"] = rng.integers(0, 3, len(feats)).astype(float)    # few distinct values: many ties
    feats["b"] = rng.integers(0, 2, len(feats)).astype(float)
    qrels = []
    for i in range(n_q):
        k = 1 + i % 3                                               # one, two or three relevant books
        qrels += [(f"q{i}", f"d{j:02d}", 1) for j in rng.choice(n_d, k, replace=False)]
        if i % 5 == 0:
            qrels.append((f"q{i}", "not-a-candidate", 1))           # relevant, never retrieved
    return feats.sample(frac=1, random_state=seed), pd.DataFrame(qrels, columns=["qid", "docno", "label"])


def ir_measures_values(feats, qrels, w):
    run = feats.assign(score=feats[["a", "b"]].to_numpy() @ np.asarray(w))
    run = strict_ties(run)   # ties in trec_eval's order for every measure, as tot_experiment evaluates them
    q = qrels.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})
    r = ir_measures.calc_aggregate(MEASURES, q, run.rename(columns={"qid": "query_id", "docno": "doc_id"}))
    return np.array([r[m] for m in MEASURES])


@pytest.mark.parametrize("w", [[1.0, 0.0], [0.5, 1.0], [0.0, 0.0], [1.0, 1.0]])
def test_relevant_ranks_give_ir_measures_values_with_ties_and_several_relevant(w):
    feats, qrels = tied_frame()
    ev = FastEvaluator(feats, qrels, ["a", "b"])
    assert ev.measures(np.array(w), MEASURES) == pytest.approx(ir_measures_values(feats, qrels, w))
    full = ev.ranks(np.array(w))                                    # the full ranking agrees on the relevant rows
    assert (full[ev._rel] == ev.relevant_ranks(np.array(w))).all()


def test_queries_without_judgements_are_left_out_and_zero_judged_count_as_ir_measures_does():
    feats, qrels = tied_frame(seed=4)
    unjudged = feats.assign(qid="u-" + feats["qid"].astype(str))   # the same books, queries with no qrels at all
    zero = qrels[qrels.qid == "q1"].assign(label=0)                 # q1 judged, nothing relevant: counts with 0
    qrels = pd.concat([qrels[qrels.qid != "q1"], zero])
    both = pd.concat([feats, unjudged])
    for w in ([1.0, 0.0], [0.4, 1.0]):
        ev = FastEvaluator(both, qrels, ["a", "b"])
        assert ev.measures(np.array(w), MEASURES) == pytest.approx(ir_measures_values(both, qrels, w))
        assert ev.measures(np.array(w), MEASURES) == pytest.approx(ir_measures_values(feats, qrels, w))


def test_duplicated_qrels_rows_count_once_and_a_fit_without_judged_queries_is_refused():
    feats, qrels = tied_frame(seed=5)
    doubled = pd.concat([qrels, qrels.head(7)])                      # a pair listed twice is one relevant book
    w = np.array([0.6, 1.0])
    assert FastEvaluator(feats, doubled, ["a", "b"]).measures(w, MEASURES) == \
        pytest.approx(ir_measures_values(feats, qrels, w))
    other = qrels.assign(qid=qrels["qid"].str.replace("q", "", regex=False))   # "0".."24": none matches "q0"..
    with pytest.raises(ValueError, match="no query of the candidate frame has qrels"):
        FastEvaluator(feats, other, ["a", "b"])
    frame = feats.drop(columns=["a", "b"]).assign(features=list(feats[["a", "b"]].to_numpy()))
    with pytest.raises(ValueError, match="no query of the candidate frame has qrels"):
        WeightedFuser(None, weights=[1.0, 1.0], names=["a", "b"], normalise="none").fit(frame, other, bags=3)


def test_no_relevant_candidate_and_the_sorting_path_give_the_same_values(monkeypatch):
    from pyterrier_tot.decomposition import _fast_eval

    feats, qrels = tied_frame(seed=3)
    none = FastEvaluator(feats, qrels.assign(docno="not-a-candidate"), ["a", "b"])   # no relevant book retrieved
    assert none.measures(np.array([1.0, 1.0]), MEASURES).tolist() == [0.0] * len(MEASURES)
    want = FastEvaluator(feats, qrels, ["a", "b"]).measures(np.array([0.3, 1.0]), MEASURES)
    monkeypatch.setattr(_fast_eval, "PAD_LIMIT", 0)                 # too many comparisons: the full sort is used
    assert FastEvaluator(feats, qrels, ["a", "b"]).measures(np.array([0.3, 1.0]), MEASURES) == pytest.approx(want)


def test_query_weights_equal_a_slice_with_repeated_queries():
    feats, qrels = tied_frame(seed=1)
    ev = FastEvaluator(feats, qrels, ["a", "b"])
    counts = np.random.default_rng(2).integers(0, 4, len(ev.uq)).astype(float)
    copies, crels = [], []
    for q, c in zip(ev.uq, counts):                                 # the resample written out as its own queries
        for k in range(int(c)):
            copies.append(feats[feats.qid == q].assign(qid=f"{q}#{k}"))
            crels.append(qrels[qrels.qid == q].assign(qid=f"{q}#{k}"))
    rep = FastEvaluator(pd.concat(copies), pd.concat(crels), ["a", "b"])
    w = np.array([0.7, 1.0])
    assert ev.reweighted(counts).measures(w, MEASURES) == pytest.approx(rep.measures(w, MEASURES))
    assert ev.measures(w, MEASURES) == pytest.approx(ir_measures_values(feats, qrels, w))  # the original unchanged
    with pytest.raises(ValueError, match="cannot weigh queries"):
        ev.reweighted(counts).measure(w, ir_measures.nDCG @ 5)


def test_bagged_fit_is_the_mean_of_resampled_ascents_and_holds_the_floor(tmp_path):
    c, qrels, experts = synthetic(n_q=60, true_w=(1.0, 0.4, 0.0), seed=5)
    names = ["base", "other", "noise"]
    metric, held = ["R@1", "R@5", "RR"], "R@1,R@2,R@5,RR"
    fit = lambda **kw: WeightedFuser(experts, names=names).fit(  # noqa: E731
        c, qrels, metric=metric, floor="base", floor_metric=held, init=[1.0, 1.0, 1.0], **kw)
    plain, bagged = fit(), fit(bags=6, seed=3)
    assert bagged.fit_bags == 6 and bagged.fit_bagged and plain.fit_bags == 0
    assert bagged.fit_history[-1]["bagged"] and bagged.fit_history[-1]["weights"] == bagged.weights.tolist()
    assert fit(bags=6, seed=3).weights.tolist() == bagged.weights.tolist()      # reproducible for a seed
    ev = FastEvaluator(bagged.features(c), qrels, names)
    parts = [ir_measures.parse_measure(m) for m in held.split(",")]
    floor_w = np.array([1.0, 0.0, 0.0])
    by_hand = bagged_weights(ev, np.ones(3), floor_w, parts, [ir_measures.parse_measure(m) for m in metric],
                             weighted_fuser.DEFAULT_GRID, 3, 6, 3)
    assert bagged.weights == pytest.approx(by_hand)
    assert floor_check(ev, floor_w, parts)(bagged.weights)                   # the mean holds the floor on the slice
    assert not np.allclose(bagged.weights / bagged.weights.sum(), plain.weights / plain.weights.sum())
    again = WeightedFuser.load(bagged.save(tmp_path / "w"), experts)
    assert (again.fit_bags, again.fit_bagged, again.fit_seed) == (6, True, 3)
    for bad in (-1, 0.5, True):
        with pytest.raises(ValueError, match="bags must be a whole number"):
            fit(bags=bad)
    with pytest.raises(ValueError, match="cannot be weighed"):     # refused before any ascent runs
        WeightedFuser(experts, names=names).fit(c, qrels, metric=["R@1", "nDCG@5"], bags=2)


def test_a_bagged_mean_below_the_floor_falls_back_to_the_plain_fit(monkeypatch):
    c, qrels, experts = synthetic(n_q=60, true_w=(1.0, 0.4, 0.0), seed=5)
    names = ["base", "other", "noise"]
    kw = dict(metric=["R@1", "RR"], floor="base", floor_metric="R@1,R@3,RR", init=[1.0, 1.0, 1.0])
    plain = WeightedFuser(experts, names=names).fit(c, qrels, **kw)
    monkeypatch.setattr(weighted_fuser, "bagged_weights", lambda *a, **k: np.array([0.0, 0.0, 1.0]))  # noise only
    fell = WeightedFuser(experts, names=names).fit(c, qrels, bags=4, **kw)
    assert fell.fit_bagged is False and fell.weights.tolist() == plain.weights.tolist()


def test_recipe_weights_are_bagged_under_their_own_key():
    key = lambda bags: recipe.weights_path("ds", None, None, 300, 0, 100, 50, bags=bags)  # noqa: E731
    assert recipe.FIT_BAGS > 0 and key(recipe.FIT_BAGS) != key(0)
    assert recipe.weights_path("ds", None, None, 300, 0, 100, 50) == key(recipe.FIT_BAGS)   # the default is bagged
    # the tuning queries' text is part of the key: weights fitted on differently cleaned queries are not reused
    text = lambda t: recipe.weights_path("ds", None, None, 300, 0, 100, 50, tuning_text=t)  # noqa: E731
    assert text("a") != text("b") != key(recipe.FIT_BAGS)


def test_precomputed_tuning_features_of_other_query_texts_are_refused():
    tuning = pd.DataFrame({"qid": ["1", "2"], "query": ["a ghost", "a dragon"]})
    feats = pd.DataFrame({"qid": ["1", "1", "2"], "docno": ["a", "b", "a"],
                          "query": ["a ghost", "a ghost", "a dragon\nSolved! It was Dragon Moon"]})
    with pytest.raises(ValueError, match="other texts of 1 tuning queries"):
        recipe.same_queries(feats, tuning, "fitted_weights")
    recipe.same_queries(feats.assign(query=feats["query"].str.split("\n").str[0]), tuning, "fitted_weights")
    recipe.same_queries(feats.drop(columns=["query"]), tuning, "fitted_weights")   # no text: nothing to compare
