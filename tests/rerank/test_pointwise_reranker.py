"""PointwiseLLMReranker: the stub OpenAI-compatible server's first-token log-probabilities move the book it judges
relevant to the top of the block, the tail stays underneath, alpha mixes the judgement with the incoming score, and
a candidate without a yes/no judgement leaves its query's order as it came (warned, counted), never a made-up
score. The real local llama.cpp server (SmolLM2) judges every candidate."""
import math
import re
import warnings

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

from pyterrier_tot.errors import BadInputError  # noqa: E402
from pyterrier_tot.index import BookIndex  # noqa: E402
from pyterrier_tot.rerank.pointwise_reranker import PointwiseLLMReranker, yes_probability  # noqa: E402
from tests.helpers.books import TINY_BOOKS, ranked_docnos, tiny_ranking
from tests.helpers.openai_stub import OpenAIStub, stub_llm
from tests.helpers.scripts import load_script

_WANTS = re.compile(r"wants (\w+)")


def judgement(messages):
    """Yes (p .9) when the candidate mentions the word the request 'wants', else No (p(yes) .2); 'mute' requests
    get tokens that are neither answer, 'fail' requests an error (see the fixture)."""
    request = messages[-1]["content"]
    if "mute" in request:
        return {"Maybe": -0.1, "The": -2.5}
    wanted = _WANTS.search(request).group(1).lower()
    candidate = request.split("Candidate:", 1)[1].lower()
    p = 0.9 if wanted in candidate else 0.2
    return {"Yes": math.log(p), " no": math.log(1 - p)}


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path_factory.mktemp("pointwise") / "index")


@pytest.fixture(scope="module")
def stub():
    with OpenAIStub(lambda m: "Yes", logprobs=judgement,
                    always_fail=lambda m: "fail" in m[-1]["content"].split("Candidate:")[0]) as s:
        yield s


ranking, order = tiny_ranking, ranked_docnos


@pytest.mark.parametrize("top,expected", [
    ({"Yes": math.log(0.6), "No": math.log(0.3)}, 2 / 3),
    ({" yes": math.log(0.3), "YES": math.log(0.3), "no.": math.log(0.2)}, 0.75),   # variants summed
    ({"Yes": 0.0}, 1.0),
    ({"Maybe": -0.1}, None),
    ({"None": -0.1, "Not": -0.2, "Nope": -0.3, "Y": -0.4, "N": -0.5, "Yess": -1.0}, None),   # not the words
    ({"**Yes**": math.log(0.5), "no\n": math.log(0.5), "Nothing": -0.1}, 0.5),
    ({}, None),
    (None, None),
])
def test_yes_probability(top, expected):
    got = yes_probability(top)
    assert (got is None) if expected is None else got == pytest.approx(expected)


def test_the_judged_book_climbs_and_the_tail_stays_below(stub, index, tmp_path):
    rr = PointwiseLLMReranker(stub_llm(stub, tmp_path / "llm.sqlite3"), index, k=4)
    res = rr(ranking("a reader wants spaceship"))
    assert order(res) == ["b4", "b1", "b3", "b6", "b5", "b2"]       # b4 judged yes; the other three keep their order
    assert sorted(res["rank"]) == list(range(6)) and rr.judged == 4 and rr.failures == 0
    asked = [p["messages"][-1]["content"] for p in stub.payloads if "spaceship" in p["messages"][-1]["content"]]
    assert len(asked) == 4 and all("Could this be the book?" in a for a in asked)
    assert all(p.get("max_tokens") == 1 and p.get("logprobs") for p in stub.payloads)
    # a book below k is never judged, even when it would be relevant
    res = rr(ranking("a reader wants dragons"))
    assert order(res)[-1] == "b2" and rr.judged == 8


def test_alpha_mixes_the_judgement_with_the_incoming_score(stub, index, tmp_path):
    llm = stub_llm(stub, tmp_path / "llm.sqlite3")
    inp = ranking("a reader wants horses", docnos=("b1", "b3", "b4", "b6"))
    res = PointwiseLLMReranker(llm, index, k=4, alpha=0.3)(inp)
    # b6: .3 * .9 + .7 * 0 = .27; b1: .3 * .2 + .7 * 1 = .76; b3: .06 + .7 * 2/3 = .527; b4: .06 + .7/3 = .293
    assert order(res) == ["b1", "b3", "b4", "b6"]
    got = dict(zip(res["docno"], res["score"]))
    assert got["b6"] == pytest.approx(0.27) and got["b1"] == pytest.approx(0.76)
    assert order(PointwiseLLMReranker(llm, index, k=4, alpha=0.9)(inp))[0] == "b6"


