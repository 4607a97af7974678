"""TitleNamer against the stub OpenAI-compatible server: names map to books exactly, through typos, case,
subtitles and "by Author"; absent titles are dropped and counted; LLM failures give no rows, never a crash."""
import warnings

import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta
import pytest

from pyterrier_tot.decomposition.field_expert import base_expert  # noqa: E402
from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser  # noqa: E402
from pyterrier_tot.errors import BadInputError, NoResultsWarning  # noqa: E402
from pyterrier_tot.index import BookIndex  # noqa: E402
from pyterrier_tot.submission.title_namer import (  # noqa: E402
    TitleNamer,
    normalise_title,
    parse_titles,
    title_similarity,
)
from tests.helpers.books import TINY_BOOKS
from tests.helpers.openai_stub import OpenAIStub, stub_llm

BOOKS = TINY_BOOKS + [
    {"docno": "b7", "title": "The Clockwork Garden: A Novel of Two Sisters", "author": "Iris Penn",
     "genres": "fantasy", "year": 2010, "text": "Two sisters tend a garden of brass flowers that tick at night."},
    {"docno": "b8", "title": "Dragons of the Blue Sun", "author": "Carl Voss", "genres": "fantasy", "year": 2006,
     "text": "The sequel: the blacksmith's daughter flies to a blue sun."},
]

#: what the scripted LLM names for each query
ANSWERS = {
    "exact": "Dragons of the Red Moon\nThe Haunted Lighthouse",
    "near": "1. dragons of teh red mon\n2) THE HAUNTED LIGHTHOUSE by Fay Lorne\n- Clockwork Garden\n* 'Spaceship 9'",
    "absent": "The Invisible Cathedral\nA Thousand Paper Boats",
    "mixed": ("Here are some titles:\nThe Invisible Cathedral\nSummer of Horses\nsummer of horses\n"
              "Dragons of the Red Moon"),
    "json": '["Murder at Lakeside Manor", {"title": "The Sleepy Kitten"}]',
    "a blacksmith befriends a dragon": "Dragons of the Red Moon",
    "a dragon, a blacksmith, a ghost in a lighthouse": "Dragons of the Red Moon",
    "many": "\n".join(["Dragons of the Red Moon", "Spaceship Nine", "The Sleepy Kitten", "Summer of Horses"]),
}


def responder(messages):
    return ANSWERS.get(messages[-1]["content"].removeprefix("Request: "), "No idea, sorry.")


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return BookIndex(pd.DataFrame(BOOKS), path=tmp_path_factory.mktemp("namer") / "index")


@pytest.fixture(scope="module")
def stub():
    with OpenAIStub(responder, always_fail=lambda m: "fail" in m[-1]["content"]) as s:
        yield s


def make_llm(stub, tmp_path):
    return stub_llm(stub, tmp_path / "llm.sqlite3")


def topics(*names):
    return pd.DataFrame({"qid": [f"q{i}" for i in range(len(names))], "query": list(names)})


def by_qid(res, qid):
    return res[res["qid"] == qid].sort_values("rank")["docno"].tolist()


# -- name matching ------------------------------------------------------------------------------------------------
def test_normalise_and_similarity():
    assert normalise_title("  The  Haunted   Lighthouse!") == "haunted lighthouse"
    assert normalise_title("Café & Crème") == "cafe and creme"
    assert title_similarity("Dragons of the Red Moon", "Dragons of the Red Moon") == 1.0
    assert title_similarity("the clockwork garden", "The Clockwork Garden: A Novel of Two Sisters") == 1.0
    assert title_similarity("The Haunted Lighthouse by Fay Lorne", "The Haunted Lighthouse") == 1.0
    assert title_similarity("dragons of teh red mon", "Dragons of the Red Moon") > 0.85
    assert title_similarity("Dragons of the Red Moon", "Dragons of the Blue Sun") < 0.8


def test_parse_titles_strips_numbering_headings_and_repeats():
    text = 'Sure! Here are my guesses:\n1. "Moon River"\n2) Moon River\n- The Owl\n\n* **Night Train**\n#4 Last'
    assert parse_titles(text, 10) == ["Moon River", "The Owl", "Night Train", "Last"]
    assert parse_titles(text, 2) == ["Moon River", "The Owl"]
    assert parse_titles('{"titles": ["A", "B"]}', 5) == ["A", "B"]
    assert parse_titles('{"title": "Only One", "author": "X"}', 5) == ["Only One"]
    assert parse_titles(None, 5) == [] and parse_titles("   ", 5) == []


