"""Answer likelihoods for EIG and KL: ``L[i, j] = p(a_j | q, y_i)``, how likely the user looking for candidate
``y_i`` is to give answer ``a_j`` (the answers the simulated user gave playing each candidate, ``a_1..a_n``).

- :func:`kernel_likelihoods` (the fallback, CLARINET's KL baseline): candidate ``i`` is taken to answer like its
  own answer, ``L[i, j] = softmax_j(cos(E a_i, E a_j) / tau)`` with a sentence encoder ``E``. Symmetric in the
  answers; two candidates that answer alike cannot be told apart.
- :class:`LLMLikelihood` (the answerer model's own probabilities): the LLM reads candidate ``y_i``'s notes and
  the question and picks, as a letter, which of the distinct answers (plus "I don't remember") its reader would
  give; the log-probabilities of the letters (``LLM.top_logprobs_many``) are the row ``L[i, :]``. A small
  model's preference for the first letters is the same for every candidate, so each column is divided by its
  mean over the candidates (contextual calibration) before the rows are normalised. Requests are sent grouped by
  candidate, so a local server reuses the notes' prefix. A request without log-probs (a server that sends none,
  or a failure) falls back to the kernel for that question (``.fallbacks``).
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Union

import numpy as np

from pyterrier_tot.clarinet.cards import book_card
from pyterrier_tot.clarinet.distribution import softmax
from pyterrier_tot.errors import LLMUnavailableError
from pyterrier_tot.llm.templates import load_prompt

LETTERS = "ABCDEFGHIJ"


def kernel_likelihoods(embeddings, tau: float = 0.1) -> np.ndarray:
    """``L[i, j] = p(a_j | y_i)``: row-wise softmax of the cosine similarities of the answers at ``tau``."""
    e = np.asarray(embeddings, dtype=float)
    e = e / np.clip(np.linalg.norm(e, axis=1, keepdims=True), 1e-12, None)
    return np.vstack([softmax(row, tau) for row in e @ e.T])


def letter_probs(top: Optional[dict], n: int) -> Optional[np.ndarray]:
    """The probabilities of the option letters ``A..`` (n of them) in a ``{token: logprob}`` dict, normalised;
    ``None`` when no option letter is among the tokens."""
    if not top:
        return None
    p = np.zeros(n)
    for token, lp in top.items():
        t = str(token).strip().strip("().:*").upper()
        if len(t) == 1 and t in LETTERS[:n]:
            p[LETTERS.index(t)] += float(np.exp(lp))
    return p / p.sum() if p.sum() > 0 else None


def calibrate(lik: np.ndarray, floor: float = 1e-3) -> np.ndarray:
    """Each column divided by its mean over the rows (a bias shared by every candidate cancels), rows renormalised."""
    lik = np.clip(np.asarray(lik, dtype=float), floor, None)
    lik = lik / lik.mean(axis=0, keepdims=True)
    return lik / lik.sum(axis=1, keepdims=True)


class LLMLikelihood:
    """Answer likelihoods from an LLM's log-probabilities (see the module doc). ``index``: where candidate notes
    come from; ``encoder``: for the kernel fallback."""

    def __init__(self, llm, index, encoder: Optional[Callable] = None, tau: float = 0.1, description_chars: int = 400,
                 calibrated: bool = True, null_answer: str = "I don't remember.",
                 prompt_dir: Union[str, Path, None] = None):
        self.llm, self.index, self.encoder = llm, index, encoder
        self.tau, self.description_chars, self.calibrated = float(tau), int(description_chars), calibrated
        self.null_answer = null_answer
        self.prompt = load_prompt("clarinet_choice", prompt_dir)
        self.fallbacks = self.requests = 0
        self._broken = False

    def _notes(self, docnos: Sequence[str]) -> dict:
        books = self.index.books_of(list(docnos))
        return {str(b["docno"]): book_card(b, title=False, max_chars=self.description_chars)
                for _, b in books.iterrows()}

    def options(self, answers: Sequence[str]) -> List[str]:
        """The distinct answers (in order of first appearance), then the null answer."""
        out = list(dict.fromkeys(" ".join(str(a).split()) for a in answers))
        out = [a for a in out if a.lower() != self.null_answer.lower()][: len(LETTERS) - 1]
        return out + [self.null_answer]

    def matrices(self, pool: Sequence[str], docnos: Sequence[str], answers: Sequence[Sequence[str]]
                 ) -> List[np.ndarray]:
        """One ``L`` per pool question: rows the candidates ``docnos``, columns the options of that question's
        answers (``answers[q][i]``: candidate ``i``'s answer to question ``q``)."""
        opts = [self.options(a) for a in answers]
        notes = self._notes(docnos)
        order = [(qi, i) for i in range(len(docnos)) for qi in range(len(pool))]  # grouped by candidate
        requests = []
        for qi, i in order:
            listed = "\n".join(f"{LETTERS[j]}) {o}" for j, o in enumerate(opts[qi]))
            requests.append(self.prompt.messages(f"Notes on the book: {notes[str(docnos[i])]}\n\n"
                                                 f"Question: {pool[qi]}\n\nAnswers:\n{listed}"))
        tops: List[Optional[dict]] = [None] * len(requests)
        if not self._broken and requests:
            try:
                tops = self.llm.top_logprobs_many(requests, prompt_version=self.prompt.version,
                                                  desc="answer likelihoods")
            except LLMUnavailableError as exc:  # a server without logprobs fails every request: stop asking
                self._broken = True
                warnings.warn(f"{self!r}: no log-probs from {self.llm!r} ({exc}); EIG / KL use the similarity "
                              "kernel from now on", stacklevel=2)
        self.requests += len(requests)
        rows = {(qi, i): letter_probs(t, len(opts[qi])) for (qi, i), t in zip(order, tops)}
        out = []
        for qi in range(len(pool)):
            lik = [rows[(qi, i)] for i in range(len(docnos))]
            if any(r is None for r in lik):
                self.fallbacks += 1
                out.append(self.kernel(answers[qi]))
                continue
            lik = np.vstack(lik)
            out.append(calibrate(lik) if self.calibrated else lik)
        return out

    def kernel(self, answers: Sequence[str]) -> np.ndarray:
        if self.encoder is None:
            return np.full((len(answers), len(answers)), 1.0 / max(1, len(answers)))
        return kernel_likelihoods(self.encoder(list(answers)), self.tau)

    def __repr__(self):
        return f"LLMLikelihood({self.llm!r}, calibrated={self.calibrated})"
