"""Plumbing shared by the benchmark scripts: result folders, timing, JSON + markdown output.

Each study sits in a folder of its own (``benchmarks/<question>/``) with its results beside it
(``benchmarks/<question>/results/``); a script there puts its own folder and ``benchmarks/`` on ``sys.path``::

    sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
    import _common

Run caches are shared by every study: ``benchmarks/.work`` (:data:`WORK`, not committed).
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import pandas as pd

os.environ.setdefault("HF_HUB_OFFLINE", "1")
BENCHMARKS = Path(__file__).resolve().parent
WORK = BENCHMARKS / ".work"


def results_dir(script=None) -> Path:
    """A study's results folder: ``results/`` beside ``script`` (a script's ``__file__``); without one, beside the
    script whose code calls this function (``write_results`` and ``rerender`` write there)."""
    return Path(script or _caller_file()).resolve().parent / "results"


def _caller_file() -> str:
    """The file of the nearest code up the call stack that is not this module's: the script calling ``_common``."""
    frame = sys._getframe(1)
    while frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    return frame.f_globals["__file__"]


def script_path(script=None) -> str:
    """``benchmarks/<question>/<name>.py`` of ``script`` (default: the calling script), as a command names it."""
    return Path(script or _caller_file()).resolve().relative_to(BENCHMARKS.parent).as_posix()


@contextmanager
def timer(store: dict, key: str):
    """Wall-clock seconds of the block into ``store[key]``; the block meets every query as new (the loaded
    bi-encoders forget the query vectors they remember, so no timed block rides on an earlier one's encoding)."""
    from pyterrier_tot.models import forget_queries

    forget_queries()
    t0 = time.perf_counter()
    yield
    store[key] = round(time.perf_counter() - t0, 3)


def cached_run(work: Path, key: str, make, seconds: dict, topics: Optional[pd.DataFrame] = None) -> pd.DataFrame:
    """A run (qid, docno, score) computed once by ``make()`` and kept as JSON lines under ``work``, with its
    wall-clock seconds in ``seconds[key]`` (timed as a new query's: the query memo is emptied first). ``topics``:
    the queries the run answers; a run kept for other query texts (a loader that now cleans them differently), or
    kept before their texts were recorded, is computed again."""
    from pyterrier_tot.models import forget_queries
    from pyterrier_tot.recipe.protocol import text_fingerprint

    work.mkdir(parents=True, exist_ok=True)
    f = work / (re.sub(r"[^A-Za-z0-9_.-]+", "_", key) + ".jsonl")
    t = f.with_suffix(".seconds")
    texts = f.with_suffix(".topics")
    want = text_fingerprint(topics) if topics is not None else None
    if want is not None and (not texts.is_file() or texts.read_text().strip() != want):
        f.unlink(missing_ok=True)
    if f.is_file():
        seconds[key] = float(t.read_text()) if t.is_file() else float("nan")
        return pd.read_json(f, lines=True, dtype={"qid": str, "docno": str})
    forget_queries()
    t0 = time.time()
    run = make()[["qid", "docno", "score"]].astype({"qid": str, "docno": str})
    seconds[key] = time.time() - t0
    run.attrs = {}
    run.to_json(f, orient="records", lines=True)
    t.write_text(f"{seconds[key]:.2f}")
    if want is not None:
        texts.write_text(want)
    print(f"  {key}: {seconds[key]:.0f} s", flush=True)
    return run


def pipeline_key(prefix: str, pipe) -> str:
    """A run-cache key for ``pipe``'s runs: ``prefix``, its fitted weights' folder name (which names the models and
    the tuning queries they were fitted on) and a hash of its repr (its stages, depth and tail), so a refitted,
    retrained or deepened pipeline is never read from an older pipeline's cached run."""

    weights = getattr(pipe, "weights_path", None)
    digest = hashlib.sha1(repr(pipe).encode()).hexdigest()[:8]
    return f"{prefix}-{Path(weights).name if weights else 'unsaved'}-{digest}"


def machine() -> dict:
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
            "date": time.strftime("%Y-%m-%d %H:%M")}


def reddit():
    """(Reddit-TOMT, its BookIndex): the data set and index every Reddit benchmark starts from."""
    import pyterrier_tot as ptt

    ds = ptt.get_dataset("reddit-tomt-books")
    return ds, ptt.BookIndex(ds)


def write_results(name: str, payload: dict, markdown: str, indent=2, results: Optional[Path] = None) -> None:
    """``results/<name>.{json,md}`` beside the calling script (or in ``results``). ``indent=None``: one line of
    JSON, for payloads with per-query columns (a number a line is megabytes)."""
    results = results or results_dir(_caller_file())
    results.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "machine": machine(), **payload}
    (results / f"{name}.json").write_text(json.dumps(payload, indent=indent, default=str))
    (results / f"{name}.md").write_text(markdown)
    print(f"wrote {results / (name + '.json')} and {results / (name + '.md')}")


def run_or_render(name: str, run, markdown, ap=None) -> None:
    """A benchmark's whole ``main``: ``--render`` rewrites the markdown from the committed JSON; otherwise ``run()``
    gives the payload, written as ``results/<name>.{json,md}`` beside the calling script. ``ap``: a parser with
    the script's own arguments (default: none but ``--render``)."""
    import argparse

    script = _caller_file()
    if parse_or_render(ap or argparse.ArgumentParser(), name, markdown, script) is None:
        return
    payload = run()
    write_results(name, payload, markdown(payload), results=results_dir(script))


