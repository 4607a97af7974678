"""CLARINET with a scripted OpenAI-compatible stub: distribution, EIG / KL arithmetic, leak checks, the game loop,
its history, posterior rewriting and free replays."""
import math
import warnings

import numpy as np
import pandas as pd
import pytest

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot.clarinet import (  # noqa: E402
    ClarificationGame,
    Clarifier,
    ExplicitPosterior,
    LanguagePosterior,
    RandomSelection,
    RetrievalDistribution,
    UserSimulator,
    UtilitySelection,
    expected_information_gain,
    kl_utility,
    plot_turns,
    softmax,
    top_mass,
    turn_table,
)
from pyterrier_tot.clarinet.leaks import forbidden, leaked, remove_names  # noqa: E402
from pyterrier_tot.clarinet.questions import FALLBACK_QUESTIONS, parse_questions  # noqa: E402
from pyterrier_tot.clarinet.simulator import NO_MEMORY  # noqa: E402
from tests.helpers.books import TINY_BOOKS
from tests.helpers.clarinet_script import QRELS, TOPICS, responder
from tests.helpers.openai_stub import OpenAIStub, stub_llm


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("clarinet")
    index = ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp / "index")
    with OpenAIStub(responder) as stub:
        yield index, stub_llm(stub, tmp / "llm.sqlite3"), stub


# -- arithmetic ---------------------------------------------------------------------------------------------------
def test_softmax_temperature_and_top_mass():
    p = softmax([2.0, 1.0, 0.0], 1.0)
    e = [math.exp(2), math.exp(1), 1.0]
    assert np.allclose(p, [x / sum(e) for x in e])
    assert softmax([2.0, 1.0], 0.01)[0] > 0.999  # a low temperature puts the mass on the best
    assert top_mass([0.3, 0.25, 0.2, 0.25]) == 2 and top_mass([0.9, 0.1]) == 1 and top_mass([0.1] * 10) == 3
    with pytest.raises(ValueError):
        softmax([1.0], 0)


def test_retrieval_distribution_keeps_top_k_with_probabilities():
    res = pd.DataFrame({"qid": ["a"] * 4 + ["b"], "docno": ["d1", "d2", "d3", "d4", "d1"],
                        "score": [4.0, 3.0, 2.0, 1.0, 0.5]})
    out = RetrievalDistribution(k=3, temperature=1.0)(res)
    a = out[out["qid"] == "a"].sort_values("rank")
    assert a["docno"].tolist() == ["d1", "d2", "d3"] and np.isclose(a["prob"].sum(), 1)
    assert np.allclose(a["prob"], softmax([4.0, 3.0, 2.0], 1.0))
    assert out.loc[out["qid"] == "b", "prob"].tolist() == [1.0]


def test_eig_and_kl_against_a_hand_computed_example():
    # two equally likely books, each answering for sure its own way: one bit (ln 2) either way
    assert expected_information_gain([0.5, 0.5], [[1, 0], [0, 1]]) == pytest.approx(math.log(2))
    assert kl_utility([0.5, 0.5], [[1, 0], [0, 1]]) == pytest.approx(math.log(2))
    # a question both books answer alike tells nothing
    assert expected_information_gain([0.5, 0.5], [[0.5, 0.5], [0.5, 0.5]]) == pytest.approx(0)
    assert kl_utility([0.5, 0.5], [[0.5, 0.5], [0.5, 0.5]]) == pytest.approx(0)
    # prior (.75, .25), p(a|y1) = (.8, .2), p(a|y2) = (.4, .6): p(a) = (.7, .3)
    h = lambda *p: -sum(x * math.log(x) for x in p)  # noqa: E731
    eig = h(0.7, 0.3) - (0.75 * h(0.8, 0.2) + 0.25 * h(0.4, 0.6))      # = 0.0673...
    assert expected_information_gain([0.75, 0.25], [[0.8, 0.2], [0.4, 0.6]]) == pytest.approx(eig)
    assert eig == pytest.approx(0.0673, abs=1e-4)
    # a* = the first answer (p = .7): posterior (.6/.7, .1/.7)
    kl = 0.6 / 0.7 * math.log((0.6 / 0.7) / 0.75) + 0.1 / 0.7 * math.log((0.1 / 0.7) / 0.25)  # = 0.0345...
    assert kl_utility([0.75, 0.25], [[0.8, 0.2], [0.4, 0.6]]) == pytest.approx(kl)
    assert kl == pytest.approx(0.0345, abs=1e-4)


