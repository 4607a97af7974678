"""Scoring clarification games: per-turn tables, per-query differences with significance, and the per-turn plot.
Every number comes from ``pt.Experiment`` (ir_measures ``RR`` and ``Success@1``) over ``game.turn(t)``::

    table = turn_table({"oracle": game}, topics, qrels)         # name, turn, MRR, top1, cum_top1, n
    perq = per_query({"oracle": game}, topics, qrels)           # name, qid, turn, RR, top1
    paired_table(perq)          # each turn against turn 0: mean difference, better / worse, paired t, Wilcoxon
    paired_table(perq, split=True)                              # ... also for turn-0 rank 1 and the rest
    compare(perq, "EIG", "random", turn=3)                      # two games on the same queries, paired
"""
from __future__ import annotations

import os
from typing import Dict, Optional, Union

import numpy as np
import pandas as pd
import pyterrier as pt
from ir_measures import RR, Success

TURN_MEASURES = [RR, Success @ 1]


def per_query(games: Dict[str, object], topics: pd.DataFrame, qrels: pd.DataFrame) -> pd.DataFrame:
    """One row per game, query and turn: ``RR`` and ``top1`` (Success@1) from ``pt.Experiment(perquery=True)``."""
    rows = []
    for name, game in games.items():
        systems = [game.turn(t) for t in range(game.turns + 1)]
        per_q = pt.Experiment(systems, topics, qrels, eval_metrics=TURN_MEASURES, perquery=True,
                              names=[str(t) for t in range(game.turns + 1)], verbose=False)
        wide = per_q.pivot_table(index=["qid", "name"], columns="measure", values="value").reset_index()
        rows.append(pd.DataFrame({"name": name, "qid": wide["qid"].astype(str), "turn": wide["name"].astype(int),
                                  "RR": wide["RR"].astype(float), "top1": wide["Success@1"].astype(float)}))
    if not rows:
        return pd.DataFrame(columns=["name", "qid", "turn", "RR", "top1"])
    return pd.concat(rows, ignore_index=True).sort_values(["name", "qid", "turn"], kind="stable")


def turn_table(games: Dict[str, object], topics: pd.DataFrame, qrels: pd.DataFrame,
               perq: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """Per game and turn: MRR and top-1 and cumulative top-1 (the share of queries whose book was first at any
    turn up to this one)."""
    perq = per_query(games, topics, qrels) if perq is None else perq
    rows = []
    for name in dict.fromkeys(perq["name"]):
        g = perq[perq["name"] == name].sort_values(["qid", "turn"]).copy()
        g["cum"] = g.groupby("qid")["top1"].cummax()
        for t, part in g.groupby("turn"):
            rows.append({"name": name, "turn": int(t), "MRR": float(part["RR"].mean()),
                         "top1": float(part["top1"].mean()), "cum_top1": float(part["cum"].mean()), "n": len(part)})
    return pd.DataFrame(rows, columns=["name", "turn", "MRR", "top1", "cum_top1", "n"])


def paired(a: pd.Series, b: pd.Series) -> dict:
    """``a`` against ``b`` (per-query values indexed by qid, paired on the qids they share): means, mean
    difference, how many queries are better / worse, the paired t-test and the Wilcoxon signed-rank p-values
    (1.0 when every difference is zero; the t-test's NaN when every difference is the same non-zero number)."""
    from scipy import stats

    both = pd.concat([a.rename("a"), b.rename("b")], axis=1, join="inner").dropna()
    d = (both["a"] - both["b"]).to_numpy(float)
    out = {"n": len(d), "mean_a": float(both["a"].mean()) if len(d) else float("nan"),
           "mean_b": float(both["b"].mean()) if len(d) else float("nan"),
           "diff": float(d.mean()) if len(d) else float("nan"), "better": int((d > 1e-12).sum()),
           "worse": int((d < -1e-12).sum()), "p_t": 1.0, "p_wilcoxon": 1.0}
    if len(d) > 1 and np.any(np.abs(d) > 1e-12):
        # every query moved by the same amount: the t statistic is undefined
        out["p_t"] = float(stats.ttest_rel(both["a"], both["b"]).pvalue) if np.std(d) > 0 else float("nan")
        out["p_wilcoxon"] = float(stats.wilcoxon(d).pvalue)
    return out


def paired_table(perq: pd.DataFrame, measure: str = "RR", baseline_turn: int = 0, split: bool = False
                 ) -> pd.DataFrame:
    """Each game's turns against its ``baseline_turn`` (same queries), per :func:`paired`; ``split`` adds the
    queries whose book was first at the baseline turn (``rank 1``) and the others (``rank > 1``) apart."""
    rows = []
    for name in dict.fromkeys(perq["name"]):
        g = perq[perq["name"] == name]
        base = g[g["turn"] == baseline_turn].set_index("qid")
        groups = {"all": base.index}
        if split:
            groups["rank 1"] = base.index[base["top1"] >= 1]
            groups["rank > 1"] = base.index[base["top1"] < 1]
        for t in sorted(set(g["turn"]) - {baseline_turn}):
            cur = g[g["turn"] == t].set_index("qid")
            for label, qids in groups.items():
                rows.append({"name": name, "turn": int(t), "queries": label,
                             **paired(cur.loc[cur.index.intersection(qids), measure],
                                      base.loc[qids, measure])})
    return pd.DataFrame(rows)


def compare(perq: pd.DataFrame, a: str, b: str, turn: int, measure: str = "RR") -> dict:
    """Game ``a`` against game ``b`` at ``turn`` on the queries both played, per :func:`paired`."""
    def values(name):
        g = perq[(perq["name"] == name) & (perq["turn"] == turn)]
        if len(g) == 0:
            raise ValueError(f"no per-query rows for game {name!r} at turn {turn}")
        return g.set_index("qid")[measure]
    return {"a": a, "b": b, "turn": int(turn), **paired(values(a), values(b))}


def plot_turns(table: pd.DataFrame, path: Union[str, os.PathLike, None] = None, title: Optional[str] = None):
    """MRR, top-1 and cumulative top-1 against the turn, one line per game (the sibling of
    :func:`pyterrier_tot.plot_recall_at_k`). Returns the matplotlib figure; ``path`` writes it."""
    import matplotlib

    if path is not None and "ipykernel" not in str(matplotlib.get_backend()).lower():
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), sharex=True)
    for ax, col, label in zip(axes, ("MRR", "top1", "cum_top1"), ("MRR", "top-1", "cumulative top-1")):
        for name, g in table.groupby("name", sort=False):
            ax.plot(g["turn"], g[col], marker="o", markersize=3, label=str(name))
        ax.set_xticks(sorted(table["turn"].unique()) if len(table) else [0])
        ax.set_xlabel("turn (0: initial query)")
        ax.set_ylabel(label)
        ax.set_ylim(0, max(0.05, float(np.nanmax(table[col])) * 1.15) if len(table) else 1)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=6)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    if path is not None:
        from pathlib import Path

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
    return fig
