import json
import re
from collections import Counter
from pathlib import Path

import pandas as pd
import pyterrier as pt
import pytest

from pyterrier_tot.query.hedge_remover import HedgeRemover, hedge_statistics, read_lexicon

CASES = json.loads((Path(__file__).parent / "data" / "hedge_cases.json").read_text(encoding="utf8"))["cases"]
WORD = re.compile(r"[^\W_]+", re.UNICODE)


def words(text):
    return Counter(w.lower() for w in WORD.findall(text))


@pytest.fixture(scope="module")
def remover():
    return HedgeRemover()


def test_packaged_lexicon_is_large_and_has_negated_entries():
    entries = read_lexicon()
    assert len(entries) >= 120
    assert any(e.startswith("!") for e in entries)
    assert len(HedgeRemover().entries) >= 120


@pytest.mark.parametrize("case", CASES, ids=[c["input"][:40] for c in CASES])
def test_hand_written_cases(remover, case):
    assert remover.clean(case["input"]) == case["expected"]


def test_enough_cases():
    assert len(CASES) >= 30


@pytest.mark.parametrize("case", CASES, ids=[c["input"][:40] for c in CASES])
def test_only_hedge_words_disappear(remover, case):
    """Every word that disappears belongs to a hedge that was found: content words are never deleted."""
    before, after = words(case["input"]), words(case["expected"])
    assert not (after - before), "cleaning must not invent words"
    lost = before - after
    hedge_words = Counter()
    for h in remover.find(case["input"]):
        hedge_words += words(h)
    assert not (lost - hedge_words), f"lost non-hedge words {lost - hedge_words}"


def test_word_boundaries(remover):
    for text in ["Maybelline", "perhapsing", "probablyness", "imovie", "tbhx", "unapparently"]:
        assert remover.clean(f"a {text} story") == f"a {text} story"
    assert remover.clean("a MAYBE story") == "a story"


def test_longest_phrase_wins(remover):
    assert remover.find("If I recall correctly it was red") == ["If I recall correctly"]
    assert remover.find("I'm not sure if it was red") == ["I'm not sure if"]


def test_negation_modes():
    text = "I don't think it was a sequel."
    assert HedgeRemover().clean(text) == text
    assert HedgeRemover(negations="not").clean(text) == "not it was a sequel."
    assert HedgeRemover(negations="drop").clean(text) == "it was a sequel."
    # a single-word hedge next to a content negation leaves the negation in place
    assert HedgeRemover(negations="drop").clean("It was maybe not a sequel.") == "It was not a sequel."
    with pytest.raises(ValueError, match="negations"):
        HedgeRemover(negations="flip")


def test_user_lexicon_extra_and_replace(tmp_path):
    extra = HedgeRemover(extra=["honestly", "to be fair"])
    assert extra.clean("Honestly, to be fair it was a cat book, maybe.") == "it was a cat book."
    only = HedgeRemover(lexicon=["honestly"])
    assert only.clean("Honestly it was maybe a cat book.") == "it was maybe a cat book."
    f = tmp_path / "lex.txt"
    f.write_text("# my markers\nhonestly\n!no way\n")
    from_file = HedgeRemover(lexicon=f)
    assert from_file.clean("no way it was honestly red") == "no way it was red"
    assert from_file.clean("no way it was red") == "no way it was red"
    assert HedgeRemover(lexicon=f, negations="drop").clean("no way it was red") == "it was red"
    with pytest.raises(FileNotFoundError):
        HedgeRemover(lexicon="no_such_file.txt")
    with pytest.raises(ValueError, match="empty"):
        HedgeRemover(lexicon=["# only a comment"])


def test_transform_pushes_query_and_counts():
    topics = pd.DataFrame({"qid": ["1", "2", "3"], "query": [
        "I think it was maybe a red book, if I recall.", "a red book", "maybe"]})
    out = HedgeRemover(count=True)(topics)
    assert out["query_0"].tolist() == topics["query"].tolist()
    assert out["query"].tolist() == ["it was a red book.", "a red book", "maybe"]  # all-hedge query kept as is
    assert out["hedge_count"].tolist() == [3, 0, 1]
    assert out.loc[0, "hedge_density"] == pytest.approx(100 * 3 / 11)
    assert out.loc[1, "hedge_density"] == 0.0
    counted = HedgeRemover(count=True, remove=False)(topics)
    assert counted["query"].tolist() == topics["query"].tolist()
    assert counted["hedge_count"].tolist() == [3, 0, 1]


def test_empty_frame_and_bad_input():
    empty = HedgeRemover(count=True)(pd.DataFrame(columns=["qid", "query"]))
    assert len(empty) == 0
    assert {"qid", "query", "query_0", "hedge_count", "hedge_density"} <= set(empty.columns)
    with pytest.raises(Exception, match="query"):
        HedgeRemover()(pd.DataFrame({"qid": ["1"]}))
    with pytest.raises(TypeError, match="query"):
        HedgeRemover()(pd.DataFrame({"qid": ["1"], "query": [3]}))


def test_repr_shows_parameters():
    r = repr(HedgeRemover(extra=["x y"], negations="not", count=True))
    assert r == "HedgeRemover(extra=['x y'], negations='not', count=True)"  # reads as the call that makes it
    assert repr(HedgeRemover()) == "HedgeRemover()"


def test_hedge_statistics_buckets(remover):
    stats = hedge_statistics(["a red book", "maybe red", "I think maybe red, iirc", "maybe " * 13])
    assert stats["n"] == 4 and stats["max"] == 13
    assert stats["buckets"] == {"0": 1, "1-2": 1, "3-5": 1, "6-11": 0, "12+": 1}


def test_real_queries_never_lose_content(remover):
    from pyterrier_tot import get_dataset

    topics = get_dataset("reddit-tomt-books").get_topics("validation").head(80)
    out = remover(topics)
    changed = 0
    for orig, new in zip(out["query_0"], out["query"]):
        assert new.strip()
        lost = words(orig) - words(new)
        hedge_words = Counter()
        for h in remover.find(orig):
            hedge_words += words(h)
        assert not (lost - hedge_words), (orig[:200], lost - hedge_words)
        changed += orig != new
    assert changed > 20  # human ToT queries do carry hedges


def test_composes_in_experiment(tmp_path):
    from pyterrier_tot import BookIndex

    corpus = pd.DataFrame({"docno": ["d1", "d2", "d3"],
                           "title": ["The Glass Lighthouse", "Ember the Dragon", "Bakery Brothers"],
                           "text": ["twins live in a lighthouse on an island",
                                    "a dragon called ember eats books", "two brothers run a bakery in paris"]})
    index = BookIndex(corpus, path=tmp_path)
    topics = pd.DataFrame({"qid": ["q1", "q2"], "query": ["I think maybe a dragon that eats books",
                                                          "if I recall, brothers with a bakery"]})
    qrels = pd.DataFrame({"qid": ["q1", "q2"], "docno": ["d2", "d3"], "label": [1, 1]})
    pipe = HedgeRemover() >> index.bm25()
    res = pt.Experiment([index.bm25(), pipe], topics, qrels, eval_metrics=["recip_rank"], names=["bm25", "hedges"])
    assert res["recip_rank"].tolist() == [1.0, 1.0]
    assert "HedgeRemover" in repr(pipe)
