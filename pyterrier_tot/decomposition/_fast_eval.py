"""Numpy evaluation of fuser weight vectors over a cached feature matrix, for :meth:`WeightedFuser.fit`: the
experts run once, then each weight setting is ranked and measured without touching pandas or the experts.
Recall@k, Success@k and RR are computed in numpy (they equal ir_measures' values; the fit tests compare them);
any other measure goes through ir_measures."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from pyterrier_tot._util import require_columns


class FastEvaluator:
    """Evaluates weight vectors on a cached feature frame with numpy (no re-running of experts)."""

    def __init__(self, feats: pd.DataFrame, qrels: pd.DataFrame, names: Sequence[str]):
        require_columns(qrels, ["qid", "docno"], "WeightedFuser.fit qrels")
        q = qrels.copy()
        if "label" not in q.columns:
            q["label"] = 1
        q["qid"] = q["qid"].astype(str)
        q["docno"] = q["docno"].astype(str)
        self.qrels = q
        qids = feats["qid"].astype(str).to_numpy()
        order = np.argsort(qids, kind="stable")
        self.qid_sorted = qids[order]
        self.X = feats[list(names)].to_numpy(dtype=float)[order]
        self.docnos = feats["docno"].astype(str).to_numpy()[order]
        rel = dict(zip(zip(q["qid"], q["docno"]), q["label"].astype(float)))
        self.gain = np.array([rel.get(k, 0.0) for k in zip(self.qid_sorted, self.docnos)])
        uq, self.starts = np.unique(self.qid_sorted, return_index=True)
        self.uq = uq
        # the mean runs over the queries of the candidate frame (qrels may cover a larger split)
        self.n_queries = max(len(uq), 1)
        self.n_rel = q[q["label"] > 0].groupby("qid").size().reindex(uq).fillna(0).to_numpy()
        self.group = np.repeat(np.arange(len(uq)), np.diff(np.append(self.starts, len(self.qid_sorted))))
        # deterministic tie-break by docno
        self._tiebreak = pd.factorize(self.docnos, sort=True)[0]

    def ranks(self, w: np.ndarray) -> np.ndarray:
        s = self.X @ w
        order = np.lexsort((self._tiebreak, -s, self.group))
        ranks = np.empty(len(s), dtype=int)
        pos = np.arange(len(s)) - self.starts[self.group[order]]
        ranks[order] = pos + 1
        return ranks

    def measure(self, w: np.ndarray, measure) -> float:
        ranks = self.ranks(np.asarray(w, dtype=float))
        name, cutoff = measure.NAME, measure.params.get("cutoff")
        rel = self.gain > 0
        if name in ("R", "Success") and cutoff:
            hit = np.bincount(self.group, weights=(rel & (ranks <= cutoff)).astype(float), minlength=len(self.uq))
            if name == "Success":
                per_q = (hit > 0).astype(float)
            else:
                per_q = np.divide(hit, self.n_rel, out=np.zeros_like(hit), where=self.n_rel > 0)
            return float(per_q.sum() / self.n_queries)
        if name == "RR":
            rr = np.where(rel, 1.0 / ranks, 0.0)
            if cutoff:
                rr = np.where(ranks <= cutoff, rr, 0.0)
            per_q = np.zeros(len(self.uq))
            np.maximum.at(per_q, self.group, rr)
            return float(per_q.sum() / self.n_queries)
        import ir_measures

        run = pd.DataFrame({"query_id": self.qid_sorted, "doc_id": self.docnos, "score": -ranks.astype(float)})
        qrels = self.qrels.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})
        qrels["relevance"] = qrels["relevance"].astype(int)
        return float(ir_measures.calc_aggregate([measure], qrels, run)[measure])

    def measures(self, w: np.ndarray, measures: Sequence) -> np.ndarray:
        """The value of each of ``measures`` for weights ``w``."""
        return np.array([self.measure(w, m) for m in measures])

    def objective(self, w: np.ndarray, measure) -> float:
        """``measure`` (or the mean of a list of measures), ties broken by MRR."""
        from ir_measures import RR

        main = float(np.mean(self.measures(w, measure))) if isinstance(measure, (list, tuple)) else \
            self.measure(w, measure)
        return main + 1e-3 * self.measure(w, RR)
