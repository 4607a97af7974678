"""Issue 22.3, composing stages the PyTerrier way: a BM25 scorer for ``**`` and ``+``, linear fusion on one scale,
measure names as the table spells them, fuser weights matched to experts by name, and ``without()`` that drops an
expert's candidates with a truthful repr. Each test failed on 0.2's behaviour."""
import ir_measures
import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_tot as ptt
from pyterrier_tot.decomposition._fast_eval import FastEvaluator
from pyterrier_tot.decomposition.date_expert import DateExpert
from pyterrier_tot.decomposition.field_expert import FieldExpert, base_expert
from pyterrier_tot.decomposition.pipeline import ClueLookup, decomposition_pipeline
from pyterrier_tot.decomposition.weighted_fuser import FuserWeights, WeightedFuser


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from tests.helpers.books import TINY_BOOKS
    return ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path_factory.mktemp("compose_index"))


TOPICS = pd.DataFrame({"qid": ["q1", "q2", "q3"],
                       "query": ["a blacksmith and a dragon fly to the red moon",
                                 "ghost keeper climbs the stairs of a lighthouse at night",
                                 "kittens play all day while their brother naps"]})
QRELS = pd.DataFrame({"qid": ["q1", "q2", "q3"], "docno": ["b2", "b5", "b1"], "label": [1, 1, 1]})


def test_bm25_scorer_in_a_feature_union_and_a_sum(index):
    bm25, dense = index.bm25(), index.dense()
    scorer = index.bm25_scorer()
    cands = (dense % 6)(TOPICS)
    # every candidate row is kept, in order, and scored exactly as BM25 retrieval scores it (0 when no term matches)
    scored = scorer(cands)
    assert len(scored) == len(cands) and list(zip(scored.qid, scored.docno)) == list(zip(cands.qid, cands.docno))
    retrieved = bm25(TOPICS).set_index(["qid", "docno"])["score"]
    for q, d, s in zip(scored.qid, scored.docno, scored.score):
        assert s == pytest.approx(retrieved.get((q, d), 0.0))
    feats = (dense % 6 >> (scorer ** index.dense_scorer()))(TOPICS)
    assert len(feats) == len(cands) and all(len(f) == 2 for f in feats["features"])
    assert [sorted(m) for m in pt.inspect.transformer_inputs(scorer)] == [["docno", "qid", "query"]]
    empty = scorer(cands.head(0))
    assert list(empty.columns)[-2:] == ["score", "rank"] and len(empty) == 0
    with pytest.raises(ptt.UnknownDocnoError, match="nope"):
        scorer(cands.head(1).assign(docno="nope"))
    assert ".bm25_scorer(" in repr(scorer) and "depth=6" in repr(scorer)


def test_linear_fusion_puts_systems_on_one_scale(index):
    bm25, dense = index.bm25() % 6, index.dense() % 6
    raw = (0.5 * bm25 + 0.5 * dense)(TOPICS)
    fused = ptt.linear_fusion(bm25, dense, weights=[0.5, 0.5])(TOPICS)
    # raw scores: BM25 dominates the sum (cosines are < 1); on one scale, both count
    b = bm25(TOPICS).set_index(["qid", "docno"])["score"]
    assert raw.score.max() > 1.5 and fused.score.max() <= 1.0 + 1e-9
    top_raw = raw.sort_values(["qid", "rank"]).groupby("qid")["docno"].first()
    top_bm25 = b.reset_index().sort_values(["qid", "score"], ascending=[True, False]).groupby("qid")["docno"].first()
    assert (top_raw == top_bm25).all()
    n = ptt.Normalise()
    expected = (0.5 * (bm25 >> n) + 0.5 * (dense >> n))(TOPICS).set_index(["qid", "docno"])["score"]
    assert np.allclose(fused.set_index(["qid", "docno"])["score"].loc[expected.index], expected)
    rrf = ptt.linear_fusion(bm25, dense, normalise="rr")(TOPICS)
    assert rrf.score.max() <= 2 / 61 + 1e-12
    with pytest.raises(ValueError, match="2 systems"):
        ptt.linear_fusion(bm25, dense, weights=[1.0])
    with pytest.raises(TypeError, match="position"):
        ptt.linear_fusion(bm25, "dense")
    with pytest.raises(ValueError, match="normalisation"):
        ptt.linear_fusion(bm25, dense, normalise="softmax")


def test_measures_by_the_names_of_the_table_columns(index):
    table = ptt.tot_experiment([index.bm25()], TOPICS, QRELS, measures=["RR", "R@5", "nDCG@10"], names=["bm25"])
    assert {"RR", "R@5", "nDCG@10"} <= set(table.columns)
    again = ptt.tot_experiment([index.bm25()], TOPICS, QRELS, measures="RR, R@5", names=["bm25"])
    assert again.loc[0, "RR"] == table.loc[0, "RR"]
    assert ptt.parse_measures(["recip_rank"]) == [ir_measures.RR]  # trec_eval names still work
    with pytest.raises(ValueError, match="unknown measure 'Recall5'"):
        ptt.tot_experiment([index.bm25()], TOPICS, QRELS, measures=["Recall5"])
    fuser = WeightedFuser([index.bm25_scorer()], weights=[1.0])
    with pytest.raises(ValueError, match="unknown measure"):
        fuser.fit(TOPICS, QRELS, metric="Recall5", candidates=index.dense() % 6)


