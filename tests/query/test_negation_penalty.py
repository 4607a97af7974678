import json

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest

from pyterrier_tot._plumbing.util import shared_data_dir
from pyterrier_tot.query.negation_penalty import NegationPenalty, read_heads

BOOKS = pd.DataFrame({
    "docno": ["memoirs", "forget", "island2", "island1", "ghosts", "kittens", "wild"],
    "title": ["Memoirs of a Teenage Amnesiac", "Forget Me Never", "Return to Gull Island", "Gull Island",
              "The Quiet House", "Four Little Kittens", "Where the Wild Things Are"],
    "text": ["A girl hits her head on the school steps and wakes up with four years of her life missing.",
             "A teenage boy with amnesia pieces his summer back together from a diary.",
             "The sequel to Gull Island: the twins return to the lighthouse a year later.\n\nA horror twist.",
             "Twins spend a summer with their aunt, who keeps the lighthouse on a windy island.",
             "A horror story about a house where the ghosts never speak.",
             "Four kittens play all day while their mother watches.",
             "A boy sails to an island of monsters and becomes their king."],
})


def run_for(query, docnos=None):
    docnos = docnos or BOOKS["docno"].tolist()
    scores = np.linspace(20, 10, len(docnos))
    res = pd.DataFrame({"qid": "q", "query": query, "docno": docnos, "score": scores})
    return pt.model.add_ranks(res)


def penalised(out):
    return set(out.loc[out["negation_penalty"] > 0, "docno"])


def with_text(res):
    return res.merge(BOOKS, on="docno")


def test_packaged_heads():
    heads = read_heads()
    assert {"sequel", "remake", "horror", "animation", "series", "romance", "picture book"} <= set(heads)


@pytest.mark.parametrize("query,expected_heads,expected_phrase", [
    ("it is not Memoirs of a Teenage Amnesiac", [], [("memoir", "teenage", "amnesiac")]),
    ("I'm sure it was not a sequel", [("sequel",)], [("sequel",)]),
    ("It wasn't really a horror, more a mystery", [("horror",)], [("horror",)]),
    ("There was no magic and no dragons at all", [("magic",), ("dragon",)], [("magic",), ("dragon",)]),
    ("not sure if it was a horror", [], []),
    ("I don't remember whether it was a sequel", [], []),
    ("I don't think it was a sequel", [("sequel",)], [("sequel",)]),
    ("I did not like the ending", [], []),
    ("it's not Where the Wild Things Are", [], [("wild", "thing")]),
    ("Not Anne of Green Gables, Pollyanna but similar", [], [("anne", "green", "gable"), ("pollyanna",)]),
    ("She had no talking cat, just a dog", [], [("talking", "cat")]),
    ("a family of four with three kids", [], []),
    ("published no later than 2010, no idea who wrote it", [], []),
    ("It's not part of a series", [("series",)], [("series",)]),
    ("it's definitely not Percy Jackson", [], [("percy", "jackson")]),
])
def test_concepts(query, expected_heads, expected_phrase):
    assert NegationPenalty().concepts(query) == expected_heads
    assert NegationPenalty(mode="phrase").concepts(query) == expected_phrase


def test_title_after_not_penalises_only_that_book():
    res = with_text(run_for("Teen girl loses her memory, it is not Memoirs of a Teenage Amnesiac"))
    out = NegationPenalty(mode="phrase")(res)
    assert penalised(out) == {"memoirs"}
    before = res.set_index("docno")["score"]
    after = out.set_index("docno")["score"]
    assert after["memoirs"] == pytest.approx(before["memoirs"] - 3.0)
    others = [d for d in before.index if d != "memoirs"]
    assert (after[others] == before[others]).all()
    # ranks follow the new scores: memoirs (first at 20.0) falls below forget (18.33)
    ranked = out.sort_values("rank")["docno"].tolist()
    assert ranked.index("memoirs") == 1 and ranked[0] == "forget"
    # heads mode ignores the title (no listed head is negated)
    assert penalised(NegationPenalty()(res)) == set()


def test_head_in_title_or_first_paragraph_only():
    res = with_text(run_for("I'm pretty sure it was not a sequel. Twins and a lighthouse."))
    out = NegationPenalty(w=2.5)(res)
    assert penalised(out) == {"island2"}
    res = with_text(run_for("Twins and a lighthouse; it wasn't a horror"))
    # island2 mentions horror only in its second paragraph; ghosts in its first
    assert penalised(NegationPenalty()(res)) == {"ghosts"}
    assert penalised(NegationPenalty(para_chars=5)(res)) == set()


