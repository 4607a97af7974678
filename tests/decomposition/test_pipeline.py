"""decomposition_pipeline: stages exposed, candidates = base top-k plus expert retrievals, fusion, ablation."""
import pandas as pd
import pyterrier as pt
import pytest

from pyterrier_tot.decomposition.date_expert import DateExpert
from pyterrier_tot.decomposition.field_expert import FieldExpert, base_expert
from pyterrier_tot.decomposition.pipeline import (
    CandidateUnion,
    ClueLookup,
    DecompositionPipeline,
    decomposition_pipeline,
)
from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser
from pyterrier_tot.index import BookIndex


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from tests.helpers.books import TINY_BOOKS
    return BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path_factory.mktemp("pipe_index"))


@pytest.fixture
def topics():
    return pd.DataFrame({"qid": ["q1", "q2"],
                         "query": ["dragon moon village", "ghost keeper climbs the stairs at night"]})


@pytest.fixture
def clue_frame():
    return pd.DataFrame({"qid": ["q1", "q2"], "clue_title": ["Spaceship Nine", None],
                         "clue_plot": [None, "ghost in a lighthouse"], "clue_year": [2010, None]})


def bm25_experts(index):
    return {"base": base_expert(index, "bm25"), "title": FieldExpert(index, "title", "bm25"),
            "plot": FieldExpert(index, "plot", "bm25"), "date": DateExpert(index)}


def test_stages_and_candidates(index, topics, clue_frame):
    dp = decomposition_pipeline(index, ClueLookup(clue_frame), experts=bm25_experts(index), k=1, expert_k=1)
    assert isinstance(dp, DecompositionPipeline)
    assert isinstance(dp.candidates, CandidateUnion) and isinstance(dp.fuser, WeightedFuser)
    assert list(dp.experts) == ["base", "title", "plot", "date"] and dp.fuser.names == list(dp.experts)
    assert isinstance(dp.pipeline, pt.Transformer)
    cands = (dp.decomposer >> dp.candidates)(topics)
    got = set(zip(cands.qid, cands.docno))
    assert ("q1", "b2") in got          # base retriever top-1
    assert ("q1", "b4") in got          # only the title expert finds Spaceship Nine
    assert ("q2", "b5") in got
    out = dp(topics)
    assert {"qid", "docno", "score", "rank", "query", "clue_title"} <= set(out.columns)
    assert out["query"].tolist().count("dragon moon village") == (out.qid == "q1").sum()
    # date expert: clue_year 2010 rules out nothing among b2 (2004) / b4 (2012) except b4
    feats = dp.fuser.features(cands).set_index(["qid", "docno"])
    assert feats.loc[("q1", "b4"), "date"] == 0.0 and feats.loc[("q1", "b2"), "date"] == 1.0


def test_weights_dict_json_and_ablation(index, topics, clue_frame, tmp_path):
    experts = bm25_experts(index)
    dp = decomposition_pipeline(index, ClueLookup(clue_frame), experts=experts, weights={"base": 1.0, "title": 5.0},
                                k=1, expert_k=1)
    assert dp.fuser.weights.tolist() == [1.0, 5.0, 0.0, 0.0]
    top = dp(topics)
    assert top[(top.qid == "q1") & (top["rank"] == 0)]["docno"].iloc[0] == "b4"  # title weight dominates
    no_title = dp.without("title")
    assert "title" not in no_title.experts and no_title.fuser.names == ["base", "plot", "date"]
    top2 = no_title(topics)
    assert top2[(top2.qid == "q1") & (top2["rank"] == 0)]["docno"].iloc[0] == "b2"
    path = dp.fuser.save(tmp_path / "weights.json")
    dp2 = decomposition_pipeline(index, ClueLookup(clue_frame), experts=experts, weights=str(path), k=1, expert_k=1)
    assert dp2.fuser.weights.tolist() == [1.0, 5.0, 0.0, 0.0]
    with pytest.raises(KeyError, match="cover"):
        decomposition_pipeline(index, None, experts=experts, weights={"cover": 1.0})
    with pytest.raises(KeyError, match="nope"):
        dp.without("nope")


def test_empty_topics_and_experiment(index, topics, clue_frame):
    dp = decomposition_pipeline(index, ClueLookup(clue_frame), experts=bm25_experts(index), k=3)
    empty = dp(topics.iloc[:0])
    assert len(empty) == 0 and {"qid", "docno", "score"} <= set(empty.columns)
    qrels = pd.DataFrame({"qid": ["q1", "q2"], "docno": ["b2", "b5"], "label": [1, 1]})
    from ir_measures import R
    res = pt.Experiment([dp], topics, qrels, [R @ 5], names=["fused"])
    assert res.iloc[0]["R@5"] == 1.0


def test_clue_lookup_missing_qids(clue_frame):
    q = pd.DataFrame({"qid": ["q1", "zz"], "query": ["a", "b"]})
    with pytest.warns(UserWarning, match="no clues"):
        out = ClueLookup(clue_frame)(q)
    assert out.loc[0, "clue_title"] == "Spaceship Nine"
    assert out.loc[1, "clue_title"] is None or pd.isna(out.loc[1, "clue_title"])
    assert "clue_genre" in out.columns


def test_default_experts_dense(index, topics):
    dp = decomposition_pipeline(index, ClueLookup(pd.DataFrame({"qid": ["q1"], "clue_title": ["red moon"]})), k=3,
                                expert_k=2)
    assert list(dp.experts) == ["base", "bm25", "title", "plot", "date"]
    with pytest.warns(UserWarning):
        out = dp(topics)
    assert out[(out.qid == "q1") & (out["rank"] == 0)]["docno"].iloc[0] == "b2"


def test_clues_kept_with_their_query_text_are_never_read_for_another_text(topics, clue_frame):
    """A clue frame that keeps the request text (as LLM clue caches do) is checked against the queries it is read
    for: the same qid with another text (another data set, another cleaning) is refused, naming the qid."""
    kept = clue_frame.merge(topics[["qid", "query"]], on="qid")
    out = ClueLookup(kept)(topics)
    assert out.set_index("qid").loc["q1", "clue_title"] == "Spaceship Nine"
    other = topics.assign(query=["a different request about whales"] + list(topics["query"].iloc[1:]))
    with pytest.raises(ValueError, match=r"clues of 1 qid\(s\), e.g. \['q1'\]"):
        ClueLookup(kept)(other)
    assert len(ClueLookup(clue_frame)(other)) == len(other)  # no texts kept: nothing to compare
    # after a rewriter (query_0 keeps the original) the clues saved with the rewritten text are read back
    import pyterrier as pt

    rewritten = pt.model.push_queries(topics.copy(), inplace=False).assign(query=lambda d: d["query_0"] + " book")
    saved = clue_frame.merge(rewritten[["qid", "query"]], on="qid")
    assert ClueLookup(saved)(rewritten).set_index("qid").loc["q1", "clue_title"] == "Spaceship Nine"
