"""The bad-input matrix: every public transformer × every kind of bad input gets the documented outcome.

The stages and their tiny inputs are the cases of ``tests/helpers/matrix.py`` (whose
``test_every_public_transformer_has_a_case`` makes each new public stage join this matrix too). What each cell
expects follows from two tables, rendered in ``docs/robustness.rst`` (a test below keeps the two equal):

- ``OUTCOMES``: what a kind of bad input gets from a stage, by what the stage reads;
- ``STAGES``: what each stage reads (query text, incoming score, docnos it must look up).
"""
import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot.errors import BadInputError, BadInputTypeError, NoResultsWarning, UnknownDocnoWarning  # noqa: E402
from tests.helpers.matrix import CASES, EXTRA_STAGES, skip_unavailable

DOCS = Path(__file__).resolve().parents[2] / "docs" / "robustness.rst"
UNKNOWN = "no-such-book"
LONG_QUERY = ("I think it was about a dragon and a blacksmith, not a sequel. " * 1700)[:100_000]
ODD_QUERY = "a dragon\x00 and a\x07 blacksmith\u200b, 竜と鍛冶屋, дракон и кузнец, تنين 🐉\r\n\tnot a sequel"

# -- what each stage reads -----------------------------------------------------------------------------------
# (reads query text, reads the incoming score, looks docnos up in an index); ``None``: outside the policy
STAGES = {
    "Normalise": (False, True, False),
    "HedgeRemover": (True, False, False),
    "NegationPenalty[index]": (True, True, True),
    "NegationPenalty[columns]": (True, True, False),
    "LLMQueryRewriter": (True, False, False),
    "HyDE": (True, False, False),
    "ClueConcatenator": (True, False, False),
    "rm3_pipeline": (True, False, False),
    "ClueDecomposer": (True, False, False),
    "RuleClueExtractor": (True, False, False),
    "FieldExpert": (False, False, True),          # a clue field: reads its clue (N/A allowed), not the query
    "base_expert": (True, False, True),
    "DateExpert[index]": (False, False, True),
    "DateExpert[year-column]": (False, False, False),
    "DensityPrior": (False, False, True),
    "WeightedFuser": (True, False, True),         # through its experts (here a BM25 base expert)
    "FuserWeights.fuser": (True, False, True),
    "ClueLookup": (False, False, False),
    "CandidateUnion": (True, False, False),
    "decomposition_pipeline": (True, False, False),
    "DecompositionPipeline": (True, False, False),
    "tuned_pipeline": (True, False, False),
    "CoverRanker": (False, False, False),         # a docno missing from the cover index is a book without a cover
    "CoverIndex.ranker": (False, False, False),   # the same CoverRanker, built by the index
    "DenseReranker[index]": (True, True, True),
    "DenseReranker[text-column]": (True, True, False),
    "TitleNamer": (True, False, False),             # names books itself; as a scorer, unnamed rows score 0
    "ListwiseReranker[index]": (True, True, True),
    "ListwiseReranker[text-column]": (True, True, False),
    "PointwiseLLMReranker[index]": (True, True, True),
    "PointwiseLLMReranker[text-column]": (True, True, False),
    "BookIndex.bm25": (True, False, False),
    "BookIndex.dense": (True, False, False),
    "BookIndex.dense_scorer": (True, False, True),
    "BookIndex.bm25_scorer": (True, False, True),
    "linear_fusion": (True, False, False),
    "LinearFusion": (True, False, True),          # of two scorers: each refuses an unknown docno
    "BookIndex.text_loader": (False, False, True),
    "SafeRetriever": (True, False, False),
    "DenseRetriever": (True, False, False),
    "DenseScorer": (True, False, True),
    "BM25Scorer": (True, False, True),
    "TextLoader": (False, False, True),
    "load_biencoder": None,  # pyterrier-dr's own query encoder, returned unchanged: its behaviour, not ours
}
STAGES.update(EXTRA_STAGES)

# -- what a kind of bad input gets -----------------------------------------------------------------------------
OK, EMPTY, MISSING, BAD, BADTYPE, UNKNOWN_ERR, NA = ("ok", "empty", "InputValidationError", "BadInputError",
                                                     "BadInputTypeError", "UnknownDocnoError", "n/a")