def test_no_negation_changes_nothing():
    res = with_text(run_for("twins spend a summer at a lighthouse"))
    out = NegationPenalty(mode="phrase")(res)
    assert (out["negation_penalty"] == 0).all()
    pd.testing.assert_series_equal(out.set_index("docno")["score"].sort_index(),
                                   res.set_index("docno")["score"].sort_index())


def test_reads_books_from_index(tmp_path):
    from pyterrier_tot import BookIndex

    index = BookIndex(BOOKS, path=tmp_path)
    res = run_for("Edited to add: It's not Four Little Kittens")
    out = NegationPenalty(index=index, mode="phrase")(res)
    assert penalised(out) == {"kittens"}
    assert "index=" in repr(NegationPenalty(index=index))
    with pytest.raises(KeyError, match="title"):
        NegationPenalty()(res)


def test_real_training_phrasings():
    """Negations written by Reddit users in the training queries hit the named titles and nothing else."""
    path = shared_data_dir() / "reddit-tomt-books" / "train" / "queries.jsonl"
    wanted = {"definitely not Where the Wild Things Are": "wild", "Not Anne of Green Gables": None}
    found = {}
    with open(path, encoding="utf8") as f:
        for line in f:
            rec = json.loads(line)
            text = f"{rec.get('title', '')}\n{rec.get('description', '')}"
            for key in wanted:
                if key in text and key not in found:
                    found[key] = text
    assert set(found) == set(wanted)
    neg = NegationPenalty(mode="phrase")
    res = with_text(run_for(found["definitely not Where the Wild Things Are"]))
    assert penalised(neg(res)) == {"wild"}
    concepts = neg.concepts(found["Not Anne of Green Gables"])
    assert ("anne", "green", "gable") in concepts and ("rebecca", "sunnybrook", "farm") in concepts
    assert penalised(neg(with_text(run_for(found["Not Anne of Green Gables"])))) == set()


def test_several_queries_and_columns_kept():
    a = with_text(run_for("not a sequel"))
    b = with_text(run_for("a sequel with twins")).assign(qid="r")
    out = NegationPenalty()(pd.concat([a, b], ignore_index=True))
    assert penalised(out[out.qid == "q"]) == {"island2"}
    assert penalised(out[out.qid == "r"]) == set()
    assert {"qid", "docno", "score", "rank", "query", "title", "text", "negation_penalty"} <= set(out.columns)
    assert sorted(out[out.qid == "q"]["rank"]) == list(range(len(BOOKS)))


def test_empty_frame_bad_args_and_repr():
    empty = pd.DataFrame(columns=["qid", "query", "docno", "score", "rank"])
    out = NegationPenalty()(empty)
    assert len(out) == 0 and {"qid", "docno", "score", "rank", "negation_penalty"} <= set(out.columns)
    with pytest.raises(ValueError, match="mode"):
        NegationPenalty(mode="any")
    with pytest.raises(ValueError, match="w"):
        NegationPenalty(w=-1)
    with pytest.raises(Exception, match="query"):
        NegationPenalty()(pd.DataFrame({"qid": ["q"], "docno": ["d"], "score": [1.0]}))
    assert repr(NegationPenalty(w=2.0, mode="phrase")).startswith("NegationPenalty(w=2.0, mode='phrase'")


def test_composes_in_experiment(tmp_path):
    from pyterrier_tot import BookIndex

    index = BookIndex(BOOKS, path=tmp_path)
    topics = pd.DataFrame({"qid": ["1"], "query": ["twins at the lighthouse on gull island, not a sequel"]})
    qrels = pd.DataFrame({"qid": ["1"], "docno": ["island1"], "label": [1]})
    bm25 = index.bm25()
    pipe = bm25 >> NegationPenalty(index=index)
    first = bm25(topics).sort_values("rank")["docno"].iloc[0]
    res = pt.Experiment([bm25, pipe], topics, qrels, eval_metrics=["recip_rank"], names=["bm25", "neg"])
    assert first == "island2"  # the sequel wins on words ...
    assert res["recip_rank"].tolist() == [0.5, 1.0]  # ... and the penalty hands rank 1 to the original
