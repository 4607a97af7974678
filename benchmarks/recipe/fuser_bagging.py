"""Issue 31.2: how should the recipe's fuser be fitted so that it stays at or above its base on queries it has not
seen? Decided inside the tuning slice alone (300 training queries; validation is not read): the slice is split into
random halves, the fuser is fitted on one half (one coordinate ascent with the base as a floor, as before; or the
mean of the ascents on ``bags`` bootstrap resamples of that half) and measured on the other half against the base
alone. Reported per method: the mean held-out gain over the base at each measure of the objective, the mean of the
*smallest* of those gains (the criterion: the recipe must not fall below its base at any measure), and how often
the held-out half saw the recipe below its base at some measure, and at R@5.

    python benchmarks/recipe/fuser_bagging.py [--base mpnet] [--splits 60] [--bags 15 30] [--render]

The tuning slice's expert scores are computed once (the recipe's candidates and experts on the named base) and
cached under ``benchmarks/.work/fuser_bagging``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]  # study, benchmarks/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyterrier as pt  # noqa: E402

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot import recipe  # noqa: E402
from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser  # noqa: E402
from pyterrier_tot.evaluation import parse_measure  # noqa: E402

NAME = "fuser_bagging"
WORK = _common.WORK / NAME
OBJ = recipe.FIT_METRIC.split(",")


def tuning_features(base: str):
    """(features frame, qrels, expert names) of the recipe on the tuning slice, with the base ``base`` as trained
    by ``BASE_SETTINGS``; cached as a pickle."""
    ds = ptt.get_dataset("reddit-tomt-books")
    index = ptt.BookIndex(ds)
    path = recipe.fine_tuned_base(ds, model=base, train=False, index=index)
    if path is None:
        raise SystemExit(f"no fine-tuned {base} base in the cache: train it first (recipe_depth.py --train)")
    fts = {recipe.base_expert_name(base): path}
    tune, tqrels = recipe.tuning_data(ds)
    dp = recipe.build_pipeline(index, fts, depth=None)
    f = WORK / f"tuning-{Path(path).name}.pkl"
    if not f.is_file():
        WORK.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        feats = dp.fuser.features((dp.decomposer >> dp.candidates)(tune))
        feats[["qid", "docno", *dp.fuser.names]].to_pickle(f)
        print(f"tuning features: {time.time() - t0:.0f} s", flush=True)
    return pd.read_pickle(f), tqrels, dp.fuser.names, recipe.base_names(fts), Path(path).name


def fit(feats, qrels, names, floor, bags: int, seed: int) -> np.ndarray:
    frame = feats.drop(columns=names).assign(features=list(feats[names].to_numpy(dtype=float)))
    f = WeightedFuser(None, weights=[1.0] * len(names), names=names, normalise="none")
    f.fit(frame, qrels, metric=recipe.FIT_METRIC, floor=floor, floor_metric=recipe.FLOOR_METRIC, bags=bags,
          seed=seed)
    return np.asarray(f.weights)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default=recipe.DEFAULT_BASE if isinstance(recipe.DEFAULT_BASE, str) else "mpnet")
    ap.add_argument("--splits", type=int, default=60)
    ap.add_argument("--bags", type=int, nargs="+", default=[15, 30])
    args = _common.parse_or_render(ap, NAME, markdown)
    if args is None:  # --render: the markdown rewritten from the committed JSON
        return
    t0 = time.time()
    feats, qrels, names, floor, model = tuning_features(args.base)
    feats = feats.assign(qid=feats["qid"].astype(str))
    qrels = qrels.assign(qid=qrels["qid"].astype(str))
    qids = np.array(sorted(feats["qid"].unique()))
    measures = [parse_measure(m) for m in OBJ]
    base_w = np.array([1.0 if n in floor else 0.0 for n in names])
    methods = {"one ascent (bags 0)": 0, **{f"bagged, {b} resamples": b for b in args.bags}}
    rng = np.random.default_rng(0)
    gains = {m: [] for m in methods}
    seconds = {m: 0.0 for m in methods}
    for s in pt.tqdm(range(args.splits), desc="halves"):
        perm = rng.permutation(qids)
        fit_q, held_q = perm[: len(perm) // 2], perm[len(perm) // 2:]
        fq = feats[feats["qid"].isin(fit_q)]
        held_f, held_qrels = feats[feats["qid"].isin(held_q)], qrels[qrels["qid"].isin(held_q)]
        base = _common.fused_measures(held_f, held_qrels, names, base_w, measures)
        for m, bags in methods.items():
            t = time.time()
            w = fit(fq, qrels[qrels["qid"].isin(fit_q)], names, floor, bags, seed=s)
            seconds[m] += time.time() - t
            gains[m].append((_common.fused_measures(held_f, held_qrels, names, w, measures) - base).tolist())
    rows = {}
    for m, g in gains.items():
        g = np.array(g)
        low = g.min(axis=1)
        rows[m] = {"mean smallest gain": float(low.mean()), "mean gain": float(g.mean()),
                   "share of halves below the base somewhere": float((low < -1e-9).mean()),
                   "share below at R@5": float((g[:, OBJ.index("R@5")] < -1e-9).mean()),
                   **{f"gain {c}": float(v) for c, v in zip(OBJ, g.mean(axis=0))},
                   "fit seconds": seconds[m] / args.splits}
    ref = np.array(gains["one ascent (bags 0)"]).min(axis=1)
    for m, g in gains.items():  # paired over the halves: the smallest gain against one ascent's
        d = np.array(g).min(axis=1) - ref
        rows[m]["smallest gain vs one ascent (se)"] = f"{d.mean():+.4f} ({d.std(ddof=1) / np.sqrt(len(d)):.4f})" \
            if len(d) > 1 and m != "one ascent (bags 0)" else ""
    payload = {"base": args.base, "model": model, "splits": args.splits, "tuning_queries": len(qids),
               "objective": recipe.FIT_METRIC, "floor_metric": recipe.FLOOR_METRIC, "experts": names,
               "rows": rows, "seconds": round(time.time() - t0, 1), "machine": _common.machine()}
    _common.write_results(NAME, payload, markdown(payload))


def markdown(p) -> str:
    table = pd.DataFrame([{"fit": m, **{k: v for k, v in r.items()}} for m, r in p["rows"].items()])
    return "\n".join([
        "# Fitting the fuser so that it holds on unseen queries (issue 31.2)", "",
        f"Inside the tuning slice only ({p['tuning_queries']} training queries; validation not read): "
        f"{p['splits']} random halves, the fuser fitted on one half and measured on the other against the "
        f"{p['base']} base alone (`{p['model']}`). Objective: the mean of `{p['objective']}`; floor held on "
        f"`{p['floor_metric']}` on the fitting half (every method). 'gain': held-out measure minus the base's; "
        "'smallest gain': the lowest of the six gains of a half (the recipe must not be below its base at any "
        "measure), averaged over halves; the paired difference to one ascent is over the same halves (their "
        "held-out halves overlap, so its standard error is optimistic). One run; the first row is the "
        "baseline (the fit as it was before bagging).", "",
        _common.md_table(table, floatfmt="{:.4f}"), "",
        f"Total {p['seconds']} s. Re-render: `python benchmarks/recipe/fuser_bagging.py --render`.", ""])


if __name__ == "__main__":
    main()
