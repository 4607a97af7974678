"""Question pools (sampled at T = 0.8, deduplicated by meaning), EIG against KL, and answer likelihoods from an
LLM's log-probs (``LLM.top_logprobs_many``) with the similarity kernel as the fallback. Stub server; the real
llama.cpp server's log-probs are checked in ``test_clarinet_llama.py``."""
import math

import numpy as np
import pandas as pd
import pytest

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot.clarinet import (  # noqa: E402
    Clarifier,
    LLMLikelihood,
    UtilitySelection,
    expected_information_gain,
    kl_utility,
)
from pyterrier_tot.clarinet.likelihood import calibrate, letter_probs  # noqa: E402
from tests.helpers.books import TINY_BOOKS
from tests.helpers.openai_stub import OpenAIStub, stub_llm

ASYMMETRIC = [[0.05, 0.95], [0.7, 0.3]]  # the likeliest answer barely moves the belief; the rare one moves it far
SYMMETRIC = [[0.2, 0.8], [0.8, 0.2]]


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return ptt.BookIndex(pd.DataFrame(TINY_BOOKS), path=tmp_path_factory.mktemp("selection") / "index")


def test_eig_and_kl_disagree_when_they_should():
    prior = [0.5, 0.5]
    eig = [expected_information_gain(prior, m) for m in (ASYMMETRIC, SYMMETRIC)]
    kl = [kl_utility(prior, m) for m in (ASYMMETRIC, SYMMETRIC)]
    assert eig[0] > eig[1] and kl[1] > kl[0]  # EIG: the informative split in expectation; KL: the sure move
    assert kl[1] == pytest.approx(eig[1])  # a symmetric question moves the belief the same for every answer
    # averaged over the answers, the KL is the EIG
    lik = np.array(ASYMMETRIC)
    p_a = np.array(prior) @ lik
    mean_kl = sum(p_a[a] * sum(p * lik[i, a] / p_a[a] * math.log(lik[i, a] / p_a[a]) for i, p in enumerate(prior))
                  for a in range(2))
    assert mean_kl == pytest.approx(eig[0])

    class Fixed:  # a likelihood that returns the two matrices above
        def matrices(self, pool, docnos, answers):
            return [np.array(ASYMMETRIC), np.array(SYMMETRIC)]

    picks = {}
    for utility in ("eig", "kl"):
        sel = UtilitySelection(utility, k=2, likelihood=Fixed())
        picks[utility] = sel.choose(["asymmetric?", "symmetric?"], docnos=["b1", "b2"], probs=prior,
                                    answer=lambda qs, ds: ["x"] * len(qs))
    assert picks == {"eig": 0, "kl": 1}


def test_pools_are_sampled_at_0_8_and_deduplicated_by_meaning(index):
    reply = ("Was there a dragon?\nDid a dragon appear in the story?\nWas the story set near the sea?\n"
             "Was there a dragon?")

    def encode(texts):  # "dragon" questions share a direction: same meaning
        return np.array([[1.0, 0.0, 0.1] if "dragon" in t else [0.0, 1.0, 0.1] for t in texts])

    with OpenAIStub(lambda m: reply) as stub:
        plain = Clarifier(stub_llm(stub, False), index, pool_size=4, min_pool=1)
        assert plain.ask(pd.DataFrame({"qid": ["q"], "query": ["a dragon book"]}))[1][0] == [
            "Was there a dragon?", "Did a dragon appear in the story?", "Was the story set near the sea?"]
        assert stub.payloads[-1]["temperature"] == 0.8 and plain.duplicates == 1
        by_meaning = Clarifier(stub_llm(stub, False), index, pool_size=4, min_pool=1, encoder=encode)
        pool = by_meaning.ask(pd.DataFrame({"qid": ["q"], "query": ["a dragon book"],
                                            "history": [[("Was the story set near the sea?", "yes")]]}))[1][0]
        assert pool == ["Was there a dragon?"] and by_meaning.duplicates == 3  # paraphrase, repeat, asked before


