"""LLM listwise reranking (RankGPT-style sliding windows) of the top of a ranking.

The top ``k`` results of each query (by incoming score) are reordered by the LLM in windows of ``window``
candidates, moving ``step`` places at a time from the bottom of the block to the top, so a good book low in the
block can climb to first place. Each window is one request (prompt ``prompts/listwise_rerank.txt``): the request
text and the numbered candidates (title + the first ``max_chars`` characters of the book), answered by a
permutation such as ``[2] > [1] > [3]``. Results below ``k`` keep their order and scores under the block::

    rerank = index.bm25() % 20 >> ptt.ListwiseReranker(llm, index, k=20, window=10, step=5)
    rerank = retriever_with_text >> ptt.ListwiseReranker(llm, k=20)      # any frame with a text column

A malformed answer never loses a document (:func:`repair_permutation`): unknown and repeated ids are dropped and
the missing ones follow in their old order (``.repaired`` counts such windows). A window whose request failed keeps
its old order, with a warning (``.failures``). The windows of all queries at one position go to the LLM together
(``LLM.chat_many``), so a batch of queries costs ``ceil((k - window) / step) + 1`` rounds of requests.

``pyterrier-generative`` (0.1.3, PyPI) was evaluated first and not built on: it does not import with the current
``pyterrier-rag`` (0.3.0; ``pyterrier_rag.prompt.jinja`` is missing), pulls ``fschat``, ``accelerate`` and
``torchaudio``, lets one failed request abort the whole call, replaces every score by a rank count and drops the
other columns, and reranks every input row rather than the top ``k`` with the rest kept underneath.
"""
from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.reprs import code_repr, keyword_settings
from pyterrier_tot._plumbing.util import explain_columns
from pyterrier_tot.checks import check_index, check_int, check_llm, check_result_frame, unknown_docnos
from pyterrier_tot.llm.templates import load_prompt
from pyterrier_tot.rerank._topk import book_texts

_BRACKETED = re.compile(r"\[\s*(\d+)\s*\]")
_NUMBER = re.compile(r"\d+")


def repair_permutation(answer: Optional[str], n: int) -> Tuple[List[int], bool]:
    """The 0-based order of ``n`` candidates that an answer such as ``"[2] > [1] > [3]"`` gives, and whether it had
    to be repaired: ids outside 1..n and repeats are dropped, missing ids follow in their old order. Bracketed
    ids are read when the answer has any, else every number; an unusable answer gives the old order."""
    if not answer:
        return list(range(n)), True
    found = _BRACKETED.findall(answer) or _NUMBER.findall(answer)
    order, seen = [], set()
    for token in found:
        i = int(token) - 1
        if 0 <= i < n and i not in seen:
            seen.add(i)
            order.append(i)
    repaired = len(order) != n or len(found) != n
    return order + [i for i in range(n) if i not in seen], repaired


def window_starts(k: int, window: int, step: int) -> List[int]:
    """Start positions of the windows over a block of ``k``, bottom first (the last one starts at 0)."""
    if k <= window:
        return [0]
    starts = list(range(k - window, 0, -step))
    return starts + [0]


