"""Hard-negative mining (gold never a negative), seeded sampling, training examples and clue-form anchors."""
import pandas as pd
import pyterrier as pt
import pytest

from pyterrier_tot.decomposition.rule_clue_extractor import clue_form_queries
from pyterrier_tot.errors import BadInputError
from pyterrier_tot.recipe.expert_training import build_examples, train_biencoder
from pyterrier_tot.recipe.hard_negatives import gold_pairs, mine_hard_negatives, sample_negatives

TOPICS = pd.DataFrame({"qid": ["q1", "q2"], "query": ["dragon and a blacksmith", "a ghost in a lighthouse"]})
QRELS = pd.DataFrame({"qid": ["q1", "q2", "q2"], "docno": ["b2", "b5", "b3"], "label": [1, 1, 0]})


def _run(rows):
    df = pd.DataFrame(rows, columns=["qid", "docno", "score"])
    return pt.Transformer.from_df(pt.model.add_ranks(df))


@pytest.fixture
def miners():
    bm25 = _run([("q1", "b2", 9.0), ("q1", "b1", 8.0), ("q1", "b3", 7.0),
                 ("q2", "b5", 9.0), ("q2", "b3", 8.0), ("q2", "b6", 1.0)])
    dense = _run([("q1", "b4", 0.9), ("q1", "b1", 0.8), ("q1", "b2", 0.7),
                  ("q2", "b6", 0.9), ("q2", "b5", 0.8)])
    return {"bm25": bm25, "dense": dense}


def test_gold_is_never_a_negative(miners):
    mined = mine_hard_negatives(TOPICS, QRELS, miners, depth=3)
    pairs = set(zip(mined["qid"], mined["docno"]))
    assert ("q1", "b2") not in pairs and ("q2", "b5") not in pairs
    # a label-0 judgement is not gold: b3 stays a (judged non-relevant) negative of q2
    assert ("q2", "b3") in pairs
    q1 = mined[mined["qid"] == "q1"].set_index("docno")
    assert set(q1.index) == {"b1", "b3", "b4"}
    assert q1.loc["b1", "source"] == "bm25+dense" and q1.loc["b1", "rank"] == 1   # best rank of both miners
    assert list(mined.columns) == ["qid", "docno", "rank", "source"]
    assert list(gold_pairs(QRELS).itertuples(index=False, name=None)) == [("q1", "b2"), ("q2", "b5")]


def test_depth_and_skip(miners):
    mined = mine_hard_negatives(TOPICS, QRELS, {"bm25": miners["bm25"]}, depth=1, skip=1)
    assert set(zip(mined["qid"], mined["docno"])) == {("q1", "b1"), ("q2", "b3")}


def test_query_without_gold_is_refused(miners):
    topics = pd.concat([TOPICS, pd.DataFrame({"qid": ["q9"], "query": ["no judgement"]})])
    with pytest.raises(BadInputError, match="q9"):
        mine_hard_negatives(topics, QRELS, miners)
    with pytest.raises(ValueError, match="miner"):
        mine_hard_negatives(TOPICS, QRELS, {})


def test_sampling_is_seeded(miners):
    mined = mine_hard_negatives(TOPICS, QRELS, miners, depth=3)
    a, b = sample_negatives(mined, 2, seed=3), sample_negatives(mined, 2, seed=3)
    assert a == b and all(len(v) == 2 for v in a.values())
    assert sample_negatives(mined, 1, top=1) == {"q1": ["b4"], "q2": ["b6"]}   # rank 0 of each query
    assert {q: len(v) for q, v in sample_negatives(mined, 10).items()} == {"q1": 3, "q2": 2}  # what there is


def test_examples_and_clue_forms(tiny_frame):
    negs = {"q1": ["b1", "b3"], "q2": ["b6"]}
    ex = build_examples(TOPICS, QRELS, tiny_frame, negs, n_negatives=2)
    assert len(ex) == 1 and len(ex[0]) == 4          # q2 has one negative: skipped, widths stay equal
    assert ex[0][0] == "dragon and a blacksmith" and ex[0][1].startswith("Dragons of the Red Moon")
    assert ex[0][2].startswith("The Sleepy Kitten")
    clues = pd.DataFrame({"qid": ["q1", "q2", "q3"], "clue_title": ["dragons of some moon", None, None],
                          "clue_genre": ["fantasy", "horror, young adult, ghosts", None], "clue_cover": [None] * 3})
    forms = clue_form_queries(clues)
    assert forms.to_dict("records") == [{"qid": "q1", "query": "dragons of some moon. fantasy"}]  # genres alone: no


def test_mixed_widths_refused():
    with pytest.raises(ValueError, match="same number"):
        train_biencoder([("a", "b"), ("c", "d", "e")])
