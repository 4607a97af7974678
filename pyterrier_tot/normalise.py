"""Per-query score normalisation, written once and used by the experts, the reranker and the fuser."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot.policy import check_result_frame

METHODS = ("minmax", "zscore", "rr", "none")


def normalise_scores(df: pd.DataFrame, method: str = "minmax", column: str = "score", rr_k: float = 60.0) -> pd.Series:
    """Return ``df[column]`` normalised within each ``qid``.

    - ``minmax``: (s - min) / (max - min) in [0, 1]; a query whose scores are all equal gets 1.0 for each.
    - ``zscore``: (s - mean) / std; constant scores give 0.0.
    - ``rr``: reciprocal rank 1 / (rr_k + rank), rank from 1 by descending score (ties keep frame order).
    - ``none``: unchanged.
    """
    if method not in METHODS:
        raise ValueError(f"unknown normalisation {method!r}; expected one of {METHODS}")
    if len(df) == 0 or method == "none":
        return df[column].astype(float) if column in df else pd.Series(dtype=float)
    scores = df[column].astype(float)
    groups = scores.groupby(df["qid"].values)
    if method == "minmax":
        lo = groups.transform("min")
        hi = groups.transform("max")
        span = (hi - lo).to_numpy()
        out = np.where(span > 0, (scores - lo).to_numpy() / np.where(span > 0, span, 1.0), 1.0)
        return pd.Series(out, index=df.index)
    if method == "zscore":
        mean = groups.transform("mean")
        std = groups.transform(lambda s: s.std(ddof=0))
        std_np = std.to_numpy()
        out = np.where(std_np > 0, (scores - mean).to_numpy() / np.where(std_np > 0, std_np, 1.0), 0.0)
        return pd.Series(out, index=df.index)
    rank = groups.rank(method="first", ascending=False)
    return 1.0 / (rr_k + rank)


class Normalise(pt.Transformer):
    """Normalise the ``score`` column of a result frame within each query (see :func:`normalise_scores`)."""

    def __init__(self, method: str = "minmax", rr_k: float = 60.0):
        if method not in METHODS:
            raise ValueError(f"unknown normalisation {method!r}; expected one of {METHODS}")
        self.method = method
        self.rr_k = rr_k

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.result_frame(inp, extra_columns=["score"])
        check_result_frame(inp, repr(self), score=True)
        out = inp.copy()
        out["score"] = normalise_scores(out, self.method, rr_k=self.rr_k).to_numpy()
        return pt.model.add_ranks(out)

    def __repr__(self):
        return f"Normalise({self.method!r})" if self.method != "rr" else f"Normalise('rr', rr_k={self.rr_k})"
