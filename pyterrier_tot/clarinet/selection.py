"""Choosing the next question from a pool: in order, at random, by expected information gain (EIG), or by KL
utility. EIG and KL need, for each question, the answer each top candidate book would give (a simulated user
playing that candidate: the system's own model of a user, never the gold book) and the likelihood
``L[i, j] = p(a_j | q, y_i)`` of each such answer under each candidate (:mod:`~pyterrier_tot.clarinet.likelihood`:
an LLM's log-probabilities, or the answer-similarity kernel). With ``L`` and the current belief ``p``:

- ``EIG(q) = H(A) - sum_i p_i H(A | y_i)`` with ``p(a) = sum_i p_i L[i, a]``;
- ``KL(q) = KL(p(y | q, a*) || p(y))`` for the most probable answer ``a*``: how far the belief would move
  (in expectation over all answers the KL equals the EIG, so the utility is taken at the likeliest answer).

EIG prefers questions whose answers split the belief evenly; KL prefers questions whose likeliest answer moves
it most, e.g. one that would rule out the favourite even when that is not the likeliest outcome of a split.
"""
from __future__ import annotations

import random
from typing import Callable, List, Optional, Sequence

import numpy as np

from pyterrier_tot.clarinet.likelihood import kernel_likelihoods


def entropy(p) -> float:
    p = np.asarray(p, dtype=float)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


#: the kernel likelihood under its older name
answer_likelihoods = kernel_likelihoods


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
    needs_answers = needs_encoder = False

    def __init__(self, seed: int = 0):
        self.seed = int(seed)

    def choose(self, pool: Sequence[str], qid: str = "", turn: int = 0, **_) -> int:
        return random.Random(f"{self.seed}/{qid}/{turn}").randrange(len(pool)) if pool else -1

    def __repr__(self):
        return f"RandomSelection(seed={self.seed})"


class FirstSelection:
    """The first question of the pool (a fixed list asked in order: the pool drops questions already asked)."""
    name = "first"
    needs_answers = needs_encoder = False

    def choose(self, pool: Sequence[str], **_) -> int:
        return 0 if pool else -1

    def __repr__(self):
        return "FirstSelection()"


class UtilitySelection:
    """The pool question with the highest utility (``"eig"`` or ``"kl"``) over the top ``k`` candidates.
    ``answer(questions, docnos) -> answers`` simulates each candidate's answer (the clarifier's ``answerer``);
    ``likelihood``: an :class:`~pyterrier_tot.clarinet.likelihood.LLMLikelihood` (the answerer model's
    log-probs), or ``None`` for the similarity kernel at ``tau`` over ``encode(texts) -> array`` (the clarifier's
    ``encoder``)."""
    needs_answers = True

    def __init__(self, utility: str = "eig", k: int = 5, tau: float = 0.1, likelihood=None):
        if utility not in UTILITIES:
            raise ValueError(f"utility must be one of {sorted(UTILITIES)}, not {utility!r}")
        self.utility, self.k, self.tau, self.likelihood = utility, int(k), float(tau), likelihood
        self.name = utility
        self.needs_encoder = likelihood is None
        self.last_scores: List[float] = []

    def matrices(self, pool: Sequence[str], docnos: Sequence[str], answer: Callable,
                 encode: Optional[Callable]) -> List[np.ndarray]:
        """``L`` of every pool question over the candidates ``docnos``."""
        n = len(docnos)
        flat = answer([q for q in pool for _ in docnos], [d for _ in pool for d in docnos])
        answers = [flat[i * n:(i + 1) * n] for i in range(len(pool))]
        if self.likelihood is not None:
            return self.likelihood.matrices(pool, docnos, answers)
        emb = np.asarray(encode(flat), dtype=float)
        return [kernel_likelihoods(emb[i * n:(i + 1) * n], self.tau) for i in range(len(pool))]

    def scores(self, pool: Sequence[str], docnos: Sequence[str], probs, answer: Callable,
               encode: Optional[Callable] = None) -> List[float]:
        docnos, probs = list(docnos)[: self.k], np.asarray(probs, dtype=float)[: self.k]
        if len(docnos) < 2:
            return [0.0] * len(pool)  # one candidate: no question can tell it from another
        fn = UTILITIES[self.utility]
        return [fn(probs, lik) for lik in self.matrices(pool, docnos, answer, encode)]

    def choose(self, pool: Sequence[str], docnos: Sequence[str] = (), probs=(), answer: Optional[Callable] = None,
               encode: Optional[Callable] = None, **_) -> int:
        if not pool:
            return -1
        self.last_scores = self.scores(pool, docnos, probs, answer, encode)
        return int(np.argmax(self.last_scores))

    def __repr__(self):
        how = f", likelihood={self.likelihood!r}" if self.likelihood is not None else f", tau={self.tau}"
        return f"UtilitySelection({self.utility!r}, k={self.k}{how})"


def selection(name: str, **kwargs):
    """``"first"``, ``"random"``, ``"eig"`` or ``"kl"`` as a selection object."""
    if name == "random":
        return RandomSelection(**kwargs)
    if name == "first":
        return FirstSelection()
    return UtilitySelection(name, **kwargs)