def test_utility_selection_prefers_the_question_that_splits_the_candidates():
    pool = ["same for all?", "splits them?"]

    def answer(questions, docnos):
        return [f"{q} {d}" if q == "splits them?" else "no idea" for q, d in zip(questions, docnos)]

    def encode(texts):  # one direction per distinct answer
        vocab = sorted(set(texts))
        return np.eye(len(vocab))[[vocab.index(t) for t in texts]]

    for utility in ("eig", "kl"):
        sel = UtilitySelection(utility, k=2)
        assert sel.choose(pool, docnos=["b1", "b2"], probs=[0.5, 0.5], answer=answer, encode=encode) == 1
        assert sel.last_scores[1] > sel.last_scores[0] == pytest.approx(0)
    assert RandomSelection(3).choose(pool, qid="q1", turn=1) == RandomSelection(3).choose(pool, qid="q1", turn=1)
    with pytest.raises(ValueError, match="answerer"):
        Clarifier(None, pool=pool, selection=UtilitySelection("eig"))


# -- leaks --------------------------------------------------------------------------------------------------------
def test_leak_check_names_titles_and_characters():
    names = forbidden("The Haunted Lighthouse (Ghosts, #2)",
                      "Teenagers meet old Captain Morrow at night. Morrow keeps the light.")
    assert "haunted lighthouse" in names and "morrow" in names
    assert leaked("Is it The Haunted-Lighthouse?", names) and leaked("was Morrow in it?", names)
    assert not leaked("Was there a lighthouse?", names)
    assert remove_names("Maybe The Haunted Lighthouse, with Morrow's dog.", names) == "Maybe, with dog."
    assert parse_questions("1. Is it scary?\n- Was it long ago? yes\nnot a question") == ["Is it scary?",
                                                                                         "Was it long ago?"]


def test_clarifier_drops_questions_naming_a_shown_book(setup):
    index, llm, _ = setup
    clarifier = Clarifier(llm, index, retriever=index.bm25(num_results=5), pool_size=4)
    out = clarifier(TOPICS)
    assert list(out["qid"]) == ["q1", "q2"] and out["question"].str.endswith("?").all()
    _, pools, texts = clarifier.ask(TOPICS)
    assert "Dragons of the Red Moon" in texts[0] and "probability" in texts[0]  # q1's best guess is shown
    assert all("Red Moon" not in q for q in pools[0]) and len(pools[0]) == 3
    for pool, text in zip(pools, texts):  # a book not shown may be named (the questioner cannot know it)
        assert 1 <= len(pool) <= 4 and ("Red Moon" in text) == (len(pool) == 3)
    assert clarifier.leaks > 0