def test_letter_probs_and_calibration():
    assert np.allclose(letter_probs({"A": math.log(0.6), " B": math.log(0.2), "Z": math.log(0.2)}, 3),
                       [0.75, 0.25, 0])
    assert letter_probs({"The": 0.0}, 3) is None and letter_probs(None, 2) is None
    # every candidate prefers "A" alike: calibration removes the shared bias
    assert np.allclose(calibrate([[0.7, 0.3], [0.7, 0.3]]), [[0.5, 0.5], [0.5, 0.5]])
    cal = calibrate([[0.9, 0.1], [0.5, 0.5]])
    assert cal[0, 0] > 0.5 > cal[1, 0]


def notes_of(messages):
    return messages[-1]["content"].split("Question:")[0]


def test_llm_likelihood_reads_the_answerer_models_log_probs(index, tmp_path):
    def logprobs(messages):  # the dragon book's reader picks A, every other reader picks B
        return {"A": math.log(0.9), "B": math.log(0.1)} if "dragon" in notes_of(messages) else \
            {"A": math.log(0.1), "B": math.log(0.9)}

    with OpenAIStub(lambda m: "A", logprobs=logprobs) as stub:
        llm = stub_llm(stub, tmp_path / "lp.sqlite3")
        assert llm.top_logprobs_many([[{"role": "user", "content": "a ghost?"}]])[0] == pytest.approx(
            {"A": math.log(0.1), "B": math.log(0.9)})
        assert stub.payloads[-1]["logprobs"] is True and stub.payloads[-1]["max_tokens"] == 1
        lik = LLMLikelihood(llm, index)
        [m] = lik.matrices(["Was there a dragon?"], ["b2", "b3"], [["A dragon.", "A detective."]])
        assert m.shape == (2, 3) and np.allclose(m.sum(axis=1), 1)  # two answers and "I don't remember."
        assert m[0, 0] > m[1, 0] and m[1, 1] > m[0, 1] and lik.fallbacks == 0
        requests = stub.requests
        lik.matrices(["Was there a dragon?"], ["b2", "b3"], [["A dragon.", "A detective."]])
        assert stub.requests == requests  # cached


def test_without_log_probs_the_kernel_takes_over(index):
    def encode(texts):
        return np.array([[1.0, 0.0] if "dragon" in t else [0.0, 1.0] for t in texts])

    with OpenAIStub(lambda m: "A", logprobs=False) as stub:  # a server that sends no logprobs
        llm = stub_llm(stub, False)
        with pytest.warns(UserWarning, match="no logprobs"):
            assert llm.top_logprobs_many([[{"role": "user", "content": "x"}]]) == [None]
        assert llm.usage.failures == 1 and stub.requests == 1  # not retried: it would answer the same
        llm = stub_llm(stub, False, max_consecutive_failures=3)
        lik = LLMLikelihood(llm, index, encoder=encode)
        with pytest.warns(UserWarning, match="similarity kernel"):
            ms = lik.matrices(["q1?", "q2?"], ["b2", "b3"], [["A dragon.", "A detective."]] * 2)
        assert lik.fallbacks == 2 and np.allclose(ms[0][0], [1 / (1 + math.exp(-10)), 1 / (1 + math.exp(10))])
        sent = stub.requests
        lik.matrices(["q3?"], ["b2", "b3"], [["A dragon.", "A detective."]])
        assert stub.requests == sent  # after the breaker opened, no more requests


def test_eig_over_a_fixed_pool_asks_what_tells_the_candidates_apart(index):
    def encode(texts):  # bag of two topics
        return np.array([[t.lower().count("dragon") + 0.01, t.lower().count("ghost") + 0.01] for t in texts])

    class Answerer:  # the system's model of a user playing each candidate
        def answer(self, questions, docnos):
            return [("a dragon" if d == "b2" else "a ghost") if "dragon" in q else "yes"
                    for q, d in zip(questions, docnos)]

    pool = ["Did you read it?", "Was there a dragon or a ghost?"]
    for utility in ("eig", "kl"):
        clar = Clarifier(None, index, pool=pool, selection=UtilitySelection(utility, k=2), answerer=Answerer(),
                         encoder=encode)
        cands = {"q": (["b2", "b5"], np.array([0.5, 0.5]))}
        chosen, pools, _ = clar.ask(pd.DataFrame({"qid": ["q"], "query": ["a monster in it"]}), cands)
        assert chosen == ["Was there a dragon or a ghost?"] and pools[0] == pool
        assert clar.selection.last_scores[1] > clar.selection.last_scores[0] == pytest.approx(0)
