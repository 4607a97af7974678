"""Evaluation helpers: the measures ToT papers report, ``pt.Experiment`` defaults, Recall@k plots, TREC run files.

Metrics always come from ir_measures (through ``pt.Experiment`` or ``ir_measures.calc_aggregate``); nothing here
computes a measure by hand.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np
import pandas as pd
import pyterrier as pt
from ir_measures import RR, R, Success, nDCG

from pyterrier_tot._plumbing.util import require_columns

#: Recall at the cut-offs the decomposition paper reports, plus MRR, nDCG@10 and Success@k.
TOT_MEASURES = [R @ 1, R @ 5, R @ 10, R @ 20, R @ 100, RR, nDCG @ 10, Success @ 1, Success @ 10, Success @ 100]
#: A short list for tables in notebooks and the demo.
SHORT_MEASURES = [R @ 5, R @ 10, R @ 100, RR, nDCG @ 10]
#: Recall at enough cut-offs to draw a curve (add them to a pt.Experiment for :func:`plot_recall_at_k`).
CURVE_MEASURES = [R @ k for k in (1, 2, 3, 5, 10, 20, 30, 50, 100, 200, 500, 1000)]

_RECALL_COL = re.compile(r"^R@(\d+)$")


def parse_measures(measures) -> list:
    """ir_measures objects from measures or their names, in the spelling of the experiment table's columns
    (``"RR"``, ``"R@5"``, ``"nDCG@10"``, ``"RR@20"``); trec_eval names (``"recip_rank"``, ``"recall_5"``) are
    accepted too. A single string may list several, separated by commas or spaces. An unknown name raises
    ``ValueError`` naming it and the accepted spellings."""
    import ir_measures

    if measures is None:
        return list(TOT_MEASURES)
    if isinstance(measures, str):
        measures = [m for m in re.split(r"[,\s]+", measures) if m]
    elif not isinstance(measures, (list, tuple)):
        measures = [measures]
    out = []
    for m in measures:
        if isinstance(m, ir_measures.Measure):
            out.append(m)
            continue
        if not isinstance(m, str):
            raise ValueError(f"a measure must be an ir_measures measure or its name, not {type(m).__name__} {m!r}")
        try:
            out.append(ir_measures.parse_measure(m))
        except (ValueError, NameError, SyntaxError, TypeError, AttributeError):
            try:
                found = ir_measures.parse_trec_measure(m)
            except (ValueError, KeyError, AttributeError):
                found = []
            if not found:
                raise ValueError(f"unknown measure {m!r}: use ir_measures names as in the table's columns "
                                 f"(e.g. {', '.join(str(x) for x in SHORT_MEASURES)}) or trec_eval names "
                                 "(e.g. recip_rank, recall_5)") from None
            out.extend(found)
    if not out:
        raise ValueError("no measures given")
    return out


def parse_measure(measure):
    """One measure (an ir_measures object or a name :func:`parse_measures` accepts)."""
    found = parse_measures([measure])
    if len(found) != 1:
        raise ValueError(f"{measure!r} names {len(found)} measures; give one")
    return found[0]


def tot_experiment(systems, topics: pd.DataFrame, qrels: pd.DataFrame, measures=None, names=None,
                   baseline: Optional[int] = None, round: int = 4, **kwargs) -> pd.DataFrame:
    """``pt.Experiment`` with the ToT measures, rounding and (optionally) paired t-tests against ``baseline``.
    ``measures``: ir_measures objects or their names as the table spells them (``["RR", "R@5"]``, see
    :func:`parse_measures`); default :data:`TOT_MEASURES`.

    Tied scores are ordered as trec_eval (and :func:`write_trec_run`) order them, docno descending, for every
    measure: some ir_measures providers (a cut-off ``RR@k``, ``Judged@k``) order ties the other way, so each
    ranking's ties are broken first (:func:`strict_ties`; scores move by a few units in the last place)."""
    eval_metrics = parse_measures(measures)
    if isinstance(systems, dict):
        systems = {k: _with_strict_ties(v) for k, v in systems.items()}
    else:
        systems = list(systems) if isinstance(systems, (list, tuple)) else [systems]
        names = names if names is not None else [str(s) for s in systems]
        systems = [_with_strict_ties(s) for s in systems]
    return pt.Experiment(systems, topics, qrels, eval_metrics=eval_metrics, names=names,
                         baseline=baseline, round=round, **kwargs)


def trec_order(results: pd.DataFrame) -> pd.DataFrame:
    """``results`` sorted as trec_eval ranks a query: score descending, ties by docno descending (as text)."""
    key = pd.DataFrame({"qid": results["qid"].to_numpy(), "score": results["score"].to_numpy(),
                        "docno": results["docno"].astype(str).to_numpy()})   # positions, whatever the index
    order = key.sort_values(["qid", "score", "docno"], ascending=[True, False, False], kind="mergesort").index
    return results.iloc[order]


def strict_ties(results: pd.DataFrame) -> pd.DataFrame:
    """``results`` in trec_eval's order (score descending, then docno descending as text) with tied scores nudged
    down by units in the last place until each query's scores strictly decrease, and ranks renumbered: the same
    ranking for every evaluator, with the scores (nearly) as they were."""
    if not len(results):
        return results
    out = trec_order(results)
    scores = out["score"].to_numpy(dtype=float).copy()
    qids = out["qid"].to_numpy()
    same = np.r_[False, qids[1:] == qids[:-1]]
    todo = np.flatnonzero(same & np.r_[False, scores[1:] >= scores[:-1]])
    if len(todo):
        for i in range(todo[0], len(scores)):   # nudges cascade down the rest of the ranking
            if same[i] and scores[i] >= scores[i - 1]:
                scores[i] = np.nextafter(scores[i - 1], -np.inf)
    out = out.drop(columns=["rank"], errors="ignore").assign(score=scores)
    return pt.model.add_ranks(out)


