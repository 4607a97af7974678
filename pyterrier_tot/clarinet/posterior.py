"""Posteriors: what the system believes about the book after each answer.

- :class:`LanguagePosterior` (CLARINET's): an LLM condenses the initial request and every question and answer
  into one description, the next search query. A query rewriter: the request stays in ``query_0``.
- :class:`ExplicitPosterior` (the baseline): Bayes' rule over the candidates,
  ``p_t(y) ∝ p(a_t | q_t, y) p_{t-1}(y)``, with the answer likelihood ``exp(s(q_t + a_t, y) / tau)`` from a
  retriever's scorer (``s``: e.g. the dense cosine of the question and answer against the book).
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Sequence, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot.clarinet.distribution import softmax
from pyterrier_tot.clarinet.questions import format_history, history_of
from pyterrier_tot.clarinet.simulator import clean_answer
from pyterrier_tot.llm.templates import load_prompt
from pyterrier_tot.policy import check_query_frame


class LanguagePosterior(pt.Transformer):
    """Rewrites ``query`` (the initial request) with its ``history`` (a list of (question, answer)) into one
    description of the book; ``query_0`` keeps the request. A row without history keeps its query (no LLM call).
    ``combine="append"`` puts the description after the request instead of replacing it. A failed or empty
    rewrite falls back to the request followed by the answers (warning, ``.failures``)."""

    def __init__(self, llm, combine: str = "replace", query_chars: int = 1500, max_tokens: int = 120,
                 prompt_dir: Union[str, Path, None] = None):
        if combine not in ("replace", "append"):
            raise ValueError(f"combine must be 'replace' or 'append', not {combine!r}")
        self.llm, self.combine, self.query_chars, self.max_tokens = llm, combine, int(query_chars), int(max_tokens)
        self.prompt = load_prompt("clarinet_posterior", prompt_dir)
        self.failures = 0

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.query_frame(inp, extra_columns=["query"])
        out = pt.model.push_queries(inp.copy(), keep_original=True, inplace=False)
        if len(inp) == 0:
            return out
        check_query_frame(inp, repr(self))
        histories = [history_of(h) for h in (inp["history"] if "history" in inp.columns else [None] * len(inp))]
        originals = out["query_0"].astype(str).tolist()
        todo = [i for i, h in enumerate(histories) if h]
        texts = [f"Request: {' '.join(originals[i].split())[: self.query_chars]}\n\n{format_history(histories[i])}"
                 for i in todo]
        answers = self.llm.chat_many([self.prompt.messages(t) for t in texts], prompt_version=self.prompt.version,
                                     desc="language posterior", max_tokens=self.max_tokens) if todo else []
        new, failed = list(originals), 0
        for i, a in zip(todo, answers):
            text = clean_answer(a)
            if not text:
                failed += 1
                text = " ".join(a for _, a in histories[i])
                new[i] = f"{originals[i]} {text}"
            else:
                new[i] = text if self.combine == "replace" else f"{originals[i]} {text}"
        if failed:
            self.failures += failed
            warnings.warn(f"{self!r}: {failed} of {len(todo)} posterior(s) failed or came back empty; those rows "
                          "use the request followed by the answers", stacklevel=2)
        out["query"] = new
        return out

    def __repr__(self):
        return f"LanguagePosterior({self.llm!r}, combine={self.combine!r})"


class ExplicitPosterior:
    """Bayes' rule over a fixed candidate set with a scorer's answer likelihood (see the module doc).
    ``scorer``: a result-frame scorer such as ``index.dense_scorer(model)``."""

    def __init__(self, scorer: pt.Transformer, tau: float = 0.05):
        self.scorer, self.tau = scorer, float(tau)

    def likelihood(self, qid: str, docnos: Sequence[str], question: str, answer: str) -> np.ndarray:
        frame = pd.DataFrame({"qid": str(qid), "query": f"{question} {answer}", "docno": list(docnos)})
        scored = self.scorer(frame.assign(score=0.0, rank=np.arange(len(frame))))
        scores = scored.set_index("docno")["score"].reindex(list(docnos)).fillna(scored["score"].min())
        return softmax(scores.to_numpy(float), self.tau)

    def update(self, qid: str, docnos: Sequence[str], prior, question: str, answer: str) -> np.ndarray:
        """The belief after ``answer`` to ``question``: prior × likelihood, normalised."""
        prior = np.asarray(prior, dtype=float)
        post = prior * self.likelihood(qid, docnos, question, answer)
        total = post.sum()
        return post / total if total > 0 else prior

    def __repr__(self):
        return f"ExplicitPosterior({self.scorer!r}, tau={self.tau})"