def parse_or_render(ap, name: str, markdown, script=None):
    """``ap``'s arguments plus ``--render``; with ``--render``, rewrite ``results/<name>.md`` (beside ``script``,
    default the calling script) from the committed JSON (:func:`rerender`) and return None, so the benchmark's
    ``main`` stops there."""
    ap.add_argument("--render", action="store_true", help="rewrite the markdown from the committed JSON, run nothing")
    args = ap.parse_args()
    if args.render:
        rerender(name, markdown, results_dir(script or _caller_file()))
        return None
    return args


def rerender(name: str, markdown, results: Optional[Path] = None) -> None:
    """Rewrite ``results/<name>.md`` from the committed ``results/<name>.json`` (a benchmark's ``--render``), beside
    the calling script unless ``results`` names the folder."""
    results = results or results_dir(_caller_file())
    payload = json.loads((results / f"{name}.json").read_text())
    (results / f"{name}.md").write_text(markdown(payload))


def split_heading(split: str, queries: int) -> str:
    """A results section's heading: the split, its size, and that validation is reported, never used to choose."""
    note = "; reported, not used" if split == "validation" else ""
    return f"## {split.capitalize()} ({queries} queries{note})"


def trailer(seconds: float, script: str) -> str:
    """A results page's last line: the run's seconds and how to re-render the page (``script``: the name of a script
    in the calling script's folder)."""
    where = Path(_caller_file()).resolve().parent / f"{script}.py"
    return f"{seconds:.0f} s on two CPU cores. Re-render: `python {script_path(where)} --render`."


def measures_per_query(run: pd.DataFrame, qrels: pd.DataFrame, measures, qids=None,
                       trec_ties: bool = True) -> pd.DataFrame:
    """Each query's value of each of ``measures`` (ir_measures objects) for ``run`` (qid, docno, score), by
    ir_measures: a frame indexed by qid, a column per measure (``str(measure)``). Equal scores are ranked in
    trec_eval's order (docno descending, as ``ptt.tot_experiment`` ranks them; ``trec_ties=False``: each measure's
    provider's own order). ``qids``: the queries to report, in that order, 0 where the run has none of a query's
    books; by default the queries ir_measures measured (those of ``qrels``)."""
    import ir_measures

    from pyterrier_tot.evaluation import strict_ties

    r = run[["qid", "docno", "score"]]
    r = (strict_ties(r) if trec_ties else r).rename(columns={"qid": "query_id", "docno": "doc_id"})
    q = qrels.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})
    got = pd.DataFrame([(m.query_id, str(m.measure), m.value) for m in ir_measures.iter_calc(measures, q, r)],
                       columns=["qid", "measure", "value"])
    out = got.pivot(index="qid", columns="measure", values="value").reindex(columns=[str(m) for m in measures])
    return out if qids is None else out.reindex(list(qids)).fillna(0.0)


def gold_run(ranks: dict) -> tuple:
    """The qrels and run that gold ranks stand for (``ranks``: qid -> the 1-based ranks a system gave the query's
    relevant books, 0 where it did not retrieve one), in ir_measures' terms: each relevant book at its rank and a
    placeholder book at every other rank down to the deepest, so ir_measures finds each relevant book where the system
    put it. A query none of whose books was retrieved keeps one placeholder, so it counts (as 0) rather than dropping
    out; a query without a relevant book is left out."""
    import ir_measures

    qrels, run = [], []
    for q, r in ranks.items():
        if not r:
            continue
        at = {x: f"gold{i}" for i, x in enumerate(r) if x}
        qrels += [ir_measures.Qrel(q, f"gold{i}", 1) for i in range(len(r))]
        run += [ir_measures.ScoredDoc(q, at.get(n, f"other{n}"), float(-n)) for n in range(1, max(max(r), 1) + 1)]
    return qrels, run


def gold_rank_measures(ranks: dict, cuts) -> dict:
    """qid -> {"R@k": ..., "RR": ...} for ``k`` in ``cuts``, by ir_measures over :func:`gold_run`, for the queries
    with a relevant book, in the order of ``ranks``."""
    import ir_measures
    from ir_measures import RR, R

    got: dict = {}
    for m in ir_measures.iter_calc([*(R @ k for k in cuts), RR], *gold_run(ranks)):
        got.setdefault(m.query_id, {})[str(m.measure)] = m.value
    return {q: got[q] for q, r in ranks.items() if r}


def fused_measures(feats: pd.DataFrame, qrels: pd.DataFrame, names, w, measures):
    """The mean of each of ``measures`` (ir_measures objects) over the queries of ``feats`` when its candidates are
    ranked by the weighted sum of the columns ``names`` under weights ``w`` (a linear fuser's score), by ir_measures
    (equal scores in trec_eval's order, docno descending); as ``WeightedFuser.fit`` measures them, a query of
    ``qrels`` without candidates in ``feats`` is left out."""
    import ir_measures
    import numpy as np

    run = pd.DataFrame({"query_id": feats["qid"].astype(str).to_numpy(),
                        "doc_id": feats["docno"].astype(str).to_numpy(),
                        "score": feats[list(names)].to_numpy(dtype=float) @ np.asarray(w, dtype=float)})
    q = pd.DataFrame({"query_id": qrels["qid"].astype(str).to_numpy(), "doc_id": qrels["docno"].astype(str).to_numpy(),
                      "relevance": qrels["label"].astype(int).to_numpy() if "label" in qrels else 1})
    agg = ir_measures.calc_aggregate(measures, q[q["query_id"].isin(run["query_id"])], run)
    return np.array([agg[m] for m in measures])


def md_table(df: pd.DataFrame, floatfmt: str = "{:.3f}") -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, row in df.iterrows():
        cells = [floatfmt.format(v) if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