class ListwiseReranker(pt.Transformer):
    """Reorders the top ``k`` of a result frame with an LLM in sliding windows (see the module docstring).

    :param llm: an :class:`~pyterrier_tot.llm.client.LLM`.
    :param index: a :class:`~pyterrier_tot.index.BookIndex` giving the books' text; without one the input frame
        needs a ``text`` column.
    :param k: results per query reordered (default 20).
    :param window: candidates per request (default 10); ``step``: places a window moves (default 5).
    :param fields: book fields shown to the LLM (with an index); ``max_chars``: characters of each candidate.
    """

    @keyword_settings
    def __init__(self, llm, index=None, *, k: int = 20, window: int = 10, step: int = 5,
                 fields: Union[str, Sequence[str]] = ("title", "text"), max_chars: int = 300,
                 prompt: str = "listwise_rerank", prompt_dir: Union[str, Path, None] = None,
                 max_query_chars: int = 2000, max_tokens: Optional[int] = None):
        check_llm(llm, "ListwiseReranker")
        for name, value in (("k", k), ("window", window), ("step", step), ("max_chars", max_chars)):
            check_int(value, name, "ListwiseReranker")
        if index is not None:
            check_index(index, "ListwiseReranker")
        if int(k) < 1 or int(window) < 2 or int(step) < 1:
            raise ValueError(f"need k >= 1, window >= 2 and step >= 1, not k={k}, window={window}, step={step}")
        if int(step) >= int(window):
            raise ValueError(f"step ({step}) must be smaller than window ({window}) or documents skip windows")
        if int(max_chars) < 1:
            raise ValueError(f"max_chars must be a positive number of characters, not {max_chars}")
        self.llm, self.index = llm, index
        self.k, self.window, self.step = int(k), int(window), int(step)
        self.fields = (fields,) if isinstance(fields, str) else tuple(fields)
        self.max_chars, self.max_query_chars = int(max_chars), int(max_query_chars)
        self.prompt = load_prompt(prompt, prompt_dir)
        # "[12] > " is about 5 tokens; room for a full permutation
        self.max_tokens = int(max_tokens) if max_tokens else 6 * self.window + 16
        self.windows = self.repaired = self.failures = 0

    def _texts(self, block: pd.DataFrame) -> List[str]:
        return book_texts(self.index, block, self.fields, self.max_chars)

    def _request(self, query: str, texts: Sequence[str]):
        lines = [f"Request: {' '.join(str(query).split())[: self.max_query_chars]}", ""]
        lines += [f"[{i + 1}] {t}" for i, t in enumerate(texts)]
        lines += ["", f"Order the {len(texts)} candidates."]
        return self.prompt.messages("\n".join(lines))

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        hint = "needs a result frame (qid, query, docno, score); without an index also a 'text' column"
        with explain_columns(repr(self), hint), pta.validate.any(inp) as v:
            if self.index is None:
                v.result_frame(extra_columns=["query", "score", "text"], mode="text-column")
            else:
                v.result_frame(extra_columns=["query", "score"], mode="index")
        out_cols = list(inp.columns) + ([] if "rank" in inp.columns else ["rank"])
        if len(inp) == 0:
            return inp.assign(rank=pd.Series(dtype=int))[out_cols] if "rank" not in inp.columns else inp.copy()
        who = repr(self)
        check_result_frame(inp, who, column="query", score=True)
        if self.index is not None:
            unknown_docnos(inp, self.index.corpus["docno"].astype(str), who, "raise")
        ranked = inp.assign(_pos=np.arange(len(inp))).sort_values(["qid", "score", "_pos"],
                                                                   ascending=[True, False, True], kind="stable")
        blocks, tails = [], []
        for _, group in ranked.groupby("qid", sort=False):
            blocks.append(group.iloc[: self.k].reset_index(drop=True))
            tails.append(group.iloc[self.k:])
        orders = [list(range(len(b))) for b in blocks]
        texts = [self._texts(b) for b in blocks]
        self._slide(blocks, texts, orders)
        parts = []
        for block, order, tail in zip(blocks, orders, tails):
            block = block.iloc[order].copy()
            base = float(tail["score"].max()) if len(tail) else 0.0
            # the block stays above the tail whatever the incoming scores were
            block["score"] = base + np.arange(len(block), 0, -1, dtype=float)
            parts += [block, tail]
        out = pd.concat(parts, ignore_index=True).drop(columns=["_pos"])
        out = pt.model.add_ranks(out.drop(columns=["rank"], errors="ignore"))
        return out[out_cols]

    def _slide(self, blocks, texts, orders) -> None:
        """Reorder ``orders`` in place: window after window, each position batched over the queries."""
        plans = [window_starts(len(b), self.window, self.step) for b in blocks]
        for j in range(max(len(p) for p in plans)):
            jobs = [(q, plans[q][j]) for q in range(len(blocks)) if j < len(plans[q])]
            requests = []
            for q, start in jobs:
                ids = orders[q][start:start + self.window]
                requests.append(self._request(blocks[q]["query"].iat[0], [texts[q][i] for i in ids]))
            answers = self.llm.chat_many(requests, prompt_version=self.prompt.version,
                                         desc=f"ListwiseReranker window {j + 1}", max_tokens=self.max_tokens)
            failed = []
            for (q, start), answer in zip(jobs, answers):
                ids = orders[q][start:start + self.window]
                self.windows += 1
                if answer is None:
                    failed.append(str(blocks[q]["qid"].iat[0]))
                    continue
                perm, repaired = repair_permutation(answer, len(ids))
                self.repaired += int(repaired)
                orders[q][start:start + len(ids)] = [ids[p] for p in perm]
            if failed:
                self.failures += len(failed)
                warnings.warn(f"{self!r}: {len(failed)} window request(s) failed and keep their old order, "
                              f"qid(s) {failed[:5]}", stacklevel=3)

    def __repr__(self):
        return code_repr(self, [self.llm] + ([self.index] if self.index is not None else []), {
            "k": self.k, "window": self.window, "step": self.step, "fields": self.fields, "max_chars": self.max_chars,
            "max_query_chars": self.max_query_chars, "max_tokens": self.max_tokens})
