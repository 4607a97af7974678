"""The deterministic oracle user (and the controls beside it) as a game's simulator, and the per-query report:
paired differences with scipy's t-test and Wilcoxon, split by turn-0 rank."""

import numpy as np
import pandas as pd
import pytest

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot.clarinet import (  # noqa: E402
    GENERIC_QUESTIONS,
    ClarificationGame,
    Clarifier,
    ConstantUser,
    ExplicitPosterior,
    FirstSelection,
    OracleUser,
    WrongBookUser,
    compare,
    paired,
    paired_table,
    per_query,
    turn_table,
)
from pyterrier_tot.clarinet.simulator import NO_MEMORY, sentences  # noqa: E402
from tests.helpers.books import TINY_BOOKS

CLOCKWORK = {"docno": "c1", "title": "The Clockwork Bird", "author": "Ida Penn", "genres": "fantasy", "year": 1999,
             "text": "Tom Finch lives in London with his grumpy aunt. Tom builds The Clockwork Bird, which can talk. "
                     "In the end the bird flies out to sea and never comes back."}
BOOKS = TINY_BOOKS + [CLOCKWORK, {"docno": "c2", "title": "Empty", "author": "", "genres": "", "year": None,
                                  "text": ""}]


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return ptt.BookIndex(pd.DataFrame(BOOKS), path=tmp_path_factory.mktemp("oracle") / "index")


def test_the_oracle_answers_with_the_closest_sentence_without_names_cut_to_n_words(index):
    oracle = OracleUser(index, words=5)
    assert sentences(CLOCKWORK["text"])[1] == "Tom builds The Clockwork Bird, which can talk."
    answers = oracle.answer(["What did he build?", "How did it end?", "Where did he live?", "What happened?"],
                            ["c1", "c1", "c1", "c2"])
    assert answers[0] == "builds, which can talk."  # "Tom" (named twice) and the title are removed
    assert answers[1] == "In the end the bird"  # five words
    assert answers[2] == "Finch lives in London with"  # London is a place, not a name of the book
    assert answers[3] == NO_MEMORY  # no description, nothing to say
    assert oracle.answer(["What did he build?"], ["c1"]) == answers[:1]  # deterministic

    def encode(texts):  # a direction per topic: the encoder decides, not the words
        return np.array([[("sea" in t) + 0.01, ("aunt" in t or "looked after" in t) + 0.01] for t in texts])

    assert OracleUser(index, encoder=encode, words=3).answer(["Who looked after him?"], ["c1"]) == ["Finch lives in"]


def test_controls_answer_about_a_wrong_book_or_not_at_all(index):
    wrong = WrongBookUser(OracleUser(index), index, seed=1)
    other = wrong.other("b2")
    assert other != "b2" and wrong.other("b2") == other  # seeded per book
    question = "What happens in the story?"
    assert wrong.answer([question], ["b2"]) == OracleUser(index).answer([question], [other])
    assert ConstantUser("No.").answer(["a?", "b?"], ["b1", "b2"]) == ["No.", "No."]


def test_oracle_games_raise_mrr_and_the_report_is_paired_per_query(index):
    topics = pd.DataFrame({"qid": ["q1", "q2", "q3"], "query": ["a book I read as a kid", "an old book with a night",
                                                                 "some story from school"]})
    qrels = pd.DataFrame({"qid": ["q1", "q2", "q3"], "docno": ["b5", "b3", "b4"], "label": 1})
    games = {}
    for name, user, post in (("oracle", OracleUser(index), None), ("silent", ConstantUser(), None),
                             ("oracle explicit", OracleUser(index), ExplicitPosterior(index.dense_scorer()))):
        clarifier = Clarifier(None, index, pool=GENERIC_QUESTIONS[:3], selection=FirstSelection())
        games[name] = ClarificationGame(index.bm25(num_results=8), clarifier, user, qrels, turns=3, posterior=post,
                                        k=8, verbose=False)
    perq = per_query(games, topics, qrels)
    table = turn_table(games, topics, qrels, perq=perq)
    oracle = table[table["name"] == "oracle"].set_index("turn")["MRR"]
    assert oracle[3] > oracle[0]  # grounded answers find the books
    silent = table[table["name"] == "silent"]["MRR"]
    assert np.allclose(silent, silent.iloc[0])  # "I don't remember." changes nothing
    pt_ = paired_table(perq, split=True)
    row = pt_[(pt_["name"] == "oracle") & (pt_["turn"] == 3) & (pt_["queries"] == "all")].iloc[0]
    assert row["diff"] == pytest.approx(oracle[3] - oracle[0]) and row["n"] == 3
    assert set(pt_["queries"]) == {"all", "rank 1", "rank > 1"}
    assert pt_.groupby(["name", "turn"])["n"].apply(lambda n: n.iloc[1] + n.iloc[2] == n.iloc[0]).all()
    assert compare(perq, "oracle", "silent", 3)["diff"] == pytest.approx(oracle[3] - silent.iloc[-1])
    tr = games["oracle"].transcript
    assert (tr.loc[tr["turn"] == 1, "question"] == GENERIC_QUESTIONS[0]).all()


def test_paired_agrees_with_scipy():
    from scipy import stats

    a = pd.Series([0.5, 1.0, 0.2, 0.9, 0.3], index=list("abcde"))
    b = pd.Series([0.25, 1.0, 0.1, 0.5, 0.5], index=list("abcde"))
    out = paired(a, b)
    assert out["better"] == 3 and out["worse"] == 1 and out["diff"] == pytest.approx((a - b).mean())
    assert out["p_t"] == pytest.approx(stats.ttest_rel(a, b).pvalue)
    assert out["p_wilcoxon"] == pytest.approx(stats.wilcoxon(a - b).pvalue)
    assert paired(a, a)["p_t"] == 1.0 and paired(a, a)["p_wilcoxon"] == 1.0
