"""Evaluation helpers: the measures ToT papers report, pt.Experiment defaults, and TREC run files."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Union

import pandas as pd
import pyterrier as pt
from ir_measures import RR, R, Success, nDCG

from pyterrier_tot._util import require_columns

#: Recall at the cut-offs the decomposition paper reports, plus MRR, nDCG@10 and Success@k.
TOT_MEASURES = [R @ 1, R @ 5, R @ 10, R @ 20, R @ 100, RR, nDCG @ 10, Success @ 1, Success @ 10, Success @ 100]
#: A short list for tables in notebooks and the demo.
SHORT_MEASURES = [R @ 5, R @ 10, R @ 100, RR, nDCG @ 10]


def tot_experiment(systems, topics: pd.DataFrame, qrels: pd.DataFrame, measures=None, names=None,
                   baseline: Optional[int] = None, round: int = 4, **kwargs) -> pd.DataFrame:
    """``pt.Experiment`` with the ToT measures, rounding and (optionally) paired t-tests against ``baseline``."""
    return pt.Experiment(systems, topics, qrels, eval_metrics=measures or TOT_MEASURES, names=names,
                         baseline=baseline, round=round, **kwargs)


def write_trec_run(results: pd.DataFrame, path: Union[str, os.PathLike], run_name: str = "pyterrier_tot",
                   depth: Optional[int] = 1000) -> Path:
    """Write a result frame as a TREC run file (``qid Q0 docno rank score run_name``).

    Ranks are recomputed from the scores within each query and start at 1; ``depth`` keeps the top ranks of
    each query. Raises on missing columns, an empty frame, or whitespace inside ids or the run name.
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
    if res.duplicated(["qid", "docno"]).any():
        raise ValueError("write_trec_run: a docno appears twice for the same qid")
    res = res.sort_values(["qid", "score"], ascending=[True, False], kind="stable")
    res["rank"] = res.groupby("qid").cumcount() + 1
    if depth is not None:
        res = res[res["rank"] <= depth]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf8") as f:
        for qid, docno, rank, score in zip(res["qid"], res["docno"], res["rank"], res["score"]):
            f.write(f"{qid} Q0 {docno} {rank} {score:.6f} {run_name}\n")
    return path


def read_trec_run(path: Union[str, os.PathLike]) -> pd.DataFrame:
    """Read a TREC run file back as a result frame (``qid, docno, rank, score, name``)."""
    df = pd.read_csv(path, sep=r"\s+", names=["qid", "Q0", "docno", "rank", "score", "name"],
                     dtype={"qid": str, "docno": str}, engine="python")
    return df.drop(columns=["Q0"])
