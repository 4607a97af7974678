"""Rank fusion of whole pipelines (the ``fuse`` stage of a config): RRF or CombSUM, scores from
:func:`~pyterrier_tot.normalise.normalise_scores`."""
from __future__ import annotations

import warnings

import pandas as pd
import pyterrier as pt
import pyterrier_alpha as pta

from pyterrier_tot.errors import NoResultsWarning
from pyterrier_tot.normalise import normalise_scores

__all__ = ["Fusion", "FUSION_METHODS"]

#: fusion method → the per-query normalisation whose values are summed
FUSION_METHODS = {"rrf": "rr", "combsum": "minmax", "zscore": "zscore"}


class Fusion(pt.Transformer):
    """Runs each input pipeline on the same queries and fuses their rankings: ``rrf`` sums 1 / (rr_k + rank),
    ``combsum`` sums per-query min-max scores (``zscore``: z-scores), each times its weight. The output keeps the
    input's query columns, so later stages see the original query whatever a branch rewrote."""

    def __init__(self, inputs, method: str = "rrf", weights=None, rr_k: float = 60.0, num_results: int = 1000):
        if method not in FUSION_METHODS:
            raise ValueError(f"Fusion method must be one of {list(FUSION_METHODS)}, not {method!r}")
        self.inputs = list(inputs)
        self.method, self.rr_k, self.num_results = method, float(rr_k), int(num_results)
        self.weights = [1.0] * len(self.inputs) if weights is None else [float(w) for w in weights]
        if len(self.weights) != len(self.inputs):
            raise ValueError(f"Fusion: {len(self.weights)} weights for {len(self.inputs)} inputs")

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pta.validate.query_frame(inp, extra_columns=["query"])
        queries = inp.drop(columns=[c for c in ("docno", "score", "rank") if c in inp.columns]).drop_duplicates("qid")
        parts = []
        for i, (branch, w) in enumerate(zip(self.inputs, self.weights)):
            res = branch(inp)
            if len(res):
                parts.append(pd.DataFrame({"qid": res["qid"].astype(str).values, "docno": res["docno"].values,
                                           f"s{i}": w * normalise_scores(res, FUSION_METHODS[self.method],
                                                                         rr_k=self.rr_k).to_numpy()}))
        if not parts:
            return queries.assign(docno=pd.Series(dtype=str), score=pd.Series(dtype=float),
                                  rank=pd.Series(dtype=int)).iloc[:0]
        fused = parts[0]
        for part in parts[1:]:
            fused = fused.merge(part, on=["qid", "docno"], how="outer")
        fused["score"] = fused[[p.columns[-1] for p in parts]].fillna(0).sum(axis=1)
        fused = fused[["qid", "docno", "score"]]
        out = queries.assign(qid=queries["qid"].astype(str)).merge(fused, on="qid")
        missing = sorted(set(queries["qid"].astype(str)) - set(fused["qid"]))
        if missing:  # the policy: a query that no branch answered is named, never silently dropped
            warnings.warn(f"{self!r}: no results for {len(missing)} query(ies), e.g. {missing[:5]}", NoResultsWarning,
                          stacklevel=2)
        out = out.sort_values(["qid", "score"], ascending=[True, False], kind="stable")
        out = pt.model.add_ranks(out)
        return out[out["rank"] < self.num_results].reset_index(drop=True)

    def __repr__(self):
        return f"Fusion({self.inputs!r}, method={self.method!r}, weights={self.weights})"
