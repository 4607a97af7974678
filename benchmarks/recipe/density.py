"""The density prior beside the default recipe (issue 31.4): a training-free expert that scores each candidate
book by minus its mean cosine to its k nearest books in the fine-tuned mpnet base's space
(:class:`~pyterrier_tot.recipe.density_prior.DensityPrior`).

1. Chosen inside the tuning slice (300 training queries; validation not read), with the protocol of
   ``helper_bases.py``: 30 random halves; on each, the fuser fitted on one half (bagged, the base alone as the
   floor) with and without the prior for each k, measured on the other half. The k kept is the one with the
   highest mean gain over the default on the held-out halves; the prior is admitted only if that gain is above 0
   and it falls below the base on no larger share of halves than the default does (rule fixed before the run).
2. Then the default with and without the admitted prior on validation (233) and BIRCO dev (57, nothing fitted
   there): weights fitted on the whole slice as ``tuned_pipeline`` fits them, 1000 deep, paired t-tests against
   the default as it was, seconds per query on this machine.

    python benchmarks/recipe/density.py [--splits 30] [--render]
"""
from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

_STUDY = Path(__file__).resolve().parent
sys.path[:0] = [str(_STUDY), str(_STUDY.parent), str(_STUDY.parent / "recipe_rejected")]  # study, benchmarks/, rejected
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import helper_bases  # noqa: E402
import seed_ensemble  # noqa: E402

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot import recipe
from pyterrier_tot.normalise import normalise_scores  # noqa: E402
from pyterrier_tot.recipe import (
    DensityPrior,  # noqa: E402
    bases,  # noqa: E402
)

NAME = "density"
WORK = _common.WORK / NAME
KS = (5, 10, 20)
BEFORE = "default as it was (no prior)"
BASELINE = "the default recipe (baseline)"


def prior(index, mpnet: str, k: int) -> DensityPrior:
    return DensityPrior(index, mpnet, k=k, precision=recipe.encoding_precision(bases.base_expert_name("mpnet")))


def select(index, ds, mpnet: str, splits: int, bags: int):
    """The halves comparison on the tuning slice and the k it admits (None: the prior is not admitted)."""
    feats, _, plain, helpers, _, floor, models, _ = helper_bases.features(index, ds)
    _, qrels = recipe.tuning_data(ds)
    feats = feats.assign(qid=feats["qid"].astype(str))
    qrels = qrels.assign(qid=qrels["qid"].astype(str))
    for k in KS:
        raw = prior(index, mpnet, k)(feats[["qid", "docno"]])
        feats[f"density_k{k}"] = normalise_scores(raw[["qid", "score"]], "minmax").to_numpy()
    default = plain + helpers
    variants = {BASELINE: default, **{f"+ density_k{k}": default + [f"density_k{k}"] for k in KS}}
    rows, full = helper_bases.compare_on_halves(feats, qrels, variants, floor, splits, bags, BASELINE)
    gain = {k: float(rows[f"+ density_k{k}"]["mean gain vs baseline (se)"].split()[0]) for k in KS}
    best = max(KS, key=lambda k: gain[k])
    below = "share of halves below the base somewhere"
    admitted = gain[best] > 0 and rows[f"+ density_k{best}"][below] <= rows[BASELINE][below]
    return {"models": models, "rows": rows, "weights_on_the_whole_slice": full, "floor": floor,
            "chosen_k": best if admitted else None, "best_k": best}


def systems(ds, index, mpnet: str, minilm: str, k, weights: dict) -> dict:
    """{row: (transformer, fuser path or None)}: BM25, the base alone, the default as it was, and with the prior
    (``k`` None: the prior row is left out). ``weights`` as in ``seed_ensemble.systems``."""
    name = bases.base_expert_name("mpnet")
    fts, helpers = {name: mpnet}, {bases.base_expert_name("minilm"): minilm}
    plan = {BEFORE: None, **({f"default + density prior (k={k})": {"density": prior(index, mpnet, k)}} if k else {})}
    out = {"BM25 (title+text)": (index.bm25(num_results=1000), None),
           "mpnet fine-tuned alone": (index.dense(mpnet, precision=recipe.encoding_precision(name)), None)}
    for row, extra in plan.items():
        if ds is not None:
            weights[row] = recipe.fitted_weights(ds, index, fts, helpers=helpers, extra_experts=extra)
        out[row] = (recipe.build_pipeline(index, fts, weights=weights[row], helpers=helpers, extra_experts=extra),
                    weights[row])
    return out