def test_clarifier_falls_back_to_a_generic_question_when_every_question_leaks(setup):
    index, llm, _ = setup
    clarifier = Clarifier(llm, index, pool_size=3, max_regenerations=1)
    frame = TOPICS.assign(forbid=[["a dragon in the story"], ["a dragon in the story"]],
                          history=[[("Was there a dragon in the story?", "yes")]] * 2)
    frame["forbid"] = [["Was there a dragon"], ["Was there a dragon"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chosen, pools, _ = clarifier.ask(frame)
    assert all("dragon" not in q for q in chosen)
    with OpenAIStub(lambda m: "Is it The Sleepy Kitten?") as stub:
        only_leaks = Clarifier(stub_llm(stub, False), index, retriever=index.bm25(num_results=3))
        with pytest.warns(UserWarning, match="generic question"):
            chosen, _, _ = only_leaks.ask(pd.DataFrame({"qid": ["k"], "query": ["kittens napping all day"]}))
        assert chosen == [FALLBACK_QUESTIONS[0]] and only_leaks.fallbacks == 1 and stub.requests == 2


def test_simulator_regenerates_then_withholds_a_leaking_answer_instead_of_garbling_it(setup):
    index, llm, _ = setup
    sim = UserSimulator(llm, index, max_regenerations=1)
    answers = sim.answer(["Was there a dragon?", "Who was in it?"], ["b2", "b2"])
    assert all(not leaked(a, forbidden("Dragons of the Red Moon")) for a in answers)
    assert sim.leaks == 2 and sim.withheld == 1  # the first answer leaked twice, then was withheld
    assert answers[0] == NO_MEMORY  # before: "Yes, there was a dragon, maybe it was that?" (redacted)
    assert answers[1] == "I believe it was a young person, somewhere far away."


# -- posteriors and the game ----------------------------------------------------------------------------------------
def test_language_posterior_rewrites_with_the_history_and_keeps_query_0(setup):
    _, llm, _ = setup
    frame = TOPICS.assign(history=[[("Was there a dragon?", "yes")], []])
    out = LanguagePosterior(llm)(frame)  # conditions on the request by default
    assert out["query_0"].tolist() == TOPICS["query"].tolist()
    rewrite = "A fantasy book about a young blacksmith and a dragon."
    assert out.loc[0, "query"] == f"{rewrite} {TOPICS.loc[0, 'query']}"
    assert out.loc[1, "query"] == TOPICS.loc[1, "query"]  # no turns yet: unchanged
    assert LanguagePosterior(llm, combine="replace")(frame).loc[0, "query"] == rewrite  # the paper's option
    assert LanguagePosterior(llm, combine="append")(frame).loc[0, "query"] == f"{TOPICS.loc[0, 'query']} {rewrite}"


@pytest.mark.parametrize("mode", ["language", "explicit"])
def test_a_two_turn_game_records_history_results_and_replays_for_free(setup, mode, tmp_path):
    index, llm, stub = setup
    retriever = index.bm25(num_results=6)
    posterior = LanguagePosterior(llm) if mode == "language" else ExplicitPosterior(index.dense_scorer())
    game = ClarificationGame(retriever, Clarifier(llm, index, pool_size=3), UserSimulator(llm, index), QRELS,
                             turns=2, posterior=posterior, k=6, name=mode, verbose=False)
    game.play(TOPICS)
    tr = game.transcript
    assert len(tr) == 2 * 3 and set(tr["turn"]) == {0, 1, 2}
    for qid, title in (("q1", "Dragons of the Red Moon"), ("q2", "The Haunted Lighthouse")):
        asked = tr[(tr["qid"] == qid) & (tr["turn"] > 0)]
        assert asked["question"].notna().all() and asked["question"].nunique() == 2  # never the same twice
        assert all(not leaked(str(x), forbidden(title)) for x in asked[["question", "answer"]].values.ravel())
    if mode == "language":
        assert tr.loc[tr["turn"] == 2, "query"].str.startswith("A fantasy book about a young blacksmith and a "
                                                               "dragon.").all()
    for t in range(3):
        res = game.results(t)
        assert set(res["qid"]) == {"q1", "q2"} and {"docno", "score", "rank"} <= set(res.columns)
    table = turn_table({mode: game}, TOPICS, QRELS)
    assert list(table["turn"]) == [0, 1, 2] and (table["cum_top1"] >= table["top1"]).all()
    assert table["cum_top1"].is_monotonic_increasing
    calls = stub.requests
    again = ClarificationGame(retriever, Clarifier(llm, index, pool_size=3), UserSimulator(llm, index), QRELS,
                              turns=2, posterior=posterior, k=6, verbose=False)
    replay = turn_table({mode: again}, TOPICS, QRELS)
    assert stub.requests == calls  # every LLM call came from the cache
    assert np.allclose(replay[["MRR", "top1"]], table[["MRR", "top1"]])
    assert again.transcript["question"].tolist() == tr["question"].tolist()
    fig = plot_turns(table, tmp_path / "turns.png")
    assert (tmp_path / "turns.png").stat().st_size > 1000 and fig is not None


def test_a_game_needs_the_gold_book(setup):
    index, llm, _ = setup
    game = ClarificationGame(index.bm25(), Clarifier(llm, index), UserSimulator(llm, index), QRELS.head(1),
                             posterior=LanguagePosterior(llm), verbose=False)
    with pytest.raises(ptt.BadInputError, match="q2"):
        game.play(TOPICS)
    assert len(game(TOPICS.iloc[0:0])) == 0
