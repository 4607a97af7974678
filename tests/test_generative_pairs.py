"""Training pairs: text forms (TextRank via summa), retrieval pairs, cheap and LLM pseudo-queries."""
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from generative_toy import toy_books  # noqa: E402
from openai_stub import OpenAIStub, stub_llm  # noqa: E402

from pyterrier_tot import generative as gen  # noqa: E402
from pyterrier_tot.llm.templates import load_prompt  # noqa: E402

LONG = ("The lighthouse keeper found a dragon egg on the rocks. The egg was warm and glowing red. "
        "He carried the egg up the stairs of the lighthouse. That night the dragon hatched and ate his supper. "
        "The village feared the dragon, but the keeper hid it in the lamp room. "
        "When a storm wrecked a ship, the dragon lit the sea so the sailors could swim home.")


@pytest.fixture(scope="module")
def corpus():
    books = pd.DataFrame([{"docno": "L", "title": "The Keeper's Dragon", "text": LONG}]).pipe(
        lambda df: pd.concat([df, toy_books(3)], ignore_index=True))
    return books, gen.book_ids(books)


def test_indexing_pairs_make_each_form(corpus):
    books, ids = corpus
    pairs = gen.indexing_pairs(books, ids)
    long_forms = set(pairs.loc[pairs.docno == "L", "task"])
    assert long_forms == {"index:keywords", "index:summary", "index:lead", "index:description"}
    assert (pairs["target"] == pairs["docno"].map(ids)).all()
    keywords = pairs.loc[(pairs.docno == "L") & (pairs.task == "index:keywords"), "source"].iloc[0]
    assert "dragon" in keywords
    with pytest.raises(ValueError, match="unknown indexing forms"):
        gen.indexing_pairs(books, ids, forms=("chapter",))


def test_retrieval_pairs_and_cheap_pseudo_queries(corpus):
    books, ids = corpus
    topics = pd.DataFrame({"qid": ["1", "2"], "query": ["dragon in a lighthouse", "a kitten"]})
    qrels = pd.DataFrame({"qid": ["1", "2", "2"], "docno": ["L", "t00", "unknown"], "label": [1, 0, 1]})
    pairs = gen.retrieval_pairs(topics, qrels, ids)
    assert pairs[["source", "docno"]].values.tolist() == [["dragon in a lighthouse", "L"]]
    spans = gen.cheap_pseudo_queries(books, ids, n=3, seed=1)
    assert len(spans) == 3 * len(books)
    for src, d in zip(spans["source"], spans["docno"]):
        assert src in " ".join(books.set_index("docno").loc[d, "text"].split())
    assert spans.equals(gen.cheap_pseudo_queries(books, ids, n=3, seed=1))


def test_prompts_are_packaged():
    for kind in ("single", "multi"):
        prompt = load_prompt(f"generative_pseudo_query_{kind}")
        assert "{query}" not in prompt.messages("x")[-1]["content"]


def test_llm_pseudo_queries_and_failures_degrade(corpus, tmp_path):
    books, ids = corpus
    asked = []

    def responder(messages):
        text = messages[-1]["content"]
        asked.append(text)
        if " # " in text:
            return "the egg hatches and later the dragon saves sailors\nwhy did the keeper hide it"
        if "lamp room" in text:
            return "1. a dragon hatches in a lighthouse\n2. keeper hides a dragon from the village\nok"
        return "- children on a quest near the harbour"

    def fail(messages):
        return "desert" in messages[-1]["content"]  # one toy book's request fails every time

    with OpenAIStub(responder, always_fail=fail) as stub:
        llm = stub_llm(stub, tmp_path / "cache.sqlite3")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            single = gen.llm_pseudo_queries(books, ids, llm, n=2, kind="single")
        chaptered = books.iloc[:1].assign(chapters=[["The egg is found.", "The dragon hatches.", "The storm."]])
        multi = gen.llm_pseudo_queries(chaptered, ids, llm, n=2, kind="multi", chapters_field="chapters")
    assert set(single.loc[single.docno == "L", "source"]) == {"a dragon hatches in a lighthouse",
                                                            "keeper hides a dragon from the village"}
    assert (single["task"] == "retrieve:llm-single").all() and (single["target"] == single["docno"].map(ids)).all()
    # the failing book gets no pairs, a warning and a count; every other book keeps its pseudo-queries
    assert single.attrs["failed_books"] == 1 and any("no usable pseudo-query" in str(w.message) for w in caught)
    assert set(single["docno"]) == set(books["docno"]) - {"t01"}
    assert len(multi) == 2 and (multi["task"] == "retrieve:llm-multi").all()
    assert any(" # " in a and "Write 2 requests" in a for a in asked)
