"""The retrieval distribution: a softmax with temperature over the top-k scores of any PyTerrier retriever.

    dist = RetrievalDistribution(k=10, temperature=0.05)
    (retriever >> dist)(topics)        # top-k rows per query with a ``prob`` column summing to 1

Dense cosine scores differ by hundredths between neighbours, so a small temperature (the default 0.05) is needed
for the distribution to prefer its top candidates at all; BM25 scores want a temperature near 1.
"""
from __future__ import annotations

from typing import List

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.reprs import code_repr, keyword_settings
from pyterrier_tot.checks import add_ranks, check_result_frame


def softmax(scores, temperature: float = 1.0) -> np.ndarray:
    """``exp(s / T)`` normalised, computed stably; an empty input gives an empty output."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, not {temperature!r}")
    s = np.asarray(scores, dtype=float) / float(temperature)
    if s.size == 0:
        return s
    e = np.exp(s - s.max())
    return e / e.sum()


def top_mass(probs, mass: float = 0.5, max_n: int = 3) -> int:
    """How many of the best candidates (``probs`` in descending order) are shown: the fewest whose probability
    reaches ``mass``, at most ``max_n``, at least one."""
    cum = np.cumsum(np.asarray(probs, dtype=float))
    n = int(np.searchsorted(cum, mass - 1e-12) + 1)
    return max(1, min(n, max_n, len(cum)))


class RetrievalDistribution(pt.Transformer):
    """Keeps the top ``k`` rows of each query of a result frame and adds ``prob``: the softmax of their scores
    at ``temperature``. Scores must be finite (an earlier stage's NaN raises, naming the qid)."""

    @keyword_settings
    def __init__(self, k: int = 10, *, temperature: float = 0.05):
        if k < 1:
            raise ValueError(f"k must be at least 1, not {k!r}")
        softmax([0.0], temperature)  # checks the temperature now rather than at the first call
        self.k, self.temperature = int(k), float(temperature)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.result_frame(inp, extra_columns=["score"])
        out = inp.copy()
        out["prob"] = pd.Series(dtype=float)
        if len(inp) == 0:
            return out.assign(rank=pd.Series(dtype=int)) if "rank" not in out else out
        check_result_frame(inp, repr(self), score=True)
        out = out.sort_values(["qid", "score"], ascending=[True, False], kind="stable")
        out = out.groupby("qid", sort=False).head(self.k).copy()
        parts: List[pd.Series] = []
        for _, idx in out.groupby("qid", sort=False).groups.items():
            parts.append(pd.Series(softmax(out.loc[idx, "score"].to_numpy(), self.temperature), index=idx))
        out["prob"] = pd.concat(parts)
        return add_ranks(out)

    def __repr__(self):
        return code_repr(self, [], self.settings())

    def settings(self) -> dict:
        """What changes its output (:mod:`pyterrier_tot._plumbing.cache_key`)."""
        return {"k": self.k, "temperature": self.temperature}
