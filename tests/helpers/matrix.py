"""The cases of the inspect and bad-input matrices (``tests/conventions/test_inspect.py``,
``tests/conventions/test_bad_inputs.py``): every mode of every public transformer with its tiny input, the
families' own cases from ``tests/helpers/cases_<family>.py`` (the ``env`` fixture they are built in is in
``tests/conventions/conftest.py``)."""
import importlib
from pathlib import Path
from typing import Optional

import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_tot as ptt
from tests.helpers.matrix_inputs import Case, clue_queries, queries, results, results_with_text


def _rm3(env):
    return ptt.rm3_pipeline(env.books, path=str(env.tmp / "terrier"))


def _of(cls, obj):
    assert isinstance(obj, cls), f"expected a {cls.__name__}, got {type(obj).__name__}"
    return obj


def _saved_fuser(env):
    experts = list(env.bm25_experts().values())
    path = env.tmp / "fuser-weights"
    if not path.exists():
        ptt.WeightedFuser(experts, weights=[1.0] * len(experts)).save(path)
    return pt.Artifact.load(path).fuser(experts)


class _TinyTrainSet:
    """A dataset-shaped object for the recipe: its training queries are the tiny corpus's own queries."""
    name = "tiny-inspect"

    def get_topics(self, split):
        return pd.DataFrame({"qid": ["t1", "t2", "t3"], "query": ["a dragon and a red moon", "kittens nap all day",
                                                                  "a ghost keeper in a lighthouse"]})

    def get_qrels(self, split):
        return pd.DataFrame({"qid": ["t1", "t2", "t3"], "docno": ["b2", "b1", "b5"], "label": [1, 1, 1]})


def _tuned(env):
    return ptt.tuned_pipeline(_TinyTrainSet(), env.index, fine_tuned=False, k=3, expert_k=2, verbose=False)


def _cover_ranker(env):
    index, model = env.covers()
    return ptt.CoverRanker(index, model, num_results=3)


