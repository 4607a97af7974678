"""Two training runs of the default's base: how far apart their recipes are, and whether the second run, weighed
beside the first as one more helper, is a second stage worth its cost (issue 31.4).

The mpnet base of the default trained twice on this machine with the same settings and text, seeds 42 (the
default) and ``--seed`` (43), each alone and under the default recipe (its MiniLM helper, weights fitted on the
tuning slice), then the recipe on seed 42 with the seed-43 model as a second helper: it re-scores the recipe's
candidates and adds none, its weight fitted on the tuning slice with the base as the floor like every other
weight. Validation (233) and BIRCO dev (57, nothing fitted there), paired t-tests against the default, seconds
per query on this machine.

    python benchmarks/recipe/recipe_depth.py --bases mpnet --train --now-only --train-seed 43 \\
        --name recipe_depth_mpnet_seed43        # trains the second base (~50 min on 2 bf16-native cores)
    python benchmarks/recipe_rejected/seed_ensemble.py [--seed 43] [--render]
"""
from __future__ import annotations

import argparse
import re
import sys
import time
import warnings
from pathlib import Path

_STUDY = Path(__file__).resolve().parent
sys.path[:0] = [str(_STUDY), str(_STUDY.parent), str(_STUDY.parent / "recipe")]  # study, benchmarks/, recipe/
import _common  # noqa: E402  (sets HF_HUB_OFFLINE)
import recipe_depth  # noqa: E402

import pyterrier_tot as ptt  # noqa: E402
from pyterrier_tot import recipe  # noqa: E402
from pyterrier_tot.models import native_bf16  # noqa: E402
from pyterrier_tot.recipe.protocol import training_info  # noqa: E402

NAME = "seed_ensemble"
WORK = _common.WORK / NAME
DEFAULT = "default (seed 42 + MiniLM helper)"
COLS = ["R@1", "R@5", "R@10", "R@20", "R@100", "R@1000", "MRR", "nDCG@10"]


def systems(ds, index, p42: str, pseed: str, minilm: str, seed: int, weights: dict) -> dict:
    """{row name: (transformer, its fuser's weights or None)}: the bases alone, the default on each, and the
    default with the second run as a second helper. ``weights``: {row name: fitted fuser}, filled on Reddit (fitted
    on its tuning slice, ``ds`` given) and reused on BIRCO (``ds`` None)."""
    name = recipe.base_expert_name("mpnet")
    prec = recipe.encoding_precision(name)
    plan = {DEFAULT: (p42, {"dense_ft": minilm}),
            f"default on the seed-{seed} base": (pseed, {"dense_ft": minilm}),
            f"default + the seed-{seed} base as a second helper": (p42, {"dense_ft": minilm, f"{name}_s{seed}": pseed})}
    out = {"BM25 (title+text)": (index.bm25(num_results=1000), None),
           "mpnet alone, seed 42": (index.dense(p42, precision=prec), None),
           f"mpnet alone, seed {seed}": (index.dense(pseed, precision=prec), None)}
    for row, (base, helpers) in plan.items():
        if ds is not None:
            weights[row] = recipe.fitted_weights(ds, index, {name: base}, helpers=helpers)
        out[row] = (recipe.build_pipeline(index, {name: base}, weights=weights[row], helpers=helpers), weights[row])
    return out


def section(tag: str, pipes: dict, topics, qrels, work: Path = WORK, baseline: str = DEFAULT) -> dict:
    """Each row's run (cached in ``work`` under its weights' name) and measures, tested against ``baseline``."""
    seconds, runs, keys = {}, {}, {}
    for n, (pipe, weights) in pipes.items():
        keys[n] = f"{tag}-{re.sub(r'[^A-Za-z0-9]+', '_', n)}-{Path(str(weights)).name if weights else ''}"
        runs[n] = _common.cached_run(work, keys[n], lambda p=pipe: p(topics), seconds, topics)
    res = recipe_depth.evaluate(runs, topics, qrels, baseline=baseline)
    for n in res:
        res[n]["s/query"] = round(seconds.get(keys[n], float("nan")) / len(topics), 3)
    return res