def test_fast_evaluator_equals_ir_measures(index):
    experts = [index.bm25_scorer(), index.dense_scorer()]
    fuser = WeightedFuser(experts, weights=[1.0, 1.0])
    feats = fuser.features((index.dense() % 6)(TOPICS))
    ev = FastEvaluator(feats, QRELS, fuser.names)
    run = fuser.fuse(feats, [0.3, 1.0])
    for m in (ir_measures.RR, ir_measures.R @ 1, ir_measures.Success @ 2, ir_measures.nDCG @ 3):
        want = ir_measures.calc_aggregate([m], QRELS.rename(columns={"qid": "query_id", "docno": "doc_id",
                                                                      "label": "relevance"}),
                                          run.rename(columns={"qid": "query_id", "docno": "doc_id"}))[m]
        assert ev.measure(np.array([0.3, 1.0]), m) == pytest.approx(want)


def test_fuser_weights_take_experts_by_name_and_check_them_at_the_entry(index, tmp_path):
    experts = {"bm25": index.bm25_scorer(), "dense": index.dense_scorer()}
    fuser = WeightedFuser(experts, weights=[0.2, 1.0])
    assert fuser.names == ["bm25", "dense"]
    path = fuser.save(tmp_path / "w")
    art = pt.Artifact.load(path)
    assert isinstance(art, FuserWeights)
    reordered = art.fuser({"dense": experts["dense"], "bm25": experts["bm25"]})  # a dict: matched by name
    assert reordered.names == ["bm25", "dense"] and reordered.experts[0] is experts["bm25"]
    out = reordered((index.dense() % 6)(TOPICS))
    assert len(out) and out["score"].notna().all()
    with pytest.raises(ValueError, match=r"lack \['dense'\]"):
        art.fuser({"bm25": experts["bm25"]})
    with pytest.raises(TypeError, match="must be a pt.Transformer"):
        art.fuser(["bm25", "dense"])  # names instead of experts: refused here, not at run time
    with pytest.raises(TypeError, match="must be a pt.Transformer"):
        WeightedFuser({"bm25": "BM25"})
    with pytest.raises(ValueError, match="numbers"):
        WeightedFuser(list(experts.values()), weights=["high", "low"])
    with pytest.raises(ValueError, match="finite"):
        WeightedFuser(list(experts.values()), weights=[1.0, float("nan")])


def test_without_drops_the_experts_candidates_and_says_so(index):
    clues = ClueLookup(pd.DataFrame({"qid": ["q1"], "clue_title": ["Spaceship Nine"], "clue_plot": [None],
                                     "clue_year": [None]}))
    experts = {"base": base_expert(index, "bm25"), "title": FieldExpert(index, "title", "bm25"),
               "plot": FieldExpert(index, "plot", "bm25"), "date": DateExpert(index)}
    dp = decomposition_pipeline(index, clues, experts=experts, k=1, expert_k=1)
    topics = TOPICS.head(1)
    assert "b4" in set((dp.decomposer >> dp.candidates)(topics).docno)  # only the title expert finds Spaceship Nine
    assert "names=['title', 'plot']" in repr(dp)
    no_title = dp.without("title")
    assert "b4" not in set((no_title.decomposer >> no_title.candidates)(topics).docno)
    assert repr(no_title.candidates).endswith("k=1, expert_k=1, names=['plot'])")
    assert "title=" not in repr(no_title)
    weights_only = dp.without("title", candidates=False)
    assert "b4" in set((weights_only.decomposer >> weights_only.candidates)(topics).docno)
    with pytest.raises(ValueError, match="no expert would be left"):
        dp.without(*experts)
    with pytest.raises(KeyError, match="candidate_experts"):
        decomposition_pipeline(index, clues, experts=experts, candidate_experts=["cover"])
    with pytest.raises(ValueError, match="positive integer"):
        decomposition_pipeline(index, clues, experts=experts, k=0)


def test_constructors_check_their_arguments_when_built(index):
    """Issue 22.3: these were accepted and failed (or silently misbehaved) only when the pipeline ran."""
    from pyterrier_tot.rerank.listwise_reranker import ListwiseReranker

    bad = {
        "DenseReranker(k='100')": lambda: ptt.DenseReranker(index, k="100"),
        "DenseReranker(index='idx')": lambda: ptt.DenseReranker("idx"),
        "FieldExpert(None)": lambda: FieldExpert(None, "title"),
        "FieldExpert(num_results=0)": lambda: FieldExpert(index, "title", num_results=0),
        "DateExpert(index=[])": lambda: DateExpert([]),
        "NegationPenalty(index='x')": lambda: ptt.NegationPenalty("x"),
        "Normalise(rr_k=-1)": lambda: ptt.Normalise("rr", rr_k=-1),
        "ClueDecomposer(None)": lambda: ptt.ClueDecomposer(None),
        "decomposition_pipeline(None)": lambda: decomposition_pipeline(None),
        "index.bm25(num_results=0)": lambda: index.bm25(num_results=0),
        "index.dense(num_results=-5)": lambda: index.dense(num_results=-5),
        "LLM(concurrency=0)": lambda: ptt.LLM(model="m", base_url="http://127.0.0.1:9/v1", concurrency=0, cache=False),
        "LLM(temperature='hot')": lambda: ptt.LLM(model="m", base_url="http://127.0.0.1:9/v1", temperature="hot",
                                                  cache=False),
        "ListwiseReranker(llm='gpt')": lambda: ListwiseReranker("gpt", index),
        "PointwiseLLMReranker(llm='gpt')": lambda: ptt.PointwiseLLMReranker("gpt", index),
    }
    for what, make in bad.items():
        with pytest.raises((ValueError, TypeError)) as e:
            make()
        assert isinstance(e.value, ptt.ToTError) or "must" in str(e.value), what
