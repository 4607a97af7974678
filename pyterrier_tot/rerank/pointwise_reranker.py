"""LLM pointwise re-ranking: the LLM judges each of the top ``k`` books on its own (yes / no), read from the
log-probabilities of its first answer token, and the block is re-ordered by that judgement.

Each (request, candidate) pair is one request (prompt ``prompts/pointwise_relevance.txt``): the request text and
one candidate (title + the first ``max_chars`` characters of the book), answered Yes or No. The answer is never
generated beyond one token: the stage asks for the ``top`` likeliest first tokens with their log-probabilities
(:meth:`LLM.top_logprobs_many`; OpenAI and llama.cpp servers expose them) and scores the candidate
``p(yes) / (p(yes) + p(no))``, summing the tokens that read "yes" / "no" whatever their case or spacing::

    llm = ptt.LLM(model="gpt-4o-mini")                                      # or ptt.LlamaServer(gguf).llm()
    pipe = ptt.tuned_pipeline(ds, index) >> ptt.PointwiseLLMReranker(llm, index, k=10)
    pipe = ptt.tuned_pipeline(ds, index) >> ptt.PointwiseLLMReranker(llm, index, k=10, alpha=0.3)

With ``alpha`` set, the block score is ``alpha * p + (1 - alpha) * minmax(incoming score)`` over the query's top
``k`` (:func:`pyterrier_tot.normalise.normalise_scores`); ``alpha=None`` orders the block by ``p`` alone
(judgements equal to within 1e-9 keep their incoming order).
Results below ``k`` keep their order under the block (:func:`~pyterrier_tot.rerank._topk.rerank_top_k`).

The requests of one query share everything before the candidate, so a server that reuses a cached prompt prefix
(llama.cpp does) reads the instructions and the request once per query. A query with a candidate the LLM could
not judge (a failed request, no log-probabilities, neither yes nor no among the top tokens) keeps its incoming
order in the block, with a warning; ``.failures`` counts such candidates and ``.judged`` the judged ones. It is
never given a made-up judgement.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_tot._plumbing.reprs import code_repr, keyword_settings
from pyterrier_tot.checks import check_index, check_int, check_llm, check_number
from pyterrier_tot.llm.templates import load_prompt
from pyterrier_tot.normalise import normalise_scores
from pyterrier_tot.rerank._topk import book_texts, rerank_top_k

#: weight of the incoming (min-max) score under ``alpha=None``: it only orders books the LLM judged alike
TIE_BREAK = 1e-9
#: the most first-token alternatives OpenAI's API returns (``top_logprobs``)
MAX_TOP = 20


def yes_probability(top: Optional[Dict[str, float]]) -> Optional[float]:
    """``p(yes) / (p(yes) + p(no))`` from a ``{token: logprob}`` dict of first answer tokens (tokens compared
    stripped of spaces and punctuation, case-folded); ``None`` when neither answer is among them."""
    if not top:
        return None
    yes = no = 0.0
    for token, lp in top.items():
        word = str(token).strip().strip(".,:;!\"'*").casefold()
        if word == "yes":
            yes += float(np.exp(lp))
        elif word == "no":
            no += float(np.exp(lp))
    return yes / (yes + no) if yes + no > 0 else None


class PointwiseLLMReranker(pt.Transformer):
    """Re-ranks the top ``k`` of a result frame by an LLM's yes / no judgement of each book (see the module doc).

    :param llm: an :class:`~pyterrier_tot.llm.client.LLM` whose server returns log-probabilities.
    :param index: a :class:`~pyterrier_tot.index.BookIndex` giving the books' text; without one the input frame
        needs a ``text`` column.
    :param k: results per query judged (default 10; one request each).
    :param alpha: ``None`` = order the block by the LLM alone; else the weight of ``p(yes)`` in
        ``alpha * p + (1 - alpha) * minmax(score)``.
    :param fields: book fields shown (with an index); ``max_chars``: characters of each candidate.
    :param top: how many first-token alternatives are asked for (default 10, at most 20).
    """

    @keyword_settings
    def __init__(self, llm, index=None, *, k: int = 10, alpha: Optional[float] = None,
                 fields: Union[str, Sequence[str]] = ("title", "text"), max_chars: int = 500,
                 prompt: str = "pointwise_relevance", prompt_dir: Union[str, Path, None] = None,
                 max_query_chars: int = 2000, top: int = 10):
        who = "PointwiseLLMReranker"
        check_llm(llm, who)
        for name, value in (("k", k), ("max_chars", max_chars), ("max_query_chars", max_query_chars),
                            ("top", top)):
            check_int(value, name, who)
        if int(top) > MAX_TOP:
            raise ValueError(f"{who}: top must be at most {MAX_TOP} (OpenAI refuses more first-token "
                             f"alternatives), not {top}")
        if alpha is not None:
            check_number(alpha, "alpha", who, 0.0, 1.0)
        if index is not None:
            check_index(index, who)
        self.llm, self.index, self.k, self.top = llm, index, int(k), int(top)
        self.alpha = None if alpha is None else float(alpha)
        self.fields = (fields,) if isinstance(fields, str) else tuple(fields)
        self.max_chars, self.max_query_chars = int(max_chars), int(max_query_chars)
        self.prompt = load_prompt(prompt, prompt_dir)
        self.judged = self.failures = 0

    def _texts(self, block: pd.DataFrame) -> List[str]:
        return book_texts(self.index, block, self.fields, self.max_chars)

    def _request(self, query: str, text: str):
        body = (f"Request: {' '.join(str(query).split())[: self.max_query_chars]}\n\nCandidate: {text}\n\n"
                "Could this be the book? Answer Yes or No.")
        return self.prompt.messages(body)

    def judge(self, block: pd.DataFrame) -> np.ndarray:
        """``p(yes)`` of each row of ``block`` (NaN where the LLM gave no usable judgement)."""
        requests = [self._request(q, t) for q, t in zip(block["query"], self._texts(block))]
        tops = self.llm.top_logprobs_many(requests, top=self.top, prompt_version=self.prompt.version,
                                          desc="PointwiseLLMReranker")
        return np.array([np.nan if p is None else p for p in map(yes_probability, tops)], dtype=float)

    def _rescore(self, block: pd.DataFrame) -> np.ndarray:
        p = self.judge(block)
        incoming = normalise_scores(block, "minmax").to_numpy()
        bad = np.isnan(p)
        self.judged += int((~bad).sum())
        if bad.any():
            self.failures += int(bad.sum())
            qids = sorted(set(block["qid"].astype(str).to_numpy()[bad]))
            warnings.warn(f"{self!r}: {int(bad.sum())} candidate(s) got no yes/no judgement (failed request, no "
                          f"log-probabilities or another answer); their queries keep the incoming order in the "
                          f"block: qid(s) {qids[:5]}", stacklevel=4)
        # alpha=None: the judgement alone, ties (a weak model gives many) broken by the incoming order
        scores = p + TIE_BREAK * incoming if self.alpha is None else self.alpha * p + (1.0 - self.alpha) * incoming
        keep = block["qid"].isin(set(block["qid"].to_numpy()[bad])).to_numpy()
        return np.where(keep, incoming, scores)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        needs = ["query", "score"] + ([] if self.index is not None else ["text"])
        hint = "needs a result frame (qid, query, docno, score); without an index also a 'text' column"
        return rerank_top_k(self, inp, self.k, self.index, needs, hint, self._rescore)

    def __repr__(self):
        return code_repr(self, [self.llm] + ([self.index] if self.index is not None else []), {
            "k": self.k, "alpha": self.alpha, "fields": self.fields, "max_chars": self.max_chars,
            "max_query_chars": self.max_query_chars, "top": self.top})
