"""ListwiseReranker against the stub OpenAI-compatible server: sliding windows move a good book from the bottom of
the block to the top; bad permutations (missing, repeated, unknown ids, garbage text) are repaired without losing a
document; a failed request keeps the window's order."""
import re
import warnings

import pandas as pd
import pyterrier as pt
import pytest

from pyterrier_tot.errors import BadInputError, UnknownDocnoError  # noqa: E402
from pyterrier_tot.index import BookIndex  # noqa: E402
from pyterrier_tot.rerank.listwise_reranker import ListwiseReranker, repair_permutation, window_starts  # noqa: E402
from tests.helpers.books import TINY_BOOKS, ranked_docnos, tiny_ranking
from tests.helpers.openai_stub import OpenAIStub, stub_llm

_CANDIDATE = re.compile(r"^\[(\d+)\] (.*)$", re.MULTILINE)


def candidates(messages):
    return [(int(i), text) for i, text in _CANDIDATE.findall(messages[-1]["content"])]


def responder(messages):
    """Answers by what the request asks for: a fault, or the candidates that mention the wanted word first."""
    request = messages[-1]["content"]
    cands = candidates(messages)
    if "garbage" in request:
        return "I am not sure which book this is, sorry!"
    if "broken" in request:  # a repeat, an unknown id, and the rest missing
        return "[2] > [2] > [99] > [0]"
    if "numbers" in request:  # no brackets: the numbers are read
        return " ".join(str(i) for i, _ in reversed(cands))
    wanted = re.search(r"wants (\w+)", request).group(1) if "wants" in request else ""
    first = [i for i, t in cands if wanted and wanted.lower() in t.lower()]
    return " > ".join(f"[{i}]" for i in first + [i for i, _ in cands if i not in first])


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path_factory.mktemp("listwise") / "index")


@pytest.fixture(scope="module")
def stub():
    with OpenAIStub(responder, always_fail=lambda m: "fail" in m[-1]["content"]) as s:
        yield s


def make_llm(stub, tmp_path):
    return stub_llm(stub, tmp_path / "llm.sqlite3")


ranking, order = tiny_ranking, ranked_docnos


# -- permutation repair -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("answer,n,expected,repaired", [
    ("[3] > [1] > [2]", 3, [2, 0, 1], False),
    ("[3] > [1]", 3, [2, 0, 1], True),                          # missing: appended in the old order
    ("[2] > [2] > [1] > [3]", 3, [1, 0, 2], True),              # repeated: the first one counts
    ("[9] > [0] > [2] > [-1]", 3, [1, 0, 2], True),             # unknown ids dropped
    ("I don't know, maybe the second?", 3, [0, 1, 2], True),    # garbage text: the old order
    ("3, 1, 2", 3, [2, 0, 1], False),                           # plain numbers
    ("[2] > [1] (the year 1987 fits)", 3, [1, 0, 2], True),      # bracketed ids win over other numbers
    ("", 2, [0, 1], True),
    (None, 2, [0, 1], True),
])
def test_repair_permutation(answer, n, expected, repaired):
    assert repair_permutation(answer, n) == (expected, repaired)


def test_window_starts_go_from_the_bottom_to_the_top():
    assert window_starts(20, 10, 5) == [10, 5, 0]
    assert window_starts(6, 3, 2) == [3, 1, 0]
    assert window_starts(4, 10, 5) == [0]


# -- the reranker -------------------------------------------------------------------------------------------------
def test_sliding_windows_bring_the_bottom_book_to_the_top(stub, index, tmp_path):
    rr = ListwiseReranker(make_llm(stub, tmp_path), index, k=6, window=3, step=2)
    out = rr(ranking("the reader wants blacksmith"))  # b2 (the blacksmith) is last
    assert order(out) == ["b2", "b1", "b3", "b4", "b6", "b5"]
    assert rr.windows == 3 and rr.repaired == 0 and rr.failures == 0
    assert out.sort_values("rank")["score"].is_monotonic_decreasing


def test_the_tail_below_k_keeps_its_order_under_the_block(stub, index, tmp_path):
    rr = ListwiseReranker(make_llm(stub, tmp_path), index, k=3, window=2, step=1)
    out = rr(ranking("the reader wants spaceship"))  # b4 is third: inside the block
    assert order(out) == ["b4", "b1", "b3", "b6", "b5", "b2"]
    tail = out[out["docno"].isin(["b6", "b5", "b2"])]
    assert tail["score"].tolist() == [3.0, 2.0, 1.0] and out["score"].max() > 3.0


@pytest.mark.parametrize("query", ["garbage please", "broken answer", "numbers only"])
def test_bad_permutations_never_lose_a_document(stub, index, tmp_path, query):
    rr = ListwiseReranker(make_llm(stub, tmp_path), index, k=6, window=4, step=2)
    inp = ranking(query)
    out = rr(inp)
    assert sorted(out["docno"]) == sorted(inp["docno"]) and len(out) == len(inp)
    assert sorted(out["rank"]) == list(range(len(inp)))
    if query != "numbers only":
        assert rr.repaired == rr.windows == 2
    if query.startswith("garbage"):
        assert order(out) == order(inp)


def test_a_failed_request_keeps_the_window_order(stub, index, tmp_path):
    rr = ListwiseReranker(make_llm(stub, tmp_path), index, k=6, window=3, step=2)
    inp = pd.concat([ranking("please fail", qid="q1"), ranking("the reader wants blacksmith", qid="q2")])
    with pytest.warns(UserWarning, match="q1"):
        out = rr(inp)
    assert order(out, "q1") == order(inp, "q1") and order(out, "q2")[0] == "b2"
    assert rr.failures == 3 and rr.windows == 6


def test_text_column_mode_and_extra_columns(stub, tmp_path):
    rr = ListwiseReranker(make_llm(stub, tmp_path), k=6, window=3, step=2)
    books = pd.DataFrame(TINY_BOOKS)[["docno", "text"]]
    inp = ranking("the reader wants ghost").merge(books, on="docno").assign(query_0="orig")
    out = rr(inp)
    assert order(out)[0] == "b5" and list(out.columns) == list(inp.columns)
    with pytest.raises(pt.validate.InputValidationError):
        rr(inp.drop(columns=["text"]))


def test_empty_frame_bad_inputs_and_repr(stub, index, tmp_path):
    rr = ListwiseReranker(make_llm(stub, tmp_path), index, k=6, window=3, step=2)
    empty = rr(ranking("x").iloc[0:0])
    assert len(empty) == 0 and {"qid", "docno", "score", "rank"} <= set(empty.columns)
    with pytest.raises(UnknownDocnoError, match="nope"):
        rr(ranking("the reader wants blacksmith", docnos=("b1", "nope")))
    bad = ranking("the reader wants blacksmith")
    bad.loc[0, "score"] = float("nan")
    with pytest.raises(BadInputError, match="q1"):
        rr(bad)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "window=3" in repr(rr) and "ListwiseReranker(" in repr(rr)
    with pytest.raises(ValueError, match="step"):
        ListwiseReranker(rr.llm, index, window=5, step=5)
