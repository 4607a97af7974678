"""How deep the recipe's candidates go (issue 31.2: "widen the candidate union if that is what recall needs").

The default fuses the base's top ``k`` = 100 books plus the top ``expert_k`` = 50 of BM25 and the title experts
(about 185 books a query); its R@100 is capped by the share of queries whose gold book that union holds, while the
base alone finds more of them in its top 200 (both measured in ``tail_order.py``). Wider variants: the base's top
200 or 300.

1. Chosen inside the tuning slice (300 training queries; validation not read), with the protocol of
   ``helper_bases.py``: random halves; on each, every variant's fuser is fitted on one half (bagged, the base alone
   as the floor) and measured on the other. Rule fixed before the run: the variant with the highest mean held-out
   gain over the base replaces the default only if its gain over the default, paired over the same halves, is
   above 0 and it falls below the base on no larger share of halves than the default does.
2. Every variant as ``tuned_pipeline(ds, k=...)`` builds it (weights fitted on the whole slice, 1000 deep) on
   validation, with paired t-tests against the default: reported, not used for the choice.

    python benchmarks/recipe_rejected/candidate_depth.py [--splits 20] [--render]
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

_STUDY = Path(__file__).resolve().parent
sys.path[:0] = [str(_STUDY), str(_STUDY.parent), str(_STUDY.parent / "recipe")]  # study, benchmarks/, recipe/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import helper_bases  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyterrier as pt  # noqa: E402
from fuser_bagging import OBJ, fit  # noqa: E402

from pyterrier_tot import recipe
from pyterrier_tot.evaluation import parse_measure  # noqa: E402
from pyterrier_tot.recipe import (
    bases,  # noqa: E402
    recipe_priors,  # noqa: E402
)

NAME = "candidate_depth"
WORK = _common.WORK / NAME
DEFAULT = f"k {recipe.BASE_K}, expert_k {recipe.EXPERT_K} (the default)"
VARIANTS = {DEFAULT: (recipe.BASE_K, recipe.EXPERT_K), "k 200, expert_k 50": (200, 50),
            "k 300, expert_k 50": (300, 50)}
VAL_MEASURES = ["R@1", "R@5", "R@10", "R@20", "R@100", "R@200", "R@1000", "RR", "nDCG@10"]


def parts(ds, index):
    fts = bases.fine_tuned_bases(ds, index, "mpnet", train=False, verbose=False)
    helpers = bases.fine_tuned_bases(ds, index, bases.default_helpers("mpnet"), train=False, verbose=False,
                                     role="helper")
    if not fts or not helpers:
        raise SystemExit("the fine-tuned mpnet base and its MiniLM helper are not cached: build the default first "
                         "(python benchmarks/recipe/recipe_depth.py --bases mpnet --now-only --train)")
    return fts, helpers, recipe_priors(index, "mpnet", fts)


def variant_features(ds, index, k: int, expert_k: int, fts, helpers, priors) -> pd.DataFrame:
    """The tuning slice's candidates of one variant with one min-max column per expert (cached); the recipe's
    weights of that variant are fitted from them on the whole slice (and cached as tuned_pipeline finds them)."""
    tune, _ = recipe.tuning_data(ds)
    # keyed as the fitted weights are (models' fingerprints, helpers, prior, k, expert_k, tuning text): features of
    # a retrained base are never reused, nor weights fitted on them saved under the new model's key
    key = recipe.weights_path(ds.name, index, fts, recipe.TUNING_QUERIES, recipe.TUNING_SEED, k, expert_k, priors,
                               recipe.FIT_BAGS, helpers, recipe.text_fingerprint(tune)).name
    f = WORK / f"tuning-k{k}-e{expert_k}-{key}.pkl"
    dp = recipe.build_pipeline(index, fts, k=k, expert_k=expert_k, extra_experts=priors, helpers=helpers, depth=None)
    if not f.is_file():
        WORK.mkdir(parents=True, exist_ok=True)
        feats = dp.fuser.features((dp.decomposer >> dp.candidates)(tune))
        feats[["qid", "docno", *dp.fuser.names]].to_pickle(f)
    feats = pd.read_pickle(f)
    recipe.fitted_weights(ds, index, fts, k=k, expert_k=expert_k, extra_experts=priors, helpers=helpers,
                          feats=feats.merge(tune[["qid", "query"]], on="qid"))
    return feats.assign(qid=feats["qid"].astype(str)), list(dp.fuser.names)


def halves(frames: dict, names: list, qrels: pd.DataFrame, floor, splits: int, bags: int) -> dict:
    measures = [parse_measure(m) for m in OBJ]
    qids = np.array(sorted(frames[DEFAULT]["qid"].unique()))
    rng = np.random.default_rng(0)
    held_abs = {v: [] for v in frames}
    gains = {v: [] for v in frames}
    base_w = np.array([1.0 if n in floor else 0.0 for n in names])
    for s in pt.tqdm(range(splits), desc="halves"):
        perm = rng.permutation(qids)
        fit_q, held_q = perm[: len(perm) // 2], perm[len(perm) // 2:]
        for v, feats in frames.items():
            held_f, held_qrels = feats[feats["qid"].isin(held_q)], qrels[qrels["qid"].isin(held_q)]
            w = fit(feats[feats["qid"].isin(fit_q)], qrels[qrels["qid"].isin(fit_q)], names, floor, bags, seed=s)
            got = _common.fused_measures(held_f, held_qrels, names, w, measures)
            held_abs[v].append(got.tolist())
            gains[v].append((got - _common.fused_measures(held_f, held_qrels, names, base_w, measures)).tolist())
    ref = np.array(gains[DEFAULT])
    rows = {}
    for v, g in gains.items():
        g, a = np.array(g), np.array(held_abs[v])
        d = g.mean(axis=1) - ref.mean(axis=1)
        rows[v] = {**{f"held-out {c}": float(x) for c, x in zip(OBJ, a.mean(axis=0))},
                   "mean gain": float(g.mean()),
                   "share of halves below the base somewhere": float((g.min(axis=1) < -1e-9).mean()),
                   "gain vs default": float(d.mean()),
                   "se": float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan"),
                   "rows per query": float(len(frames[v]) / frames[v]["qid"].nunique())}
    return rows


def choose(rows: dict) -> str:
    best = max(rows, key=lambda v: rows[v]["mean gain"])
    below = "share of halves below the base somewhere"
    ok = best != DEFAULT and rows[best]["gain vs default"] > 0 and rows[best][below] <= rows[DEFAULT][below]
    return best if ok else DEFAULT


def validation(ds, index) -> dict:
    import ir_measures
    from scipy.stats import ttest_rel

    topics, qrels = ds.get_topics("validation"), ds.get_qrels("validation")
    q = qrels.rename(columns={"qid": "query_id", "docno": "doc_id", "label": "relevance"}).astype(
        {"query_id": str, "doc_id": str})
    qids = sorted(topics["qid"].astype(str))
    measures = [parse_measure(m) for m in VAL_MEASURES]
    seconds, per, keys = {}, {}, {}
    for v, (k, ek) in VARIANTS.items():
        pipe = recipe.tuned_pipeline(ds, index, train=False, verbose=False, k=k, expert_k=ek)
        key = f"val-k{k}-e{ek}-{Path(pipe.weights_path).name}"  # another fit of the weights: another run
        run = _common.cached_run(WORK, key, lambda p=pipe: p(topics), seconds, topics)
        keys[v] = key
        got = {str(m): dict.fromkeys(qids, 0.0) for m in measures}
        for m in ir_measures.iter_calc(measures, q, run.rename(columns={"qid": "query_id", "docno": "doc_id"})):
            got[str(m.measure)][m.query_id] = m.value
        per[v] = {m: np.array([d[i] for i in qids]) for m, d in got.items()}
    out = {}
    for v, pq in per.items():
        row = {m: float(x.mean()) for m, x in pq.items()}
        for m in ("R@5", "R@100", "RR"):
            diff = pq[m] - per[DEFAULT][m]
            row[f"{m} up/down"] = f"{int((diff > 0).sum())}/{int((diff < 0).sum())}"
            row[f"p {m}"] = float(ttest_rel(pq[m], per[DEFAULT][m]).pvalue) if diff.any() else 1.0
        row["s/query"] = seconds[keys[v]] / len(qids)
        out[v] = row
    return out


def markdown(p: dict) -> str:
    tun = pd.DataFrame([{"variant": v, **r} for v, r in p["rows"].items()])
    val = pd.DataFrame([{"variant": v, **r} for v, r in p["validation"].items()])
    return "\n".join([
        "# How deep the recipe's candidates go (issue 31.2)", "",
        f"The default recipe (mpnet base, MiniLM helper, density prior) with the base's top k books plus the top "
        f"expert_k of BM25 and the title experts as its candidates. Inside the tuning slice ({p['tuning_queries']} "
        f"training queries): {p['splits']} random halves; on each, every variant's fuser fitted on one half "
        f"(mean of `{recipe.FIT_METRIC}`, bagged over {p['bags']} resamples, the base alone as the floor) and "
        "measured on the other; 'gain': held-out measure minus the base alone's, averaged over the six measures; "
        "'gain vs default': paired over the same halves (held-out halves overlap, so the se is optimistic). Rule "
        "fixed before the run: the variant with the highest mean gain replaces the default only if its gain vs "
        "the default is above 0 and it falls below the base on no larger share of halves. "
        f"Chosen: **{p['chosen']}**.", "",
        "## Tuning slice (halves)", "", _common.md_table(tun, floatfmt="{:.4f}"), "",
        f"## Validation ({p['n_validation']} queries; reported, not used for the choice)", "",
        "Each variant as `tuned_pipeline(ds, k=k, expert_k=expert_k)` builds it (weights fitted on the whole "
        "slice, 1000 deep); p: paired t-test against the default. s/query: two CPU cores.", "",
        _common.md_table(val.rename(columns={"RR": "MRR"})), "",
        f"Total {p['seconds']:.0f} s. Re-render: `python benchmarks/recipe_rejected/candidate_depth.py --render`.", ""])


def main():
    args = helper_bases.halves_args(NAME, markdown, __file__)
    if args is None:
        return
    t0 = time.time()
    ds, index = _common.reddit()
    fts, helpers, priors = parts(ds, index)
    frames, names = {}, None
    for v, (k, ek) in VARIANTS.items():
        frames[v], names = variant_features(ds, index, k, ek, fts, helpers, priors)
        print(f"{v}: {len(frames[v])} candidate rows, {time.time() - t0:.0f} s", flush=True)
    _, qrels = recipe.tuning_data(ds)
    qrels = qrels.assign(qid=qrels["qid"].astype(str))
    rows = halves(frames, names, qrels, recipe.base_names(fts), args.splits, args.bags)
    chosen = choose(rows)
    payload = {"splits": args.splits, "bags": args.bags, "tuning_queries": int(frames[DEFAULT]["qid"].nunique()),
               "variants": VARIANTS, "rows": rows, "chosen": chosen, "validation": validation(ds, index),
               "n_validation": len(ds.get_topics("validation")), "seconds": time.time() - t0}
    _common.write_results(NAME, payload, markdown(payload))


if __name__ == "__main__":
    main()
