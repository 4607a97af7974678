"""The one top-k re-scoring loop shared by the re-rankers: order each query by its incoming score, re-score its
top ``k`` with the stage's scorer and keep the tail in its incoming order, strictly below the re-scored block."""
from __future__ import annotations

from typing import Callable, List, Sequence

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.util import explain_columns
from pyterrier_tot.checks import check_result_frame, unknown_docnos


def book_texts(index, block: pd.DataFrame, fields: Sequence[str], max_chars: int) -> List[str]:
    """The text an LLM re-ranker shows for each row of ``block``: the ``fields`` of the book in ``index`` joined by
    ": " (without an index, the frame's ``text`` column), whitespace collapsed, cut at ``max_chars``."""
    if index is None:
        text = block["text"].fillna("").astype(str)
    else:
        books = index.books_of(block["docno"].astype(str))
        text = books[list(fields)].fillna("").astype(str).agg(": ".join, axis=1)
    return [" ".join(t.split())[:max_chars] for t in text]


def rerank_top_k(stage, inp: pd.DataFrame, k: int, index, needs: Sequence[str], hint: str,
                 rescore: Callable[[pd.DataFrame], np.ndarray]) -> pd.DataFrame:
    """Validate ``inp`` for ``stage`` (columns ``needs``; ``hint`` says what was expected), then re-score the top
    ``k`` rows of each query with ``rescore(block)`` (an array aligned with the block's rows)."""
    with explain_columns(repr(stage), hint):
        pta.validate.result_frame(inp, extra_columns=list(needs))
    out = inp.copy()
    if len(out) == 0:
        out["score"] = pd.Series(dtype=float)
        return pt.model.add_ranks(out)
    check_result_frame(out, repr(stage), "query", score=True)
    if index is not None:
        unknown_docnos(out, index.docnos, repr(stage))
    out["_order"] = np.arange(len(out))
    out = out.sort_values(["qid", "score", "_order"], ascending=[True, False, True], kind="stable")
    pos = out.groupby("qid", sort=False).cumcount().to_numpy()
    top = pos < k
    block = out.loc[top]
    new_top = np.asarray(rescore(block), dtype=float)
    scores = np.empty(len(out), dtype=float)
    scores[top] = new_top
    if (~top).any():
        # the tail keeps its incoming order, strictly below the lowest re-scored score of its query
        floor = pd.Series(new_top, index=block["qid"].to_numpy()).groupby(level=0).min()
        tail = out.loc[~top]
        n_tail = tail.groupby("qid", sort=False)["qid"].transform("size").to_numpy()
        tail_pos = (pos[~top] - k).astype(float)
        scores[~top] = floor.reindex(tail["qid"].to_numpy()).to_numpy() - 1.0 - tail_pos / n_tail
    out["score"] = scores
    return pt.model.add_ranks(out.drop(columns=["_order"]))