def test_a_query_without_a_judgement_keeps_its_order(stub, index, tmp_path):
    rr = PointwiseLLMReranker(stub_llm(stub, tmp_path / "llm.sqlite3", max_consecutive_failures=None), index, k=3)
    inp = pd.concat([ranking("mute reader", qid="q1"), ranking("fail reader", qid="q2"),
                     ranking("a reader wants lighthouse", docnos=("b1", "b3", "b5"), qid="q3")])
    with pytest.warns(UserWarning, match="no yes/no judgement"):
        res = rr(inp)
    assert order(res, "q1") == order(inp, "q1") and order(res, "q2") == order(inp, "q2")
    assert order(res, "q3") == ["b5", "b1", "b3"] and len(res) == len(inp)
    assert rr.failures == 6 and rr.judged == 3


def test_bad_input_and_settings_are_named(stub, index, tmp_path):
    llm = stub_llm(stub, tmp_path / "llm.sqlite3")
    with pytest.raises(ValueError, match="alpha"):
        PointwiseLLMReranker(llm, index, alpha=1.5)
    with pytest.raises(ValueError, match="k"):
        PointwiseLLMReranker(llm, index, k=0)
    with pytest.raises(ValueError, match="top"):
        PointwiseLLMReranker(llm, index, top=21)
    with pytest.raises(pt.validate.InputValidationError, match="query"):
        PointwiseLLMReranker(llm, index)(ranking("x").drop(columns=["query"]))
    rr = PointwiseLLMReranker(llm, k=2)                       # no index: the frame's text column
    with pytest.raises(pt.validate.InputValidationError, match="text"):
        rr(ranking("x"))
    inp = ranking("a reader wants jupiter", docnos=("b1", "b4")).assign(text=["kittens nap", "a ship to jupiter"])
    assert order(rr(inp)) == ["b4", "b1"]
    assert "PointwiseLLMReranker(" in repr(rr) and "k=2" in repr(rr)
    with pytest.raises(BadInputError, match="score"):                # NaN scores from an earlier stage
        rr(inp.assign(score=[1.0, float("nan")]))
    empty = PointwiseLLMReranker(llm, index)(ranking("x").iloc[:0])
    assert len(empty) == 0 and "rank" in empty.columns


def test_smollm2_on_llama_cpp_judges_every_candidate(reddit, reddit_index, tmp_path):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (the 'llm' extra)")
    from pyterrier_tot.llm.llama_server import LlamaServer

    topics = reddit.get_topics("validation").head(1)
    with LlamaServer(n_ctx=4096, n_threads=1) as server:
        llm = server.llm(cache=tmp_path / "pw.sqlite3", timeout=600, verbose=False)
        first = reddit_index.bm25(num_results=3)(topics)
        rr = PointwiseLLMReranker(llm, reddit_index, k=3, max_chars=300)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res = rr(first)
    assert not [w for w in caught if "judgement" in str(w.message) or "failed" in str(w.message)]
    assert rr.judged == 3 and rr.failures == 0 and llm.usage.completion_tokens <= 3
    assert sorted(res["docno"]) == sorted(first["docno"]) and np.all((res["score"] >= 0) & (res["score"] <= 1))


def test_the_benchmark_scores_ties_as_trec_eval_and_unanswered_queries_as_zero():
    per_query = load_script("benchmarks/second_stage/pointwise_llm.py").per_query

    qrels = pd.DataFrame({"qid": ["q1", "q2"], "docno": ["a", "c"], "label": [1, 1]})
    run = pd.DataFrame({"qid": ["q1", "q1"], "docno": ["a", "x"], "score": [1.0, 1.0]})   # tie: x before a
    got = per_query(run, qrels)
    assert list(got.index) == ["q1", "q2"] and list(got.columns) == ["R@1", "R@5", "R@10", "MRR"]
    assert got.loc["q1", "MRR"] == 0.5 and got.loc["q1", "R@1"] == 0.0 and got.loc["q1", "R@5"] == 1.0
    assert (got.loc["q2"] == 0.0).all()
