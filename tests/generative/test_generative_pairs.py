"""Training pairs: text forms (TextRank via summa), retrieval pairs, cheap and LLM pseudo-queries."""
import warnings

import pandas as pd
import pytest

from pyterrier_tot import generative as gen  # noqa: E402
from pyterrier_tot.llm.templates import load_prompt  # noqa: E402
from tests.helpers.generative_toy import toy_books
from tests.helpers.openai_stub import OpenAIStub, stub_llm

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


def test_keyphrase_and_template_queries(corpus):
    books, ids = corpus
    keys = gen.keyphrase_queries(books, ids, n=2, seed=3)
    assert (keys["task"] == "retrieve:keyphrases").all() and (keys["target"] == keys["docno"].map(ids)).all()
    # keyphrases made only of title words are left out: a reader who knew them would know the title
    from pyterrier_tot.generative.pseudo_queries import keyphrases

    phrases = keyphrases(LONG, "The Keeper's Dragon")
    assert "lighthouse" in phrases and "lighthouse" not in keyphrases(LONG, "The Lighthouse")
    assert "dragon" not in phrases and len(phrases) >= 2
    # each request is up to 4 distinct keyphrases of the book (which 4 depends on TextRank's scores, where ties and
    # float noise differ between machines, so the test does not name them)
    lighthouse = keys.loc[keys.docno == "L", "source"].tolist()
    assert 1 <= len(lighthouse) == len(set(lighthouse)) <= 2
    for q in lighthouse:
        parts = q.split(", ")
        assert len(parts) == min(4, len(phrases)) == len(set(parts)) and set(parts) <= set(phrases)
    # ties are broken alphabetically, so the order does not hang on the machine
    from summa import keywords as summa_keywords

    scored = summa_keywords.keywords(LONG, scores=True)
    tied = [k for k, v in scored if any(k2 != k and round(v, 6) == round(v2, 6) for k2, v2 in scored)]
    ranked = keyphrases(LONG, limit=100)
    for a in tied:
        for b in tied:
            sa, sb = dict(scored)[a], dict(scored)[b]
            if a < b and round(sa, 6) == round(sb, 6):
                assert ranked.index(a) < ranked.index(b)
    tpl = gen.template_queries(books, ids, n=3, seed=3)
    assert len(tpl) == 3 * len(books) and not tpl["source"].str.contains(r"\{").any()
    text = " ".join(LONG.split())
    for q in tpl.loc[tpl.docno == "L", "source"]:  # each holds a span of the description or its keyphrases
        assert any(" ".join(text.split()[i:i + 6]) in q for i in range(len(text.split()) - 6)) or \
            sum(k in q for k in phrases) >= 2
        assert ",." not in q
    assert tpl.equals(gen.template_queries(books, ids, n=3, seed=3))


def test_clue_form_pairs_use_the_rule_clues(corpus):
    books, ids = corpus
    topics = pd.DataFrame({"qid": ["1", "2"], "query": [
        "The cover was dark blue with a dragon on a lighthouse. I read it around 2005, a fantasy book.",
        "no clues here at all"]})
    qrels = pd.DataFrame({"qid": ["1", "2"], "docno": ["L", "t00"], "label": [1, 1]})
    pairs = gen.clue_form_pairs(topics, qrels, ids)
    assert pairs["docno"].tolist() == ["L"] and (pairs["task"] == "retrieve:clues").all()
    assert "dragon" in pairs["source"].iloc[0] and len(pairs["source"].iloc[0]) < len(topics["query"].iloc[0])
    assert len(gen.clue_form_pairs(topics.iloc[:0], qrels, ids)) == 0


def test_pseudo_query_file_round_trip(corpus, tmp_path):
    books, ids = corpus
    pairs = gen.cheap_pseudo_queries(books, ids, n=2).assign(task="retrieve:llm-tot")
    path = gen.write_pseudo_queries(pairs, tmp_path / "pq.jsonl", model="stub", books=len(books))
    back = gen.read_pseudo_queries(path, ids)
    assert back[["source", "target", "docno", "task"]].equals(pairs[["source", "target", "docno", "task"]])
    assert back.attrs["meta"] == {"model": "stub", "books": len(books)}
    other = {d: f"id-{d}" for d in list(ids)[:2]}  # another id map: its targets, unknown books dropped
    again = gen.read_pseudo_queries(path, other)
    assert set(again["docno"]) == set(other) and (again["target"] == again["docno"].map(other)).all()


def test_tot_kind_sends_the_description(corpus, tmp_path):
    books, ids = corpus
    asked = []

    def responder(messages):
        asked.append(messages)
        return "read it as a kid, a dragon hatches in a lighthouse I think\nkeeper hides a dragon, maybe 2000s"

    with OpenAIStub(responder) as stub:
        llm = stub_llm(stub, tmp_path / "cache.sqlite3")
        pairs = gen.llm_pseudo_queries(books.iloc[:1], ids, llm, n=2, kind="tot", max_tokens=50)
    assert len(pairs) == 2 and (pairs["task"] == "retrieve:llm-tot").all()
    assert "half remember" in asked[0][0]["content"] and LONG[:40] in asked[0][-1]["content"]
    with pytest.raises(ValueError, match="'tot'"):
        gen.llm_pseudo_queries(books, ids, llm, kind="chapterwise")
