"""How the recipe's fuser puts its experts on one scale (issues 31.2 / 31.3 / 31.4). The default min-max
normalises each expert's scores per query over the candidate union (a missing score: 0, the bottom); z-scores (a
missing score: 0, the mean) and reciprocal ranks 1 / (60 + rank) (RRF; a missing score: 0, below every rank) are
the usual alternatives. Everything else stays the default's: the experts, the candidates (base top 100 + experts'
top 50), the fit (coordinate ascent on ``recipe.FIT_METRIC`` with the base as a floor on ``recipe.FLOOR_METRIC``,
the mean of ``recipe.FIT_BAGS`` bootstrap ascents, from the same initial weights) and the tail to depth 1000.

Rule fixed before the run: each normalisation is fitted that way in 5-fold cross-validation on the tuning slice
(300 training queries the base never saw); the one with the highest held-out objective (the mean over folds of
the fit objective's measures, R@1/5/10/20/100 and MRR) is chosen, min-max unless another is higher. The chosen one
replaces min-max in the default only if, refitted on the whole slice, it raises validation R@5 and MRR over the
default with p < .05 and is at or above the base alone at R@1/5/10/20/100/1000 and MRR. Validation and BIRCO dev
(nothing fitted on BIRCO) are reported for every normalisation.

    python benchmarks/recipe_rejected/fuser_normalisation.py   # about 25 minutes on two cores (the experts' scores)
    python benchmarks/recipe_rejected/fuser_normalisation.py --render
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

_STUDY = Path(__file__).resolve().parent
sys.path[:0] = [str(_STUDY), str(_STUDY.parent), str(_STUDY.parent / "recipe")]  # study, benchmarks/, recipe/

import ir_measures
import numpy as np
import pandas as pd
from _common import WORK, md_table, parse_or_render, pipeline_key, reddit, write_results
from ir_measures import RR, R

NAME = "fuser_normalisation"
METHODS = ("minmax", "zscore", "rr")
FOLDS = 5
OBJECTIVE = [R @ 1, R @ 5, R @ 10, R @ 20, R @ 100, RR]


def default_parts(ds, index):
    """(the default recipe 1000 deep, the same recipe unfitted and without its tail, its base folders): the
    unfitted one gives the initial weights, the expert names and the experts that score the candidates."""
    from pyterrier_tot import recipe

    fine = recipe.fine_tuned_bases(ds, index, recipe.DEFAULT_BASE, train=False)
    helpers = recipe.fine_tuned_bases(ds, index, recipe.default_helpers(recipe.DEFAULT_BASE), train=False,
                                      role="helper")
    extra = recipe.recipe_priors(index, recipe.DEFAULT_BASE, recipe.fine_tuned_models(fine)) or None
    unfitted = recipe.build_pipeline(index, fine, depth=None, helpers=helpers, extra_experts=extra)
    return recipe.tuned_pipeline(ds, index, train=False, verbose=False), unfitted, fine, (helpers, extra)


def raw_scores(dp, topics: pd.DataFrame, key: str) -> pd.DataFrame:
    """Each candidate's raw score from each expert (NaN where the expert gave none), cached under ``key``."""
    from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser

    f = WORK / NAME / f"{key}.pkl"
    if f.is_file():
        return pd.read_pickle(f)
    t0 = time.time()
    cands = dp.pipeline_to_candidates()(topics)
    raw = WeightedFuser(dict(zip(dp.fuser.names, dp.fuser.experts)), normalise="none",
                        neutral=float("nan")).features(cands)
    raw = raw[["qid", "docno", *dp.fuser.names]].astype({"qid": str, "docno": str})
    raw.attrs["seconds"] = time.time() - t0
    f.parent.mkdir(parents=True, exist_ok=True)
    raw.to_pickle(f)
    return raw


def normalised(raw: pd.DataFrame, names: list, method: str) -> pd.DataFrame:
    """``raw`` on one scale per expert and query, as the fuser puts it (``method``; a missing score: 0)."""
    from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser

    frame = raw[["qid", "docno"]].assign(features=list(raw[names].to_numpy(dtype=float)))
    return WeightedFuser(None, weights=[1.0] * len(names), names=names, normalise=method).features(frame)


def fit(feats: pd.DataFrame, qrels: pd.DataFrame, names: list, init, floor) -> np.ndarray:
    """The recipe's fit (``recipe.fitted_weights`` on precomputed features) on normalised ``feats``."""
    from pyterrier_tot import recipe
    from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser

    frame = feats.drop(columns=names).assign(features=list(feats[names].to_numpy(dtype=float)))
    f = WeightedFuser(None, weights=init, names=names, normalise="none")
    f.fit(frame, qrels, metric=recipe.FIT_METRIC, floor=floor, floor_metric=recipe.FLOOR_METRIC, bags=recipe.FIT_BAGS)
    return np.asarray(f.weights, dtype=float)


def fused(feats: pd.DataFrame, names: list, weights) -> pd.DataFrame:
    from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser

    return WeightedFuser(None, weights=weights, names=names, normalise="none").fuse(feats)


