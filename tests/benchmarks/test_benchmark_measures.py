"""The benchmarks' measures come from ir_measures (benchmarks/_common.py): a fuser's weighted sum over cached expert
scores and a run's per-query values rank equal scores as trec_eval does (docno descending), as the library's
``tot_experiment`` and ``WeightedFuser.fit`` rank them."""
import numpy as np
import pandas as pd
import pytest
from ir_measures import RR, R

from tests.helpers.scripts import load_script

common = load_script("benchmarks/_common.py")


def test_fused_measures_rank_ties_by_docno_descending_and_weigh_the_columns():
    feats = pd.DataFrame({"qid": ["1", "1", "1", "2", "2"], "docno": ["a", "b", "c", "a", "b"],
                          "x": [1.0, 1.0, 0.0, 0.0, 1.0], "y": [0.0, 0.0, 2.0, 1.0, 0.0]})
    qrels = pd.DataFrame({"qid": ["1", "2", "9"], "docno": ["a", "a", "a"], "label": [1, 1, 1]})  # 9: no candidates
    # x alone: query 1 ties a and b (b first, docno descending), query 2 ranks a last
    assert common.fused_measures(feats, qrels, ["x", "y"], [1.0, 0.0], [R @ 1, RR]).tolist() == [0.0, 0.5]
    # y alone: c leads query 1, then the tie b, a (docno descending); a leads query 2
    got = common.fused_measures(feats, qrels, ["x", "y"], np.array([0.0, 1.0]), [R @ 1, R @ 2, RR])
    assert got.tolist() == [0.5, 0.5, pytest.approx((1 / 3 + 1) / 2)]


def test_measures_per_query_reports_every_asked_query_in_order():
    run = pd.DataFrame({"qid": ["1", "1", "2"], "docno": ["a", "b", "z"], "score": [1.0, 1.0, 3.0]})
    qrels = pd.DataFrame({"qid": ["1", "2", "3"], "docno": ["a", "y", "q"], "label": [1, 1, 1]})
    got = common.measures_per_query(run, qrels, [R @ 1, RR], qids=["3", "1", "2"])
    assert list(got.index) == ["3", "1", "2"] and list(got.columns) == ["R@1", "RR"]
    assert got.loc["1"].tolist() == [0.0, 0.5] and (got.loc[["2", "3"]] == 0.0).all().all()
    assert list(common.measures_per_query(run, qrels, [RR]).index) == ["1", "2", "3"]  # those of the qrels