def markdown(p: dict) -> str:
    sel = p["selection"]
    chosen = (f"**k = {sel['chosen_k']}** admitted" if sel["chosen_k"] else
              f"**not admitted** (best k = {sel['best_k']})")
    lines = ["# The density prior beside the default recipe (issue 31.4)", "",
             "Each candidate book scored by minus its mean cosine to its k nearest books in the fine-tuned mpnet "
             f"base's space (`{sel['models']['mpnet']}`, fp32 vectors), weighed by the recipe's fuser like any "
             "expert. Nothing trained; no query or label read.", "",
             f"## 1. Choice inside the tuning slice ({p['splits']} random halves of the 300 queries)", "",
             "On each half the fuser is fitted (mean of `" + recipe.FIT_METRIC + f"`, bagged over {p['bags']} "
             f"resamples, floor `{sel['floor']}`) and measured on the other half against the base alone; 'vs "
             "baseline': paired over the same halves (overlapping, so the standard errors are optimistic). Rule "
             "fixed before the run: the k with the highest mean gain vs baseline, admitted if that gain is above 0 "
             f"and its share of halves below the base is no larger than the default's. Result: {chosen}.", "",
             *helper_bases.halves_sections(sel),
             f"## 2. Reddit-TOMT validation ({p['n_queries']} queries)", "",
             "Weights fitted on the whole tuning slice (bagged, base as the floor), 1000 deep. p: paired t-test "
             "against the default as it was; +/-: queries found / lost at R@5, better / worse by reciprocal rank. "
             f"s/query: this machine, {p['threads']} torch threads (a row that encodes the corpus pays for it).", "",
             seed_ensemble.results_table(p["results"]), "",
             f"## 3. BIRCO WhatsThatBook dev ({p['birco_queries']} queries; Reddit-fitted weights, nothing fitted "
             "here)", "", seed_ensemble.results_table(p["birco"]), "", "## Fitted weights (tuning slice)", ""]
    lines += [f"- {k}: `{w}`" for k, w in p["weights"].items()]
    lines += ["", f"Total {p['seconds']} s. Re-render: `python benchmarks/recipe/density.py --render`.", ""]
    return "\n".join(lines)


def main():
    args = helper_bases.halves_args(NAME, markdown, __file__)
    if args is None:  # --render: the markdown rewritten from the committed JSON
        return
    import torch

    from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser

    t0 = time.time()
    ds, index = _common.reddit()
    mpnet = bases.fine_tuned_base(ds, model="mpnet", train=False, index=index)
    minilm = bases.fine_tuned_base(ds, model="minilm", train=False, index=index)
    if not (mpnet and minilm):
        raise SystemExit("the default's bases are not in the cache: run `make demo` or tuned_pipeline(ds) first")
    sel = select(index, ds, mpnet, args.splits, args.bags)
    print(helper_bases.halves_sections(sel)[0], "\nchosen k:", sel["chosen_k"])
    fitted: dict = {}
    results = seed_ensemble.section("val", systems(ds, index, mpnet, minilm, sel["chosen_k"], fitted),
                                    ds.get_topics("validation"), ds.get_qrels("validation"), WORK, BEFORE)
    bds = ptt.get_dataset("birco-wtb")
    bindex = ptt.BookIndex(bds)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*empty title.*")
        birco = seed_ensemble.section("birco", systems(None, bindex, mpnet, minilm, sel["chosen_k"], fitted),
                                      bds.get_topics("dev"), bds.get_qrels("dev"), WORK, BEFORE)
    weights = {row: dict(zip(f.names, [round(float(w), 3) for w in f.weights]))
               for row, f in ((row, WeightedFuser.load(path)) for row, path in fitted.items())}
    payload = {"splits": args.splits, "bags": args.bags, "selection": sel,
               "n_queries": len(ds.get_topics("validation")), "birco_queries": len(bds.get_topics("dev")),
               "results": results, "birco": birco, "weights": weights, "threads": torch.get_num_threads(),
               "seconds": round(time.time() - t0, 1), **_common.machine()}
    _common.write_results(NAME, payload, markdown(payload))
    print(markdown(payload))


if __name__ == "__main__":
    main()