def objective(run: pd.DataFrame, qrels: pd.DataFrame) -> float:
    q = qrels.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"})
    got = ir_measures.calc_aggregate(OBJECTIVE, q, run.rename(columns={"qid": "query_id", "docno": "doc_id"}))
    return float(np.mean([got[m] for m in OBJECTIVE]))


def cross_validated(raw: pd.DataFrame, qrels: pd.DataFrame, names: list, init, floor, method: str) -> dict:
    """The held-out objective of ``method`` over ``FOLDS`` folds of the tuning slice (queries shuffled, seed 0)."""
    qids = np.random.default_rng(0).permutation(sorted(raw["qid"].unique()))
    feats = normalised(raw, names, method)
    held = []
    for i in range(FOLDS):
        test = set(qids[i::FOLDS])
        train = feats[~feats["qid"].isin(test)]
        w = fit(train, qrels[~qrels["qid"].astype(str).isin(test)], names, init, floor)
        held.append(objective(fused(feats[feats["qid"].isin(test)], names, w), qrels[qrels["qid"].isin(test)]))
    return {"held-out objective": float(np.mean(held)), "folds": [round(h, 4) for h in held]}


def choose(cv: dict) -> str:
    """The rule fixed before the run: the highest held-out objective; min-max unless another is higher."""
    best = max(cv, key=lambda m: cv[m]["held-out objective"])
    return best if cv[best]["held-out objective"] > cv["minmax"]["held-out objective"] else "minmax"


def rows(runs: dict, topics, qrels, baseline: str) -> list:
    from recipe_depth import evaluate

    table = evaluate(runs, topics, qrels, baseline)
    return [{"system": n, **r} for n, r in table.items()]


def section(dp_default, unfitted, raw, weights: dict, tail: pd.DataFrame, topics, qrels) -> list:
    """BM25-free rows of one data set: the base alone (the tail run), the default, and each normalisation's fit
    (fused top k, then the base's ranking to 1000 as the default does), tested against the default."""
    from pyterrier_tot.decomposition.pipeline import fill_to_depth

    names = unfitted.fuser.names
    runs = {"base alone": tail, "default (min-max, as shipped)": dp_default}
    for method, w in weights.items():
        ranked = fused(normalised(raw, names, method), names, w)
        runs[f"{method}, refitted"] = fill_to_depth(ranked, tail, 1000, keep=unfitted.candidates.k)
    return rows(runs, topics, qrels, "default (min-max, as shipped)")


def tables(p: dict) -> list:
    """The markdown of the validation and BIRCO sections (``p["sections"]``, ``p["n"]``), each row tested against
    the default (as :func:`rows` leaves them)."""
    lines: list = []
    cols = ["system", "R@1", "R@5", "R@10", "R@20", "R@100", "R@1000", "MRR", "nDCG@10", "+/- R@5", "p R@5",
            "+/- MRR", "p MRR"]
    for tag, title in (("validation", "Validation (reported, not used)"), ("birco", "BIRCO dev (nothing fitted)")):
        df = pd.DataFrame(p["sections"][tag])
        for c in ("p R@5", "p MRR", "+/- R@5", "+/- MRR"):
            df[c] = [("-" if pd.isna(v) else f"{v:.3f}" if isinstance(v, float) else v)
                     for v in df.get(c, pd.Series([None] * len(df)))]
        lines += [f"## {title}, {p['n'][tag]} queries", "",
                  "+/-: queries up / down against the default; p: paired t-test against the default.", "",
                  md_table(df[[c for c in cols if c in df.columns]]), ""]
    return lines


def markdown(p: dict) -> str:
    lines = ["# How the recipe's fuser puts its experts on one scale", "",
             "Min-max (the default), z-scores and reciprocal ranks (RRF, 1 / (60 + rank)), each fitted as the recipe "
             "is (coordinate ascent on the mean of R@1/5/10/20/100 and MRR, the base as a floor, the mean of "
             f"{p['bags']} bootstrap ascents) over the same experts and candidates, with the same tail to depth 1000. "
             "Rule fixed before the run: the highest held-out objective in 5-fold cross-validation on the tuning slice "
             "is chosen (min-max unless another is higher); it replaces min-max only if, refitted on the whole slice, "
             "it raises validation R@5 and MRR over the default with p < .05 and is nowhere below the base alone.", "",
             f"Chosen on the tuning slice: **{p['chosen']}**. Replaces min-max in the default: "
             f"**{'yes' if p['adopt'] else 'no'}**. The min-max refit reproduces the shipped weights: "
             f"**{'yes' if p['reproduces'] else 'no'}**.", "",
             "## Tuning slice, 5-fold cross-validation (the choice)", "",
             md_table(pd.DataFrame([{"normalisation": m, **c} for m, c in p["cv"].items()]), "{:.4f}"), ""]
    return "\n".join(lines + tables(p) + closing(p, lambda m: p["names"], NAME))