CASES = [
    Case("Normalise", "score", lambda e: ptt.Normalise(), results),
    Case("HedgeRemover", "rewrite", lambda e: ptt.HedgeRemover(count=True), queries),
    Case("NegationPenalty", "index", lambda e: ptt.NegationPenalty(index=e.index), results),
    Case("NegationPenalty", "columns", lambda e: ptt.NegationPenalty(mode="phrase"), results_with_text),
    Case("LLMQueryRewriter", "rewrite", lambda e: ptt.LLMQueryRewriter(e.llm), queries),
    Case("HyDE", "rewrite", lambda e: ptt.HyDE(e.llm, combine="append"), queries),
    Case("ClueConcatenator", "rewrite", lambda e: ptt.ClueConcatenator(), clue_queries),
    Case("rm3_pipeline", "retrieve", _rm3, queries, needs="terrier"),
    Case("ClueDecomposer", "joint", lambda e: ptt.ClueDecomposer(e.llm, "extractive", "joint"), queries),
    Case("ClueDecomposer", "per_field", lambda e: ptt.ClueDecomposer(e.llm, "predictive", reference_year=2020),
         queries),
    Case("RuleClueExtractor", "extract", lambda e: ptt.RuleClueExtractor(), queries),
    Case("FieldExpert", "retrieve", lambda e: ptt.FieldExpert(e.index, "title", "dense"), clue_queries),
    Case("FieldExpert", "score", lambda e: ptt.FieldExpert(e.index, "title", "dense"), results),
    Case("FieldExpert", "retrieve-bm25", lambda e: ptt.FieldExpert(e.index, "plot", "bm25"), clue_queries),
    Case("FieldExpert", "score-bm25", lambda e: ptt.FieldExpert(e.index, "plot", "bm25"), results),
    Case("base_expert", "retrieve", lambda e: ptt.base_expert(e.index, "bm25"), queries),
    Case("base_expert", "score", lambda e: ptt.base_expert(e.index, "bm25"), results),
    Case("DateExpert", "index", lambda e: ptt.DateExpert(e.index), results),
    Case("DateExpert", "year-column", lambda e: ptt.DateExpert(soft=True), results_with_text),
    Case("DensityPrior", "score", lambda e: ptt.DensityPrior(e.index, k=2), results),
    Case("WeightedFuser", "score", lambda e: ptt.WeightedFuser(list(e.bm25_experts().values())), results),
    Case("ClueLookup", "lookup", lambda e: ptt.ClueLookup(clue_queries().drop(columns="query")), queries),
    Case("CandidateUnion", "retrieve", lambda e: ptt.CandidateUnion(
        ptt.base_expert(e.index, "bm25"), [ptt.FieldExpert(e.index, "title", "bm25")], k=3, expert_k=2),
        clue_queries),
    Case("decomposition_pipeline", "default-experts",
         lambda e: ptt.decomposition_pipeline(e.index, ptt.RuleClueExtractor(), k=3, expert_k=2), queries),
    Case("DecompositionPipeline", "clues-given",
         lambda e: ptt.decomposition_pipeline(e.index, None, experts=e.bm25_experts(), k=3, expert_k=2),
         clue_queries),
    Case("CoverRanker", "retrieve", _cover_ranker, clue_queries, needs="covers"),
    Case("CoverRanker", "score", _cover_ranker, results, needs="covers"),
    Case("CoverIndex.ranker", "retrieve", lambda e: e.covers()[0].ranker(e.covers()[1], num_results=3),
         clue_queries, needs="covers"),
    Case("DenseReranker", "index", lambda e: ptt.DenseReranker(e.index, k=2), results),
    Case("DenseReranker", "text-column", lambda e: ptt.DenseReranker(k=2, stored=False), results_with_text),
    Case("BookIndex.bm25", "retrieve", lambda e: e.index.bm25(num_results=3), queries),
    Case("BookIndex.dense", "retrieve", lambda e: e.index.dense(num_results=3), queries),
    Case("BookIndex.dense_scorer", "score", lambda e: e.index.dense_scorer(), results),
    Case("BookIndex.bm25_scorer", "score", lambda e: e.index.bm25_scorer(), results),
    Case("linear_fusion", "retrieve",
         lambda e: ptt.linear_fusion(e.index.bm25(num_results=3), e.index.dense(num_results=3)), queries),
    Case("LinearFusion", "score",
         lambda e: ptt.LinearFusion(e.index.bm25_scorer(), e.index.dense_scorer(), normalise="none"), results),
    Case("BookIndex.text_loader", "load", lambda e: e.index.text_loader(), results),
    Case("load_biencoder", "query-encoder", lambda e: ptt.load_biencoder(), queries),
    # the classes behind the BookIndex methods, reached the way users get them
    Case("SafeRetriever", "bm25", lambda e: _of(ptt.SafeRetriever, e.index.bm25(num_results=3)), queries),
    Case("DenseRetriever", "inner", lambda e: _of(ptt.DenseRetriever, e.index.dense(num_results=3).retriever),
         queries),
    Case("DenseScorer", "score", lambda e: _of(ptt.DenseScorer, e.index.dense_scorer()), results),
    Case("BM25Scorer", "score", lambda e: _of(ptt.BM25Scorer, e.index.bm25_scorer()), results),
    Case("TextLoader", "load", lambda e: _of(ptt.TextLoader, e.index.text_loader()), results),
    Case("FuserWeights.fuser", "score", lambda e: _saved_fuser(e), results),
    Case("tuned_pipeline", "zero-shot-base", lambda e: _tuned(e), queries),
    Case("TitleNamer", "retrieve", lambda e: ptt.TitleNamer(e.llm, e.index, num_titles=3), queries),
    Case("TitleNamer", "score", lambda e: ptt.TitleNamer(e.llm, e.index, num_titles=3), results),
    Case("ListwiseReranker", "index",
         lambda e: ptt.ListwiseReranker(e.llm, e.index, k=2, window=2, step=1), results),
    Case("ListwiseReranker", "text-column", lambda e: ptt.ListwiseReranker(e.llm, k=2, window=2, step=1),
         results_with_text),
    Case("PointwiseLLMReranker", "index", lambda e: ptt.PointwiseLLMReranker(e.llm, e.index, k=2), results),
    Case("PointwiseLLMReranker", "text-column", lambda e: ptt.PointwiseLLMReranker(e.llm, k=2), results_with_text),
]


# Families in their own subpackages keep their cases (and their bad-input ``STAGES`` rows) in
# ``tests/helpers/cases_<family>.py``: a module defining ``CASES`` (a list of :class:`Case`) and ``STAGES`` (a dict).
EXTRA_STAGES: dict = {}
for _path in sorted(Path(__file__).parent.glob("cases_*.py")):
    _module = importlib.import_module(f"{__package__}.{_path.stem}")
    CASES += _module.CASES
    EXTRA_STAGES.update(getattr(_module, "STAGES", {}))


def skip_unavailable(needs: Optional[str]) -> None:
    if needs == "terrier" and not ptt.terrier_available():
        pytest.skip(f"RM3 needs Terrier: {ptt.terrier_status()[1]}")
    if needs == "covers":
        pytest.importorskip("open_clip")