#: kind → (outcome in a query frame, outcome in a result frame, which stage property turns "ok" into the error)
OUTCOMES = {
    "empty frame": (EMPTY, EMPTY, None),
    "missing qid column": (MISSING, MISSING, None),
    "NaN query": (BAD, BAD, "query"),
    "None query": (BAD, BAD, "query"),
    "non-string query": (BADTYPE, BADTYPE, "query"),
    "empty query": (BAD, BAD, "query"),
    "whitespace-only query": (BAD, BAD, "query"),
    "100,000-character query": (OK, OK, None),
    "control characters, mixed scripts": (OK, OK, None),
    "duplicate qids": (BAD, NA, None),
    "duplicate docnos within a query": (NA, BAD, None),
    "unknown docno": (NA, UNKNOWN_ERR, "docnos"),
    "NaN score from an earlier stage": (NA, BAD, "score"),
}


def _set_query(value):
    def mutate(inp):
        if "query" not in inp.columns:
            return None
        out = inp.copy()
        out["query"] = out["query"].astype(object)
        out.loc[out["qid"] == "q1", "query"] = pd.Series([value] * int((out["qid"] == "q1").sum()),
                                                          index=out.index[out["qid"] == "q1"], dtype=object)
        return out
    return mutate


def _dup_qid(inp):
    row = inp[inp["qid"] == "q2"].head(1).assign(qid="q1")
    return pd.concat([inp, row], ignore_index=True)


def _first_q1(inp, column, value):
    out = inp.copy()
    out.loc[out.index[out["qid"] == "q1"][0], column] = value
    return out


MUTATIONS = {
    "empty frame": lambda inp: inp.iloc[0:0].copy(),
    "missing qid column": lambda inp: inp.drop(columns=["qid"]),
    "NaN query": _set_query(float("nan")),
    "None query": _set_query(None),
    "non-string query": _set_query(42),
    "empty query": _set_query(""),
    "whitespace-only query": _set_query(" \t\n "),
    "100,000-character query": _set_query(LONG_QUERY),
    "control characters, mixed scripts": _set_query(ODD_QUERY),
    "duplicate qids": _dup_qid,
    "duplicate docnos within a query": lambda inp: pd.concat([inp, inp.head(1)], ignore_index=True),
    "unknown docno": lambda inp: _first_q1(inp, "docno", UNKNOWN),
    "NaN score from an earlier stage": lambda inp: _first_q1(inp, "score", float("nan")),
}

def stage_key(case) -> str:
    for key in (f"{case.name}[{case.mode}]", case.name):
        if key in STAGES:
            return key
    raise KeyError(f"{case.id} has no row in STAGES: add what it reads")


def expected(case, kind: str) -> str:
    props = STAGES[stage_key(case)]
    if props is None:
        return NA
    reads_query, reads_score, looks_up = props
    in_query, in_result, prop = OUTCOMES[kind]
    outcome = in_result if "docno" in case.inp(None).columns else in_query
    if outcome in (NA, EMPTY, MISSING) or prop is None:
        return outcome
    return outcome if {"query": reads_query, "score": reads_score, "docnos": looks_up}[prop] else OK


def _optional_qids(t, inp) -> set:
    """qids a retriever may leave out by documented design: their clue is N/A (clue experts, CoverRanker)."""
    if "docno" in inp.columns:
        return set()
    clue = getattr(t, "clue", None) if isinstance(t, ptt.FieldExpert) else (
        "clue_cover" if isinstance(t, ptt.CoverRanker) else None)
    if clue is None or clue == "query" or clue not in inp.columns:
        return set()
    return set(inp.loc[inp[clue].map(lambda v: v is None or (isinstance(v, float) and math.isnan(v))), "qid"])


_BUILT = {}


def _build(case, env):
    if case.id not in _BUILT:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _BUILT[case.id] = case.build(env)
    return _BUILT[case.id]


CELLS = [(c, k) for c in CASES for k in OUTCOMES]