def test_exact_titles_map_in_naming_order(stub, index, tmp_path):
    namer = TitleNamer(make_llm(stub, tmp_path), index)
    res = namer(topics("exact"))
    assert by_qid(res, "q0") == ["b2", "b5"]
    assert res["score"].tolist() == [10.0, 9.0] and res["rank"].tolist() == [0, 1]
    assert namer.unmatched == 0 and namer.named == 2


def test_near_misses_map_typo_case_subtitle_author(stub, index, tmp_path):
    namer = TitleNamer(make_llm(stub, tmp_path), index)
    assert by_qid(namer(topics("near")), "q0") == ["b2", "b5", "b7", "b4"]


def test_absent_titles_are_dropped_and_counted(stub, index, tmp_path):
    namer = TitleNamer(make_llm(stub, tmp_path), index)
    with pytest.warns(NoResultsWarning, match="q0"):
        res = namer(topics("absent", "exact"))
    assert by_qid(res, "q0") == [] and by_qid(res, "q1") == ["b2", "b5"]
    assert namer.unmatched == 2 and namer.empty_results == 1


def test_a_near_title_of_another_book_is_not_taken(stub, index, tmp_path):
    # "Dragons of the Red Moon" must not become its sequel, nor a missing book the closest BM25 hit
    namer = TitleNamer(make_llm(stub, tmp_path), index)
    res = namer(topics("mixed"))
    assert by_qid(res, "q0") == ["b6", "b2"]
    assert res["score"].tolist() == [9.0, 8.0]  # from the naming rank; the heading and the repeat are not names
    assert namer.unmatched == 1


def test_json_answers_and_num_titles(stub, index, tmp_path):
    llm = make_llm(stub, tmp_path)
    assert by_qid(TitleNamer(llm, index)(topics("json")), "q0") == ["b3", "b1"]
    assert by_qid(TitleNamer(llm, index, num_titles=2)(topics("many")), "q0") == ["b2", "b4"]


def test_llm_failure_gives_no_rows_a_warning_and_a_count(stub, index, tmp_path):
    namer = TitleNamer(make_llm(stub, tmp_path), index)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = namer(topics("exact", "please fail"))
    assert set(res["qid"]) == {"q0"} and namer.failures == 1
    assert any("q1" in str(w.message) and "failed" in str(w.message) for w in caught)
    assert not any(issubclass(w.category, NoResultsWarning) for w in caught)  # warned once, as a failure


def test_scorer_mode_keeps_every_row(stub, index, tmp_path):
    namer = TitleNamer(make_llm(stub, tmp_path), index)
    cands = pt.model.add_ranks(pd.DataFrame({"qid": "q0", "query": "exact", "docno": ["b1", "b5", "b2"],
                                             "score": [3.0, 2.0, 1.0]}))
    out = namer(cands)
    assert out.sort_values("rank")["docno"].tolist() == ["b2", "b5", "b1"]
    assert dict(zip(out["docno"], out["score"])) == {"b2": 10.0, "b5": 9.0, "b1": 0.0}


def test_composes_and_fuses(stub, index, tmp_path):
    namer = TitleNamer(make_llm(stub, tmp_path), index)
    assert by_qid((namer % 1)(topics("exact")), "q0") == ["b2"]
    bm25 = index.bm25(num_results=5)
    query = topics("a blacksmith befriends a dragon")
    fused = pta.fusion.RRFusion(bm25, namer)(query)
    assert fused.sort_values("rank")["docno"].iloc[0] == "b2" and len(fused) == len(bm25(query))
    # as a scorer inside the WeightedFuser: the named book wins over BM25's favourite
    query = topics("a dragon, a blacksmith, a ghost in a lighthouse")
    assert bm25(query).sort_values("rank")["docno"].iloc[0] == "b5"
    pipe = bm25 >> WeightedFuser([base_expert(index, "bm25"), namer], weights=[0.5, 1.0])
    out = pipe(query)
    assert out.sort_values("rank")["docno"].iloc[0] == "b2" and len(out) == len(bm25(query))


def test_empty_frames_bad_input_and_repr(stub, index, tmp_path):
    namer = TitleNamer(make_llm(stub, tmp_path), index)
    out = namer(pd.DataFrame(columns=["qid", "query"]))
    assert len(out) == 0 and {"qid", "docno", "score", "rank"} <= set(out.columns)
    with pytest.raises(BadInputError, match="q1"):
        namer(pd.DataFrame({"qid": ["q0", "q1"], "query": ["exact", "  "]}))
    with pytest.raises(pt.validate.InputValidationError):
        namer(pd.DataFrame({"qid": ["q0"]}))
    assert "TitleNamer(" in repr(namer) and "num_titles=10" in repr(namer)
    with pytest.raises(ValueError, match="num_titles"):
        TitleNamer(namer.llm, index, num_titles=0)
