"""Every public transformer tells ``pt.inspect`` the truth, in every mode.

For each mode of each public transformer (a class in ``pyterrier_tot.__all__`` that subclasses
``pt.Transformer``, or a public function / method whose return annotation is one) this checks that:

- ``pt.inspect.transformer_inputs`` declares a column set that the tiny input of that mode satisfies;
- dropping any declared column (one no other declared mode can do without) raises
  ``pt.validate.InputValidationError``;
- ``pt.inspect.transformer_outputs`` (which runs the stage on an empty frame) gives the columns of a real call.

A new public stage fails :func:`test_every_public_transformer_has_a_case` until it has a case here.
"""
import inspect
import json
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional

import pandas as pd
import pyterrier as pt
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest import TINY_BOOKS  # noqa: E402
from openai_stub import OpenAIStub  # noqa: E402

import pyterrier_tot as ptt  # noqa: E402

#: Public callables returning transformers whose annotation does not say so (none, or a Union with a tuple).
UNANNOTATED = {"load_biencoder", "rm3_pipeline"}


@dataclass
class Case:
    name: str                                   # public name (``Class``, ``function`` or ``Class.method``)
    mode: str
    build: Callable[["Env"], pt.Transformer]
    inp: Callable[["Env"], pd.DataFrame]
    needs: Optional[str] = None                 # "terrier" or "covers": skipped when unavailable
    marks: List = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.name}[{self.mode}]"


# -- tiny inputs ----------------------------------------------------------------------------------------------
CLUES = {"clue_title": ["red moon dragons", None], "clue_author": [None, "Fay Lorne"],
         "clue_date": ["around 2005", None], "clue_cover": ["a dragon on a red moon", None],
         "clue_genre": ["fantasy", "horror"], "clue_plot": ["a blacksmith befriends a dragon", "a ghost keeper"],
         "clue_year": pd.array([2005, pd.NA], dtype="Int64")}


def queries(env=None) -> pd.DataFrame:
    return pd.DataFrame({"qid": ["q1", "q2"],
                         "query": ["I think it was about a dragon and a blacksmith, not a sequel",
                                   "maybe a ghost in a lighthouse, no romance"]})


def clue_queries(env=None) -> pd.DataFrame:
    return queries().assign(**CLUES)


def results(env=None) -> pd.DataFrame:
    res = clue_queries().merge(pd.DataFrame({"docno": ["b2", "b5", "b1"], "score": [3.0, 2.0, 1.0]}), how="cross")
    return pt.model.add_ranks(res)


def results_with_text(env=None) -> pd.DataFrame:
    books = pd.DataFrame(TINY_BOOKS)[["docno", "title", "text", "year"]]
    return results().merge(books, on="docno")


# -- environment: one tiny index, one stub LLM, one tiny CLIP cover index -----------------------------------------
def responder(messages):
    return json.dumps({"title": "Dragons of the Red Moon", "author": "N/A", "date": "around 2005", "cover": "N/A",
                       "genre": "fantasy", "plot": "a blacksmith befriends a dragon"})


class Env:
    def __init__(self, tmp: Path, llm):
        self.tmp = tmp
        self.books = pd.DataFrame(TINY_BOOKS)
        self.index = ptt.BookIndex(self.books, path=tmp / "index")
        self.llm = llm
        self._covers = None

    def bm25_experts(self):
        return {"base": ptt.base_expert(self.index, "bm25"), "title": ptt.FieldExpert(self.index, "title", "bm25"),
                "date": ptt.DateExpert(self.index)}

    def covers(self):
        if self._covers is None:
            from synthetic_covers import make_books, write_covers

            from pyterrier_tot.covers import ClipModel, CoverIndex

            model = ClipModel.from_config(seed=0)
            made = write_covers(make_books(len(TINY_BOOKS), seed=3, size=48), self.tmp / "covers")
            docs = [{"docno": b["docno"], "cover": m["cover"]} for b, m in zip(TINY_BOOKS, made)]
            index = CoverIndex(self.tmp / "cover-index").build(docs, model, batch_size=8, verbose=False)
            self._covers = (index, model)
        return self._covers


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("inspect")
    with OpenAIStub(responder) as stub:
        llm = ptt.LLM(model="stub", base_url=stub.base_url, api_key="sk-test", cache=tmp / "llm.sqlite3",
                      verbose=False, concurrency=2)
        yield Env(tmp, llm)


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
# ``tests/cases_<family>.py``: a module defining ``CASES`` (a list of :class:`Case`) and ``STAGES`` (a dict).
EXTRA_STAGES: dict = {}
for _path in sorted(Path(__file__).parent.glob("cases_*.py")):
    _module = __import__(_path.stem)
    CASES += _module.CASES
    EXTRA_STAGES.update(getattr(_module, "STAGES", {}))


def _returns_transformer(fn) -> bool:
    try:
        ret = typing.get_type_hints(fn).get("return")
    except Exception:
        return False
    return inspect.isclass(ret) and issubclass(ret, pt.Transformer)


def public_transformer_names() -> set:
    names = set(UNANNOTATED)
    for name in ptt.__all__:
        obj = getattr(ptt, name)
        if inspect.isclass(obj):
            if issubclass(obj, pt.Transformer):
                names.add(name)
                continue
            for attr, member in vars(obj).items():
                if not attr.startswith("_") and inspect.isfunction(member) and _returns_transformer(member):
                    names.add(f"{name}.{attr}")
        elif inspect.isfunction(obj) and _returns_transformer(obj):
            names.add(name)
    return names


def test_every_public_transformer_has_a_case():
    missing = public_transformer_names() - {c.name for c in CASES}
    assert not missing, f"public transformers without a case in tests/test_inspect.py: {sorted(missing)}"


def _available(needs: Optional[str]) -> None:
    if needs == "terrier" and not ptt.terrier_available():
        pytest.skip(f"RM3 needs Terrier: {ptt.terrier_status()[1]}")
    if needs == "covers":
        pytest.importorskip("open_clip")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_inspect_tells_the_truth(case, env):
    _available(case.needs)
    t = case.build(env)
    inp = case.inp(env)
    cols = set(inp.columns)

    modes = pt.inspect.transformer_inputs(t)
    accepted = [m for m in modes if set(m) <= cols]
    assert accepted, f"{t!r}: declared inputs {modes} do not accept the columns {sorted(cols)}"

    # a column is required when no declared mode can do without it (the widest accepted mode is the one taken)
    required = [c for c in max(accepted, key=len) if not any(set(m) <= cols - {c} for m in modes)]
    assert required, f"{t!r}: no declared column is required ({modes})"
    for c in required:
        with pytest.raises(pt.validate.InputValidationError):
            t(inp.drop(columns=[c]))

    real = t(inp)
    declared = pt.inspect.transformer_outputs(t, list(inp.columns))
    assert set(declared) == set(real.columns), (
        f"{t!r}: inspect says {sorted(declared)}, a real call gives {sorted(real.columns)}")


REWRITERS = [c for c in CASES if c.name in ("HedgeRemover", "LLMQueryRewriter", "HyDE", "ClueConcatenator")]


@pytest.mark.parametrize("case", REWRITERS, ids=[c.id for c in REWRITERS])
def test_rewriters_keep_the_old_query(case, env):
    inp = case.inp(env)
    out = case.build(env)(inp)
    assert out["query_0"].tolist() == inp["query"].tolist()
    assert out["query"].tolist() != inp["query"].tolist()
