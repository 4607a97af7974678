"""Posteriors: what the system believes about the book after each answer. Both read every answer through
:func:`~pyterrier_tot.clarinet.answers.read_answer` first, so "I don't remember." changes nothing and a bare
"No." is never read as evidence *for* what the question named.

- :class:`LanguagePosterior` (CLARINET's): the request and the answers become the next search query. By default
  it *conditions* on the request: ``combine="prepend"`` puts the new text first and keeps the whole request after
  it (on the tuning slice it beat ``"append"``, MRR after 3 oracle answers .737 against .645: a query encoder cuts
  long requests, 256 word pieces for MiniLM, and with them anything appended); ``"append"`` puts it after the
  request; ``"replace"`` is the paper's option (the new text alone, .612). With an ``llm``, the new text is the
  LLM's condensed description of the request and the informative answers; without one (``llm=None``), it is the
  informative answers' text itself: no LLM, no cost. A query rewriter: the request stays in ``query_0``.
  That text is each answer's evidence, the question followed by the answer ("Where was it set? In a lighthouse."),
  as measured. ``answer_first=True`` (what :func:`~pyterrier_tot.clarinet.interactive.interactive_search` uses)
  puts the answers' own words first and the questions they answer after them ("In a lighthouse. Where was it
  set?"), so that the query a person reads starts with what they said: the same words, so BM25 ranks the same.
- :class:`ExplicitPosterior` (the baseline): Bayes' rule over the candidates,
  ``p_t(y) ∝ p(a_t | q_t, y) p_{t-1}(y)``, with the answer likelihood ``exp(s(evidence, y) / tau)`` from a
  retriever's scorer ``s`` (e.g. the dense cosine of the question and answer against the book). ``tau`` sets
  how much one short answer weighs against the request: at the retrieval distribution's temperature (0.05) an
  answer counts as much as the whole request; the default, 0.3, was chosen on the recipe's tuning slice (see
  ``benchmarks/clarification/clarification.py --phase tune``). A bare "No." is ignored (``negative="ignore"``,
  the default) or read as evidence against the books that match the question (``negative="invert"``).
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import List, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.reprs import code_repr, keyword_settings
from pyterrier_tot.checks import check_query_frame
from pyterrier_tot.clarinet.answers import read_answer
from pyterrier_tot.clarinet.distribution import softmax
from pyterrier_tot.clarinet.questions import format_history, history_of
from pyterrier_tot.clarinet.simulator import clean_answer
from pyterrier_tot.llm.templates import load_prompt

COMBINE = ("prepend", "append", "replace")
#: The explicit posterior's answer temperature, chosen on the tuning slice
#: (``benchmarks/clarification/clarification.py --phase tune``).
DEFAULT_TAU = 0.3


def evidence_text(history, answer_first: bool = False) -> str:
    """The informative part of a history: the evidence of each positive answer, in order (null and bare
    negative answers say nothing a retriever can use). ``answer_first``: the same words, the answers' own words
    (in order) before the questions they answer (a bare "yes" has only its question)."""
    parts, words, questions = [], [], []
    for q, a in history:
        r = read_answer(q, a)
        if r.kind != "positive":
            continue
        parts.append(r.evidence)
        question = " ".join(str(q or "").split())
        if question and r.evidence == question:  # a bare "yes": the question is all it says
            questions.append(question)
        elif question and r.evidence.startswith(question + " "):
            words.append(r.evidence[len(question) + 1:])
            questions.append(question)
        else:  # "No, it was ...": the answer's words alone
            words.append(r.evidence)
    return " ".join(words + questions if answer_first else parts)


class LanguagePosterior(pt.Transformer):
    """Rewrites ``query`` (the initial request) with its ``history`` (a list of (question, answer)); ``query_0``
    keeps the request. A row without informative answers keeps its query (no LLM call). A failed or empty LLM
    rewrite falls back to the request followed by the answers (warning, ``.failures``). See the module doc for
    ``combine`` and ``answer_first`` (without an LLM only)."""

    @keyword_settings
    def __init__(self, llm=None, *, combine: str = "prepend", query_chars: int = 1500, max_tokens: int = 120,
                 prompt_dir: Union[str, Path, None] = None, answer_first: bool = False):
        if combine not in COMBINE:
            raise ValueError(f"combine must be one of {COMBINE}, not {combine!r}")
        self.llm, self.combine, self.query_chars, self.max_tokens = llm, combine, int(query_chars), int(max_tokens)
        self.answer_first = bool(answer_first)
        self.prompt_dir = prompt_dir
        self.prompt = load_prompt("clarinet_posterior", prompt_dir)
        self.failures = 0

    def _join(self, request: str, new: str) -> str:
        if self.combine == "replace":
            return new
        return f"{new} {request}" if self.combine == "prepend" else f"{request} {new}"

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.query_frame(inp, extra_columns=["query"])
        out = pt.model.push_queries(inp.copy(), keep_original=True, inplace=False)
        if len(inp) == 0:
            return out
        check_query_frame(inp, repr(self))
        histories = [history_of(h) for h in (inp["history"] if "history" in inp.columns else [None] * len(inp))]
        originals = out["query_0"].astype(str).tolist()
        evidence = [evidence_text(h, self.answer_first) for h in histories]
        todo = [i for i, e in enumerate(evidence) if e]
        new = list(originals)
        if self.llm is None:
            for i in todo:
                new[i] = self._join(originals[i], evidence[i])
            out["query"] = new
            return out
        kept = [[(q, a) for q, a in histories[i] if read_answer(q, a).kind != "null"] for i in todo]
        texts = [f"Request: {' '.join(originals[i].split())[: self.query_chars]}\n\n{format_history(h)}"
                 for i, h in zip(todo, kept)]
        answers = self.llm.chat_many([self.prompt.messages(t) for t in texts], prompt_version=self.prompt.version,
                                     desc="language posterior", max_tokens=self.max_tokens) if todo else []
        failed = 0
        for i, a in zip(todo, answers):
            text = clean_answer(a)
            if text:
                new[i] = self._join(originals[i], text)
            else:
                failed += 1
                new[i] = f"{originals[i]} {evidence[i]}"
        if failed:
            self.failures += failed
            warnings.warn(f"{self!r}: {failed} of {len(todo)} posterior(s) failed or came back empty; those rows "
                          "use the request followed by the answers", stacklevel=2)
        out["query"] = new
        return out

    def __repr__(self):
        return code_repr(self, [self.llm] if self.llm is not None else [], {
            "combine": self.combine, "query_chars": self.query_chars, "max_tokens": self.max_tokens,
            "prompt_dir": self.prompt_dir, "answer_first": self.answer_first})

    def settings(self) -> dict:
        """What changes its queries (:mod:`pyterrier_tot._plumbing.cache_key`): the LLM, the prompt's version, the
        settings."""
        from pyterrier_tot._plumbing.cache_key import settings_of

        return {"llm": settings_of(self.llm), "combine": self.combine, "query_chars": self.query_chars,
                "max_tokens": self.max_tokens, "prompt_version": self.prompt.version, "answer_first": self.answer_first}


class ExplicitPosterior:
    """Bayes' rule over a fixed candidate set with a scorer's answer likelihood (see the module doc).
    ``scorer``: a result-frame scorer such as ``index.dense_scorer(model)``."""

    def __init__(self, scorer: pt.Transformer, tau: float = DEFAULT_TAU, negative: str = "ignore"):
        if negative not in ("ignore", "invert"):
            raise ValueError(f"negative must be 'ignore' or 'invert', not {negative!r}")
        softmax([0.0], tau)  # checks tau now
        self.scorer, self.tau, self.negative = scorer, float(tau), negative

    def likelihoods(self, items: Sequence[Tuple[str, Sequence[str], str, str]]) -> List[np.ndarray]:
        """``p(answer | question, y)`` for each candidate, up to a constant (uniform when the answer says nothing),
        for many ``(qid, docnos, question, answer)`` at once: one scorer call for all of them."""
        readings = [read_answer(q, a) for _, _, q, a in items]
        use = [i for i, (r, it) in enumerate(zip(readings, items)) if len(it[1]) and (
            r.kind == "positive" or (r.kind == "negative" and self.negative == "invert"))]
        out = [np.full(len(it[1]), 1.0 / max(len(it[1]), 1)) for it in items]
        if not use:
            return out
        frame = pd.DataFrame([{"qid": f"{items[i][0]}#{i}", "query": readings[i].evidence, "docno": str(d)}
                              for i in use for d in items[i][1]])
        frame["score"], frame["rank"] = 0.0, frame.groupby("qid").cumcount()
        scored = self.scorer(frame)
        for i in use:
            docnos = [str(d) for d in items[i][1]]
            g = scored[scored["qid"] == f"{items[i][0]}#{i}"].set_index("docno")["score"]
            s = g.reindex(docnos).fillna(g.min() if len(g) else 0.0).to_numpy(float)
            out[i] = softmax(-s if readings[i].kind == "negative" else s, self.tau)
        return out

    def likelihood(self, qid: str, docnos: Sequence[str], question: str, answer: str) -> np.ndarray:
        """``p(answer | question, y)`` for each candidate, up to a constant (uniform when it says nothing)."""
        return self.likelihoods([(qid, docnos, question, answer)])[0]

    def update_many(self, items: Sequence[Tuple[str, Sequence[str], np.ndarray, str, str]]) -> List[np.ndarray]:
        """:meth:`update` for many ``(qid, docnos, prior, question, answer)`` (one scorer call)."""
        liks = self.likelihoods([(q, d, qu, a) for q, d, _, qu, a in items])
        out = []
        for (_, _, prior, _, _), lik in zip(items, liks):
            prior = np.asarray(prior, dtype=float)
            post = prior * lik
            out.append(post / post.sum() if post.sum() > 0 else prior)
        return out

    def update(self, qid: str, docnos: Sequence[str], prior, question: str, answer: str) -> np.ndarray:
        """The belief after ``answer`` to ``question``: prior × likelihood, normalised."""
        return self.update_many([(qid, docnos, prior, question, answer)])[0]

    def __repr__(self):
        return f"ExplicitPosterior({self.scorer!r}, tau={self.tau}, negative={self.negative!r})"
