"""Choosing the next question from a generated pool: at random, by expected information gain (EIG), or by KL
utility. EIG and KL need, for each question, the answer each top candidate book would give (the user simulator
pretending that candidate is the book) and a likelihood of each such answer under each candidate.

The likelihood comes from the answers themselves, as in CLARINET's KL baseline: candidate ``i`` is taken to give
an answer like its own, so ``p(a_j | q, y_i) = softmax_j(cos(E a_i, E a_j) / tau)`` over the simulated answers
``a_1..a_n`` (``E``: a sentence encoder). With that matrix ``L`` (rows: candidates, columns: answers) and the
current belief ``p``:

- ``EIG(q) = H(A) - sum_i p_i H(A | y_i)`` with ``p(a) = sum_i p_i L[i, a]``;
- ``KL(q) = KL(p(y | q, a*) || p(y))`` for the most probable answer ``a*``: how far the belief would move
  (in expectation over all answers the KL equals the EIG, so the utility is taken at the likeliest answer).
"""
from __future__ import annotations

import random
from typing import Callable, List, Optional, Sequence

import numpy as np

from pyterrier_tot.clarinet.distribution import softmax


def entropy(p) -> float:
    p = np.asarray(p, dtype=float)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def answer_likelihoods(embeddings, tau: float = 0.1) -> np.ndarray:
    """``L[i, j] = p(a_j | y_i)``: row-wise softmax of the cosine similarities of the answers at ``tau``."""
    e = np.asarray(embeddings, dtype=float)
    e = e / np.clip(np.linalg.norm(e, axis=1, keepdims=True), 1e-12, None)
    sims = e @ e.T
    return np.vstack([softmax(row, tau) for row in sims])


def posterior(prior, likelihood_row) -> np.ndarray:
    """Bayes: ``p(y | a) ∝ p(a | y) p(y)`` (a zero total keeps the prior)."""
    prior = np.asarray(prior, dtype=float)
    post = prior * np.asarray(likelihood_row, dtype=float)
    total = post.sum()
    return post / total if total > 0 else prior / prior.sum()


def expected_information_gain(prior, lik) -> float:
    """``H(A) - E_y H(A | y)`` for belief ``prior`` over the candidates and ``lik[i, j] = p(a_j | y_i)``."""
    prior = np.asarray(prior, dtype=float)
    prior = prior / prior.sum()
    lik = np.asarray(lik, dtype=float)
    p_a = prior @ lik
    return entropy(p_a) - float(sum(pi * entropy(row) for pi, row in zip(prior, lik)))


def kl_utility(prior, lik) -> float:
    """``KL(p(y | a*) || p(y))`` for the most probable answer ``a* = argmax_a sum_i p_i lik[i, a]``."""
    prior = np.asarray(prior, dtype=float)
    prior = prior / prior.sum()
    lik = np.asarray(lik, dtype=float)
    a_star = int(np.argmax(prior @ lik))
    post = posterior(prior, lik[:, a_star])
    mask = post > 0
    return float((post[mask] * np.log(post[mask] / prior[mask])).sum())


UTILITIES = {"eig": expected_information_gain, "kl": kl_utility}


class RandomSelection:
    """A question drawn uniformly from the pool (seeded per qid and turn, so a replayed game asks the same)."""
    name = "random"
    needs_answers = False

    def __init__(self, seed: int = 0):
        self.seed = int(seed)

    def choose(self, pool: Sequence[str], qid: str = "", turn: int = 0, **_) -> int:
        return random.Random(f"{self.seed}/{qid}/{turn}").randrange(len(pool)) if pool else -1

    def __repr__(self):
        return f"RandomSelection(seed={self.seed})"


class UtilitySelection:
    """The pool question with the highest utility (``"eig"`` or ``"kl"``) over the top ``k`` candidates.
    ``answer(questions, docnos) -> answers`` simulates each candidate's answer (the game passes its
    simulator); ``encode(texts) -> array`` embeds them (the game passes the retriever's sentence encoder)."""
    needs_answers = True

    def __init__(self, utility: str = "eig", k: int = 5, tau: float = 0.1):
        if utility not in UTILITIES:
            raise ValueError(f"utility must be one of {sorted(UTILITIES)}, not {utility!r}")
        self.utility, self.k, self.tau = utility, int(k), float(tau)
        self.name = utility
        self.last_scores: List[float] = []

    def scores(self, pool: Sequence[str], docnos: Sequence[str], probs, answer: Callable, encode: Callable
               ) -> List[float]:
        docnos, probs = list(docnos)[: self.k], np.asarray(probs, dtype=float)[: self.k]
        if len(docnos) < 2:
            return [0.0] * len(pool)  # one candidate: no question can tell it from another
        answers = answer([q for q in pool for _ in docnos], [d for _ in pool for d in docnos])
        emb = np.asarray(encode(answers), dtype=float)
        fn, n = UTILITIES[self.utility], len(docnos)
        return [fn(probs, answer_likelihoods(emb[i * n:(i + 1) * n], self.tau)) for i in range(len(pool))]

    def choose(self, pool: Sequence[str], docnos: Sequence[str] = (), probs=(), answer: Optional[Callable] = None,
               encode: Optional[Callable] = None, **_) -> int:
        if not pool:
            return -1
        self.last_scores = self.scores(pool, docnos, probs, answer, encode)
        return int(np.argmax(self.last_scores))

    def __repr__(self):
        return f"UtilitySelection({self.utility!r}, k={self.k}, tau={self.tau})"


def selection(name: str, **kwargs):
    """``"random"``, ``"eig"`` or ``"kl"`` as a selection object."""
    if name == "random":
        return RandomSelection(**kwargs)
    return UtilitySelection(name, **kwargs)
