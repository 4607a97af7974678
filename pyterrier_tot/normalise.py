"""Per-query score normalisation, written once and used by the experts, the reranker and the fuser.

PyTerrier's ``+`` adds raw scores: ``0.7 * bm25 + 0.3 * dense`` adds BM25 scores (about 5-40) to cosines (about
0-1), so the sum is BM25's ranking. Put each system on one scale first, ``0.7 * (bm25 >> Normalise()) + 0.3 *
(dense >> Normalise())``, which :func:`linear_fusion` (a :class:`LinearFusion`) writes for you, keeping each
row's query columns (PyTerrier's ``+`` leaves them NaN on books that only its right side returned)::

    fused = ptt.linear_fusion(bm25, dense, weights=[0.7, 0.3])            # min-max per query, then the sum
    rrf = ptt.linear_fusion(bm25, dense, normalise="rr")                 # reciprocal-rank fusion (k = 60)
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot._plumbing.reprs import SettingsEquality, keyword_settings
from pyterrier_tot.checks import check_number, check_result_frame, fill_query_columns

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


def mix_scores(df: pd.DataFrame, new, alpha: float, column: str = "score") -> np.ndarray:
    """``alpha * minmax(new) + (1 - alpha) * minmax(df[column])``, each min-max within the ``qid`` of its row: a
    second stage's scores ``new`` (one per row of ``df``) interpolated with the incoming ones on one scale."""
    mine = normalise_scores(pd.DataFrame({"qid": df["qid"].to_numpy(), "score": np.asarray(new, dtype=float)}))
    return alpha * mine.to_numpy() + (1.0 - alpha) * normalise_scores(df, "minmax", column).to_numpy()


class Normalise(SettingsEquality, pt.Transformer):
    """Normalise the ``score`` column of a result frame within each query (see :func:`normalise_scores`)."""

    @keyword_settings
    def __init__(self, method: str = "minmax", *, rr_k: float = 60.0):
        if method not in METHODS:
            raise ValueError(f"unknown normalisation {method!r}; expected one of {METHODS}")
        check_number(rr_k, "rr_k", "Normalise", low=0, low_open=True)
        self.method = method
        self.rr_k = rr_k

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.result_frame(inp, extra_columns=["score"])
        check_result_frame(inp, repr(self), score=True)
        out = inp.copy()
        out["score"] = normalise_scores(out, self.method, rr_k=self.rr_k).to_numpy()
        return pt.model.add_ranks(out)

    def settings(self) -> dict:
        """What changes its scores (:mod:`pyterrier_tot._plumbing.cache_key`)."""
        return {"method": self.method, "rr_k": float(self.rr_k) if self.method == "rr" else None}

    def __repr__(self):
        return f"Normalise({self.method!r})" if self.method != "rr" else f"Normalise('rr', rr_k={self.rr_k})"