@pytest.mark.parametrize("case,kind", CELLS, ids=[f"{c.id}-{k}" for c, k in CELLS])
def test_bad_input_cell(case, kind, env):
    outcome = expected(case, kind)
    inp = MUTATIONS[kind](case.inp(env))
    if outcome == NA or inp is None:
        pytest.skip(f"{kind!r} does not apply to {case.id}")
    skip_unavailable(case.needs)
    t = _build(case, env)
    if outcome == MISSING:
        with pytest.raises(pt.validate.InputValidationError):
            t(inp)
    elif outcome in (BAD, BADTYPE):
        with pytest.raises(BadInputTypeError if outcome == BADTYPE else BadInputError) as err:
            t(inp)
        named = ["q1"] if kind != "NaN score from an earlier stage" else ["q1", "score"]
        for n in named:
            assert n in str(err.value), f"{t!r}: {err.value} does not name {n}"
    elif outcome == UNKNOWN_ERR:
        with pytest.raises(ptt.UnknownDocnoError, match=UNKNOWN):
            t(inp)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NoResultsWarning)
            out = t(inp)
        if outcome == EMPTY:
            assert len(out) == 0 and "qid" in out.columns
        else:
            lost = set(inp["qid"]) - set(out["qid"]) - _optional_qids(t, inp)
            assert not lost, f"{t!r} lost qid(s) {lost} on {kind!r}"
            if "score" in out.columns and "score" not in inp.columns:
                assert out["score"].notna().all(), f"{t!r} gave NaN scores on {kind!r}"


# -- the cases the issue reported ------------------------------------------------------------------------------
def test_a_vanishing_query_now_raises_naming_it(env):
    pipe = ptt.decomposition_pipeline(env.index, ptt.RuleClueExtractor(), experts=env.bm25_experts(), k=3,
                                      expert_k=2)
    with pytest.raises(BadInputError, match="'q1'"):
        pipe(pd.DataFrame({"qid": ["q1", "q2"], "query": ["", "a dog story"]}))


def test_a_query_without_candidates_is_named_and_counted(env):
    pipe = ptt.decomposition_pipeline(env.index, ptt.RuleClueExtractor(), experts=env.bm25_experts(), k=3,
                                      expert_k=2)
    with pytest.warns(NoResultsWarning, match="qz"):
        out = pipe(pd.DataFrame({"qid": ["qz", "q2"], "query": ["zzzqqq xxyyzz", "a dragon and a blacksmith"]}))
    assert set(out["qid"]) == {"q2"} and pipe.candidates.empty_results == 1


def test_unknown_docnos_can_be_scored_nan_on_request(env):
    res = MUTATIONS["unknown docno"](CASES[0].inp(env))
    inner = env.index.dense_scorer()
    stages = [ptt.DenseScorer(inner.query_encoder, inner.scorer, inner.known, inner.label, unknown_docnos="nan"),
              ptt.FieldExpert(env.index, "plot", "bm25", unknown_docnos="nan"),
              ptt.FieldExpert(env.index, "title", "dense", unknown_docnos="nan"),
              ptt.DateExpert(env.index, unknown_docnos="nan"), ptt.DensityPrior(env.index, unknown_docnos="nan")]
    for t in stages:
        with pytest.warns(UnknownDocnoWarning, match=UNKNOWN):
            out = t(res)
        assert len(out) == len(res), t
        unknown = out["docno"] == UNKNOWN
        assert out.loc[unknown, "score"].isna().all() and out.loc[~unknown, "score"].notna().all(), t
    with pytest.raises(ValueError, match="unknown_docnos"):
        ptt.DateExpert(env.index, unknown_docnos="zero")


# -- the docs render the same tables ---------------------------------------------------------------------------
def _table(header, rows) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join("=" * w for w in widths)
    fmt = "  ".join("{:<%d}" % w for w in widths)
    body = [fmt.format(*map(str, r)).rstrip() for r in rows]
    return "\n".join([line, fmt.format(*header).rstrip(), line, *body, line])


def render_tables() -> str:
    yes = {True: "yes", False: "no"}
    outcomes = _table(("bad input", "query frame", "result frame", "the error only where the stage reads"),
                      [(k, q, r, {None: "", "query": "query text", "score": "the score",
                                  "docnos": "docnos (looks them up)"}[p]) for k, (q, r, p) in OUTCOMES.items()])
    stages = _table(("stage", "reads query text", "reads the score", "looks docnos up"),
                    [(k, *(yes[x] for x in v)) if v is not None else (k, "n/a", "n/a", "n/a")
                     for k, v in STAGES.items()])
    return outcomes + "\n\n" + stages


def test_docs_show_the_same_tables():
    text = DOCS.read_text(encoding="utf8")
    for table in render_tables().split("\n\n"):
        assert table in text, ("docs/robustness.rst is out of date; paste the tables that "
                               "`python -m tests.conventions.test_bad_inputs` prints into it")


def test_every_case_has_a_stage_row():
    for case in CASES:
        stage_key(case)
    assert np.all([k in MUTATIONS for k in OUTCOMES])


if __name__ == "__main__":
    print(render_tables())