def closing(p: dict, names_of, script: str) -> list:
    """The markdown's last lines: each row's weights fitted on the whole slice (``names_of(row)``: its experts),
    the run's seconds and how to re-render it."""
    return ["Weights fitted on the whole tuning slice: " + "; ".join(
        f"{k}: " + ", ".join(f"{n} {w:.3g}" for n, w in zip(names_of(k), ws)) for k, ws in p["weights"].items()), "",
        f"{p['seconds']:.0f} s on two CPU cores (the experts' raw scores: {p['raw_seconds']:.0f} s). "
        f"Re-render: `python benchmarks/recipe_rejected/{script}.py --render`.", ""]


def begin(name: str, markdown, doc: str):
    """None after ``--render`` (the markdown rewritten from the committed JSON), else (the start time, the
    Reddit-TOMT dataset, its index)."""
    if parse_or_render(argparse.ArgumentParser(description=doc.split("\n\n")[0]), name, markdown) is None:
        return None
    return (time.time(), *reddit())


def main() -> None:
    started = begin(NAME, markdown, __doc__)
    if started is None:
        return
    import pyterrier_tot as ptt
    from pyterrier_tot import recipe

    t0, ds, index = started
    dp, unfitted, fine, (helpers, extra) = default_parts(ds, index)
    names, init, floor = unfitted.fuser.names, unfitted.fuser.weights, recipe.base_names(fine)
    if list(names) != list(dp.fuser.names):
        raise SystemExit(f"the default's experts {dp.fuser.names} are not the unfitted recipe's {names}")
    wkey = Path(dp.weights_path).name
    tune, tq = recipe.train_data(ds, "tuning", recipe.TUNING_QUERIES, recipe.TUNING_SEED)
    tune, tq = tune.astype({"qid": str}), tq.astype({"qid": str, "docno": str})
    raw_t = raw_scores(unfitted, tune, pipeline_key("tuning-raw", unfitted))
    cv = {}
    for m in METHODS:
        cv[m] = cross_validated(raw_t, tq, names, init, floor, m)
        print(m, cv[m], flush=True)
    chosen = choose(cv)
    weights = {m: fit(normalised(raw_t, names, m), tq, names, init, floor) for m in METHODS}
    reproduces = bool(np.allclose(weights["minmax"], dp.fuser.weights))
    sections, n, raw_seconds = {}, {}, raw_t.attrs.get("seconds", 0.0)
    birco = ptt.get_dataset("birco-wtb")
    bindex = ptt.BookIndex(birco)
    for tag, topics, qrels in (("validation", ds.get_topics("validation"), ds.get_qrels("validation")),
                               ("birco", birco.get_topics("dev"), birco.get_qrels("dev"))):
        topics = topics.astype({"qid": str})
        if tag == "birco":
            bextra = recipe.recipe_priors(bindex, recipe.DEFAULT_BASE, recipe.fine_tuned_models(fine)) or None
            shipped = recipe.build_pipeline(bindex, fine, weights=dp.weights_path, helpers=helpers,
                                            extra_experts=bextra)
            scorer = recipe.build_pipeline(bindex, fine, depth=None, helpers=helpers, extra_experts=bextra)
        else:
            shipped, scorer = dp, unfitted
        raw = raw_scores(scorer, topics, pipeline_key(f"{tag}-raw", scorer))
        raw_seconds += raw.attrs.get("seconds", 0.0)
        tail = cached(pipeline_key(f"{tag}-tail", shipped), shipped.tail, topics)
        default_run = cached(pipeline_key(f"{tag}-default", shipped), shipped, topics)
        sections[tag] = section(default_run, scorer, raw, weights, tail, topics, qrels)
        n[tag] = len(topics)
    val = {r["system"]: r for r in sections["validation"]}
    pick, base = val[f"{chosen}, refitted"], val["base alone"]
    adopt = (chosen != "minmax" and pick.get("p R@5", 1) < .05 and pick.get("p MRR", 1) < .05
             and pick["R@5"] > val["default (min-max, as shipped)"]["R@5"]
             and pick["MRR"] > val["default (min-max, as shipped)"]["MRR"]
             and all(pick[c] >= base[c] for c in ("R@1", "R@5", "R@10", "R@20", "R@100", "R@1000", "MRR")))
    payload = {"cv": cv, "chosen": chosen, "adopt": bool(adopt), "reproduces": reproduces, "names": list(names),
               "weights": {m: [float(x) for x in w] for m, w in weights.items()}, "bags": recipe.FIT_BAGS,
               "sections": sections, "n": n, "weights_key": wkey, "raw_seconds": round(raw_seconds, 1),
               "seconds": round(time.time() - t0, 1)}
    write_results(NAME, payload, markdown(payload))


def cached(key: str, system, topics: pd.DataFrame) -> pd.DataFrame:
    """``system(topics)``'s ranking, computed once and kept under ``key`` (the system's :func:`pipeline_key`)."""
    f = WORK / NAME / f"{key}.pkl"
    if not f.is_file():
        f.parent.mkdir(parents=True, exist_ok=True)
        system(topics)[["qid", "docno", "score"]].astype({"qid": str, "docno": str}).to_pickle(f)
    return pd.read_pickle(f)


if __name__ == "__main__":
    main()