class LinearFusion(SettingsEquality, pt.Transformer):
    """``w1 * s1 + w2 * s2 + ...`` over the rankings of ``systems``, each first put on one scale by
    :class:`Normalise` (``normalise``: ``minmax``, the default, ``zscore``, ``rr`` for reciprocal-rank fusion, or
    ``none`` for raw scores of systems already on one scale); ``weights`` default to 1 each. A book that one system
    did not return counts 0 there, the bottom of the min-max and RR scales, as with PyTerrier's ``+``.

    It does the merge itself, so every row keeps its query columns: PyTerrier's ``+`` outer-merges two rankings
    on (qid, docno) and keeps the left side's copy of each shared column, so a book that only the right side
    returned has NaN in ``query``, ``query_0`` and the clue columns, and a re-ranker after it fails. Here each
    shared column takes the first system's value that is present, a query column still missing is taken from the
    qid's other rows or from the input (:func:`~pyterrier_tot.checks.fill_query_columns`), and an N/A clue stays
    ``None``. The scores are the same as the ``+`` expression's."""

    def __init__(self, *systems: pt.Transformer, weights=None, normalise: str = "minmax", rr_k: float = 60.0):
        if len(systems) < 2:
            raise ValueError(f"LinearFusion needs at least two systems, got {len(systems)}")
        bad = [i for i, t in enumerate(systems) if not isinstance(t, pt.Transformer)]
        if bad:
            raise TypeError(f"LinearFusion: system(s) at position {bad} are not pt.Transformers "
                            f"({[type(systems[i]).__name__ for i in bad]})")
        weights = [1.0] * len(systems) if weights is None else [float(w) for w in weights]
        if len(weights) != len(systems):
            raise ValueError(f"LinearFusion: {len(weights)} weights for {len(systems)} systems")
        if not all(np.isfinite(weights)):
            raise ValueError(f"LinearFusion: weights must be finite numbers, got {weights}")
        self.norm = Normalise(normalise, rr_k=rr_k)  # validates the method name
        self.systems = tuple(systems)
        self.weights = tuple(weights)
        self.normalise = normalise
        self.rr_k = float(rr_k)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        from pyterrier_tot.decomposition.clues import clues_na_as_none  # lazily: that package imports this module

        merged = None
        for i, (system, w) in enumerate(zip(self.systems, self.weights)):
            res = system(inp)
            if self.normalise != "none":
                res = self.norm(res)
            col = f"_score{i}"
            res = res.drop(columns=["rank"], errors="ignore").rename(columns={"score": col})
            res[col] = w * res[col].astype(float)
            if merged is None:
                merged = res
                continue
            shared = [c for c in res.columns if c in merged.columns and c not in ("qid", "docno")]
            merged = merged.merge(res, on=["qid", "docno"], how="outer", suffixes=("", _RIGHT))
            for c in shared:  # the first system's value where it has one, else this one's
                merged[c] = merged[c].combine_first(merged.pop(c + _RIGHT))
        parts = [f"_score{i}" for i in range(len(self.systems))]
        merged["score"] = merged[parts].fillna(0.0).sum(axis=1)
        merged = merged.drop(columns=parts)
        if len(merged):
            source = inp if "qid" in inp.columns else None
            merged = clues_na_as_none(fill_query_columns(merged, source=source))
        return pt.model.add_ranks(merged)

    def subtransformers(self):
        return {"systems": list(self.systems)}

    def settings(self) -> dict:
        """What changes its scores (:mod:`pyterrier_tot._plumbing.cache_key`)."""
        from pyterrier_tot._plumbing.cache_key import settings_of

        return {"systems": settings_of(list(self.systems)), "weights": list(self.weights),
                "normalise": self.normalise, "rr_k": self.rr_k}

    def __repr__(self):
        args = [repr(s) for s in self.systems]
        if any(w != 1.0 for w in self.weights):
            args.append(f"weights={list(self.weights)!r}")
        if self.normalise != "minmax":
            args.append(f"normalise={self.normalise!r}")
        if self.rr_k != 60.0:
            args.append(f"rr_k={self.rr_k!r}")
        return f"LinearFusion({', '.join(args)})"


_RIGHT = "__right"  # suffix of a later system's copy of a shared column while LinearFusion merges


def linear_fusion(*systems: pt.Transformer, weights=None, normalise: str = "minmax",
                  rr_k: float = 60.0) -> pt.Transformer:
    """A :class:`LinearFusion` of ``systems``: ``w1 * (s1 >> Normalise(normalise)) + w2 * (s2 >>
    Normalise(normalise)) + ...``, with every row keeping its query columns (``query``, ``query_0``, clues), also
    for a book that only a later system returned. ``weights`` default to 1 each; ``normalise``: ``minmax``
    (default), ``zscore``, ``rr`` (reciprocal-rank fusion) or ``none`` (raw scores, only for systems already on one
    scale)."""
    return LinearFusion(*systems, weights=weights, normalise=normalise, rr_k=rr_k)