def _with_strict_ties(system):
    if isinstance(system, pd.DataFrame):
        return strict_ties(system)
    return system >> pt.apply.generic(strict_ties)


def recall_curves(results: pd.DataFrame) -> pd.DataFrame:
    """The ``R@k`` columns of a ``pt.Experiment`` table as a tidy frame (``name, k, recall``), k ascending."""
    require_columns(results, ["name"], "recall_curves")
    cols = {int(m.group(1)): c for c in results.columns if (m := _RECALL_COL.match(str(c)))}
    if not cols:
        raise ValueError("recall_curves: the experiment table has no R@k column; evaluate with "
                         "eval_metrics including ptt.CURVE_MEASURES (or R@k measures)")
    rows = [{"name": name, "k": k, "recall": float(val)}
            for name, rec in zip(results["name"], results.to_dict("records"))
            for k, val in ((k, rec[c]) for k, c in sorted(cols.items()))]
    return pd.DataFrame(rows, columns=["name", "k", "recall"])


def plot_recall_at_k(results: pd.DataFrame, path: Union[str, os.PathLike, None] = None, ax=None,
                     title: Optional[str] = "Recall@k", logx: bool = True, highlight: Sequence[str] = ()):
    """Draw one Recall@k curve per system of a ``pt.Experiment`` table (its ``R@k`` columns) with matplotlib.

    ``path`` writes the figure (PNG, SVG or PDF by suffix); ``ax`` draws into an existing axes (notebooks);
    ``highlight`` names systems drawn with a thicker line. Returns the matplotlib ``Figure``.
    """
    import matplotlib

    if ax is None and path is not None and "ipykernel" not in str(matplotlib.get_backend()).lower():
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    curves = recall_curves(results)
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 4.5))
    else:
        fig = ax.figure
    for name, part in curves.groupby("name", sort=False):
        lw = 2.6 if name in highlight else 1.5
        ax.plot(part["k"], part["recall"], marker="o", markersize=3, linewidth=lw, label=str(name))
    if logx:
        ax.set_xscale("log")
    ks = sorted(curves["k"].unique())
    ax.set_xticks(ks)
    ax.set_xticklabels([str(k) for k in ks])
    ax.set_xlabel("k (cut-off)")
    ax.set_ylabel("Recall@k")
    ax.set_ylim(0, 1)
    ax.grid(True, alpha=0.3)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
    return fig


def write_trec_run(results: pd.DataFrame, path: Union[str, os.PathLike], run_name: str = "pyterrier_tot",
                   depth: Optional[int] = 1000) -> Path:
    """Write a result frame as a TREC run file (``qid Q0 docno rank score run_name``) through ``pt.io``.

    Before writing: ranks are recomputed from the scores within each query (from 1; equal scores in trec_eval's
    order, docno descending), ``depth`` keeps the top of each query, and an empty frame, a missing or non-finite
    score, whitespace in ids or the run name, or a docno twice for a qid raise an error naming the values.
    Scores are written at full precision (the shortest text that reads back as the same float), so no two books
    the frame ranks apart are tied in the file.
    """
    require_columns(results, ["qid", "docno", "score"], "write_trec_run")
    if len(results) == 0:
        raise ValueError("write_trec_run: the result frame is empty; nothing to write")
    if not run_name or any(c.isspace() for c in run_name):
        raise ValueError(f"write_trec_run: run_name must be one word, not {run_name!r}")
    res = results[["qid", "docno", "score"]].copy()
    res["qid"] = res["qid"].astype(str)
    res["docno"] = res["docno"].astype(str)
    for col in ("qid", "docno"):
        bad = res[col].str.contains(r"\s", regex=True) | (res[col] == "")
        if bad.any():
            raise ValueError(f"write_trec_run: {col} values must be non-empty and free of spaces: "
                             f"{res.loc[bad, col].tolist()[:5]}")
    dup = res.duplicated(["qid", "docno"])
    if dup.any():
        raise ValueError(f"write_trec_run: docno(s) appear twice for the same qid: "
                         f"{res.loc[dup, ['qid', 'docno']].values.tolist()[:5]}")
    res["score"] = pd.to_numeric(res["score"], errors="coerce").astype(float)
    bad = ~np.isfinite(res["score"].to_numpy())
    if bad.any():
        raise ValueError(f"write_trec_run: score must be a finite number; (qid, docno) with a missing, NaN or "
                         f"infinite score: {res.loc[bad, ['qid', 'docno']].values.tolist()[:5]}")
    # the ranks written follow trec_eval's order, so the file's ranks, its scores and what trec_eval / ir_measures
    # evaluate agree
    res = trec_order(res)
    res["rank"] = res.groupby("qid").cumcount() + 1
    if depth is not None:
        res = res[res["rank"] <= depth]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # each score as the shortest text that reads back as the same float: rounding (e.g. to 6 decimals) would
    # tie books the frame ranks apart (1e-9-scale generative scores, saturated cross-encoder scores), and
    # trec_eval would then re-order them by docno
    pt.io.write_results(res.assign(score=res["score"].map(repr)), str(path), format="trec", run_name=run_name)
    return path


def read_trec_run(path: Union[str, os.PathLike]) -> pd.DataFrame:
    """Read a TREC run file back as a result frame (``qid, docno, rank, score, name``) through ``pt.io``."""
    return pt.io.read_results(str(path), format="trec")
