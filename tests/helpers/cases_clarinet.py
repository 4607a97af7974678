"""The CLARINET stages' cases for ``tests/conventions/test_inspect.py`` and rows for
``tests/conventions/test_bad_inputs.py``."""
import pandas as pd

from pyterrier_tot.clarinet import (
    GENERIC_QUESTIONS,
    ClarificationGame,
    Clarifier,
    LanguagePosterior,
    OracleUser,
    RetrievalDistribution,
    UserSimulator,
)
from tests.helpers.matrix_inputs import Case, queries, results

QRELS = pd.DataFrame({"qid": ["q1", "q2"], "docno": ["b2", "b5"], "label": [1, 1]})


def _with_history(env=None) -> pd.DataFrame:
    return queries().assign(history=[[("Was there a dragon?", "Yes, and a blacksmith I think.")], []])


def _game(env) -> ClarificationGame:
    return ClarificationGame(env.index.bm25(num_results=3), Clarifier(env.llm, env.index, pool_size=2),
                             UserSimulator(env.llm, env.index), QRELS, turns=1, posterior=LanguagePosterior(env.llm),
                             k=3, verbose=False)


CASES = [
    Case("RetrievalDistribution", "score", lambda e: RetrievalDistribution(k=2, temperature=1.0), results),
    Case("Clarifier", "retrieve", lambda e: Clarifier(e.llm, e.index, retriever=e.index.bm25(num_results=3),
                                                      pool_size=2), queries),
    Case("LanguagePosterior", "rewrite", lambda e: LanguagePosterior(e.llm), _with_history),
    Case("LanguagePosterior", "rewrite without an LLM", lambda e: LanguagePosterior(), _with_history),
    Case("Clarifier", "fixed pool", lambda e: Clarifier(None, e.index, retriever=e.index.bm25(num_results=3),
                                                        pool=GENERIC_QUESTIONS), queries),
    Case("ClarificationGame", "play", _game, queries),
    Case("ClarificationGame.turn", "play", lambda e: _game(e).turn(0), queries),
    Case("ClarificationGame", "oracle user, no LLM", lambda e: ClarificationGame(
        e.index.bm25(num_results=3), Clarifier(None, e.index, pool=GENERIC_QUESTIONS), OracleUser(e.index), QRELS,
        turns=1, k=3, verbose=False), queries),
]

# (reads query text, reads the incoming score, looks docnos up in an index)
STAGES = {
    "RetrievalDistribution": (False, True, False),
    "Clarifier": (True, False, False),
    "LanguagePosterior": (True, False, False),
    "ClarificationGame": (True, False, False),
    "ClarificationGame.turn": (True, False, False),
}