def results_table(res: dict) -> str:
    head = ["name", *COLS, "R@5 p", "MRR p", "R@5 +/-", "MRR +/-", "s/query"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n, r in res.items():
        cells = [n, *(f"{r[c]:.3f}" for c in COLS),
                 *(f"{r[f'p {c}']:.3f}" if f"p {c}" in r else "" for c in ("R@5", "MRR")),
                 *(r.get(f"+/- {c}", "") for c in ("R@5", "MRR")), f"{r['s/query']:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown(p: dict) -> str:
    s = p["seed"]
    lines = ["# Two training runs of the default's base, and the second as a helper (issue 31.4)", "",
             f"The mpnet base trained twice here with `BASE_SETTINGS` (bf16 autocast: {p['native_bf16']}), seeds 42 "
             f"and {s}, on the same {p['train_queries']} training queries outside the tuning slice; MiniLM helper "
             "as in the default. 'second helper': the recipe on seed 42 with the seed-" + str(s) + " model scoring "
             "its candidates beside the MiniLM helper, weights fitted on the tuning slice (bagged, the base alone "
             "as the floor), as every recipe row here. p: paired t-test against the default; +/-: queries the row "
             "ranks the gold book better / worse at R@5 (found / lost) and by reciprocal rank. s/query: this "
             f"machine, {p['threads']} torch threads (a base row includes encoding the corpus).", "",
             f"## Reddit-TOMT validation ({p['n_queries']} queries)", "", results_table(p["results"]), "",
             f"## BIRCO WhatsThatBook dev ({p['birco_queries']} queries; nothing fitted here)", "",
             results_table(p["birco"]), "", "## Fitted weights (tuning slice)", ""]
    lines += [f"- {k}: `{w}`" for k, w in p["weights"].items()]
    lines += ["", "## Training records", "", "| model | seed | steps | seconds | bf16 |", "|---|---|---|---|---|"]
    lines += [f"| {m} | {t.get('seed')} | {t.get('steps')} | {t.get('seconds')} | {bool(t.get('amp'))} |"
              for m, t in p["training"].items()]
    lines += ["", f"Total {p['seconds']} s. Re-render: `python benchmarks/recipe_rejected/seed_ensemble.py --render`.",
              ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=43, help="the training seed of the second base (default 43)")
    args = _common.parse_or_render(ap, NAME, markdown)
    if args is None:  # --render: the markdown rewritten from the committed JSON
        return
    import torch

    from pyterrier_tot.decomposition.weighted_fuser import WeightedFuser

    t0 = time.time()
    ds, index = _common.reddit()
    p42 = recipe.fine_tuned_base(ds, model="mpnet", train=False, index=index)
    pseed = recipe.fine_tuned_base(ds, model="mpnet", train=False, index=index, seed=args.seed)
    minilm = recipe.fine_tuned_base(ds, model="minilm", train=False, index=index)
    if not (p42 and pseed and minilm):
        raise SystemExit("a base is missing from the cache: train the seed-42 default and run recipe_depth.py with "
                         f"--train-seed {args.seed} first (see this file's docstring)")
    fitted: dict = {}
    results = section("val", systems(ds, index, p42, pseed, minilm, args.seed, fitted), ds.get_topics("validation"),
                      ds.get_qrels("validation"))
    bds = ptt.get_dataset("birco-wtb")
    bindex = ptt.BookIndex(bds)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*empty title.*")
        birco = section("birco", systems(None, bindex, p42, pseed, minilm, args.seed, fitted),
                        bds.get_topics("dev"), bds.get_qrels("dev"))
    weights = {}
    for row, path in fitted.items():
        f = WeightedFuser.load(path)
        weights[row] = {n: round(float(w), 3) for n, w in zip(f.names, f.weights)}
    training = {Path(m).name: {k: training_info(m).get(k) for k in ("seed", "steps", "seconds", "amp")}
                for m in (p42, pseed, minilm)}
    payload = {"seed": args.seed, "n_queries": len(ds.get_topics("validation")),
               "train_queries": len(recipe.train_data(ds, "rest")[0]), "birco_queries": len(bds.get_topics("dev")),
               "results": results, "birco": birco, "weights": weights, "training": training,
               "native_bf16": native_bf16(), "threads": torch.get_num_threads(), "seconds": round(time.time() - t0, 1),
               **_common.machine()}
    _common.write_results(NAME, payload, markdown(payload))
    print(markdown(payload))


if __name__ == "__main__":
    main()
