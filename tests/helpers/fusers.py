"""Experts with known scores for the fusers' tests: a table-driven expert and a synthetic world whose true
weights are known."""
import numpy as np
import pandas as pd
import pyterrier as pt


class TableExpert(pt.Transformer):
    """Scores candidates from a fixed (qid, docno) -> score table; rows absent from the table are not emitted."""

    def __init__(self, table: pd.DataFrame, name: str):
        self.table = table
        self.name = name

    def transform(self, inp):
        out = inp.drop(columns=["score", "rank"], errors="ignore").merge(self.table, on=["qid", "docno"])
        return pt.model.add_ranks(out)

    def __repr__(self):
        return self.name


def cands(qids, docnos):
    return pd.DataFrame([(q, d) for q in qids for d in docnos], columns=["qid", "docno"]).assign(query="x")


def synthetic(n_q=150, n_d=40, true_w=(2.0, 1.0, 0.0), seed=1):
    rng = np.random.default_rng(seed)
    c = cands([f"q{i}" for i in range(n_q)], [f"d{j}" for j in range(n_d)])
    X = rng.uniform(size=(len(c), 3))
    truth = X @ np.asarray(true_w)
    c["truth"] = truth
    gold = c.loc[c.groupby("qid")["truth"].idxmax(), ["qid", "docno"]].assign(label=1)
    experts = [TableExpert(c[["qid", "docno"]].assign(score=X[:, j] * 7 + j), f"e{j}") for j in range(3)]
    return c.drop(columns=["truth"]), gold, experts
